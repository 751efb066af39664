"""Web apps by name: the mesh `domain`, an instance's `name`, the `http-route` its web listen
provides, and the names an ingress serves with a certificate per name.

Invariants:
- An instance's DNS name (`fqdn`) depends on its `name` and the mesh `domain` only, never on its
  node: a move keeps the name, its public URL (`https://<fqdn>`) and its certificate.
- A `name` is a DNS label (`app1`, becoming `app1.<domain>`) or a name inside the domain
  (`wiki.home.arpa`), lower case; one name belongs to one instance. Two instances claiming one
  name, a name outside the domain and a name with no domain are refused at mesh.yaml's `name`,
  naming the other line; an `http-route` on a listen that does not say `http: true` is refused
  at the module's `provides`, naming the listen's line.
- A route is the binding of an ingress's `http-route` requirement (`each: true`) to a named
  provider; its values carry `fqdn`. An unnamed provider is bound (the firewall rule is the
  same) but serves no name: it gets no certificate and the ingress's list gives it `fqdn` "".
- With `acme` in mesh.yaml no name's certificate is ever requested from the mesh CA, kept
  for an ingress or mounted in it (certified_names is empty): the ingress is told the ACME
  email (`${self.acme-email}`) and obtains each name's certificate itself. `acme` needs a
  domain a public CA can validate: never one under a special-use suffix (ACME_REFUSED).
- Otherwise each served name has one certificate from the mesh CA (ledger `tls`, key
  `name:<fqdn>`, SAN the name), whose key (credential `tls/name:<fqdn>`) is sealed to the nodes of the ingresses
  serving it: resolver/_tls is the one mechanism, issuing it once, keeping it, renewing it.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping, Optional

import attrs

from ._declaration import Binding, BindingDecl
from ._frozen import FrozenMap
from ._model import Mesh, Module

#: The provision a web listen provides and an ingress takes every one of.
ROUTE_PROVISION = "http-route"
#: The binding value naming the route's DNS name (what the ingress serves it as).
FQDN_KEY = "fqdn"
#: The prefix of a name's entry in the ledger's `tls` (instance names hold no ':').
NAME_PREFIX = "name:"
#: Where an ingress finds a name's certificate and key, below its TLS directory.
NAMES_DIR = "names"
#: The label carrying the serials of the names' certificates an ingress's containers read.
NAMES_LABEL = "mesh.tls-names"

#: The `self` value telling an ingress the ACME account's email ("" absent: the mesh CA).
ACME_EMAIL_KEY = "acme-email"
#: Domains no public ACME CA can validate (special-use names, RFC 6761/6762/8375/9476).
ACME_REFUSED = ("arpa", "local", "localhost", "test", "invalid", "example", "internal",
                "alt", "lan", "home", "corp")

# the local part without what a Caddyfile or a shell reads (quotes, braces, `$`, spaces)
_EMAIL = re.compile(r"^[a-z0-9._%+-]+@([a-z0-9-]+\.)+[a-z0-9-]+$")
_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def is_dns_name(text: str) -> bool:
    """Whether `text` is a lower-case DNS name of labels (letters, digits, inner '-')."""
    return 0 < len(text) <= 253 and all(_LABEL.match(label) for label in text.split("."))


def is_email(text: str) -> bool:
    """Whether `text` is an email address an ACME CA accepts for an account (local@domain,
    the domain, in any case, a DNS name of two labels or more)."""
    return bool(_EMAIL.match(text.lower())) and is_dns_name(text.rsplit("@", 1)[1].lower())


def acme_refusal(domain: str) -> Optional[str]:
    """Why no public ACME CA can issue for names in `domain` (its special-use suffix), or
    None when it may."""
    suffix = domain.rsplit(".", 1)[-1]
    if suffix in ACME_REFUSED:
        return f"names under .{suffix} are not public"
    return None


def certified_names(mesh: Mesh, holders: dict[str, tuple[str, ...]]
                    ) -> dict[str, tuple[str, ...]]:
    """The served names (name or ingress → ...) whose certificates come from the mesh CA:
    all of them, or none when mesh.yaml says `acme` (the ingress then gets them itself)."""
    return {} if mesh.acme is not None else holders


def fqdn(name: Optional[str], domain: Optional[str]) -> Optional[str]:
    """The DNS name of an instance named `name` in `domain` (a label is put in the domain; a
    dotted name is taken as written), or None when unnamed or there is no domain."""
    if name is None or domain is None:
        return None
    return name if "." in name else f"{name}.{domain}"


def in_domain(name: str, domain: str) -> bool:
    """Whether DNS name `name` lies inside `domain` (below it, not the domain itself)."""
    return name.endswith("." + domain)


def fqdns(mesh: Mesh) -> dict[str, str]:
    """Every named instance of `mesh` → its DNS name."""
    found: dict[str, str] = {}
    domain = mesh.domain
    if domain is None:
        return found  # (no domain: no name, and no walk of every instance)
    for instance, described in mesh.instances.items():
        full = fqdn(described.name, domain)
        if full is not None:
            found[instance] = full
    return found


def public_url(full: str) -> str:
    """The public URL of a name (what `${self.url}` is)."""
    return f"https://{full}"


def name_key(full: str) -> str:
    """The ledger `tls` key (and the id of its request) of a name's certificate."""
    return NAME_PREFIX + full


def is_name_key(key: str) -> bool:
    """Whether a ledger `tls` key (or a request id) is a web name's certificate."""
    return key.startswith(NAME_PREFIX)


def name_of_key(key: str) -> str:
    """The web name a `name:` key names."""
    return key[len(NAME_PREFIX):]


def name_files(full: str) -> tuple[str, str]:
    """A name's certificate and key file names in the ingress's TLS directory."""
    return f"{NAMES_DIR}/{full}.crt", f"{NAMES_DIR}/{full}.key"


def route_listen_faults(module: Module) -> list[tuple[int, str, str]]:
    """(provide index, listen, message) of each `http-route` provided on a listen that is not
    plain HTTP (no `http: true`, or UDP, or TLS: the ingress speaks plain HTTP to it)."""
    faults: list[tuple[int, str, str]] = []
    for index, provide in enumerate(module.provides):
        listen = module.listens.get(provide.listen)
        if provide.provision != ROUTE_PROVISION or listen is None:
            continue
        why = None
        if not listen.http:
            why = "does not say http: true"
        elif listen.protocol != "tcp":
            why = f"is {listen.protocol}"
        elif listen.tls:
            why = "serves TLS (the ingress speaks plain HTTP to its backends)"
        if why is not None:
            faults.append((index, provide.listen,
                           f"an {ROUTE_PROVISION} is provided on listen {provide.listen!r}, "
                           f"which {why}"))
    return faults


def served_names(routes: Iterable[tuple[str, str]], node_of: Mapping[str, str],
                 fqdn_of: Mapping[str, str]) -> tuple[dict[str, tuple[str, ...]],
                                                      dict[str, tuple[str, ...]]]:
    """From the routes (ingress instance, provider instance): each ingress → the names it
    serves (sorted), and each name → the nodes of the ingresses serving it (sorted)."""
    by_ingress: dict[str, set[str]] = {}
    holders: dict[str, set[str]] = {}
    for ingress, provider in routes:
        full = fqdn_of.get(provider)
        if full is None:
            continue
        by_ingress.setdefault(ingress, set()).add(full)
        holders.setdefault(full, set()).add(node_of[ingress])
    return ({k: tuple(sorted(v)) for k, v in by_ingress.items()},
            {k: tuple(sorted(v)) for k, v in holders.items()})


def route_listen(module: Module) -> Optional[str]:
    """The listen a module's `http-route` is provided on (its web listen), or None."""
    for provide in module.provides:
        if provide.provision == ROUTE_PROVISION:
            return provide.listen
    return None


def direct_url(address: str, port: int) -> str:
    """Where an unnamed web app answers: plain HTTP on its node's address and published port."""
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}"


def own_names(instance: str, full: Optional[str], domain: Optional[str],
              direct: Optional[str] = None, acme_email: Optional[str] = None
              ) -> BindingDecl:
    """What an instance is told of itself, as a binding under the reserved name `self`:
    `${self.domain}` (when the mesh has one), and `${self.url}` and `${self.hostname}`
    (resolver/_placeholders, NAMED): its public name when it is named; otherwise, for a web app
    whose web listen is published (`direct`, from direct_url), that address, so an unnamed app
    still knows where it is reached (its node's address as its hostname); with `acme_email`
    (mesh.yaml's `acme`), `${self.acme-email}`, which an ingress gets its names' certificates
    from ACME with."""
    values = {"domain": domain or ""}
    if acme_email is not None:
        values[ACME_EMAIL_KEY] = acme_email
    if full is not None:
        values.update(url=public_url(full), hostname=full)
    elif direct is not None:
        values.update(url=direct, hostname=direct.split("://", 1)[1].rsplit(":", 1)[0]
                      .strip("[]"))
    return BindingDecl(instance, "self", instance, None, FrozenMap(values))


@attrs.frozen
class NameRecord:
    """One web name and where it answers: the addresses of the nodes of the ingresses that
    route it (none: no ingress takes its route, so nothing serves it yet)."""

    name: str
    instance: str
    addresses: tuple[str, ...]


def name_records(mesh: Mesh, bindings: Iterable[Binding]) -> tuple[NameRecord, ...]:
    """Every named instance of `mesh` with the addresses it answers at, from a resolution's
    `bindings` (the routes' ingresses' nodes), in name order: what `mesh names` prints for a
    hosts file or a router."""
    ingress_nodes: dict[str, set[str]] = {}
    for binding in bindings:
        if binding.provision == ROUTE_PROVISION:
            ingress_nodes.setdefault(binding.provider, set()).add(binding.consumer_node)
    records = []
    for instance, full in fqdns(mesh).items():
        nodes = ingress_nodes.get(instance, set())
        addresses = sorted({mesh.nodes[n].address for n in nodes if n in mesh.nodes})
        records.append(NameRecord(full, instance, tuple(addresses)))
    return tuple(sorted(records, key=lambda r: r.name))
