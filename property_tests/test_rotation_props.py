"""Rotation as a state machine, against a plain model of the physical world.

The world: a provider that accepts exactly the generations it last put in force, and holder
nodes that each use exactly the generation they last applied. Events arrive in any order:
rotate, a holder applies what it is told, the provider applies its grant, and stale reports.
At every step: every holder's generation is accepted by the provider (dual credentials always;
single credentials except holders the ledger lists in the stated window); a retired generation
is never accepted again, by the ledger nor, once dropped, by the provider.
"""

from __future__ import annotations

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from pyrsistent import pmap

from resolver._rotation import (
    RotationError,
    accepted_generations,
    begin_rotation,
    first_generation,
    grant_view,
    holder_applied,
    holder_generation,
    in_progress,
    provider_applied,
    waiting_holders,
    window_holders,
)

HOLDERS = ("anchor", "lab", "edge")


class RotationMachine(RuleBasedStateMachine):
    @initialize(dual=st.booleans(), holders=st.integers(1, 3))
    def provisioned(self, dual, holders):
        """A credential issued and applied everywhere: the steady state rotations start from."""
        self.dual = dual
        self.id = "postgres-database/pg@anchor/app@lab" if dual else "amqp/mq@anchor/app@lab"
        self.holders = HOLDERS[:holders]
        cred = first_generation({n: f"sealed-{n}-1" for n in self.holders},
                                slot="a" if dual else None)
        self.provider_has = set(accepted_generations(cred))  # the provider's real state
        cred = provider_applied(cred, 1)
        self.holds = {n: 1 for n in self.holders}  # each holder's real state
        for node in self.holders:
            cred = holder_applied(cred, node, 1)
        self.cred = cred
        self.ever_retired: set[int] = set()
        self.dropped_by_provider: set[int] = set()
        self.rotations = 0  # the plain model: how many rotations were accepted
        self.model_busy = False  # the plain model: a rotation not yet finished

    # ------------------------------------------------------------------ events

    @rule()
    def rotate(self):
        sealed = {n: f"sealed-{n}-{self.rotations + 2}" for n in self.holders}
        try:
            after = begin_rotation(self.id, self.cred, sealed)
        except RotationError:
            assert self.model_busy, "a settled credential refused a rotation"
            assert in_progress(self.cred) is not None
            return
        assert not self.model_busy, "a second rotation began while one was in progress"
        self.rotations += 1
        self.model_busy = True
        if self.dual and after.pending is not None:
            assert after.pending.slot != self.cred.active.slot, "the idle slot is the other one"
        self.cred = after

    @rule(node=st.sampled_from(HOLDERS))
    def holder_applies(self, node):
        if node not in self.holders:
            return
        told = holder_generation(self.cred, node).generation
        self.holds[node] = told
        self.cred = holder_applied(self.cred, node, told)

    @rule()
    def provider_applies(self):
        target = accepted_generations(self.cred)
        self.dropped_by_provider |= (self.provider_has - target) & self.ever_retired
        self.provider_has = set(target)
        newest, _ = grant_view(self.cred)
        self.cred = provider_applied(self.cred, newest.generation)

    @rule(node=st.sampled_from(HOLDERS), back=st.integers(1, 3))
    def stale_holder_report(self, node, back):
        """A replayed report of an older generation changes nothing that matters."""
        if node in self.holders:
            before = self.cred
            self.cred = holder_applied(self.cred, node, max(1, self.holds[node] - back))
            assert self.cred == before

    @rule(back=st.integers(1, 3))
    def stale_provider_report(self, back):
        before = self.cred
        self.cred = provider_applied(self.cred, max(1, self.cred.provider_applied - back))
        assert attrs.evolve(self.cred, provider_applied=0) == attrs.evolve(before,
                                                                            provider_applied=0)

    # ------------------------------------------------------------------ properties

    @invariant()
    def every_holder_holds_an_accepted_credential(self):
        window = set(window_holders(self.cred))
        for node in self.holders:
            if self.holds[node] in self.provider_has:
                continue
            assert not self.dual, f"dual credential: {node} holds {self.holds[node]}, " \
                                  f"the provider accepts {sorted(self.provider_has)}"
            assert node in window, f"{node} is locked out and the ledger does not say so"

    @invariant()
    def retired_is_never_accepted_again(self):
        self.ever_retired |= set(self.cred.retired)
        assert not (accepted_generations(self.cred) & self.ever_retired)
        assert not (self.provider_has & self.dropped_by_provider)
        assert set(self.cred.retired) == self.ever_retired, "a retired generation came back"

    @invariant()
    def the_ledger_keeps_the_plain_model(self):
        cred = self.cred
        newest = max(g.generation for g in (cred.active, cred.pending, cred.retiring) if g)
        assert newest == self.rotations + 1
        busy = cred.pending is not None or cred.retiring is not None
        if self.model_busy and not busy:
            self.model_busy = False
        assert busy == self.model_busy
        if cred.retiring is not None:
            assert self.dual and waiting_holders(cred), "retiring kept with nobody waiting"
        if cred.pending is None and cred.retiring is None and self.dual:
            assert set(cred.retired) == set(range(1, cred.active.generation))
        values_kept = [g for g in (cred.active, cred.pending, cred.retiring) if g]
        assert all(g.generation not in cred.retired for g in values_kept), \
            "a retired generation's sealed values are still in the ledger"


TestRotation = RotationMachine.TestCase


class OwnSecretMachine(RuleBasedStateMachine):
    """A module's own secret: active at once, the old one kept sealed until its holder applied."""

    @initialize()
    def issued(self):
        self.id = "secret/pg@anchor/admin"
        self.cred = first_generation({"anchor": "sealed-1"})
        self.ever_retired: set[int] = set()
        self.applied = 0

    @rule()
    def rotate(self):
        try:
            after = begin_rotation(self.id, self.cred, {"anchor": "sealed-x"})
        except RotationError:
            assert self.cred.retiring is not None
            return
        assert after.active.generation == self.cred.active.generation + 1
        assert after.retiring == self.cred.active, "the old value must stay sealed"
        self.cred = after

    @rule()
    def holder_applies(self):
        self.applied = self.cred.active.generation
        self.cred = holder_applied(self.cred, "anchor", self.applied)

    @invariant()
    def old_value_kept_until_applied_and_never_again(self):
        self.ever_retired |= set(self.cred.retired)
        if self.cred.retiring is not None:
            assert self.applied < self.cred.active.generation
        assert not (accepted_generations(self.cred) & self.ever_retired)


TestOwnSecret = OwnSecretMachine.TestCase


def test_rotation_is_refused_by_name_while_one_is_in_progress():
    cred = first_generation({"anchor": "s"}, slot="a")
    cred = begin_rotation("c", cred, {"anchor": "t"})
    try:
        begin_rotation("c", cred, {"anchor": "u"})
    except RotationError as error:
        assert "c is already rotating" in str(error) and "waiting for the provider" in str(error)
    else:  # pragma: no cover
        raise AssertionError("a second rotation was accepted")


def test_dual_grant_is_the_same_while_pending_and_while_retiring():
    cred = first_generation({"anchor": "s", "lab": "s"}, slot="a")
    cred = provider_applied(cred, 1)
    pending = begin_rotation("c", cred, pmap({"anchor": "t", "lab": "t"}))
    promoted = provider_applied(pending, 2)
    assert grant_view(pending) == grant_view(promoted)
    assert promoted.active.slot == "b" and promoted.retiring.slot == "a"
