"""The library's public API is closed: one `__all__`, nothing imported from its private modules.

Everything outside resolver/ (the executors, tests, property tests, benchmarks, scripts) uses
the names `resolver.__all__` lists; a `resolver._*` module is the library's own business. The
scan reads the source (AST): `import resolver._x`, `from resolver._x import y`, `from resolver
import _x` and an attribute `resolver._x` are all found, at the top of a file or in a function.

One deliberate exception: the fuzz harness (scripts/fuzzlib.py) swaps the library's per-document
loaders (and load_mesh_dir's parse of mesh.yaml) for memoized ones inside resolver._documents
and resolver._mesh_dir while it runs, which only a harness
reaching in can do; it is named here so that nothing else can do the same unnoticed.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import resolver

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("executors", "tests", "property_tests", "benchmarks", "scripts", "docs")
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
    source = (ROOT / "resolver" / "__init__.py").read_text()
    assert source.count("__all__") == 1 + source.count("`__all__`"), \
        "__all__ is assigned once (never extended)"


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
        resolver.structure({"node": "a", "serial": "x", "bogus": 1}, resolver.Declaration)
    text = str(caught.value)
    assert "serial is a string ('x')" in text and "unknown key 'bogus'" in text
    assert "missing required key 'mesh'" in text
    assert resolver.structure({"mesh": "m", "node": "a", "address": "10.0.0.1", "serial": 1},
                              resolver.Declaration).node == "a"
    with pytest.raises(resolver.MeshError, match="no document type 'nope'"):
        resolver.json_schema("nope")
