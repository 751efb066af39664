"""Every public name of the library says what it is: a docstring on each class and function in
`resolver.__all__` and in the `__all__` of each public submodule (`resolver.rotation`, ...) and
on each public method and property of those classes, and a `#:` comment (or a docstring after
it) on each public constant, which is how pdoc documents a variable.

A constant that is a member of a documented StrEnum is documented by its enum.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import pkgutil
from pathlib import Path
from types import ModuleType

import resolver

RESOLVER = Path(resolver.__file__).resolve().parent


def public_modules() -> dict[str, ModuleType]:
    """The root and each public submodule, by the file that defines it."""
    found: dict[str, ModuleType] = {"__init__": resolver}
    for info in pkgutil.iter_modules(resolver.__path__):
        if not info.name.startswith("_"):
            found[info.name] = importlib.import_module(f"resolver.{info.name}")
    return found


def exported_from(public: str = "__init__") -> dict[str, tuple[str, str]]:
    """Public name → (private module, the name it has there), for the root (each star-imported
    private module's `__all__`) or a public submodule (its imports), from its source."""
    found = {}
    for node in ast.parse((RESOLVER / f"{public}.py").read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                if alias.name == "*":
                    module = importlib.import_module(f"resolver.{node.module}")
                    found.update({n: (node.module, n) for n in module.__all__})
                else:
                    found[alias.asname or alias.name] = (node.module, alias.name)
    return found


def constant_documented(module: str, name: str) -> bool:
    """Whether the module-level assignment of `name` has a `#:` comment on the line before it
    or a string right after it."""
    source = (RESOLVER / f"{module}.py").read_text()
    lines = source.splitlines()
    body = ast.parse(source).body
    for index, node in enumerate(body):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        if not any(isinstance(t, ast.Name) and t.id == name for t in targets):
            continue
        before = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
        after = body[index + 1] if index + 1 < len(body) else None
        return before.startswith("#:") or (
            isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str))
    raise AssertionError(f"{name} is not assigned at the top of resolver/{module}.py")


def undocumented() -> list[str]:
    missing = []
    for public, namespace in public_modules().items():
        origins = exported_from(public)
        missing += undocumented_in(namespace, origins, [n for n in namespace.__all__
                                                       if n not in public_modules()])
    return missing


def undocumented_in(namespace: ModuleType, origins: dict[str, tuple[str, str]],
                    names: list[str]) -> list[str]:
    missing = []
    for name in names:
        module, own_name = origins[name]
        value = getattr(namespace, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            if not (vars(value).get("__doc__") if inspect.isclass(value) else value.__doc__):
                missing.append(f"{name} ({module})")
            if inspect.isclass(value):
                missing += [f"{name}.{attribute} ({module})"
                            for attribute in undocumented_members(value)]
        elif isinstance(value, enum.Enum):
            if not vars(type(value)).get("__doc__"):
                missing.append(f"{name}: its enum {type(value).__name__} ({module})")
        elif not constant_documented(module, own_name):
            missing.append(f"{name} ({module}, a constant: `#:` comment)")
    return missing


def undocumented_members(cls: type) -> list[str]:
    found = []
    for attribute, value in vars(cls).items():
        if attribute.startswith("_"):
            continue
        function = value.fget if isinstance(value, property) else getattr(value, "__func__",
                                                                          value)
        if inspect.isfunction(function) and not (function.__doc__ or "").strip():
            found.append(attribute)
    return found


def test_every_public_name_has_a_docstring():
    missing = undocumented()
    assert missing == [], "public names without a docstring:\n" + "\n".join(missing)


def test_the_walk_finds_a_missing_docstring(monkeypatch):
    monkeypatch.setattr(resolver.container_changes, "__doc__", None)
    monkeypatch.setattr(resolver.Sources.file, "__doc__", "")
    monkeypatch.setattr(resolver.rotation.begin_rotation, "__doc__", None)
    missing = undocumented()
    assert "container_changes (_plan)" in missing and "Sources.file (_inputs)" in missing
    assert "begin_rotation (_rotation)" in missing  # a public submodule's name too
    assert constant_documented("_ledger", "LEDGER_VERSION")
    assert not constant_documented("_model", "EMPTY_MAP")  # private, and said by no `#:`
