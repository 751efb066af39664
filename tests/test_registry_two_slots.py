"""A registry pull account rotates with no window, against the real registry (Debian's
docker-registry with htpasswd auth, as the mesh's registry instance runs it).

Each account has two htpasswd entries (`node-<node>_a`, `node-<node>_b`): the registry's node
puts the new generation in the idle slot's entry while the node that pulls keeps logging in
with the old one until it applied the new. The walk uses the real issuer (`rotate`), the
resolver, the ledger's record of applies and the htpasswd provisioner, which writes the file
the registry reads; the registry is restarted whenever the file changes, as the provisioner
restarts the registry's containers.

A client logs in to the registry in a loop through the whole rotation, as the pulling node's
declaration says at each moment, and once right after each step: no login is refused (a
connection refused while the registry restarts is no login, and is counted apart). The same
walk with an account issued with one entry is refused right after the registry's apply: the
window the two slots close.
"""

from __future__ import annotations

import io
import threading
import time

import attrs
import pytest
import requests

from resolver.rotation import record_applied
from executors.common.keys import unseal
from executors.common.report import LivePrinter, Report
from executors.control.issuer import rotate
from executors.node.node_paths import NodePaths
from executors.node.provisioners.grants import provision_files as provision_accounts
from executors.node.provisioners.htpasswd import htpasswd_path

from _background import repeatedly
from _registry_helpers import REGISTRY_BINARY, RegistryProcess
from test_registry_tls import ca, issued, keys, load, mesh_text, public, resolve  # noqa: F401

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(REGISTRY_BINARY is None, reason="docker-registry is not "
                                 "installed (scripts/services.sh installs it)")]

PULL = "registry-pull/registry/n0"


def source_for(key, node):
    """What a node unseals: the generation a SecretRef names, from the ledger of the moment."""
    def source(ledger):
        def value(ref):
            credential = ledger.credentials[ref.credential]
            for generation in (credential.pending, credential.active, credential.retiring):
                if generation is not None and generation.generation == ref.generation:
                    return unseal(key, generation.sealed[node])
            raise KeyError(f"{ref.credential} generation {ref.generation}")
        return value
    return source


class Walk:
    def __init__(self, tmp, keys, ca):  # noqa: F811 - the module fixtures of test_registry_tls
        self.inputs = load(mesh_text(["10.0.0.1", "10.0.0.2"], [public(k) for k in keys[:2]], 1))
        self.ledger, _ = issued(self.inputs, ca)
        self.paths = NodePaths(tmp / "n1-state", tmp / "n1-root")
        self.n1 = source_for(keys[1], "n1")
        self.n0 = source_for(keys[0], "n0")
        self.file = htpasswd_path(self.paths, "registry")
        self.registry = RegistryProcess(tmp / "registry", auth=(
            f"auth:\n  htpasswd:\n    realm: mesh\n    path: {self.file}\n"))
        self.lock = threading.Lock()
        self.view = None
        self.refused: list[str] = []
        self.unreachable = 0
        self.logins = 0

    def registry_applies(self) -> list[str]:
        """n1's apply: the htpasswd provisioner, a restart when the file changed, reported."""
        declaration = resolve(self.inputs, self.ledger).declarations["n1"]
        report = Report(printer=LivePrinter(stream=io.StringIO()))
        result = provision_accounts(declaration, self.n1(self.ledger), report, paths=self.paths)
        changed = [f"{op.op} {op.subject}" for op in report.ops if op.op.endswith("-account")]
        if changed or self.registry.process is None:
            self.registry.stop()
            self.registry.start()
        granted = {o.credential: o.generation for o in result.outcomes if o.status == "in-force"}
        self.ledger = record_applied(self.ledger, "n1", declaration, granted=granted)
        return changed

    def puller_applies(self) -> None:
        """n0's apply: its runtime is told the account and generation its declaration holds."""
        declaration = resolve(self.inputs, self.ledger).declarations["n0"]
        (login,) = declaration.registry_logins
        with self.lock:
            self.view = (login.user, self.n0(self.ledger)(login.secret), login.secret.generation)
        self.ledger = record_applied(self.ledger, "n0", declaration)

    def log_in(self) -> None:
        with self.lock:
            user, password, generation = self.view
        try:
            answer = requests.get(f"http://{self.registry.address}/v2/",
                                  auth=(user, password), timeout=5)
        except requests.RequestException:
            self.unreachable += 1  # the registry restarting: no login was tried
            return
        self.logins += 1
        if answer.status_code != 200:
            self.refused.append(f"{user} generation {generation}: {answer.status_code}")

    def rotation(self) -> list[str]:
        """Provision, then rotate n0's pull account to its end, logging in all along."""
        changed = self.registry_applies()
        self.puller_applies()
        self.log_in()
        try:
            with repeatedly(self.log_in):
                self.ledger = rotate(self.ledger, [PULL], self.inputs.mesh)
                for _ in range(4):
                    changed += self.registry_applies()
                    self.log_in()  # right after the registry's apply, before the puller's
                    self.puller_applies()
                    self.log_in()
                    credential = self.ledger.credentials[PULL]
                    if credential.pending is None and credential.retiring is None:
                        break
                changed += self.registry_applies()
                self.log_in()
                time.sleep(0.3)
        finally:
            self.registry.stop()
        return changed


def test_a_pull_loop_through_a_registry_account_rotation_is_never_refused(tmp_path, keys, ca):  # noqa: F811
    walk = Walk(tmp_path, keys, ca)
    changed = walk.rotation()
    assert walk.refused == [], walk.refused
    assert walk.logins > 10, (walk.logins, walk.unreachable)
    assert walk.view[0] == "node-n0_b" and walk.view[2] == 2, walk.view[:1] + walk.view[2:]
    assert "set-account node-n0_b on registry" in changed, changed
    assert "remove-account node-n0_a on registry" in changed, changed
    assert not any(c.startswith("set-account node-n0_a") for c in changed[3:]), changed
    text = walk.file.read_text()
    assert "node-n0_b:" in text and "node-n0_a:" not in text


def test_an_account_issued_with_one_entry_has_the_window_the_two_slots_close(tmp_path, keys,  # noqa: F811
                                                                             ca):  # noqa: F811
    walk = Walk(tmp_path, keys, ca)
    credential = walk.ledger.credentials[PULL]
    assert credential.active.slot == "a"
    walk.ledger = attrs.evolve(walk.ledger, credentials=walk.ledger.credentials.set(
        PULL, attrs.evolve(credential, active=attrs.evolve(credential.active, slot=None))))
    walk.rotation()
    assert walk.refused, "one entry per account must show its window"
