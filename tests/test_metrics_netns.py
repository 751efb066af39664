"""Metrics as a provision, for real: two network namespaces, each with its own dockerd and the
mesh firewall on.

The catalogue's `prometheus` (on n1) takes every `metrics` provider (`each: true`); the
catalogue's `node-exporter` runs on both nodes. Prometheus reads its scrape targets from the
binding file the mesh mounts in its file-based discovery format, and its own
`/api/v1/targets` lists both exporters as up: the one on its own node and the one across
the firewall on n2, whose port the mesh opened to n1 alone. A second exporter on n2, planned
and applied, adds exactly its target; taking it out of mesh.yaml removes exactly it. The
modules are the catalogue's own, on a test image built from Debian's packages (tests/
_promimage.py) in place of their Dockerfiles' builds; images come from a registry on each
node's loopback (one storage behind both), pinned by `mesh pin` inside n1.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
import yaml

try:
    from . import _netns
except ImportError:
    import _netns

from _machines import UPSTREAM, machines, mesh_host, mesh_in  # noqa: E402

pytestmark = pytest.mark.integration

_why = _netns.have_tools()
for tool, package in (("dockerd", "docker.io"), ("busybox", "busybox-static"),
                      ("docker-registry", "docker-registry")):
    if not _why and shutil.which(tool) is None:
        _why = f"{tool} is not installed ({package}; scripts/services.sh installs it)"
if _why:
    pytest.skip(f"two-namespace metrics test: {_why}", allow_module_level=True)

from _promimage import available, prometheus_image  # noqa: E402

if available():
    pytest.skip(f"metrics test image: {available()}", allow_module_level=True)

REPO = Path(__file__).resolve().parent.parent
IMAGE = f"{UPSTREAM}/mesh-test-metrics/prometheus"
PROVISIONS = (REPO / "catalogue" / "provisions.yaml").read_text()
ALL_UP_WITHIN = 90  # seconds: a scrape every 15 s, after the server is ready


def catalogue_module(name: str) -> str:
    """The catalogue's module `name`, its built artifact replaced by the test image."""
    module = yaml.safe_load((REPO / "catalogue" / name / "module.yaml").read_text())
    built = next(a for a, spec in module["artifacts"].items() if "build" in spec)
    module["artifacts"] = {built: {"repository": IMAGE, "tag": "1"}}
    return yaml.safe_dump(module, sort_keys=False)



def write_mesh(directory: Path, topology, keys: dict, exporters: dict[str, str]) -> None:
    catalogue = directory / "catalogue"
    for name in ("prometheus", "node-exporter"):
        (catalogue / name).mkdir(parents=True, exist_ok=True)
        (catalogue / name / "module.yaml").write_text(catalogue_module(name))
    (catalogue / "provisions.yaml").write_text(PROVISIONS)
    nodes = "".join(f"  {node}:\n    address: {topology.addresses[node]}\n"
                    f"    public-key: {keys[node]}\n" + ("    control: true\n" if node == "n1"
                                                         else "")
                    for node in ("n1", "n2"))
    instances = "  prometheus@n1:\n    module: prometheus\n    node: n1\n" + "".join(
        f"  {name}:\n    module: node-exporter\n    node: {node}\n"
        for name, node in exporters.items())
    (directory / "mesh.yaml").write_text(
        f"mesh: metrics{os.getpid()}\ncatalogue: catalogue\nledger: ledger.yaml\n"
        f"nodes:\n{nodes}instances:\n{instances}")


def test_prometheus_scrapes_every_metrics_provider_as_they_come_and_go():
    with tempfile.TemporaryDirectory(prefix="mesh-metrics-") as scratch, \
            _netns.Topology("m", count=2,
                            subnet=f"10.83.{20 + os.getpid() % 200}") as topology:
        tmp = Path(scratch)
        with machines(topology, tmp, ("n1", "n2")) as daemons:
            _walk(topology, daemons, tmp)


def _walk(topology, daemons: dict, tmp: Path) -> None:
    from executors.node import docker_engine

    n1, n2 = daemons["n1"], daemons["n2"]
    engine = docker_engine.connect(n1.host)
    engine.tag(prometheus_image(engine), IMAGE, "1")
    n1.docker("push", f"{IMAGE}:1")

    directory, out = tmp / "mesh", tmp / "out"
    directory.mkdir()
    keys = {}
    for node in ("n1", "n2"):
        made = mesh_host("node-key", node, "--path", str(tmp / f"{node}.key"))
        keys[node] = made.split("public-key:")[1].split()[0]
    exporters = {"node-exporter@n1": "n1", "node-exporter@n2": "n2"}
    write_mesh(directory, topology, keys, exporters)
    mesh_in(topology, "n1", "pin", str(directory))

    def plan() -> dict:
        shutil.rmtree(out, ignore_errors=True)
        planned = mesh_host("plan", str(directory), "--issue", "--out", str(out))
        assert "prometheus@n1 targets -> every metrics provider" in planned, planned
        return {node: json.loads((out / f"{node}.declaration.json").read_text())
                for node in ("n1", "n2")}

    def apply(node: str) -> str:
        return mesh_in(topology, node, "apply", str(out / f"{node}.declaration.json"),
                       "--secrets", str(directory / "ledger.yaml"), "--key",
                       str(tmp / f"{node}.key"), "--docker-host", daemons[node].host,
                       "--state-root", str(tmp / f"{node}-state"), "--file-root",
                       str(tmp / f"{node}-root"), "--no-fast")

    def server_name(declaration: dict) -> str:
        (server,) = [c["name"] for c in declaration["containers"]
                     if c["labels"]["mesh.instance"] == "prometheus@n1"]
        return server

    def targets(declaration: dict) -> dict[str, dict]:
        """Prometheus's /api/v1/targets, asked in its container: mesh_instance → target."""
        said = n1.docker("exec", server_name(declaration), "wget", "-qO-",
                         "http://127.0.0.1:9090/api/v1/targets", check=False)
        if said.returncode != 0:
            return {}
        active = json.loads(said.stdout)["data"]["activeTargets"]
        return {t["labels"]["mesh_instance"]: t for t in active}

    def all_up(declaration: dict, expected: set[str]) -> dict[str, dict]:
        deadline = time.monotonic() + ALL_UP_WITHIN
        seen: dict[str, dict] = {}
        while time.monotonic() < deadline:
            seen = targets(declaration)
            if set(seen) == expected and all(t["health"] == "up" for t in seen.values()):
                return seen
            time.sleep(2)
        pytest.fail(f"Prometheus's targets after {ALL_UP_WITHIN}s: "
                    + json.dumps({k: [t["health"], t["lastError"], t["scrapeUrl"]]
                                  for k, t in seen.items()}) + f", expected {sorted(expected)}")

    # both exporters, one on Prometheus's node and one across the firewall
    declared = plan()
    (told,) = [b for b in declared["n1"]["bindings"] if b["requirement"] == "targets"]
    assert told["each"] and [e["provider"] for e in told["entries"]] == sorted(exporters)
    assert not declared["n2"].get("bindings")  # an exporter is told nothing
    (sd,) = [f for f in declared["n1"]["files"]
             if f["path"].endswith("/targets.prometheus-file-sd")]
    groups = json.loads(sd["content"])
    assert [g["labels"]["mesh_instance"] for g in groups] == sorted(exporters)
    assert all(g["labels"]["__metrics_path__"] == "/metrics" for g in groups)
    assert sd.get("secret") is None  # nothing is granted per target
    # n2 opens its exporter's port to n1's address alone
    allows = [a for a in declared["n2"]["firewall"]["allow"]
              if a["reason"].startswith("node-exporter@n2/")]
    assert [a["sources"] for a in allows] == [[topology.addresses["n1"]]], allows
    apply("n2")
    apply("n1")
    seen = all_up(declared["n1"], set(exporters))
    assert seen["node-exporter@n2"]["scrapeUrl"].startswith(
        f"http://{topology.addresses['n2']}:")

    # mesh verify on n1: each entry GET from inside Prometheus's container, exposition checked
    verified = topology.mesh("n1", "verify", str(out / "n1.declaration.json"), "--json",
                             "--docker-host", n1.host, "--file-root", str(tmp / "n1-root"))
    said = json.loads(verified.stdout)
    assert said["ok"] and verified.returncode == 0, verified.stdout + verified.stderr
    entries = {r["provider"]: r for r in said["results"] if r.get("requirement") == "targets"}
    assert set(entries) == set(exporters), said["results"]
    for result in entries.values():
        assert result["status"] == "ok", result
        assert "answers Prometheus exposition" in result["message"], result
        assert "from inside" in result["message"], result

    # an exporter that does not answer is named: node-exporter@n2 stopped on its node
    exporter_n2 = next(c["name"] for c in declared["n2"]["containers"]
                       if c["labels"]["mesh.instance"] == "node-exporter@n2")
    daemons["n2"].docker("stop", "-t", "1", exporter_n2)
    verified = topology.mesh("n1", "verify", str(out / "n1.declaration.json"), "--json",
                             "--docker-host", n1.host, "--file-root", str(tmp / "n1-root"),
                             "--timeout", "2")
    said = json.loads(verified.stdout)
    assert not said["ok"] and verified.returncode == 1, verified.stdout + verified.stderr
    failing = [r for r in said["results"] if r["status"] not in ("ok", "requires-nothing")]
    assert [(r["provider"], r["status"]) for r in failing] == [
        ("node-exporter@n2", "unreachable")], failing
    assert "node-exporter@n2" in failing[0]["message"], failing
    daemons["n2"].docker("start", exporter_n2)

    # a third provider: exactly its target is added
    exporters["exporter2@n2"] = "n2"
    write_mesh(directory, topology, keys, exporters)
    declared = plan()
    apply("n2")
    apply("n1")
    seen = all_up(declared["n1"], set(exporters))
    assert len(seen) == 3

    # removed from mesh.yaml: exactly its target goes
    del exporters["exporter2@n2"]
    write_mesh(directory, topology, keys, exporters)
    declared = plan()
    apply("n2")
    apply("n1")
    seen = all_up(declared["n1"], set(exporters))
    assert "exporter2@n2" not in seen
