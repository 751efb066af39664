"""Tool servers' bearer tokens (`grant: bearer-token`), held by properties.

- Told and granted alike: in whole meshes of tool servers and consumers taking every one, each
  entry a consumer is told carries its own credential's token under `token` (never
  `password`), `transport` as the provision writes it, and the provider's node holds exactly
  one bearer-token grant per (provider, consumer) naming that same credential; no two entries
  of all the lists share a token.
- The tokens file: after any sequence of provisioning runs with any grants (rotations in
  progress included) over a file with an operator's own lines, its managed entries are exactly
  the desired `<login>_<slot>` users, each with the SHA-256 of its generation's token and
  never the token; the operator's lines are kept; a second run changes nothing.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

import resolver
from resolver import (Catalogue, Declaration, GrantDecl, Instance, Ledger, Listen, Mesh,
                      Module, Node, Provide, Provision, Require, SecretRef)
from resolver.rendering import TOKEN_KIND, secret_token

from executors.common.report import Report
from executors.node.node_paths import NodePaths
from executors.node.provisioners import tokens
from executors.node.provisioners.base import NodeFiles, ProvisionResult
from executors.node.provisioners.htpasswd_plan import desired_entries

TOOLS = "tools"
PROVISIONS = pmap({TOOLS: Provision(
    grant=TOKEN_KIND, keys=pvector(["host", "port", "user", "token", "url", "transport"]),
    url="http://{host}:{port}/mcp", values=pmap({"transport": "streamable-http"}))})
SERVER = Module(name="toolsrv", listens=pmap({"mcp": Listen(port=8000)}),
                provides=pvector([Provide(provision=TOOLS, listen="mcp")]))
ASSISTANT = Module(name="assistant", requires=pvector([
    Require(as_=TOOLS, provision=TOOLS, each=True)]))
NODES = ("n1", "n2", "n3")
names = st.text(alphabet="abcdefgh", min_size=1, max_size=4)


@st.composite
def tool_meshes(draw):
    instances: dict[str, Instance] = {}
    for module, count in (("toolsrv", draw(st.integers(0, 4))),
                          ("assistant", draw(st.integers(1, 3)))):
        for _ in range(count):
            name = f"{module[0]}{draw(names)}@{draw(st.sampled_from(NODES))}"
            instances.setdefault(name, Instance(module=module, node=name.split("@")[1]))
    mesh = Mesh(mesh="tt", nodes=pmap({n: Node(address=f"10.0.0.{i + 1}")
                                       for i, n in enumerate(NODES)}),
                instances=pmap(instances))
    catalogue = Catalogue(modules=pmap({"toolsrv": SERVER, "assistant": ASSISTANT}),
                          provisions=PROVISIONS)
    return mesh, catalogue


@given(tool_meshes())
def test_each_entry_is_told_its_own_token_and_its_provider_holds_the_same_grant(drawn):
    mesh, catalogue = drawn
    resolution = resolver.resolve(catalogue, mesh, Ledger())
    grants = {(g.provider, g.consumer): g for d in resolution.declarations.values()
              for g in d.grants}
    assert all(g.kind == TOKEN_KIND for g in grants.values())
    told = []
    for name, instance in mesh.instances.items():
        if instance.module != "assistant":
            continue
        (listed,) = [b for b in resolution.declarations[instance.node].bindings
                     if b.consumer == name]
        for entry in listed.entries:
            credential = f"{TOOLS}/{entry.provider}/{name}"
            assert entry.values["token"] == secret_token(credential)
            assert "password" not in entry.values
            assert entry.values["transport"] == "streamable-http"
            grant = grants.pop((entry.provider, name))
            assert grant.credential.credential == credential
            assert grant.slot == "a"
            told.append(entry.values["token"])
    assert not grants  # no grant without an entry told
    assert len(told) == len(set(told))


# --------------------------------------------------------------------------- the tokens file

consumers = st.sampled_from(["one@a", "two@a", "three@b", "four@c"])


@st.composite
def grant_sets(draw):
    chosen = draw(st.lists(consumers, unique=True, max_size=4))
    grants = []
    for consumer in chosen:
        generation = draw(st.integers(1, 4))
        slot = "ab"[generation % 2]
        rotating = generation > 1 and draw(st.booleans())
        credential = f"tools/srv@a/{consumer}"
        grants.append(GrantDecl(
            provision=TOOLS, kind=TOKEN_KIND, provider="srv@a", consumer=consumer,
            consumer_node=consumer.split("@")[1], login=consumer.replace("@", "_"),
            resource=consumer.replace("@", "_"), credential=SecretRef(credential, generation),
            slot=slot, retiring=SecretRef(credential, generation - 1) if rotating else None,
            retiring_slot="ab"[(generation - 1) % 2] if rotating else None))
    return grants


def token_of(ref: SecretRef) -> str:
    return f"tok-{ref.credential}-{ref.generation}"


def run(root: Path, grants: list[GrantDecl]) -> ProvisionResult:
    result = ProvisionResult()
    tokens.provision_file(Declaration(mesh="tt", node="a", address="10.0.0.1"), "srv@a",
                          grants, token_of, Report(), result,
                          NodeFiles(NodePaths(root / "state", root)))
    return result


OPERATOR = "# the operator's own\nbyhand:sha256:" + "f" * 64 + "\n"


@settings(max_examples=60)
@given(st.lists(grant_sets(), min_size=1, max_size=4))
def test_the_tokens_file_holds_exactly_the_desired_hashes_and_a_second_run_does_nothing(runs):
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        path = tokens.tokens_path(NodePaths(root / "state", root), "srv@a")
        path.parent.mkdir(parents=True)
        path.write_text(OPERATOR)
        for grants in runs:
            run(root, grants)
            text = path.read_text()
            assert text.startswith(OPERATOR)
            managed = {}
            for line in text.splitlines():
                if line and not line.startswith("#") and not line.startswith("byhand:"):
                    user, _, hashed = line.partition(":")
                    managed[user] = hashed
            wanted = {want.user: "sha256:" + hashlib.sha256(
                token_of(SecretRef(want.credential, want.generation)).encode()).hexdigest()
                for g in grants for want in desired_entries(g)}
            assert managed == wanted
            assert "tok-" not in text
            assert run(root, grants).statements == 0
            assert path.read_text() == text
