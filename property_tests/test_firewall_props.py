"""Properties of firewall rendering (executors/firewall_render.py) and of the executor's diff.

The read-back oracle (`read_back`) reads what a document does from its rules and sets, never
from the intent, and refuses rule shapes it does not know; the intent's triples are computed
independently (`intent_triples`). The last test hands rendered documents to a real kernel,
inside `unshare -n` only.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from pyrsistent import pvector

from resolver import FirewallAllow, FirewallFloor, FirewallIntent

import resolver
from executors.firewall import RECORD_DIGEST, REPLACE_TABLE, Observed, diff
from executors.firewall_render import (
    ANYWHERE,
    FAMILY,
    TABLE,
    SshFloorMissing,
    intent_triples,
    keeps_ssh_floor,
    read_back,
    render,
)
try:
    from .strategies_firewall import intents
except ImportError:
    from strategies_firewall import intents

SSH_FLOOR = FirewallFloor(22, "tcp", pvector(), "ssh")
# Found by hypothesis: allows on one port, published and not, must not share a set.
MIXED_PUBLISHED = FirewallIntent(address="10.77.0.1", floors=pvector([SSH_FLOOR]), allow=pvector([
    FirewallAllow(1, "tcp", pvector(["10.77.0.1"]), "", published=True),
    FirewallAllow(1, "tcp", pvector(["10.77.0.2"]), "", published=False),
]))
# A floor from anywhere and one from named sources on the same port.
TWO_FLOORS_ONE_PORT = FirewallIntent(address="10.77.0.1", floors=pvector([
    SSH_FLOOR, FirewallFloor(22, "tcp", pvector(["10.77.0.2", "fd00::1"]), "jump host"),
]))
# Found by hypothesis: a NUL or a quote in a reason broke libnftables' parsing.
AWKWARD_REASON = FirewallIntent(address="10.77.0.1", floors=pvector([SSH_FLOOR]), allow=pvector([
    FirewallAllow(5432, "tcp", pvector(["10.77.0.2"]), 'a\x00b "c" \\ \u00e9' * 20),
]))

digests = st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda h: "sha256:" + h)


@given(intents())
def test_every_document_keeps_the_ssh_floor(intent):
    rendered = render(intent)
    back = read_back(rendered.document)
    ssh = {(f.port, f.protocol, ANYWHERE) for f in intent.floors
           if f.reason.lower().startswith("ssh")}
    assert ssh and ssh <= back.input
    assert back.input_policy == "drop"
    assert keeps_ssh_floor(rendered.document, rendered.ssh_triples)


@given(intents(ssh=False))
def test_an_intent_without_the_ssh_floor_is_refused(intent):
    with pytest.raises(SshFloorMissing):
        render(intent)


@given(intents())
@example(MIXED_PUBLISHED)
@example(TWO_FLOORS_ONE_PORT)
def test_allowed_triples_read_back_equal_the_intent(intent):
    back = read_back(render(intent).document)
    assert back.input == intent_triples(intent)
    assert back.forward == intent_triples(intent, published_only=True)
    assert back.published_closed  # any other DNAT'd connection is dropped
    allowed = {(a.port, a.protocol, str(ipaddress.ip_address(s)))
               for a in intent.allow for s in a.sources}
    assert allowed <= back.input


@given(intents(), st.randoms(use_true_random=False))
def test_rendering_is_deterministic(intent, shuffler):
    first = render(intent)
    assert render(intent).text == first.text
    # Order of allows and floors, and a trip through the declaration's document form, are
    # not part of what the firewall means: same document, same digest.
    allow, floors = list(intent.allow), list(intent.floors)
    shuffler.shuffle(allow)
    shuffler.shuffle(floors)
    shuffled = attrs.evolve(intent, allow=pvector(allow), floors=pvector(floors))
    assert render(shuffled).text == first.text
    round_tripped = resolver.structure(resolver.unstructure(intent), resolver.FirewallIntent)
    assert render(round_tripped).digest == first.digest
    assert read_back(first.document).digest == first.digest


def _tables_named(value, found):
    """Every (family, table) named anywhere in the document, however deeply."""
    if isinstance(value, dict):
        if "family" in value and ("table" in value or "name" in value):
            found.add((value["family"], value.get("table", value.get("name"))))
        for item in value.values():
            _tables_named(item, found)
    elif isinstance(value, list):
        for item in value:
            _tables_named(item, found)
    return found


@given(intents())
def test_rendering_never_mentions_another_table(intent):
    document = render(intent).document
    objects = set()
    for command in document["nftables"]:
        (verb, body), = command.items()
        assert verb in ("add", "delete")  # never flush, never a whole-ruleset command
        for kind, obj in body.items():
            objects.add(kind)
            name = obj["name"] if kind == "table" else obj["table"]
            assert (obj["family"], name) == (FAMILY, TABLE)
    assert objects <= {"table", "set", "chain", "rule"}
    assert read_back(document).tables == {(FAMILY, TABLE)}
    text = json.dumps(document)
    assert "flush" not in text and "ruleset" not in text


@given(intents(), st.sampled_from([0, 1]), st.integers(0, 7))
def test_sets_not_one_rule_per_pair(intent, which, extra):
    """Adding a source to an existing allow changes a set's elements, never the rule count."""
    def rule_count(i):
        return sum(1 for c in render(i).document["nftables"] if "rule" in c.get("add", {}))

    allowed = [a for a in intent.allow if a.sources]
    if not allowed:
        return
    target = allowed[which % len(allowed)]
    family_mate = [s for s in (f"10.77.9.{extra + 1}", f"fd00:99::{extra + 1}")
                   if ipaddress.ip_address(s).version == ipaddress.ip_address(target.sources[0]).version][0]
    grown = attrs.evolve(intent, allow=pvector(
        [attrs.evolve(a, sources=pvector(list(a.sources) + [family_mate])) if a is target else a
         for a in intent.allow]))
    assert rule_count(grown) == rule_count(intent)
    assert read_back(render(grown).document).input == intent_triples(grown)


@given(intents())
@example(AWKWARD_REASON)
def test_comments_stay_within_what_libnftables_accepts(intent):
    for command in render(intent).document["nftables"]:
        comment = command.get("add", {}).get("rule", {}).get("comment")
        if comment is not None:
            assert len(comment.encode("utf-8")) <= 128 and comment.isprintable()
            assert comment.isascii() and '"' not in comment and "\\" not in comment


# ---------------------------------------------------------------------------- the executor's diff


@given(digests)
def test_diff_is_empty_when_the_node_carries_the_digest(digest):
    assert diff(digest, Observed(True, digest, digest)) == ()


@given(digests, st.one_of(st.none(), digests), st.one_of(st.none(), digests), st.booleans())
def test_diff_replaces_the_table_unless_it_runs_the_digest(desired, running, recorded, exists):
    ops = diff(desired, Observed(exists, running if exists else None, recorded))
    in_sync = exists and running == desired
    if not in_sync:
        assert [op.kind for op in ops] == [REPLACE_TABLE]
    elif recorded != desired:
        assert [op.kind for op in ops] == [RECORD_DIGEST]  # no transaction for a stale file
    else:
        assert ops == ()
    assert all(op.digest == desired and op.cause for op in ops)


# ---------------------------------------------------------------------------- a real kernel


_CHECK_IN_NAMESPACE = """
import json, sys, nftables
from executors.firewall_render import read_back
n = nftables.Nftables()
for line in sys.stdin:
    document = json.loads(line)
    for attempt in range(2):  # the second apply replaces the table the first one created
        rc, out, err = n.json_cmd(document)
        assert rc == 0, err
    n.set_json_output(True)
    rc, out, err = n.cmd("list table inet mesh")
    listing = json.loads(out)["nftables"]
    sets = {o["set"]["name"]: sorted(o["set"].get("elem", [])) for o in listing if "set" in o}
    wanted = {c["add"]["set"]["name"]: sorted(c["add"]["set"]["elem"])
              for c in document["nftables"] if "set" in c.get("add", {})}
    assert sets == wanted, (sets, wanted)
    rules = sum(1 for o in listing if "rule" in o)
    assert rules == sum(1 for c in document["nftables"] if "rule" in c.get("add", {}))
print("ok")
"""


# Each example is a batch checked in one namespace; no shrinking (each step is a process).
@pytest.mark.integration
@settings(max_examples=12, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.data_too_large])
@given(st.lists(intents(), min_size=5, max_size=5))
def test_the_kernel_accepts_every_rendered_document(batch):
    """Rendered documents applied for real, twice each, inside a throw-away namespace."""
    pytest.importorskip("nftables", reason="the nftables Python binding is not installed "
                        "(scripts/services.sh installs it)")
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("unshare -n is not permitted here (needs root)")
    batch = [MIXED_PUBLISHED, TWO_FLOORS_ONE_PORT, AWKWARD_REASON] + batch
    lines = "".join(json.dumps(render(i).document) + "\n" for i in batch)
    result = subprocess.run(["unshare", "-n", sys.executable, "-c", _CHECK_IN_NAMESPACE],
                            input=lines, capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parent.parent)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_the_renderer_is_pure():
    """executors/firewall_render.py imports nothing that does I/O (the resolver's own rule)."""
    import ast

    source = Path(__file__).resolve().parent.parent / "executors" / "firewall_render.py"
    forbidden = {"os", "io", "pathlib", "subprocess", "socket", "time", "datetime", "random",
                 "secrets", "logging", "threading", "nftables", "tempfile", "shutil", "sys",
                 "ctypes", "importlib", "docker", "requests"}
    found = []
    for node in ast.walk(ast.parse(source.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
        found += [n for n in names if n.split(".")[0] in forbidden or n.startswith("executors")]
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("open", "__import__"):
            found.append(node.func.id)
    assert found == []
