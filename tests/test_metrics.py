"""Metrics as a provision, as an operator meets it through `mesh plan`: the catalogue's
`prometheus` takes every `metrics` provider and mounts the list as Prometheus's file_sd
targets; each `node-exporter` is opened to the monitor's node only and told nothing; a third
exporter changes exactly the monitor's targets file and container, and no other instance.
(tests/test_metrics_netns.py runs the same modules for real.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CATALOGUE = ROOT / "catalogue"
TARGETS = "/etc/mesh/bindings/prometheus@n1/targets.prometheus-file-sd"
DEBIAN = "sha256:" + "2" * 64


def mesh(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "executors.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


def write(directory: Path, exporters: dict[str, str]) -> None:
    for name in ("prometheus", "node-exporter"):
        shutil.copytree(CATALOGUE / name, directory / "catalogue" / name, dirs_exist_ok=True)
    shutil.copy(CATALOGUE / "provisions.yaml", directory / "catalogue" / "provisions.yaml")
    (directory / "mesh.yaml").write_text(
        "mesh: mon\nnodes:\n  n1: {address: 10.0.0.1}\n  n2: {address: 10.0.0.2}\n"
        "instances:\n  prometheus@n1: {module: prometheus, node: n1}\n" + "".join(
            f"  {name}: {{module: node-exporter, node: {node}}}\n"
            for name, node in exporters.items()))
    ledger = directory / "ledger.yaml"
    if not ledger.exists():
        ledger.write_text(
            f"version: 1\npins:\n  docker.io/library/debian:bookworm-slim: '{DEBIAN}'\n"
            "builds:\n"
            f"  prometheus/prometheus:\n    digest: 'sha256:{'3' * 64}'\n"
            f"    bases: {{prometheus/debian: '{DEBIAN}'}}\n"
            f"  node-exporter/node-exporter:\n    digest: 'sha256:{'4' * 64}'\n"
            f"    bases: {{node-exporter/debian: '{DEBIAN}'}}\n")


def declarations(out: Path) -> dict[str, dict]:
    return {node: json.loads((out / f"{node}.declaration.json").read_text())
            for node in ("n1", "n2")}


def test_prometheus_is_told_every_exporter_as_file_sd_targets_and_each_opened_to_it(tmp_path):
    write(tmp_path, {"node-exporter@n1": "n1", "node-exporter@n2": "n2"})
    planned = mesh("plan", tmp_path, "--out", tmp_path / "out")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert ("  prometheus@n1 targets -> every metrics provider (2)\n"
            "    - node-exporter@n1  10.0.0.1:") in planned.stdout
    n1, n2 = declarations(tmp_path / "out").values()
    (targets,) = [f for f in n1["files"] if f["path"] == TARGETS]
    groups = json.loads(targets["content"])
    assert groups == [
        {"labels": {"__metrics_path__": "/metrics", "__scheme__": "http",
                    "mesh_instance": f"node-exporter@{node}"},
         "targets": [f"{address}:{port}"]}
        for node, address, port in (
            ("n1", "10.0.0.1", n1["providers"][0]["port"]),
            ("n2", "10.0.0.2", n2["providers"][0]["port"]))]
    assert "secret" not in targets and targets["mode"] == "0444"
    (server,) = [c for c in n1["containers"] if c["labels"]["mesh.instance"] == "prometheus@n1"]
    assert {"kind": "binding", "source": TARGETS, "target": "/etc/prometheus/targets.json",
            "read_only": True} in server["mounts"]
    assert server["env"]["SCRAPE_TARGETS"] == "2" and not server.get("secrets")
    # the exporter on n2 is opened to n1 (the monitor's node) alone, and told nothing
    assert [(a["reason"], a["sources"]) for a in n2["firewall"]["allow"]] == [
        ("node-exporter@n2/metrics for prometheus@n1", ["10.0.0.1"])]
    assert not n2.get("bindings")


def test_a_third_exporter_changes_the_monitors_targets_and_nothing_of_the_others(tmp_path):
    exporters = {"node-exporter@n1": "n1", "node-exporter@n2": "n2"}
    write(tmp_path, exporters)
    assert mesh("plan", tmp_path, "--out", tmp_path / "base", "--write-ledger").returncode == 0
    write(tmp_path, {**exporters, "second@n2": "n2"})
    planned = mesh("plan", tmp_path, "--against", tmp_path / "base", "--json")
    assert planned.returncode == 0, planned.stderr
    changes = json.loads(planned.stdout)["declaration_changes"]
    touched = {(c["node"], c["section"], c["subject"], c["action"]) for c in changes}
    recreated = {c["subject"] for c in changes if c["section"] == "container"}
    assert recreated == {"mon-prometheus-n1-server", "mon-second-n2-exporter"}, touched
    assert ("n1", "file", TARGETS, "~") in touched, touched
    assert not any("node-exporter@" in c["subject"] or "node-exporter-" in c["subject"]
                   for c in changes), touched
    after = json.loads(planned.stdout)["nodes"]["n2"]["firewall"]["allow"]
    assert sorted(a["reason"] for a in after) == [
        "node-exporter@n2/metrics for prometheus@n1", "second@n2/metrics for prometheus@n1"]
