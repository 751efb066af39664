"""The house: executors' rooms say where code runs, arrows point one way, and no circles.

cli → node, control, common; node → common; control → common; common → nothing of executors.
Nothing imports cli (the verbs are the top floor). The resolver imports no executor. A room
may hold sub-packages (node/provisioners/); they belong to their room.

No module of executors/ or resolver/ imports another in a circle (the two packages are one
graph, so a circle through both is seen too), counting every import statement a module
runs, at its top or inside a function (a lazy import is still an arrow), and leaving out only
what `if TYPE_CHECKING:` guards (never run). A module's whole name written as a string (the
provisioner registry's table, imported by importlib on first use) is an arrow too; a name
built at run time (the verbs' dispatch by command) cannot be seen and is not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable, Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("cli", "node", "control", "common")
ALLOWED = {
    "cli": {"cli", "node", "control", "common"},
    "node": {"node", "common"},
    "control": {"control", "common"},
    "common": {"common"},
}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _import_nodes(tree: ast.AST, type_only: bool = False) -> Iterator[ast.AST]:
    """Every import statement that runs (at module level or in a function), and those under
    `if TYPE_CHECKING:` only when `type_only` is asked for."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if _type_checking(node) and not type_only:
            stack.extend(node.orelse)  # type: ignore[attr-defined]
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def imported_modules(path: Path, known: Iterable[str], root: Path = ROOT,
                     type_only: bool = False) -> set[str]:
    """The modules among `known` that the file at `path` imports (relative imports resolved;
    `from package import name` is the submodule when `name` is one)."""
    known = set(known)
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):  # a module named in full, for importlib
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value in known and node.value != name:
            found.add(node.value)
    for node in _import_nodes(tree, type_only):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source
                       for a in node.names]
        for target in targets:
            while target and target not in known:  # `import a.b.c` runs a.b.c's module
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(package_dir: Path | Iterable[Path], root: Path = ROOT,
                 type_only: bool = False) -> dict[str, set[str]]:
    """Module → the modules it imports, over every file under `package_dir` (one directory
    or several: an arrow between two packages is seen only when both are in the graph)."""
    dirs = [package_dir] if isinstance(package_dir, Path) else list(package_dir)
    files = sorted(p for d in dirs for p in d.rglob("*.py"))
    known = {module_name(p, root) for p in files}
    return {module_name(p, root): imported_modules(p, known, root, type_only) for p in files}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected set of modules larger than one (Tarjan), as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def room_of(path: Path) -> str:
    parts = path.relative_to(ROOT / "executors").parts
    return parts[0] if len(parts) > 1 else ""


FILES = sorted((ROOT / "executors").rglob("*.py"))
GRAPH = import_graph(ROOT / "executors")


def test_every_executor_file_lives_in_a_room():
    loose = [str(p.relative_to(ROOT)) for p in FILES
             if room_of(p) not in ROOMS and p.name != "__init__.py"]
    assert loose == [], "files outside executors/{cli,node,control,common}: " + ", ".join(loose)


@pytest.mark.parametrize("path", [p for p in FILES if room_of(p) in ROOMS],
                         ids=lambda p: str(p.relative_to(ROOT / "executors")))
def test_imports_point_one_way(path):
    room = room_of(path)
    rooms = {m.split(".")[1] for m in GRAPH[module_name(path)] if m.count(".") >= 1}
    wrong = rooms - ALLOWED[room]
    assert not wrong, f"{path.relative_to(ROOT)} imports executors.{sorted(wrong)}: " \
        f"{room} may import only {sorted(ALLOWED[room])}"


def test_the_check_catches_a_wrong_arrow():
    path = ROOT / "executors" / "node" / "x_bad.py"
    graph = {"executors.node.x_bad": {"executors.control.issuer"}}
    rooms = {m.split(".")[1] for m in graph[module_name(path)]}
    assert rooms - ALLOWED[room_of(path)] == {"control"}


def test_no_module_of_executors_imports_another_in_a_circle():
    assert len(GRAPH) > 40
    # the registry's table is seen: provisioners are imported by it, by name
    assert "executors.node.provisioners.postgres" in GRAPH["executors.node.provisioners.registry"]
    found = cycles(GRAPH)
    assert found == [], "import circles in executors/: " + \
        "; ".join(" ↔ ".join(c) for c in found)


RESOLVER_GRAPH = import_graph(ROOT / "resolver")
WHOLE_GRAPH = import_graph([ROOT / "resolver", ROOT / "executors"])


def test_no_module_of_resolver_imports_another_in_a_circle():
    """The resolution stages (selection, refusals, rendering, assembly) import what they share
    from modules below them (_bound, _declaration), never the orchestrator (_resolve) back."""
    assert len(RESOLVER_GRAPH) > 30
    assert "resolver._render" in RESOLVER_GRAPH["resolver._resolve"]
    found = cycles(RESOLVER_GRAPH)
    assert found == [], "import circles in resolver/: " + \
        "; ".join(" ↔ ".join(c) for c in found)


def test_no_circle_runs_through_resolver_and_executors_together():
    assert any(m.startswith("resolver") for m in WHOLE_GRAPH["executors.node.apply.render"])
    assert not any(m.startswith("executors") for name, targets in WHOLE_GRAPH.items()
                   if name.startswith("resolver") for m in targets), "the resolver imports an executor"
    found = cycles(WHOLE_GRAPH)
    assert found == [], "import circles: " + "; ".join(" ↔ ".join(c) for c in found)


def test_no_circle_even_through_imports_only_the_type_checker_reads():
    """Annotations are part of the house too: with every `if TYPE_CHECKING:` import counted,
    resolver/ and executors/ still import nothing in a circle (the provisioners take the
    SecretSource protocol from executors.node.extensions, which reads their value types only
    for the type checker)."""
    graph = import_graph([ROOT / "resolver", ROOT / "executors"], type_only=True)
    assert "executors.node.provisioners.base" in graph["executors.node.extensions"]
    found = cycles(graph)
    assert found == [], "import circles, type-only imports counted: " + \
        "; ".join(" ↔ ".join(c) for c in found)


def test_the_cycle_check_sees_lazy_imports_and_relative_ones_but_not_type_checking(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import thing\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\n"
                              "if TYPE_CHECKING:\n    from pkg import d\n")
    (pkg / "d.py").write_text("import pkg.c\n")
    (pkg / "e.py").write_text("import importlib\nTABLE = {'x': 'pkg.f'}\n")
    (pkg / "f.py").write_text("from . import e\n")
    graph = import_graph(pkg, tmp_path)
    assert graph["pkg.a"] == {"pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.a"}
    assert graph["pkg.c"] == set()
    assert import_graph(pkg, tmp_path, type_only=True)["pkg.c"] == {"pkg.d"}
    assert graph["pkg.e"] == {"pkg.f"}
    assert cycles(graph) == [["pkg.a", "pkg.sub.b"], ["pkg.e", "pkg.f"]]
    other = tmp_path / "other"
    other.mkdir()
    (other / "__init__.py").write_text("")
    (other / "g.py").write_text("from pkg import c\n")
    (pkg / "h.py").write_text("from other.g import x\n")
    (pkg / "c.py").write_text("import pkg.h\n")
    assert cycles(import_graph(pkg, tmp_path)) == [["pkg.a", "pkg.sub.b"], ["pkg.e", "pkg.f"]]
    assert cycles(import_graph([pkg, other], tmp_path)) == [
        ["other.g", "pkg.c", "pkg.h"], ["pkg.a", "pkg.sub.b"], ["pkg.e", "pkg.f"]]


def test_the_command_answers_to_each_of_its_entry_points(capsys):
    """`executors.cli.main` is the command's module (`main.main(argv)`, what the tests and
    `python -m executors.cli` use) and, called, the command itself (what a console script of
    the entry point `executors.cli:main` does); pyproject's entry point names the function."""
    import tomllib

    from resolver import documents
    from executors.cli import main as module

    assert module.main(["schema"]) == 0
    assert module(["schema"]) == 0
    from executors.common.message_schemas import SCHEMAS

    names = list(documents.document_names()) + list(SCHEMAS)  # documents, then messages
    assert capsys.readouterr().out.split() == 2 * names
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"mesh": "executors.cli.main:main"}


# Imports run at the top of a module, where the import graph can be read. A function imports
# only what may be missing or must not be paid for up front, each for the reason written here:
OPTIONAL_PACKAGES = {"pika", "graphviz", "nftables"}  # an extra's client, or a system binding
DEFERRED = {
    # PyNaCl and cryptography (the control extra): `mesh plan` without --issue, `mesh pin` and
    # `mesh mirror` without --key run on the base install
    ("executors/cli/plan.py", "executors.common.keys"),
    ("executors/control/trust.py", "executors.common.keys"),
    ("executors/control/declarations.py", "executors.control.issuer"),
    # the no-op check answers before the full apply path is imported (the ≥20× target)
    ("executors/cli/apply.py", "executors.common.report"),
    ("executors/cli/apply.py", "executors.node.apply.runner"),
    ("executors/cli/apply.py", "main"),  # `from .main import main`: main imports this verb
}


def _function_imports(path: Path) -> Iterator[str]:
    tree = ast.parse(path.read_text())
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Import):
                yield from (alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                yield node.module or ""


def late_imports(root: Path = ROOT) -> list[str]:
    """`file: module` for every import inside a function of executors/ that no reason above
    covers."""
    found = []
    for path in sorted((root / "executors").rglob("*.py")):
        name = str(path.relative_to(root))
        for module in _function_imports(path):
            if module.split(".")[0] in OPTIONAL_PACKAGES or (name, module) in DEFERRED:
                continue
            found.append(f"{name}: {module}")
    return found


def test_executors_import_at_the_top_except_for_a_stated_reason():
    assert late_imports() == []


def test_a_late_import_without_a_reason_is_found(tmp_path):
    module = tmp_path / "executors" / "node" / "late.py"
    module.parent.mkdir(parents=True)
    module.write_text("def f():\n    import json\n    from executors.common import keys\n"
                      "    import nftables\n")
    assert late_imports(tmp_path) == ["executors/node/late.py: json",
                                      "executors/node/late.py: executors.common"]


# Inside node/, packages by job in floors: a floor imports its own and the floors below only.
NODE_FLOORS = (
    ("node_paths", "docker_engine", "logs",  # where things are, the Engine's client, its logs
     "restic"),  # the backup repository's client
    ("extensions", "firewall"),  # the extension points; the firewall (renders and applies)
    ("provisioners",  # grants made true on their providers
     "state_move",  # a moved instance's state served, fetched, verified, let go
     "backup_target"),  # a backup duty's repository opened with the sealed values
    ("apply", "verify",  # a node made to match a declaration; bindings checked from it
     "backup",  # an instance's state snapshotted and put back
     "upgrade"),  # a snapshot before a stateful instance's new image, a rollback's restore
    ("agent",  # the loop that takes declarations off the broker and applies them
     "backup_schedule"),  # the agent's scheduled and requested backups
)


def node_floor_violations(root: Path = ROOT) -> list[str]:
    floor = {part: level for level, parts in enumerate(NODE_FLOORS) for part in parts}
    found = []
    for module, imported in sorted(import_graph(root / "executors" / "node", root).items()):
        parts = module.split(".")
        if len(parts) < 3:
            continue  # executors.node itself
        for target in sorted(imported):
            source_job, target_job = parts[2], target.split(".")[2]
            if source_job == target_job:
                continue
            if source_job not in floor or target_job not in floor:
                found.append(f"{module} → {target}: a job NODE_FLOORS does not place")
            elif floor[target_job] > floor[source_job]:
                found.append(f"{module} → {target}: up from {source_job} to {target_job}")
    return found


def test_node_packages_import_down_only():
    assert node_floor_violations() == []


def test_the_floor_check_catches_an_arrow_up(tmp_path):
    for name in ("executors/__init__.py", "executors/node/__init__.py",
                 "executors/node/firewall/__init__.py", "executors/node/agent/__init__.py",
                 "executors/node/agent/loop.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "executors/node/firewall/executor.py").write_text(
        "from executors.node.agent import loop\n")
    assert node_floor_violations(tmp_path) == [
        "executors.node.firewall.executor → executors.node.agent.loop: up from firewall to agent"]
