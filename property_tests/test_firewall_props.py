"""Properties of firewall rendering (executors/node/firewall/render.py) and of the executor's diff.

The read-back oracle (`read_back`, executors/node/firewall/readback.py) reads what a script does
from its rules and sets, never from the intent, and refuses shapes it does not know; what the
intent opens is computed independently (`intent_triples`), and whether an address gets in is
asked of the intent's own words (`intent_accepts`: each exposure network asked whether it
holds the address, nothing merged). The kernel tests load rendered scripts into a real
kernel, inside `unshare -n` only, and read back what the kernel lists.
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

from resolver import FirewallAllow, FirewallExposure, FirewallFloor, FirewallIntent, FirewallLocal

import resolver
from resolver import documents
from executors.node.firewall.executor import RECORD_DIGEST, REPLACE_TABLE, Observed, diff
from executors.node.firewall.meaning import intent_accepts, intent_triples, local_source
from executors.node.firewall.readback import keeps_ssh_floor, read_back
from executors.node.firewall.render import (
    ANYWHERE,
    FAMILY,
    INPUT_PREAMBLE,
    PROTOCOLS,
    SET_KINDS,
    TABLE,
    SshFloorMissing,
    render,
)
try:
    from .strategies_firewall import BRIDGES, PROBES, intents
except ImportError:
    from strategies_firewall import BRIDGES, PROBES, intents

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
# Networks that nest and touch on one port (intervals of one set may not overlap), the whole
# address space of both families, and an exposure to one address written as a /32.
NESTED_NETWORKS = FirewallIntent(address="10.77.0.1", floors=pvector([SSH_FLOOR]), expose=pvector([
    FirewallExposure(8080, "tcp", pvector(["10.77.0.0/24", "10.77.0.0/25", "10.77.0.128/25",
                                           "10.77.1.0/24", "fd00::/64", "fd00::/16"]), "ui"),
    FirewallExposure(25, "tcp", pvector(["0.0.0.0/0", "::/0", "10.77.0.9/32"]), "smtp"),
]))
# Same-node consumers on a port that nodes elsewhere and the LAN also reach.
LOCAL_AND_REMOTE = FirewallIntent(
    address="10.77.0.1", floors=pvector([SSH_FLOOR]),
    allow=pvector([FirewallAllow(20001, "tcp", pvector(["10.77.0.2"]), "db for app@n2")]),
    local=pvector([FirewallLocal(20001, "tcp", pvector(["0a:00:00:00:00:01"]), "db for app@n1")]),
    expose=pvector([FirewallExposure(20001, "tcp", pvector(["192.168.1.0/24"]), "db for LAN")]))

digests = st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda h: "sha256:" + h)
bridges = st.sampled_from(BRIDGES)


def _lines(text: str, prefix: str) -> list:
    return [line for line in text.splitlines() if line.startswith(prefix)]


@given(intents())
def test_every_script_keeps_the_ssh_floor(intent):
    rendered = render(intent)
    back = read_back(rendered.text)
    ssh = {(f.port, f.protocol, ANYWHERE) for f in intent.floors
           if f.reason.lower().startswith("ssh")}
    assert ssh and ssh <= back.input
    assert back.input_policy == "drop"
    assert keeps_ssh_floor(rendered.text, rendered.ssh_triples)


@given(intents(ssh=False))
def test_an_intent_without_the_ssh_floor_is_refused(intent):
    with pytest.raises(SshFloorMissing):
        render(intent)


@given(intents(), bridges)
@example(MIXED_PUBLISHED, ("docker0",))
@example(TWO_FLOORS_ONE_PORT, ("docker0",))
@example(NESTED_NETWORKS, ("docker0",))
@example(LOCAL_AND_REMOTE, ("docker0", "br-mesh"))
def test_opened_triples_read_back_equal_the_intent(intent, names):
    back = read_back(render(intent, names).text)
    assert back.input == intent_triples(intent, bridges=names)
    assert back.forward == intent_triples(intent, published_only=True, bridges=names)
    assert back.published_closed  # any other DNAT'd connection is dropped
    allowed = {(a.port, a.protocol, str(ipaddress.ip_address(s)))
               for a in intent.allow for s in a.sources}
    assert allowed <= back.input
    mine = {(lo.port, lo.protocol, local_source(m, b))
            for lo in intent.local for m in lo.macs for b in names}
    assert mine <= back.input and mine <= back.forward


@given(intents(), st.lists(st.sampled_from(PROBES), min_size=1, max_size=8), bridges)
@example(NESTED_NETWORKS, ["10.77.0.200", "10.77.2.1", "fd00::77", "fd01::1", "10.77.0.9"],
         ("docker0",))
@example(LOCAL_AND_REMOTE, ["192.168.1.5", "192.168.2.5", "10.77.0.2", "10.77.0.3"],
         ("docker0",))
def test_who_gets_in_is_who_the_intent_names(intent, probes, names):
    """Asked per (port, address): the script lets in exactly whom the intent names, networks
    included (however the renderer merged them), in the input hook and for published ports;
    and same-node consumers only on the runtime's bridges."""
    back = read_back(render(intent, names).text)
    published = attrs.evolve(intent, allow=pvector(a for a in intent.allow if a.published))
    ports = {(o.port, o.protocol) for group in (intent.allow, intent.floors, intent.expose,
                                                intent.local) for o in group}
    ports |= {(1, "tcp"), (65535, "udp")}
    sources = list(probes) + [local_source(m, b) for lo in intent.local for m in lo.macs
                              for b in ("docker0", "br-mesh", "eth0")]
    for port, protocol in ports:
        for source in sources:
            wanted = intent_accepts(intent, port, protocol, source, bridges=names)
            assert back.accepts(port, protocol, source) == wanted, (port, protocol, source)
            assert back.accepts(port, protocol, source, forward=True) == intent_accepts(
                published, port, protocol, source, bridges=names), (port, protocol, source)
            if source.startswith("ether ") and source.rsplit(" ", 1)[1] not in names:
                # a container's MAC counts only on the runtime's bridges: elsewhere it gets
                # in only where anything does
                assert wanted == ((port, protocol, ANYWHERE) in intent_triples(intent))


@given(intents(), st.randoms(use_true_random=False))
def test_rendering_is_deterministic(intent, shuffler):
    first = render(intent)
    assert render(intent).text == first.text
    # Order of allows, floors, same-node openings and exposures, and a trip through the
    # declaration's document form, are not part of what the firewall means.
    groups = {}
    for field in ("allow", "floors", "local", "expose"):
        items = list(getattr(intent, field))
        shuffler.shuffle(items)
        groups[field] = pvector(items)
    assert render(attrs.evolve(intent, **groups)).text == first.text
    round_tripped = documents.structure(documents.unstructure(intent), resolver.FirewallIntent)
    assert render(round_tripped).digest == first.digest
    assert read_back(first.text).digest == first.digest


@given(intents())
def test_rendering_never_mentions_another_table(intent):
    text = render(intent).text
    for line in text.splitlines():
        verb, kind, family, table = line.split(" ")[:4]
        assert verb in ("add", "delete")  # never flush, never a whole-ruleset command
        assert kind in ("table", "set", "chain", "rule")
        assert (family, table) == (FAMILY, TABLE)
    assert read_back(text).tables == {(FAMILY, TABLE)}
    assert "flush" not in text and "ruleset" not in text


def _rules(intent) -> int:
    return len(_lines(render(intent).text, "add rule "))


# The most rules any script holds, however many ports and sources: the fixed rules (input
# preamble, the forward hook's established and closing rules) and, per protocol and kind of
# source set, one input rule and at most one forward rule.
MOST_RULES = len(INPUT_PREAMBLE) + 2 + 2 * len(PROTOCOLS) * len(SET_KINDS)


@given(intents(), st.integers(1, 400), st.sampled_from(["allow", "expose", "local"]),
       st.integers(0, 7))
def test_rules_do_not_grow_with_ports_or_sources(intent, extra_ports, kind, seed):
    """Adding ports (each with its own sources) to the kinds of source an intent already has
    adds set elements, never a rule; and no script holds more than MOST_RULES rules."""
    groups = [g for g in (intent.allow, intent.expose, intent.local) if g]
    if kind == "allow" and intent.allow:
        template = intent.allow[seed % len(intent.allow)]
    elif kind == "expose" and intent.expose:
        template = intent.expose[seed % len(intent.expose)]
    elif kind == "local" and intent.local:
        template = intent.local[seed % len(intent.local)]
    else:
        assert _rules(intent) <= MOST_RULES or not groups
        return
    field = {"allow": "allow", "expose": "expose", "local": "local"}[kind]
    taken = {o.port for o in getattr(intent, field)}
    fresh = [p for p in range(1, 65536) if p not in taken][:extra_ports]
    grown = attrs.evolve(intent, **{field: pvector(
        list(getattr(intent, field)) + [attrs.evolve(template, port=p) for p in fresh])})
    assert _rules(grown) == _rules(intent) <= MOST_RULES
    assert read_back(render(grown).text).input == intent_triples(grown)


@given(intents())
@example(AWKWARD_REASON)
def test_comments_stay_within_what_libnftables_accepts(intent):
    for line in _lines(render(intent).text, "add rule "):
        if ' comment "' in line:
            comment = line.split(' comment "', 1)[1][:-1]
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
from executors.node.firewall.readback import read_back
n = nftables.Nftables()
for line in sys.stdin:
    text = json.loads(line)
    for attempt in range(2):  # the second apply replaces the table the first one created
        rc, out, err = n.cmd(text)
        assert rc == 0, err
    n.set_json_output(True)
    rc, out, err = n.cmd("list table inet mesh")
    n.set_json_output(False)
    assert rc == 0, err
    mine, kernels = read_back(text), read_back(json.loads(out))
    assert kernels.input == mine.input, sorted(kernels.input ^ mine.input)[:10]
    assert kernels.forward == mine.forward, sorted(kernels.forward ^ mine.forward)[:10]
    assert (kernels.input_policy, kernels.forward_priority, kernels.published_closed,
            kernels.digest) == (mine.input_policy, mine.forward_priority, mine.published_closed,
                                mine.digest)
print("ok")
"""


def _in_a_namespace(texts: list) -> subprocess.CompletedProcess:
    pytest.importorskip("nftables", reason="the nftables Python binding is not installed "
                        "(scripts/services.sh installs it)")
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("unshare -n is not permitted here (needs root)")
    lines = "".join(json.dumps(t) + "\n" for t in texts)
    return subprocess.run(["unshare", "-n", sys.executable, "-c", _CHECK_IN_NAMESPACE],
                          input=lines, capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent)


# Each example is a batch checked in one namespace; no shrinking (each step is a process).
@pytest.mark.integration
@settings(max_examples=12, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.data_too_large])
@given(st.lists(st.tuples(intents(), bridges), min_size=5, max_size=5))
def test_the_kernel_holds_what_the_script_says(batch):
    """Rendered scripts applied for real, twice each, inside a throw-away namespace; what the
    kernel then lists reads back as what the script itself reads back as."""
    fixed = [MIXED_PUBLISHED, TWO_FLOORS_ONE_PORT, AWKWARD_REASON, NESTED_NETWORKS,
             LOCAL_AND_REMOTE]
    texts = [render(i).text for i in fixed] + [render(i, b).text for i, b in batch]
    result = _in_a_namespace(texts)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_the_renderer_and_the_reader_are_pure():
    """The renderer, the reader and the meaning of an intent import nothing that does I/O (the
    marks they share with the other executors, checked too, import nothing at all)."""
    import ast

    forbidden = {"os", "io", "pathlib", "subprocess", "socket", "time", "datetime", "random",
                 "secrets", "logging", "threading", "nftables", "tempfile", "shutil", "sys",
                 "ctypes", "importlib", "docker", "requests"}
    found = []
    names = ("node/firewall/render.py", "node/firewall/readback.py", "node/firewall/meaning.py",
             "common/marks.py")
    pure_modules = {"executors." + name[:-3].replace("/", ".") for name in names}
    for name in ("node/firewall/render.py", "node/firewall/readback.py",
                 "node/firewall/meaning.py", "common/marks.py"):
        source = Path(__file__).resolve().parent.parent / "executors" / name
        for node in ast.walk(ast.parse(source.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            found += [(name, n) for n in names if n.split(".")[0] in forbidden
                      or (n.startswith("executors") and n not in pure_modules)]
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("open",
                                                                                  "__import__"):
                found.append((name, node.func.id))
    assert found == []
