"""Certificate renewal (resolver/_certs.py) against the standard library's own calendar.

resolver/ may not import datetime (no clock, no ambient state), so it counts seconds by
calendar arithmetic of its own; the tests may, and use it as the oracle:
- every ISO 8601 time with an offset reads as the same instant datetime reads;
- a field out of its range (month 13, day 32, hour 24, minute 60, second 61) is refused,
  and so is a day past the end of its month (found by these properties: 31 June was read as
  1 July);
- a certificate is due for renewal exactly when `now` is at or after its expiry minus the
  renewal window, and resolve(now=…) requests exactly the certificates that are due (or
  missing, or for an address or key that changed).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import attrs
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pyrsistent import pmap

from resolver import Certificate, MeshError, resolve
from resolver.certificates import epoch_seconds, is_tls_credential, renewal_due, tls_credential

from .strategies_meshes import meshes

offsets = st.integers(-14 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
moments = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2400, 12, 30),
                       timezones=offsets)


def spelled(moment: datetime, style: str) -> str:
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if style == "fraction":
        text += f".{moment.microsecond:06d}"
    if style == "space":
        text = text.replace("T", " ")
    offset = moment.utcoffset()
    minutes = int(offset.total_seconds() // 60)
    if minutes == 0 and style != "numeric":
        return text + "Z"
    sign = "-" if minutes < 0 else "+"
    hours, rest = divmod(abs(minutes), 60)
    return text + (f"{sign}{hours:02d}{rest:02d}" if style == "compact"
                   else f"{sign}{hours:02d}:{rest:02d}")


@given(moments, st.sampled_from(["plain", "fraction", "space", "compact", "numeric"]))
def test_a_time_reads_as_the_instant_datetime_reads(moment, style):
    text = spelled(moment, style)
    assert epoch_seconds(text) == int(moment.replace(microsecond=0).timestamp())


@given(st.integers(1970, 2400), st.sampled_from(["month", "day", "hour", "minute", "second"]),
       st.integers(0, 3))
def test_a_field_out_of_range_is_refused(year, field, beyond):
    values = {"month": 7, "day": 15, "hour": 12, "minute": 30, "second": 30}
    limits = {"month": 12, "day": 31, "hour": 23, "minute": 59, "second": 60}
    values[field] = limits[field] + 1 + beyond
    text = (f"{year:04d}-{values['month']:02d}-{values['day']:02d}T{values['hour']:02d}:"
            f"{values['minute']:02d}:{values['second']:02d}Z")
    with pytest.raises(MeshError):
        epoch_seconds(text)
    values[field] = limits[field] if field != "second" else 59  # the last valid value reads
    text = (f"{year:04d}-{values['month']:02d}-{values['day']:02d}T{values['hour']:02d}:"
            f"{values['minute']:02d}:{values['second']:02d}Z")
    expected = datetime(year, values["month"], values["day"], values["hour"], values["minute"],
                        values["second"], tzinfo=timezone.utc)
    assert epoch_seconds(text) == int(expected.timestamp())


@given(st.integers(1970, 2400))
@example(2000)  # divisible by 400: leap
@example(2100)  # by 100 but not 400: not leap
@example(2024)  # by 4: leap
@example(2023)  # not leap
def test_a_day_past_the_end_of_its_month_is_refused(year):
    """30 February is not a day; 29 February is one only in a leap year. Every month's last
    days (28 to 32) of the year drawn are asked, so one wrong month length or leap rule shows
    whichever year is drawn (a draw of one month and one day missed a leap rule turned round
    in 100 examples)."""
    for month in range(1, 13):
        for day in range(28, 33):
            text = f"{year:04d}-{month:02d}-{day:02d}T00:00:00Z"
            try:
                expected = int(datetime(year, month, day, tzinfo=timezone.utc).timestamp())
            except ValueError:
                with pytest.raises(MeshError):
                    epoch_seconds(text)
            else:
                assert epoch_seconds(text) == expected, text


EDGE = datetime(2030, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


@given(moments, moments, st.integers(0, 90))
@example(EDGE, EDGE - timedelta(days=30), 30)  # the window opens at this very second
@example(EDGE, EDGE - timedelta(days=30, seconds=1), 30)  # one second before it does
def test_renewal_is_due_exactly_inside_the_window(not_after, now, days):
    certificate = Certificate(serial="1", not_before="2000-01-01T00:00:00Z",
                              not_after=spelled(not_after, "plain"), pem="")
    due = renewal_due(certificate, spelled(now, "plain"), days)
    window_opens = not_after.replace(microsecond=0) - timedelta(days=days)
    assert due == (now.replace(microsecond=0) >= window_opens)


@given(meshes(), moments, st.lists(st.integers(-40, 400), min_size=4, max_size=4))
def test_resolve_requests_exactly_the_certificates_due(world, now, lifetimes):
    """Each node's certificate expires some days from `now`; the renewal window is the mesh's."""
    mesh = world.mesh
    certificates = {}
    for (node, described), days in zip(sorted(mesh.nodes.items()), lifetimes):
        certificates[node] = Certificate(
            serial=node, not_before="2000-01-01T00:00:00Z",
            not_after=spelled(now + timedelta(days=days), "plain"), pem=f"pem of {node}",
            address=described.address, public_key=described.public_key or "")
    ledger = attrs.evolve(world.ledger, certificates=pmap(certificates))
    resolution = resolve(world.catalogue, mesh, ledger, now=spelled(now, "fraction"))
    wanted = {node for (node, _), days in zip(sorted(mesh.nodes.items()), lifetimes)
              if days <= mesh.ca.renew_before_days}
    asked = {r.id for r in resolution.requests if r.kind == "certificate"}
    assert asked == wanted
    for request in resolution.requests:
        if request.kind == "certificate":
            assert list(request.holders) == [request.id]
            assert "renewal" in request.reason
    without_now = resolve(world.catalogue, mesh, ledger)
    assert not [r for r in without_now.requests if r.kind == "certificate"], \
        "without a time nothing is due"


@given(st.from_regex(r"[a-z][a-z0-9-]{0,12}@[a-z][a-z0-9-]{0,8}", fullmatch=True))
def test_a_tls_key_credential_is_told_apart_from_every_other_credential(instance):
    """Executors pick out the TLS keys (sealed to the node that serves them) by their id."""
    assert is_tls_credential(tls_credential(instance)) is True
    for other in (f"postgres-database/{instance}/app@lab", f"secret/{instance}/admin",
                  f"amqp/lavinmq@lab/{instance}"):
        assert is_tls_credential(other) is False
