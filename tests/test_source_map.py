"""Positions are kept apart from the model: nothing reachable from a loaded `Inputs` is an
object of the YAML parser (ruamel's nodes, marks, comments or scalar types).

Each document's positions (`DocumentPositions`, in `Inputs.sources`) are a source map held as
plain data: key path → (line, col) of the key and of its value, and the order keys are written
in, as a trie of tuples, dicts and lists of ints and strings. So an `Inputs` can be kept, compared
and sent anywhere without the parser, and `Sources.where` / `key_order` answer from it alone.
"""

from __future__ import annotations

import gc
import types
from pathlib import Path

import pytest

from executors.control.loading import load_mesh_dir

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted(p.parent for p in (ROOT / "fixtures").rglob("mesh.yaml")
                  if "refusals" not in p.parts)
PLAIN = (tuple, dict, list, int, str, float, bool, type(None))
NOT_FOLLOWED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
                types.MethodType)


def reachable(root: object) -> list[object]:
    """Every object reachable from `root` through references, classes and code left out."""
    seen: set[int] = set()
    found = []
    stack = [root]
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        found.append(value)
        if not isinstance(value, NOT_FOLLOWED):
            stack.extend(gc.get_referents(value))
    return found


def parser_objects(root: object) -> list[str]:
    return sorted({f"{type(v).__module__}.{type(v).__qualname__}" for v in reachable(root)
                   if (type(v).__module__ or "").startswith("ruamel")})


@pytest.mark.parametrize("directory", FIXTURES, ids=lambda p: p.name)
def test_no_parser_object_is_reachable_from_loaded_inputs(directory):
    inputs = load_mesh_dir(directory)
    assert len(reachable(inputs)) > 100
    assert parser_objects(inputs) == []


@pytest.mark.parametrize("directory", FIXTURES, ids=lambda p: p.name)
def test_each_documents_positions_are_plain_data(directory):
    inputs = load_mesh_dir(directory)
    assert "mesh" in inputs.sources.documents
    for key, positions in inputs.sources.documents.items():
        kinds = {type(v) for v in reachable(positions.tree)}
        assert kinds <= set(PLAIN), (key, kinds - set(PLAIN))
    first_node = inputs.sources.key_order("mesh", "nodes")[0]
    file, line, col = inputs.sources.where("mesh", "nodes", first_node, at_key=True)
    assert file.endswith("mesh.yaml") and line > 1 and col > 1


def test_the_walk_finds_a_parser_object():
    from ruamel.yaml.error import StreamMark

    assert parser_objects({"kept": [StreamMark("f", 0, 0, 0)]}) == [
        "ruamel.yaml.error.StreamMark"]
