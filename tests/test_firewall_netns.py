"""The firewall executor against real nftables, in three network namespaces acting as nodes.

n1 is the provider (a listener on its assigned port 5432 and on ssh's 22); n2 is bound to it,
n3 is not. Every nft operation happens inside the namespaces (tests/_netns.py); the host's
ruleset is never read or written.
"""

from __future__ import annotations

import json

import pytest
from pyrsistent import pvector

from resolver import Declaration, FirewallAllow, FirewallFloor, FirewallIntent, documents

try:
    from . import _netns
except ImportError:
    import _netns

pytestmark = pytest.mark.integration

_why = _netns.have_tools()
if _why:
    pytest.skip(f"firewall namespace tests: {_why}", allow_module_level=True)

PROVIDER_PORT = 5432
SSH = 22
UNDECLARED_PORT = 8080


def intent_for(topology, bound: tuple, *, ssh: bool = True, extra_floors=()) -> FirewallIntent:
    a = topology.addresses
    floors = [FirewallFloor(SSH, "tcp", pvector(), "ssh")] if ssh else []
    floors += list(extra_floors)
    allow = [FirewallAllow(PROVIDER_PORT, "tcp", pvector(sorted(a[n] for n in bound)),
                           "postgres@n1 for app@n2")] if bound else []
    return FirewallIntent(address=a["n1"], allow=pvector(allow), floors=pvector(floors),
                          mesh_sources=pvector(sorted(a.values())))


def write_declaration(path, topology, intent: FirewallIntent) -> str:
    declaration = Declaration(mesh="test", node="n1", address=topology.addresses["n1"],
                              firewall=intent)
    path.write_text(json.dumps(documents.unstructure(declaration)))
    return str(path)


@pytest.fixture(scope="module")
def topology():
    with _netns.Topology("fw") as topology:
        topology.listen("n1", PROVIDER_PORT)
        topology.listen("n1", SSH)
        topology.listen("n1", UNDECLARED_PORT)
        yield topology


@pytest.fixture
def fresh(topology, tmp_path):
    """n1 without our table before and after each test; a state dir of the test's own."""
    remove = ("import nftables; n = nftables.Nftables(); rc, out, err = n.cmd('list tables');\n"
              "if 'inet mesh' in out: n.cmd('delete table inet mesh')")
    topology.python("n1", remove)
    yield tmp_path
    topology.python("n1", remove)


def apply(topology, tmp_path, intent, *extra):
    declaration = write_declaration(tmp_path / "declaration.json", topology, intent)
    return topology.mesh("n1", "firewall", declaration, "--state-dir", str(tmp_path / "state"),
                         *extra)


def test_without_our_table_everything_is_reachable(topology, fresh):
    # The control: what the firewall below closes is open without it.
    assert topology.connects("n3", "n1", PROVIDER_PORT)
    assert topology.connects("n3", "n1", UNDECLARED_PORT)


def test_bound_node_connects_unbound_is_refused_ssh_from_everywhere(topology, fresh):
    result = apply(topology, fresh, intent_for(topology, bound=("n2",)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[applied]" in result.stdout
    assert topology.connects("n2", "n1", PROVIDER_PORT)
    assert not topology.connects("n3", "n1", PROVIDER_PORT)
    assert topology.connects("n2", "n1", SSH)
    assert topology.connects("n3", "n1", SSH)
    assert not topology.connects("n2", "n1", UNDECLARED_PORT)
    assert not topology.connects("n3", "n1", UNDECLARED_PORT)


def test_second_apply_with_nothing_changed_performs_no_transaction(topology, fresh):
    intent = intent_for(topology, bound=("n2",))
    assert apply(topology, fresh, intent).returncode == 0
    again = apply(topology, fresh, intent)
    assert again.returncode == 0
    assert "up to date" in again.stdout and "[applied]" not in again.stdout
    assert "checking the batch" not in again.stdout
    # The library call agrees: no step, no transaction.
    code = (
        "import json, sys, resolver\n"
        "from executors.node.firewall.executor import apply_firewall\n"
        "d = resolver.documents.structure(json.load(open(sys.argv[1])), resolver.Declaration)\n"
        "r = apply_firewall(d.firewall, sys.argv[2])\n"
        "print(json.dumps({'steps': len(r.steps), 'transactions': r.transactions, 'ok': r.ok}))\n"
    )
    out = topology.python("n1", code, str(fresh / "declaration.json"), str(fresh / "state"))
    assert json.loads(out.stdout) == {"steps": 0, "transactions": 0, "ok": True}


def test_apply_that_removes_a_binding_refuses_the_connection(topology, fresh):
    assert apply(topology, fresh, intent_for(topology, bound=("n2", "n3"))).returncode == 0
    assert topology.connects("n2", "n1", PROVIDER_PORT)
    assert topology.connects("n3", "n1", PROVIDER_PORT)
    result = apply(topology, fresh, intent_for(topology, bound=("n3",)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[applied]" in result.stdout and "declaration wants" in result.stdout
    assert not topology.connects("n2", "n1", PROVIDER_PORT)
    assert topology.connects("n3", "n1", PROVIDER_PORT)
    assert topology.connects("n2", "n1", SSH)


def test_broker_floor_opens_to_mesh_sources_only(topology, fresh, tmp_path):
    broker = FirewallFloor(UNDECLARED_PORT, "tcp",
                           pvector([topology.addresses["n2"]]), "broker enrolment")
    assert apply(topology, fresh, intent_for(topology, bound=(), extra_floors=[broker])).returncode == 0
    assert topology.connects("n2", "n1", UNDECLARED_PORT)
    assert not topology.connects("n3", "n1", UNDECLARED_PORT)
    assert not topology.connects("n2", "n1", PROVIDER_PORT)


BROKEN_APPLY = """
import json, sys, attrs, resolver
from executors.node.firewall import executor as fw
from executors.node.firewall.render import render
d = resolver.documents.structure(json.load(open(sys.argv[1])), resolver.Declaration)
state, how = sys.argv[2], sys.argv[3]
good = render(d.firewall)
lines = []
for line in good.text.splitlines():
    if how == "bad-value" and line.startswith("add set inet mesh tcp_v4 "):
        line = line.replace(" } }", ", 10.77.0.99 . 70000 } }")  # refused by libnftables
    if how == "unreadable" and line.startswith("add chain inet mesh forward "):
        line = line.replace("hook forward", "hook no-such-hook")  # not a line the mesh writes
    if how == "no-ssh" and line.startswith("add rule inet mesh input tcp dport @tcp_any"):
        continue
    lines.append(line)
    if how == "kernel" and line.startswith("add table"):  # refused by the kernel: intervals
        lines.append("add set inet mesh tcp_v4_net { type ipv4_addr . inet_service; flags "
                     "interval; elements = { 10.77.0.0/24 . 5432, 10.77.0.0/25 . 5432 } }")
broken = attrs.evolve(good, text="\\n".join(lines) + "\\n", digest="sha256:" + "0" * 64)
nft = fw.open_nftables()
ops = fw.diff(broken.digest, fw.observe(nft, state))
report = fw.apply(ops, broken, nft, state, fw.FirewallReport(), check_first=how != "kernel")
after = fw.observe(nft, state)
print(json.dumps({"ok": report.ok, "lines": report.lines(), "transactions": report.transactions,
                  "running": after.running_digest, "recorded": after.recorded_digest,
                  "good": good.digest}))
"""


@pytest.mark.parametrize("how", ["bad-value", "kernel", "unreadable"])
def test_failing_batch_leaves_the_old_rules_in_force(topology, fresh, how):
    intent = intent_for(topology, bound=("n2",))
    assert apply(topology, fresh, intent).returncode == 0
    before = topology.nft_tables("n1", skip=())["inet mesh"]
    out = json.loads(topology.python("n1", BROKEN_APPLY, str(fresh / "declaration.json"),
                                     str(fresh / "state"), how).stdout)
    assert not out["ok"]
    assert out["running"] == out["good"] == out["recorded"]
    reason = " ".join(out["lines"])
    if how == "bad-value":
        assert out["transactions"] == 0  # the dry-run check caught it
        assert "batch check failed" in reason and "out of range" in reason
    elif how == "unreadable":
        assert out["transactions"] == 0  # the mesh's own reading caught it
        assert "cannot be read back" in reason and "no-such-hook" in reason
    else:
        assert out["transactions"] == 1  # sent unchecked: the kernel refused and rolled back
        assert "kernel refused" in reason and "File exists" in reason
    assert topology.nft_tables("n1", skip=())["inet mesh"] == before
    assert topology.connects("n2", "n1", PROVIDER_PORT)
    assert not topology.connects("n3", "n1", PROVIDER_PORT)
    assert topology.connects("n3", "n1", SSH)


def test_a_document_without_the_ssh_floor_is_never_applied(topology, fresh):
    assert apply(topology, fresh, intent_for(topology, bound=("n2",))).returncode == 0
    out = json.loads(topology.python("n1", BROKEN_APPLY, str(fresh / "declaration.json"),
                                     str(fresh / "state"), "no-ssh").stdout)
    assert not out["ok"] and out["transactions"] == 0
    assert "ssh floor" in " ".join(out["lines"])
    assert out["running"] == out["good"]
    assert topology.connects("n3", "n1", SSH)


def test_an_intent_without_the_ssh_floor_is_refused(topology, fresh):
    result = apply(topology, fresh, intent_for(topology, bound=("n2",), ssh=False))
    assert result.returncode == 1
    assert "ssh floor" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert topology.connects("n3", "n1", PROVIDER_PORT)  # nothing was applied


def test_dry_run_checks_but_applies_nothing(topology, fresh):
    result = apply(topology, fresh, intent_for(topology, bound=("n2",)), "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[checked]" in result.stdout
    assert topology.connects("n3", "n1", PROVIDER_PORT)
    assert not (fresh / "state" / "firewall.digest").exists()


def test_other_tables_stay_untouched(topology, fresh):
    # A stand-in for the container runtime's iptables-nft tables, with a rule and a set.
    topology.python("n1", (
        "import nftables; n = nftables.Nftables()\n"
        "rc, out, err = n.cmd('add table ip runtime; add chain ip runtime relay { type filter hook "
        "forward priority 0; policy accept; }; add set ip runtime s { type ipv4_addr; }; "
        "add element ip runtime s { 10.77.0.9 }; add rule ip runtime relay ip saddr @s counter accept')\n"
        "assert rc == 0, err\n"
    ))
    try:
        before = topology.nft_tables("n1")
        assert "ip runtime" in before
        assert apply(topology, fresh, intent_for(topology, bound=("n2",))).returncode == 0
        assert apply(topology, fresh, intent_for(topology, bound=("n3",))).returncode == 0
        assert topology.nft_tables("n1") == before
    finally:
        topology.python("n1", "import nftables; nftables.Nftables().cmd('delete table ip runtime')")


def test_table_removed_behind_our_back_is_restored(topology, fresh):
    intent = intent_for(topology, bound=("n2",))
    assert apply(topology, fresh, intent).returncode == 0
    topology.python("n1", "import nftables; nftables.Nftables().cmd('delete table inet mesh')")
    assert topology.connects("n3", "n1", PROVIDER_PORT)
    result = apply(topology, fresh, intent)
    assert "table inet mesh absent" in result.stdout and "[applied]" in result.stdout
    assert not topology.connects("n3", "n1", PROVIDER_PORT)


def test_bad_declaration_is_located_not_a_traceback(topology, tmp_path):
    bad = tmp_path / "declaration.yaml"
    bad.write_text("mesh: test\nnode: n1\naddress: 10.77.0.1\nfirewall:\n  address: 5\n")
    result = topology.mesh("n1", "firewall", str(bad), "--state-dir", str(tmp_path / "s"))
    assert result.returncode == 2
    assert f"{bad}:5:" in result.stderr
    assert "Traceback" not in result.stderr
