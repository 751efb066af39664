"""Resolution is pure stages that pass values: no shared mutable resolver object.

The context every stage reads is frozen, and so is every value a stage hands on (a Bound, the
floors refused); a stage returns its findings and writes nothing it was given. Statically, no
module of resolver/ writes an attribute outside a constructor (the two local bookkeepers that
do are named below, with why), none caches through hasattr, and none keeps a global or
nonlocal counter.
"""

from __future__ import annotations

import ast
from pathlib import Path

import attrs
import pytest

import resolver
from executors.control.loading import load_mesh_dir

ROOT = Path(__file__).resolve().parent.parent
RESOLVER = ROOT / "resolver"
FIXTURES = ROOT / "fixtures"

#: Modules of resolver/ that keep mutable bookkeeping in their own objects, and why.
MUTABLE_BOOKKEEPERS = {
    "_yaml.py": "the YAML reader's composer keeps its parse position while loading a document",
    "_issue.py": "PortBook, a free-port book one assign_ports call builds and drops",
    "_documents.py": "dump_yaml sets up the ruamel emitter it has just made (ruamel's API is "
                     "attributes)",
}
#: The values resolution stages hand each other: each must be a frozen attrs class.
STAGE_VALUES = {"_context.py": {"Context", "FloorRefusals"}, "_bound.py": {"Bound"},
                "_declaration.py": {"Problem", "InstanceRendering", "Binding", "Request"},
                "_registry_access.py": {"MeshRegistry"}, "_resolution.py": {"Resolution"},
                "_select.py": {"Selection"},
                "_render_bindings.py": {"Live", "OwnSecrets", "Consumed"},
                "_render.py": {"LocalOpenings", "Images"}}


def _frozen_classes(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
            and any(ast.unparse(d).split("(")[0] == "attrs.frozen" for d in node.decorator_list)}


@pytest.mark.parametrize("module", sorted(STAGE_VALUES))
def test_the_context_and_the_values_stages_pass_are_frozen(module):
    assert STAGE_VALUES[module] <= _frozen_classes(RESOLVER / module)


def test_the_frozen_check_sees_a_mutable_context(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import attrs\n@attrs.define\nclass Context:\n    x: int\n"
                    "@attrs.frozen(eq=False)\nclass Floors:\n    y: int\n")
    assert _frozen_classes(path) == {"Floors"}


def _inputs(case: str) -> resolver.Inputs:
    return load_mesh_dir(FIXTURES / case)


@pytest.mark.parametrize("case", ["homelab", "refusals/held-typo", "refusals/port-conflict",
                                  "refusals/second-mesh-provider",
                                  "refusals/floor-on-kept-port"])
def test_resolving_writes_nothing_it_is_given_and_gives_the_same_resolution_again(case):
    inputs = _inputs(case)
    before = (attrs.asdict(inputs.catalogue), attrs.asdict(inputs.mesh),
              attrs.asdict(inputs.ledger))
    first = resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger,
                             sources=inputs.sources)
    second = resolver.resolve(inputs.catalogue, inputs.mesh, inputs.ledger,
                              sources=inputs.sources)
    assert first == second
    assert list(first.problems) == list(second.problems)  # the same order too
    assert (attrs.asdict(inputs.catalogue), attrs.asdict(inputs.mesh),
            attrs.asdict(inputs.ledger)) == before


def test_a_held_instance_names_every_refusal_in_the_order_stated():
    """The blocked mapping stages pass on keeps each instance's codes in stated order; the
    held problem lists them (its position is the first refusal's)."""
    resolution = resolver.resolve(*_resolve_args("refusals/held-typo"))
    held = [p for p in resolution.problems if p.code == resolver.ProblemCode.HELD]
    assert held
    for problem in held:
        refusals = [p for p in resolution.problems
                    if p.severity == "error" and problem.instance in p.blocks]
        assert refusals and all(f"[{p.code}]" in problem.message for p in refusals)


def _resolve_args(case: str) -> tuple:
    inputs = _inputs(case)
    return inputs.catalogue, inputs.mesh, inputs.ledger


def _attribute_writes(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, target) of every assignment to an attribute outside a method named __init__
    or __attrs_post_init__."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_constructor: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_constructor = node.name in ("__init__", "__attrs_post_init__")
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) \
                        and not in_constructor:
                    found.append((node.lineno, ast.unparse(sub)))
        for child in ast.iter_child_nodes(node):
            visit(child, in_constructor)

    visit(tree, False)
    return found


def _caching_or_counters(tree: ast.AST) -> list[tuple[int, str]]:
    """hasattr/setattr/object.__setattr__ calls and global/nonlocal statements."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name in ("hasattr", "setattr", "object.__setattr__", "delattr"):
                found.append((node.lineno, name))
    return found


def _mutable_attrs_classes(tree: ast.AST) -> list[tuple[int, str]]:
    """Classes decorated with attrs.define / attr.s / attrs.mutable (mutable attrs classes)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for deco in node.decorator_list:
                text = ast.unparse(deco)
                if text.split("(")[0] in ("attrs.define", "attr.s", "attrs.mutable",
                                          "attr.define", "define", "attr.attrs"):
                    found.append((node.lineno, node.name))
    return found


def test_the_checks_see_a_write_a_cache_and_a_mutable_class():
    tree = ast.parse(
        "import attrs\n"
        "@attrs.define\nclass R:\n    x: int\n"
        "class S:\n    def __init__(self):\n        self.n = 0\n"
        "    def bump(self):\n        self.n += 1\n"
        "def stage(r):\n    if not hasattr(r, 'cache'):\n        r.cache = {}\n"
        "    global COUNT\n")
    assert _attribute_writes(tree) == [(9, "self.n"), (12, "r.cache")]
    assert sorted(_caching_or_counters(tree)) == [(11, "hasattr"), (13, "global COUNT")]
    assert _mutable_attrs_classes(tree) == [(3, "R")]


@pytest.mark.parametrize("path", sorted(RESOLVER.glob("*.py")), ids=lambda p: p.name)
def test_no_module_of_resolver_writes_state_caches_or_counts(path):
    tree = ast.parse(path.read_text(), str(path))
    assert _caching_or_counters(tree) == []
    assert _mutable_attrs_classes(tree) == []
    if path.name in MUTABLE_BOOKKEEPERS:
        return
    assert _attribute_writes(tree) == [], \
        f"{path.name} writes an attribute after construction"


def test_no_resolver_object_is_left():
    source = "\n".join(p.read_text() for p in RESOLVER.glob("*.py"))
    assert "class _Resolver" not in source
