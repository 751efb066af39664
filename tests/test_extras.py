"""Dependencies by use: the library alone needs six packages; each verb says which extra it
lacks, exit 2, no traceback.

Each check runs a fresh interpreter whose import system refuses the packages a machine
without the extras would not have (a sys.meta_path finder placed first), which is what
`pip install .` alone leaves: resolver/ must import, and the verbs the README's first command
runs must work, with the standard library and attrs, cattrs, orjson, pyrsistent,
ruamel.yaml and ruamel.yaml.clib (its C parser, for large mesh.yaml files) only.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from executors.cli import extras

ROOT = Path(__file__).resolve().parent.parent
# what `pip install .` brings: the six dependencies and what they import themselves
# (ruamel.yaml.clib is the module _ruamel_yaml, built with Cython: its runtime modules)
BASE = {"resolver", "executors", "attr", "attrs", "cattr", "cattrs", "orjson", "pyrsistent",
        "pvectorc", "ruamel", "_ruamel_yaml", "typing_extensions", "cython_runtime"}

HARNESS = """
import sys
BEFORE = set(sys.modules)  # what site put there (.pth hooks) before the check began
ALLOWED = {allowed!r}  # None: everything installed but BLOCKED
ALLOWED = None if ALLOWED is None else set(sys.stdlib_module_names) | set(ALLOWED)
BLOCKED = set({blocked!r})

class Absent:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in BLOCKED or (ALLOWED is not None and top not in ALLOWED):
            raise ModuleNotFoundError(f"No module named {{top!r}}", name=top)
        return None

sys.meta_path.insert(0, Absent())
{body}
"""


def run_without(body: str, *, allowed=BASE, blocked=(), cwd=ROOT) -> subprocess.CompletedProcess:
    """Run `body` where only the standard library and `allowed` import (None: everything
    installed), and never `blocked`."""
    code = HARNESS.format(allowed=None if allowed is None else sorted(allowed),
                          blocked=sorted(blocked), body=body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=cwd, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          timeout=300)


def mesh_without(*argv: str, blocked=(), allowed=None, cwd=ROOT) -> subprocess.CompletedProcess:
    """`mesh ARGV` with the packages `blocked` absent (and, given `allowed`, all but those)."""
    body = ("from executors.cli.main import main\n"
            f"sys.exit(main({list(argv)!r}))")
    return run_without(body, allowed=allowed, blocked=blocked, cwd=cwd)


def test_the_library_imports_with_its_six_dependencies_only():
    result = run_without(
        "import resolver\n"
        "tops = sorted({m.split('.')[0] for m in set(sys.modules) - BEFORE}\n"
        "              - set(sys.stdlib_module_names))\n"
        "print(' '.join(tops))")
    assert result.returncode == 0, result.stderr
    cython = {top for top in result.stdout.split() if re.fullmatch(r"_cython_[0-9_]+", top)}
    assert set(result.stdout.split()) - cython <= BASE, result.stdout


def test_the_check_would_catch_a_library_import_of_an_extra():
    result = run_without("import resolver\nimport docker\n")
    assert result.returncode != 0 and "No module named 'docker'" in result.stderr


def test_pyproject_declares_the_six_and_the_extras_the_command_names():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = lambda reqs: tuple(re.split(r"[<>=;\s]", r, maxsplit=1)[0] for r in reqs)  # noqa: E731
    assert set(names(project["dependencies"])) == {"attrs", "cattrs", "orjson", "pyrsistent",
                                                   "ruamel.yaml", "ruamel.yaml.clib"}
    declared = project["optional-dependencies"]
    for extra, distributions in extras.EXTRAS.items():
        assert set(names(declared[extra])) == set(distributions), extra
    every = {d for ds in extras.EXTRAS.values() for d in ds}
    assert set(extras.PROVIDED_BY.values()) <= every


def homelab(tmp_path: Path) -> Path:
    """A copy of fixtures/homelab with the catalogue it names (../../catalogue)."""
    shutil.copytree(ROOT / "catalogue", tmp_path / "catalogue")
    shutil.copytree(ROOT / "fixtures" / "homelab", tmp_path / "fixtures" / "homelab")
    return tmp_path / "fixtures" / "homelab"


@pytest.mark.parametrize("verb", ["check", "plan", "stale", "schema", "graph"])
def test_what_the_library_alone_runs(verb, tmp_path):
    """The README's first command (`pip install -e . && mesh plan fixtures/homelab`) and the
    other verbs that need no extra run with every extra's package absent."""
    mesh = homelab(tmp_path)
    argv = {"schema": ["schema", "mesh"]}.get(verb, [verb, str(mesh)])
    result = mesh_without(*argv, allowed=BASE)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    if verb == "schema":
        json.loads(result.stdout)


@pytest.mark.parametrize("argv, blocked, extra", [
    (["apply", "DECL", "--no-fast", "--state-root", "state"], {"docker"}, "node"),
    (["node-key", "n1", "--path", "k"], {"nacl"}, "node"),
    (["verify", "x.json"], {"psycopg"}, None),  # reads the declaration first: bad input
    (["apply", "DECL", "--no-fast"], set(extras.PROVIDED_BY), "node"),  # nothing installed
    (["rotate", "DIR", "some/credential"], {"nacl"}, "control"),
    (["applied", "DIR", "n1", "--digest", "x"], {"nacl"}, "control"),
    (["ca", "init", "DIR"], {"cryptography"}, "control"),
    (["renew", "DIR", "n1"], {"cryptography"}, "control"),
    (["pin", "DIR"], {"requests"}, "control"),
    (["mirror", "DIR"], {"requests"}, "control"),
    (["plan", "DIR", "--issue"], {"nacl", "cryptography"}, "control"),
    (["graph", "DIR", "--format", "svg"], {"graphviz"}, "control"),
])
def test_a_verb_without_its_extra_says_which_to_install(argv, blocked, extra, tmp_path):
    mesh = homelab(tmp_path)
    declaration = tmp_path / "n1.declaration.json"
    declaration.write_text(json.dumps({"mesh": "m", "node": "n1", "address": "127.0.0.1",
                                       "serial": 1}))
    argv = [{"DIR": str(mesh), "DECL": str(declaration)}.get(a, a) for a in argv]
    result = mesh_without(*argv, blocked=blocked, cwd=tmp_path)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 2, result.stderr
    if extra is not None:
        assert f"it comes with the `{extra}` extra: python3 -m pip install " \
               f"'mesh-resolver[{extra}]'" in result.stderr


def test_help_lists_a_verb_whose_extra_is_missing():
    result = mesh_without("--help", blocked={"nacl", "cryptography", "requests", "docker"})
    assert result.returncode == 0, result.stderr
    for verb in ("rotate", "applied", "ca", "renew", "pin", "mirror", "node-key"):
        assert re.search(rf"\n\s+{verb}\s+\(needs the (node|control) extra", result.stdout), verb


def test_an_unknown_missing_module_is_a_defect_not_an_extra():
    error = ModuleNotFoundError("No module named 'frobnicate'", name="frobnicate")
    assert extras.missing_extra("apply", error) is None
    assert extras.extra_for("plan", "nacl") == "control"
    assert extras.extra_for("apply", "nacl") == "node"


def test_every_verb_a_command_module_registers_is_known_to_main():
    """cli/main.ALSO names the verbs a module registers besides its own (ca: renew; rotate:
    applied), so a module that cannot be imported still lists all of them; and every verb
    has its extra decided in cli/extras.py, or needs none."""
    import argparse

    from executors.cli.main import ALSO, COMMANDS, build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    verbs = set(sub.choices)
    assert verbs == set(COMMANDS) | {v for also in ALSO.values() for v in also}
    assert set(extras.VERB_EXTRA) <= verbs
    assert verbs - set(extras.VERB_EXTRA) == {"check", "schema", "stale", "supervise", "names"}
