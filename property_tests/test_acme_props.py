"""Web names' certificates from ACME (mesh.yaml `acme`, resolver/_names certified_names): the
choice between the mesh CA and the ingress's own ACME, held by properties.

- with `acme`, no web name's certificate is ever requested from the mesh CA, none is mounted
  in an ingress (no `names/` file, no names label), none is listed as due, whatever the
  ledger already holds (a mesh switched to ACME after the mesh CA issued them);
- without it, every served name (a named web app some ingress routes) has its request, held
  by the nodes of the ingresses routing it;
- with `acme`, what an ingress is told (`${self.acme-email}`) is the email; without, "";
- `acme` is refused at mesh.yaml's `acme` for a domain under a special-use suffix (naming the
  `domain:` line) and for an email that is not one.
"""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

import resolver
from resolver import Acme, Artifact, Catalogue, Container, Ledger, Mesh
from resolver.certificates import certificates_due
from resolver.documents import load_mesh

from .test_names_props import (CATALOGUE, DOMAIN, PINS, kept_ledger, name_requests,
                               named_meshes, oracle_names)

PUBLIC = "example.org"
PINNED = PINS.set("example.org/proxy:1", "sha256:" + "b" * 64)
EMAIL = "ops@example.org"
# an ingress with a container told the ACME email, as the catalogue's caddy is
INGRESS = attrs.evolve(
    CATALOGUE.modules["ingress"],
    artifacts=pmap({"proxy": Artifact(repository="example.org/proxy", tag="1", tls=True)}),
    containers=pvector([Container(name="proxy", artifact="proxy",
                                  env=pmap({"ACME_EMAIL": "${self.acme-email}"}))]))
TOLD = Catalogue(modules=CATALOGUE.modules.set("ingress", INGRESS),
                 provisions=CATALOGUE.provisions)


def public(mesh: Mesh, acme: bool) -> Mesh:
    """The mesh with a public domain, and `acme` when asked."""
    return attrs.evolve(mesh, domain=PUBLIC, acme=Acme(email=EMAIL) if acme else None)


def public_ledger(mesh: Mesh) -> Ledger:
    """test_names_props' kept ledger (every served name's certificate, its key sealed to its
    ingresses) for the names in the public domain."""
    kept = kept_ledger(mesh)
    return attrs.evolve(
        kept, pins=PINNED,
        tls=pmap({k.replace(DOMAIN, PUBLIC): attrs.evolve(c, address=c.address.replace(
            DOMAIN, PUBLIC)) for k, c in kept.tls.items()}),
        credentials=pmap({k.replace(DOMAIN, PUBLIC): c for k, c in kept.credentials.items()}))


def oracle_public_names(mesh: Mesh) -> dict[str, tuple[str, ...]]:
    return {key.replace(DOMAIN, PUBLIC): nodes for key, nodes in oracle_names(mesh).items()}


@given(named_meshes(), st.booleans(), st.booleans())
def test_with_acme_no_name_certificate_ever_without_every_served_name_has_one(
        mesh, acme, kept):
    ledger = public_ledger(mesh) if kept else Ledger(pins=PINNED)
    meshed = public(mesh, acme)
    resolution = resolver.resolve(TOLD, meshed, ledger)
    requested = name_requests(resolution)
    files = [f.path for d in resolution.declarations.values() for f in d.files
             if "/names/" in f.path]
    labelled = [c.instance for d in resolution.declarations.values() for c in d.containers
                if "mesh.tls-names" in c.labels]
    told = {c.env["ACME_EMAIL"] for d in resolution.declarations.values()
            for c in d.containers if c.instance.startswith("ingress")}
    due = [d.name for d in certificates_due(meshed, ledger, "2099-01-01T00:00:00Z")
           if d.name.startswith("name:")]
    if acme:
        assert requested == {} and files == [] and labelled == [] and due == []
        assert told == {EMAIL}
    else:
        assert requested == ({} if kept else oracle_public_names(mesh))
        served = oracle_public_names(mesh)
        ingresses = [i for i in mesh.instances.values() if i.module == "ingress"]
        assert len(files) == (2 * len(served) * len(ingresses) if kept else 0)
        assert sorted(due) == (sorted(served) if kept else [])
        assert told == {""}



SPECIAL = ("arpa", "local", "localhost", "test", "invalid", "example", "internal", "alt")


@given(st.lists(st.sampled_from(["home", "lab", "mesh", "x1"]), min_size=0, max_size=2),
       st.sampled_from(SPECIAL + ("org", "net", "de", "io")),
       st.sampled_from(["ops@example.org", "Ops+mesh@Example.ORG", "ops", "o ps@x.org",
                        "ops@x", "{ops}@x.org"]))
def test_acme_is_refused_for_a_special_use_domain_or_an_email_that_is_not_one(
        labels, suffix, email):
    domain = ".".join([*labels, suffix]) if labels else f"names.{suffix}"
    text = (f"mesh: m\ndomain: {domain}\nacme:\n  email: '{email}'\n"
            f"nodes:\n  n1: {{address: 10.0.0.1}}\n")
    expected = set()
    if suffix in SPECIAL:
        expected.add(3)  # at `acme`, naming the domain's line
    if email not in ("ops@example.org", "Ops+mesh@Example.ORG"):
        expected.add(4)  # at `acme.email`
    try:
        load_mesh(text, "mesh.yaml")
        faulted: set[int] = set()
    except resolver.InputError as error:
        faulted = {f.line for f in error.faults}
        assert all("(line 2)" in f.message for f in error.faults
                   if "acme for the domain" in f.message)
    assert faulted == expected
