"""resolve() pauses CPython's cyclic collector while it runs (resolver/_collector.py): allowed
only because a resolution creates no reference cycle, so nothing it drops waits for the
collector and pausing it cannot make memory grow. Proven here: with the collector off, large
and refused meshes are resolved (twice, the second with the ledger the first produced) and
their resolutions dropped; a collection then finds nothing unreachable. And the caller's
setting comes back, whether resolve() returns or raises."""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import weakref
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Iterator, Optional

import attrs
import pytest

import resolver
from executors.control.loading import load_mesh_dir

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
CASES = ["homelab", "anchor", "genesis", "refusals/held-typo", "refusals/port-conflict",
         "refusals/ambiguous-provider", "refusals/move-with-state",
         "refusals/floor-on-kept-port", "refusals/unknown-module"]


def _bench() -> ModuleType:
    """benchmarks/bench_resolve.py, for its synthetic mesh generator."""
    spec = importlib.util.spec_from_file_location("bench_resolve",
                                                  ROOT / "benchmarks" / "bench_resolve.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _meshes() -> Iterator[tuple[resolver.Catalogue, resolver.Mesh, resolver.Ledger,
                                resolver.Sources]]:
    for case in CASES:
        inputs = load_mesh_dir(FIXTURES / case)
        yield inputs.catalogue, inputs.mesh, inputs.ledger, inputs.sources
    catalogue, mesh, ledger = _bench().synthetic(2500)
    yield catalogue, mesh, ledger, resolver.Sources()


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()


def test_a_resolution_creates_no_reference_cycle(collector_off: None) -> None:
    meshes = list(_meshes())  # loaded before the window: only resolving is inside it
    gc.collect()
    assert gc.garbage == []
    made = 0
    for catalogue, mesh, ledger, sources in meshes:
        first = resolver.resolve(catalogue, mesh, ledger, sources=sources)
        second = resolver.resolve(catalogue, mesh, first.ledger, sources=sources)
        made += len(first.declarations) + len(second.bindings)
        assert not gc.isenabled()  # the caller's setting (off) is kept
        del first, second
    assert made > 2500  # the large mesh was resolved
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept to be named
    unreachable = gc.collect()
    kinds = Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
    assert unreachable == 0 and not kinds, kinds.most_common(10)
    assert not [k for k in kinds if k.startswith(("resolver.", "pyrsistent"))]


def test_resolve_gives_back_the_callers_setting() -> None:
    catalogue, mesh, ledger, sources = next(_meshes())
    enabled = gc.isenabled()
    try:
        for setting in (True, False):
            (gc.enable if setting else gc.disable)()
            resolver.resolve(catalogue, mesh, ledger, sources=sources)
            assert gc.isenabled() is setting
            broken = attrs.evolve(mesh, nodes=mesh.nodes.set(
                "bad", resolver.Node(address="not an address")))
            with pytest.raises(resolver.InputError):  # raised by validate(), inside the pause
                resolver.resolve(catalogue, broken, ledger, sources=sources)
            assert gc.isenabled() is setting
    finally:
        (gc.enable if enabled else gc.disable)()


class _Node:
    """A caller's object that can be in a reference cycle and be watched (weakref)."""

    def __init__(self) -> None:
        self.other: object = None


def _dropped_cycle() -> "weakref.ref[_Node]":
    """A two-object cycle the caller has just dropped, watched through a weak reference."""
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@contextlib.contextmanager
def _collector(enabled: bool) -> Iterator[None]:
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        yield
    finally:
        (gc.enable if was else gc.disable)()


def _generation_of(obj: object) -> Optional[int]:
    for generation in (0, 1, 2):
        if any(o is obj for o in gc.get_objects(generation=generation)):
            return generation
    return None  # (frozen)


def test_what_a_resolution_holds_is_not_left_young() -> None:
    """With the collector on and nothing frozen, the result's objects go to the oldest
    generation as resolve() returns: the caller's next collections do not walk them all."""
    catalogue, mesh, ledger, sources = next(_meshes())
    with _collector(True):
        gc.collect()
        result = resolver.resolve(catalogue, mesh, ledger, sources=sources)
        assert gc.is_tracked(result)
        assert _generation_of(result) == 2
        assert _generation_of(result.declarations) == 2


def test_the_callers_dropped_cycle_is_collected_not_promoted() -> None:
    """The caller's young objects are collected as resolve() begins: a cycle it dropped just
    before is freed then, not carried into the oldest generation with the result."""
    catalogue, mesh, ledger, sources = next(_meshes())
    with _collector(True):
        gc.collect()
        watched = _dropped_cycle()
        assert watched() is not None  # (a few allocations since the collection: none ran)
        resolver.resolve(catalogue, mesh, ledger, sources=sources)
        assert watched() is None


def test_a_caller_with_the_collector_off_is_left_as_it_was() -> None:
    catalogue, mesh, ledger, sources = next(_meshes())
    with _collector(False):
        gc.collect()
        watched = _dropped_cycle()
        result = resolver.resolve(catalogue, mesh, ledger, sources=sources)
        assert watched() is not None  # nothing collected for a caller that turned it off
        assert _generation_of(result) == 0  # nor anything moved
        gc.collect()
        assert watched() is None


def test_the_callers_frozen_objects_stay_frozen() -> None:
    catalogue, mesh, ledger, sources = next(_meshes())
    with _collector(True):
        gc.collect()
        gc.freeze()
        try:
            frozen = gc.get_freeze_count()
            assert frozen > 0
            result = resolver.resolve(catalogue, mesh, ledger, sources=sources)
            assert gc.get_freeze_count() == frozen
            assert _generation_of(result) in (0, 1)  # a plain pause: left young
        finally:
            gc.unfreeze()
