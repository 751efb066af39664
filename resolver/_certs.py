"""Which node certificates must be issued: pure, with the time passed in as a string.

Invariants:
- A certificate recorded for a node is kept: it is requested anew only when the node has none,
  when its address or public key differ from what it certifies, or when `now` (given) lies in
  the renewal window (`ca.renew-before-days` before expiry). Without `now`, never renewed.
- Times are ISO 8601 strings with a UTC offset; they are compared as whole seconds computed
  here by calendar arithmetic (no clock, no datetime), so the check is byte-for-byte pure.
- Requests come out sorted by node, one per node at most, each naming why.
- `certificates_due` lists every certificate the ledger keeps for the mesh as it is (each
  node's, each instance's TLS server certificate, and each served web name's, on the first
  node holding its key) that `now` finds expired or inside the renewal window, with the node
  it is on; nothing else is listed.
"""

from __future__ import annotations

import enum
import re
from typing import Optional

import attrs
from pyrsistent import pvector

from ._declaration import Request
from ._errors import MeshError
from ._ledger import Certificate, Ledger
from ._model import Mesh
from ._names import fqdns, is_name_key, name_of_key

_ISO = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(Z|[+-]\d{2}:?\d{2})$")

DAY = 86400


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (the well-known era algorithm)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def epoch_seconds(timestamp: str) -> int:
    """Seconds since the epoch of an ISO 8601 timestamp with a UTC offset ("Z" or ±HH:MM)."""
    match = _ISO.match(timestamp.strip())
    if match is None:
        raise MeshError(f"{timestamp!r} is not a time; expected ISO 8601 with an offset, "
                        f"e.g. 2026-01-31T12:00:00Z")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    if not (1 <= month <= 12 and 1 <= day <= _days_in_month(year, month) and hour < 24
            and minute < 60 and second < 61):
        raise MeshError(f"{timestamp!r} is not a valid time")
    offset = match.group(7)
    shift = 0
    if offset != "Z":
        sign = -1 if offset[0] == "-" else 1
        digits = offset[1:].replace(":", "")
        shift = sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return (_days_from_civil(year, month, day) * DAY + hour * 3600 + minute * 60 + second
            - shift)


def renewal_due(certificate: Certificate, now: str, renew_before_days: int) -> bool:
    """Whether `now` lies inside the renewal window (or past expiry)."""
    return epoch_seconds(now) >= epoch_seconds(certificate.not_after) - renew_before_days * DAY


def certificate_reason(mesh: Mesh, ledger: Ledger, node: str,
                       now: Optional[str] = None) -> Optional[str]:
    """Why `node` needs a certificate issued, or None when the recorded one is kept."""
    certificate = ledger.certificates.get(node)
    if certificate is None:
        return "no certificate yet"
    described = mesh.nodes[node]
    if certificate.address and certificate.address != described.address:
        return f"the node's address changed from {certificate.address} to {described.address}"
    if (certificate.public_key and described.public_key
            and certificate.public_key != described.public_key):
        return "the node's public key changed"
    if now is not None and renewal_due(certificate, now, mesh.ca.renew_before_days):
        return (f"renewal: expires {certificate.not_after}, within the "
                f"{mesh.ca.renew_before_days}-day renewal window")
    return None


def certificate_requests(mesh: Mesh, ledger: Ledger, now: Optional[str] = None) -> list[Request]:
    """One request per node whose certificate must be issued or renewed, sorted by node."""
    requests = []
    for node in sorted(mesh.nodes):
        reason = certificate_reason(mesh, ledger, node, now)
        if reason is not None:
            requests.append(Request(kind="certificate", id=node, holders=pvector([node]),
                                    reason=reason))
    return requests


class CertificateKind(enum.Enum):
    """What a certificate due for renewal certifies."""

    NODE = "node"  # a node's certificate (`certificates`)
    SERVER = "server"  # an instance's TLS server certificate (`tls`), e.g. the registry's


@attrs.frozen
class DueCertificate:
    """A certificate expired or inside its renewal window, at the time asked about."""

    kind: CertificateKind
    name: str  # the node (NODE) or the instance (SERVER) it certifies
    node: str  # the node it is on: what `mesh renew DIR NODE` names
    serial: str
    not_after: str
    expired: bool  # `now` is at or past `not_after`
    renew_before_days: int  # the CA's renewal window it is inside


def certificates_due(mesh: Mesh, ledger: Ledger, now: str) -> tuple[DueCertificate, ...]:
    """Every node certificate and TLS server certificate of the mesh expired or inside the
    CA's renewal window (`ca.renew-before-days`) at `now`, soonest expiry first (ties by node,
    kind, name). Certificates of nodes or instances no longer in the mesh are not listed."""
    days = mesh.ca.renew_before_days
    found: list[DueCertificate] = []
    for node, certificate in ledger.certificates.items():
        if node in mesh.nodes and renewal_due(certificate, now, days):
            found.append(_due(CertificateKind.NODE, node, node, certificate, now, days))
    served = set(fqdns(mesh).values()) if mesh.acme is None else set()  # acme: not ours
    for instance, certificate in ledger.tls.items():
        described = mesh.instances.get(instance)
        if described is not None and renewal_due(certificate, now, days):
            found.append(_due(CertificateKind.SERVER, instance, described.node, certificate,
                              now, days))
        elif is_name_key(instance) and name_of_key(instance) in served \
                and renewal_due(certificate, now, days):
            # a web name's certificate (resolver/_names), on the first node holding its key
            key = ledger.credentials.get("tls/" + instance)
            holders = sorted(key.active.sealed) if key is not None and key.active else []
            if holders:
                found.append(_due(CertificateKind.SERVER, instance, holders[0], certificate,
                                  now, days))
    return tuple(sorted(found, key=lambda d: (epoch_seconds(d.not_after), d.node,
                                              d.kind.value, d.name)))


def _due(kind: CertificateKind, name: str, node: str, certificate: Certificate, now: str,
         days: int) -> DueCertificate:
    return DueCertificate(kind=kind, name=name, node=node, serial=certificate.serial,
                          not_after=certificate.not_after,
                          expired=epoch_seconds(now) >= epoch_seconds(certificate.not_after),
                          renew_before_days=days)
