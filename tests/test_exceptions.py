"""One exception root: every exception class defined in resolver/ or executors/ is a MeshError.

An embedding tool (or the `mesh` command's last line of defence, which turns a MeshError into
`mesh: …` and exit 2) catches one type. The walk imports every module of both packages and
looks at each class a module defines itself.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
import types

import pytest

import executors
import resolver
from resolver import MeshError

# Classes that may not derive from MeshError, each with why. Keep this short.
EXEMPT = {
    # apply_fast imports the standard library only (its whole point is not to import the
    # resolver); _Decline never leaves try_noop, which turns any exception into "decline".
    "executors.node.apply.fast._Decline",
}


def modules_of(package: types.ModuleType) -> list[types.ModuleType]:
    found = [package]
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if info.name.endswith(".__main__"):  # runs the command when imported
            continue
        found.append(importlib.import_module(info.name))
    return found


def foreign_exceptions(modules) -> list[str]:
    """Every exception class defined in `modules` that is not a MeshError (qualified names)."""
    wrong = []
    for module in modules:
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__ or not issubclass(cls, BaseException):
                continue
            name = f"{cls.__module__}.{cls.__qualname__}"
            if not issubclass(cls, MeshError) and name not in EXEMPT:
                bases = ", ".join(b.__name__ for b in cls.__mro__[1:])
                wrong.append(f"{name} ({bases})")
    return sorted(wrong)


@pytest.mark.parametrize("package", [resolver, executors], ids=lambda p: p.__name__)
def test_every_exception_class_is_a_mesh_error(package):
    modules = modules_of(package)
    assert len(modules) > 10  # the walk found the package's modules
    wrong = foreign_exceptions(modules)
    assert wrong == [], "exception classes outside the MeshError hierarchy: " + "; ".join(wrong)


def test_the_walk_finds_a_stray_exception(tmp_path, monkeypatch):
    (tmp_path / "stray_errors.py").write_text(
        "from resolver import MeshError\n"
        "class Good(MeshError): pass\n"
        "class Bad(RuntimeError): pass\n"
        "class NotAnError: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("stray_errors")
    try:
        assert foreign_exceptions([module]) == ["stray_errors.Bad (RuntimeError, Exception, "
                                                "BaseException, object)"]
    finally:
        sys.modules.pop("stray_errors", None)


def test_the_exempt_names_still_exist():
    for name in EXEMPT:
        module, _, attribute = name.rpartition(".")
        assert hasattr(importlib.import_module(module), attribute), name
