"""The self-hosting step of every publish (executors/control/self_hosting.py) when it cannot
push: local builds are kept exactly as recorded, and one line says why (no Engine, registry or
broker needed to see it). A registry that does not answer yet, and the push once it does, are
in tests/test_self_hosting_publish_netns.py.
"""

from __future__ import annotations

from _genesis import built_genesis, genesis_copy
from executors.control.loading import load_mesh_dir
from executors.control.self_hosting import Outcome, Why, push_when_served


def test_nothing_local_nothing_done(tmp_path):
    said: list[str] = []
    done = push_when_served(genesis_copy(tmp_path), None, say=said.append)
    assert done.outcome is Outcome.NOTHING_LOCAL and said == []


def test_no_registry_declared_keeps_the_local_build_and_says_so(tmp_path):
    directory = built_genesis(tmp_path)
    before = (directory / "ledger.yaml").read_text()
    said: list[str] = []
    done = push_when_served(directory, None, say=said.append)
    assert (done.outcome, done.why, done.kept) == (Outcome.KEPT, Why.NO_REGISTRY,
                                                   ("control/control",))
    assert said == ["self-hosting: control/control kept as local build(s), published as they "
                    "are: the mesh declares no registry (an instance providing artifact-store, "
                    "its port in the ledger); tried again at the next publish"]
    assert (directory / "ledger.yaml").read_text() == before
