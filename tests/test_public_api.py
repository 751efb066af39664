"""The library's public API is closed: the root's `__all__` and its public submodules' own,
nothing imported from its private modules.

Everything outside resolver/ (the executors, tests, property tests, benchmarks, scripts, the
control image) uses the names `resolver.__all__` and the `__all__` of `resolver.documents`,
`resolver.rotation`, ... list; a `resolver._*` module is the library's own business. The scan
reads the source (AST): `import resolver._x`, `from resolver._x import y`, `from resolver
import _x` and an attribute `resolver._x` are all found, at the top of a file or in a function;
a second scan finds every public name used (`from resolver import x`, `resolver.x`,
`from resolver.rotation import x`, `rotation.x`) and fails on one its module does not list.

The root's `__all__` is joined from the private modules' own lists (each lists what it adds to
the root, and only names it defines), so the two cannot drift; each public submodule is thin
(imports from private modules, nothing else) and no name has two public homes.

One deliberate exception: the fuzz harness (scripts/fuzzlib.py) swaps the library's per-document
loaders (and load_mesh_dir's parse of mesh.yaml) for memoized ones inside resolver._documents
and resolver._mesh_dir while it runs, which only a harness
reaching in can do; it is named here so that nothing else can do the same unnoticed.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path
from types import ModuleType

import pytest

import resolver
from resolver import documents

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("executors", "tests", "property_tests", "benchmarks", "scripts", "docs", "catalogue")
INIT = ROOT / "resolver" / "__init__.py"
REACHING_IN = {"scripts/fuzzlib.py": {"import resolver._documents", "import resolver._mesh_dir"}}


def private_uses(source: str, filename: str) -> list[str]:
    """Every use of a private resolver module in `source`, as 'file:line: what'."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        what = None
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("resolver._")]
            what = f"import {names[0]}" if names else None
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith("resolver._"):
                what = f"from {node.module} import …"
            elif node.module == "resolver":
                private = [a.name for a in node.names if a.name.startswith("_")]
                what = f"from resolver import {private[0]}" if private else None
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "resolver" and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            what = f"resolver.{node.attr}"
        if what is not None:
            found.append(f"{filename}:{node.lineno}: {what}")
    return found


def scanned_files() -> list[Path]:
    return sorted(p for d in SCANNED for p in (ROOT / d).rglob("*.py"))


def test_nothing_outside_resolver_uses_its_private_modules():
    files = scanned_files()
    assert len(files) > 100 and any(p.parent.name == "executors" or "executors" in p.parts
                                    for p in files)
    found = []
    for path in files:
        relative = str(path.relative_to(ROOT))
        uses = private_uses(path.read_text(), relative)
        allowed = REACHING_IN.get(relative, set())
        found += [u for u in uses if u.split(": ", 1)[1] not in allowed]
    assert found == [], "private resolver modules used outside resolver/ (use the public " \
        "names in resolver.__all__):\n" + "\n".join(found)


@pytest.mark.parametrize("source, what", [
    ("import resolver._rotation\n", "import resolver._rotation"),
    ("from resolver._plan import container_changes\n", "from resolver._plan import"),
    ("def f():\n    from resolver import _codes as codes\n", "from resolver import _codes"),
    ("import resolver\nx = resolver._dot.quote('a')\n", "resolver._dot"),
])
def test_the_scan_finds_each_way_in(source, what):
    found = private_uses(source, "x.py")
    assert found and what in found[0]


def test_the_scan_allows_public_names():
    source = "import resolver\nfrom resolver import resolve, ProblemCode\nresolver.resolve\n" \
             "resolver.__all__\n"
    assert private_uses(source, "ok.py") == []


def test_one_all_lists_every_public_name_once():
    names = resolver.__all__
    assert len(names) == len(set(names)), "a name listed twice in __all__"
    assert [n for n in names if not hasattr(resolver, n)] == []
    public = {n for n in dir(resolver) if not n.startswith("_")}
    assert public == set(names), f"public but not in __all__: {sorted(public - set(names))}"
    assert all_statements(INIT.read_text()) == ["assigned"], \
        "__all__ is assigned once (never extended)"


def all_statements(source: str) -> list[str]:
    """How `source` touches `__all__`: 'assigned' per assignment, 'extended' per `+=`,
    `.extend`, `.append` or any other call on it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += ["assigned" for t in targets if isinstance(t, ast.Name) and t.id == "__all__"]
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) \
                and node.target.id == "__all__":
            found.append("extended")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "__all__":
            found.append("extended")
    return found


def test_the_all_check_sees_an_extension():
    assert all_statements("__all__ = ['a']\n__all__ += ['b']\n") == ["assigned", "extended"]
    assert all_statements("__all__ = ['a']\n__all__.extend(x.__all__)\n") == \
        ["assigned", "extended"]


def private_modules() -> dict[str, ModuleType]:
    return {info.name: importlib.import_module(f"resolver.{info.name}")
            for info in pkgutil.iter_modules(resolver.__path__) if info.name.startswith("_")}


def public_submodules() -> dict[str, ModuleType]:
    return {info.name: importlib.import_module(f"resolver.{info.name}")
            for info in pkgutil.iter_modules(resolver.__path__)
            if not info.name.startswith("_")}


def joined() -> list[str]:
    """The private modules whose lists the root's `__all__` joins (`*_x.__all__`), in order."""
    for node in ast.parse(INIT.read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == \
                ["__all__"]:
            assert isinstance(node.value, ast.List)
            return [e.value.value.id for e in node.value.elts if isinstance(e, ast.Starred)
                    and isinstance(e.value, ast.Attribute) and e.value.attr == "__all__"
                    and isinstance(e.value.value, ast.Name)]
    raise AssertionError("resolver/__init__.py assigns no __all__")


def defined_in(module: ModuleType) -> set[str]:
    """The names a module defines itself at its top level (classes, functions, assignments):
    not those it imports."""
    names: set[str] = set()
    for node in ast.parse(Path(module.__file__).read_text()).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def test_the_roots_all_is_joined_from_the_private_modules_own_lists():
    """Each private module's `__all__` lists exactly what it adds to the root, every name one it
    defines; the root star-imports each such module and joins their lists, and nothing else but
    its public submodules."""
    privates = private_modules()
    with_all = {name for name, module in privates.items() if hasattr(module, "__all__")}
    order = joined()
    assert len(order) == len(set(order)) and set(order) == with_all, \
        f"private modules with an __all__ the root does not join: {sorted(with_all - set(order))}"
    starred = {node.module for node in ast.parse(INIT.read_text()).body
               if isinstance(node, ast.ImportFrom) and node.level == 1
               and [a.name for a in node.names] == ["*"]}
    assert starred == with_all
    lists = [name for module in order for name in privates[module].__all__]
    assert resolver.__all__[:len(lists)] == lists
    assert sorted(resolver.__all__[len(lists):]) == sorted(public_submodules())
    assert len(lists) == len(set(lists)), "a name in two private lists"
    for module in order:
        names = privates[module].__all__
        assert names, f"resolver.{module}.__all__ is empty: give the module none"
        foreign = [n for n in names if n not in defined_in(privates[module])]
        assert foreign == [], f"resolver.{module}.__all__ lists names it does not define: {foreign}"
        assert all(getattr(resolver, n) is getattr(privates[module], n) for n in names)


def test_each_public_submodule_is_thin_exact_and_the_only_home_of_its_names():
    submodules = public_submodules()
    assert set(submodules) >= {"documents", "rotation", "artifacts", "picture", "incremental"}
    assert set(submodules) <= set(resolver.__all__)
    homes: dict[str, str] = {n: "resolver" for n in resolver.__all__}
    for name, module in submodules.items():
        assert module.__doc__, f"resolver.{name} says what it is"
        names = module.__all__
        assert len(names) == len(set(names)), f"a name listed twice in resolver.{name}.__all__"
        public = {n for n in dir(module) if not n.startswith("_")}
        assert public == set(names), f"resolver.{name}: public but not in __all__: " \
            f"{sorted(public - set(names))}, listed but missing: {sorted(set(names) - public)}"
        twice = {n: homes[n] for n in names if n in homes}
        assert twice == {}, f"resolver.{name} lists names public elsewhere too: {twice}"
        homes.update({n: name for n in names})
        body = ast.parse(Path(module.__file__).read_text()).body
        imports = [node for node in body if isinstance(node, ast.ImportFrom)]
        assert all(node.level == 1 and (node.module or "").startswith("_") for node in imports)
        rest = [node for node in body if not isinstance(node, ast.ImportFrom)
                and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
        assert [all_statements(ast.unparse(node)) for node in rest] == [["assigned"]], \
            f"resolver.{name} holds nothing but its imports and its __all__"


def used_names(source: str, filename: str) -> list[tuple[str, str, int]]:
    """Every public name of the library `source` uses, as (module, name, line): `from resolver
    import x` and `resolver.x` are ('resolver', 'x'); `from resolver.sub import x`,
    `resolver.sub.x` and `sub.x` (sub bound by `from resolver import sub`) are
    ('resolver.sub', 'x')."""
    tree = ast.parse(source, filename)
    submodules = set(public_submodules())
    roots, bound = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.asname or "resolver" for a in node.names if a.name == "resolver"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "resolver":
            bound.update({a.asname or a.name: f"resolver.{a.name}" for a in node.names
                          if a.name in submodules})
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.split(".")[0] == "resolver":
            found += [(node.module, a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in roots:
                found.append(("resolver", node.attr, node.lineno))
            elif node.value.id in bound:
                found.append((bound[node.value.id], node.attr, node.lineno))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and isinstance(node.value.value, ast.Name) and node.value.value.id in roots \
                and node.value.attr in submodules:
            found.append((f"resolver.{node.value.attr}", node.attr, node.lineno))
    return [(m, n, line) for m, n, line in found
            if not n.startswith("_") and not m.split(".")[-1].startswith("_")]


def test_every_public_name_used_outside_resolver_is_one_its_module_lists():
    """A name moved to a submodule (or dropped) leaves no caller behind: every use names a name
    the root's or that submodule's `__all__` lists."""
    lists = {"resolver": set(resolver.__all__)} | {
        f"resolver.{name}": set(module.__all__) for name, module in public_submodules().items()}
    found = []
    for path in scanned_files():
        relative = str(path.relative_to(ROOT))
        found += [f"{relative}:{line}: {module}.{name}"
                  for module, name, line in used_names(path.read_text(), relative)
                  if name not in lists.get(module, ())]
    assert found == [], "names their module does not list:\n" + "\n".join(found)


def test_the_use_scan_finds_each_way_of_naming():
    source = ("import resolver\nfrom resolver import rotation, resolve\n"
              "from resolver.documents import load_mesh\nresolver.documents.structure\n"
              "rotation.begin_rotation\nresolver.HELD\nresolver.__all__\n")
    assert {(m, n) for m, n, _ in used_names(source, "x.py")} == {
        ("resolver", "rotation"), ("resolver", "resolve"), ("resolver.documents", "load_mesh"),
        ("resolver", "documents"), ("resolver.documents", "structure"),
        ("resolver.rotation", "begin_rotation"), ("resolver", "HELD")}


def test_the_package_is_typed():
    assert (ROOT / "resolver" / "py.typed").is_file()
    assert 'resolver = ["py.typed"]' in (ROOT / "pyproject.toml").read_text()


def test_every_exception_of_the_library_is_a_mesh_error():
    """An embedding tool catches one type: every exception class defined in resolver/ is a
    MeshError, the public ones included."""
    import importlib
    import pkgutil

    classes = []
    for info in pkgutil.iter_modules(resolver.__path__):
        module = importlib.import_module(f"resolver.{info.name}")
        classes += [c for _n, c in inspect.getmembers(module, inspect.isclass)
                    if issubclass(c, BaseException) and c.__module__ == module.__name__]
    assert len(classes) >= 5
    assert [c.__qualname__ for c in classes if not issubclass(c, resolver.MeshError)] == []
    for name in ("RotationError", "PlaceholderSyntaxError", "InputError", "ResolutionError"):
        assert issubclass(getattr(resolver, name), resolver.MeshError)


def test_structure_raises_input_error_naming_every_fault_never_the_converters_own():
    with pytest.raises(resolver.InputError) as caught:
        documents.structure({"node": "a", "serial": "x", "bogus": 1}, resolver.Declaration)
    text = str(caught.value)
    assert "serial is a string ('x')" in text and "unknown key 'bogus'" in text
    assert "missing required key 'mesh'" in text
    assert documents.structure({"mesh": "m", "node": "a", "address": "10.0.0.1", "serial": 1},
                               resolver.Declaration).node == "a"
    with pytest.raises(resolver.MeshError, match="no document type 'nope'"):
        documents.json_schema("nope")
