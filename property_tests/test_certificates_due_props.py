"""Which certificates are due (resolver.certificates.certificates_due, what `mesh check` and
`mesh status` list) against a plain oracle written from the documented rule:

- a node's certificate, or an instance's TLS server certificate, is listed exactly when `now`
  is at or past its expiry minus the CA's renewal window (`ca.renew-before-days`), and marked
  expired exactly when `now` is at or past its expiry;
- it names the node it is on (the instance's node, for a server certificate), the serial and
  the expiry as the ledger records them;
- certificates of nodes or instances no longer in the mesh are never listed;
- the list is ordered soonest expiry first.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import attrs
from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pmap

from resolver import Certificate, Ledger, Mesh, Node
from resolver.certificates import CertificateKind, certificates_due

from .strategies_meshes import meshes

DAY = 86400
NOW = datetime(2030, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def certificate(serial: str, expires: datetime) -> Certificate:
    return Certificate(serial=serial, not_before="2000-01-01T00:00:00Z", not_after=iso(expires),
                       pem=f"pem {serial}")


# lifetimes left at `now`, in seconds: around the window's edge and the expiry, and far off
lifetimes = st.one_of(st.integers(-40 * DAY, 400 * DAY),
                      st.integers(-2, 2).map(lambda s: 30 * DAY + s),
                      st.integers(-2, 2))


def oracle(mesh, node_left: dict, server_left: dict, days: int) -> list[tuple]:
    """(kind, name, node, expired) of every certificate due, written from the rule alone."""
    window = days * DAY
    due = [("node", node, node, left <= 0, left) for node, left in node_left.items()
           if node in mesh.nodes and left <= window]
    due += [("server", instance, mesh.instances[instance].node, left <= 0, left)
            for instance, left in server_left.items()
            if instance in mesh.instances and left <= window]
    return sorted(due, key=lambda d: (d[4], d[2], d[0], d[1]))


# the window's width: often the default 30 days, so the edges above fall on it
windows = st.one_of(st.just(30), st.integers(0, 60))


@given(meshes(), st.lists(lifetimes, min_size=12, max_size=12), windows, st.booleans())
def test_exactly_the_certificates_inside_the_window_are_due(world, left, days, strangers):
    mesh, ledger = world.mesh, world.ledger
    node_left = dict(zip(sorted(mesh.nodes), left))
    server_left = dict(zip(sorted(mesh.instances), reversed(left)))
    if strangers:  # certificates the mesh no longer has a node or instance for
        node_left["gone-node"] = -DAY
        server_left["gone@nowhere"] = -DAY
    mesh = attrs.evolve(mesh, ca=attrs.evolve(mesh.ca, renew_before_days=days))
    ledger = attrs.evolve(
        ledger,
        certificates=pmap({n: certificate(f"n-{n}", NOW + timedelta(seconds=s))
                           for n, s in node_left.items()}),
        tls=pmap({i: certificate(f"s-{i}", NOW + timedelta(seconds=s))
                  for i, s in server_left.items()}))
    due = certificates_due(mesh, ledger, iso(NOW))
    expected = oracle(mesh, node_left, server_left, days)
    assert [(d.kind.value, d.name, d.node, d.expired) for d in due] == \
        [e[:4] for e in expected]
    for d in due:
        kept = ledger.certificates[d.name] if d.kind is CertificateKind.NODE \
            else ledger.tls[d.name]
        assert (d.serial, d.not_after, d.renew_before_days) == \
            (kept.serial, kept.not_after, days)


def test_before_inside_and_after_the_window():
    """One node certificate expiring 2030-03-31T12:00:00Z, a 30-day window."""
    mesh = Mesh(mesh="m", nodes=pmap({"lab": Node(address="10.0.0.1")}))
    ledger = Ledger(certificates=pmap({"lab": certificate("7", NOW + timedelta(days=30))}))
    assert certificates_due(mesh, ledger, iso(NOW - timedelta(seconds=1))) == ()  # before
    (inside,) = certificates_due(mesh, ledger, iso(NOW))  # the window opens
    assert (inside.node, inside.expired, inside.not_after) == \
        ("lab", False, "2030-03-31T12:00:00Z")
    (after,) = certificates_due(mesh, ledger, iso(NOW + timedelta(days=30)))  # expiry
    assert after.expired
