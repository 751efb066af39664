"""Rotation as a state machine, against a plain model that decides everything by itself.

The model (`Model`) is written from the rules in DESIGN.md, not from resolver/_rotation.py: it
numbers generations, gives a two-slot credential's new generation the idle slot, keeps the
old one accepted until every holder applied the new one (two slots) or retires it as soon as
the provider put the new one in force (one password per account), and says on its own when a
rotation is in progress. The physical world is a provider that accepts exactly what the
*model* says its grant put in force the last time it applied, and holder nodes that each use
the generation they last applied. Events arrive in any order: rotate, a holder applies what
it is told, the provider applies its grant, stale reports.

At every step the implementation agrees with the model (what holders are told, what the
provider must accept and is granted, retired generations, the stated window, whether a
rotation is in progress) and the physical invariants hold: every holder's generation is
accepted (two slots: always; one password: except the holders in the stated window), and a
retired generation is never accepted again.

ServerAdminMachine models a provider's own admin secret and a server that keeps the password
it was initialised with: it is what `mesh rotate DIR secret/<postgres>/admin` must never lock out.
"""

from __future__ import annotations

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from pyrsistent import pmap

from resolver import RotationError
from resolver.rotation import (
    accepted_generations,
    begin_rotation,
    first_generation,
    grant_view,
    holder_applied,
    holder_generation,
    in_progress,
    provider_applied,
    reseal,
    waiting_holders,
    window_holders,
)

HOLDERS = ("anchor", "lab", "edge")


@attrs.define
class Model:
    """A credential's rotation, decided by plain rules."""

    dual: bool
    holders: tuple
    slot: dict = attrs.Factory(dict)  # generation → slot (two-slot credentials)
    active: int = 1
    pending: int | None = None
    retiring: int | None = None
    retired: set = attrs.Factory(set)
    applied: dict = attrs.Factory(dict)  # holder → newest generation it reported
    busy: bool = False

    def accepted(self) -> set:
        """What the provider must accept now: with two slots, every generation a holder may
        hold or be moved to; with one password, only the newest."""
        if self.dual:
            return {g for g in (self.pending, self.active, self.retiring) if g is not None}
        return {self.pending if self.pending is not None else self.active}

    def granted(self) -> tuple:
        """(newest to put in force, older one still to accept) of the provider's grant."""
        newest = self.pending if self.pending is not None else self.active
        if not self.dual:
            return newest, None
        older = self.active if self.pending is not None else self.retiring
        return newest, older

    def rotate(self) -> int:
        new = max([self.active, self.pending or 0, self.retiring or 0, *self.retired]) + 1
        if self.dual:
            self.slot[new] = "b" if self.slot[self.active] == "a" else "a"
        self.pending, self.busy = new, True
        return new

    def provider_in_force(self, generation: int) -> None:
        if self.pending is None or generation < self.pending:
            return
        old, self.active, self.pending = self.active, self.pending, None
        if self.dual:
            self.retiring = old
            self.settle()
        else:
            self.retired.add(old)
            self.busy = False  # one password: done once the provider holds the new one

    def holder_holds(self, node: str, generation: int) -> None:
        if generation <= self.active:
            self.applied[node] = max(self.applied.get(node, 0), generation)
        self.settle()

    def settle(self) -> None:
        if self.retiring is not None and all(self.applied.get(n, 0) >= self.active
                                             for n in self.holders):
            self.retired.add(self.retiring)
            self.retiring, self.busy = None, False

    def window(self) -> set:
        accepted = self.accepted()
        return {n for n in self.holders if self.applied.get(n, 0) and
                self.applied[n] not in accepted}


class RotationMachine(RuleBasedStateMachine):
    @initialize(dual=st.booleans(), holders=st.integers(1, 3), silent=st.integers(0, 2))
    def provisioned(self, dual, holders, silent):
        """A credential issued and applied by every holder but the `silent` last ones (a node
        that has not reported anything yet): where rotations start from."""
        self.dual = dual
        self.id = "postgres-database/pg@anchor/app@lab" if dual else "amqp/mq@anchor/app@lab"
        self.holders = HOLDERS[:holders]
        self.model = Model(dual, self.holders, slot={1: "a"})
        cred = first_generation({n: f"sealed-{n}-1" for n in self.holders},
                                slot="a" if dual else None)
        self.provider_has = {1}  # the provider's real state: what its grant put in force
        cred = provider_applied(cred, 1, credential_id=self.id)
        reporting = self.holders[:max(0, len(self.holders) - silent)]
        self.holds = {n: (1 if n in reporting else 0) for n in self.holders}  # 0: holds nothing
        for node in reporting:
            cred = holder_applied(cred, node, 1)
            self.model.holder_holds(node, 1)
        self.cred = cred
        self.dropped_by_provider: set[int] = set()

    # ------------------------------------------------------------------ events

    @rule()
    def rotate(self):
        sealed = {n: f"sealed-{n}-x" for n in self.holders}
        try:
            after = begin_rotation(self.id, self.cred, sealed)
        except RotationError as error:
            assert self.model.busy, f"a settled credential refused a rotation: {error}"
            return
        assert not self.model.busy, "a second rotation began while one was in progress"
        new = self.model.rotate()
        assert after.pending is not None and after.pending.generation == new
        if self.dual:
            assert after.pending.slot == self.model.slot[new], "the idle slot is the other one"
        self.cred = after

    @rule(node=st.sampled_from(HOLDERS))
    def holder_applies(self, node):
        if node not in self.holders:
            return
        told = holder_generation(self.cred, node).generation
        assert told == self.model.active, "a holder is told only what the provider holds"
        self.holds[node] = told
        self.cred = holder_applied(self.cred, node, told)
        self.model.holder_holds(node, told)

    @rule()
    def provider_applies(self):
        newest, older = self.model.granted()
        target = {g for g in (newest, older) if g is not None}
        self.dropped_by_provider |= self.provider_has - target
        self.provider_has = target  # the model's grant, put in force for real
        self.cred = provider_applied(self.cred, newest, credential_id=self.id)
        self.model.provider_in_force(newest)

    @rule()
    def rotate_and_provider_applies(self):
        """The common path in one step, so deep states (retiring, windows) come often."""
        self.rotate()
        self.provider_applies()

    @rule(node=st.sampled_from(HOLDERS), back=st.integers(1, 3))
    def stale_holder_report(self, node, back):
        """A replayed report of an older generation changes nothing that matters."""
        if node in self.holders and self.holds[node]:
            before = self.cred
            self.cred = holder_applied(self.cred, node, max(1, self.holds[node] - back))
            assert self.cred == before

    @rule(back=st.integers(1, 3))
    def stale_provider_report(self, back):
        before = self.cred
        self.cred = provider_applied(self.cred, max(1, self.cred.provider_applied - back),
                                     credential_id=self.id)
        assert attrs.evolve(self.cred, provider_applied=0) == attrs.evolve(before,
                                                                            provider_applied=0)

    @rule(kept=st.lists(st.sampled_from(HOLDERS), min_size=1, max_size=3, unique=True))
    def holders_change(self, kept):
        """An instance moved: the credential is sealed to exactly the new holders, not rotated.
        A holder that stays keeps its sealed box and its report; a new one gets a box of each
        generation and holds nothing until it applies; one that left is forgotten."""
        before, holders = self.cred, tuple(sorted(kept, key=HOLDERS.index))

        def sealed_for(generation, nodes):
            return {n: f"sealed-{n}-moved-{generation.generation}" for n in nodes}

        self.cred = reseal(self.cred, holders, sealed_for)
        for old, new in ((before.active, self.cred.active), (before.pending, self.cred.pending),
                         (before.retiring, self.cred.retiring)):
            if old is None:
                assert new is None or new.generation not in before.retired
                continue
            if new is None:  # the old generation retired: nobody that still holds waits for it
                assert old is before.retiring and old.generation in self.cred.retired
                continue
            assert (new.generation, new.slot) == (old.generation, old.slot)
            assert dict(new.sealed) == {n: old.sealed[n] if n in old.sealed else
                                        f"sealed-{n}-moved-{old.generation}" for n in holders}
        self.holders = self.model.holders = holders
        self.holds = {n: self.holds.get(n, 0) for n in holders}
        self.model.applied = {n: g for n, g in self.model.applied.items() if n in holders}
        self.model.settle()

    # ------------------------------------------------------------------ properties

    @invariant()
    def the_ledger_says_what_the_model_says(self):
        cred, model = self.cred, self.model
        assert cred.active.generation == model.active
        assert (cred.pending.generation if cred.pending else None) == model.pending
        assert (cred.retiring.generation if cred.retiring else None) == model.retiring
        assert set(cred.retired) == model.retired, "a retired generation came back or is missing"
        assert accepted_generations(cred) == model.accepted()
        newest, older = grant_view(cred)
        assert (newest.generation, older.generation if older else None) == model.granted()
        if self.dual:
            assert newest.slot == model.slot[newest.generation]
        assert (in_progress(cred) is not None) == model.busy
        assert set(window_holders(cred)) == model.window()
        assert set(waiting_holders(cred)) == {n for n in self.holders
                                              if model.applied.get(n, 0) < model.active}

    @invariant()
    def every_holder_holds_an_accepted_credential(self):
        for node in self.holders:
            if self.holds[node] in self.provider_has or self.holds[node] == 0:
                continue
            assert not self.dual, f"dual credential: {node} holds {self.holds[node]}, " \
                                  f"the provider accepts {sorted(self.provider_has)}"
            assert node in self.model.window(), f"{node} is locked out and nobody says so"

    @invariant()
    def retired_is_never_accepted_again(self):
        assert not (accepted_generations(self.cred) & self.model.retired)
        assert not (self.provider_has & self.dropped_by_provider), "a dropped generation is back"
        kept = [g for g in (self.cred.active, self.cred.pending, self.cred.retiring) if g]
        assert all(g.generation not in self.cred.retired for g in kept), \
            "a retired generation's sealed values are still in the ledger"


TestRotation = RotationMachine.TestCase


class OwnSecretMachine(RuleBasedStateMachine):
    """A module's own secret that no server holds (an app's token): active at once, the old
    one kept sealed until its holder applied. The model counts generations and decides by
    itself when the rotation is over."""

    @initialize()
    def issued(self):
        self.id = "secret/pg@anchor/admin"
        self.cred = first_generation({"anchor": "sealed-1"})
        self.active, self.retiring, self.retired = 1, None, set()
        self.applied = 0

    @rule()
    def rotate(self):
        try:
            after = begin_rotation(self.id, self.cred, {"anchor": "sealed-x"})
        except RotationError:
            assert self.retiring is not None, "a settled secret refused a rotation"
            return
        assert self.retiring is None, "a second rotation began before the holder applied"
        self.active, self.retiring = self.active + 1, self.active
        assert after.active.generation == self.active
        assert after.retiring == self.cred.active, "the old value must stay sealed"
        assert after.pending is None, "a module's own secret waits for no provider"
        self.cred = after

    @rule()
    def holder_applies(self):
        self.applied = self.cred.active.generation
        self.cred = holder_applied(self.cred, "anchor", self.applied)
        if self.retiring is not None and self.applied >= self.active:
            self.retired.add(self.retiring)
            self.retiring = None

    @invariant()
    def old_value_kept_until_applied_and_never_again(self):
        assert self.cred.active.generation == self.active
        assert (self.cred.retiring.generation if self.cred.retiring else None) == self.retiring
        assert set(self.cred.retired) == self.retired
        assert (in_progress(self.cred) is not None) == (self.retiring is not None)
        assert not (accepted_generations(self.cred) & self.retired)


TestOwnSecret = OwnSecretMachine.TestCase


class ServerAdminMachine(RuleBasedStateMachine):
    """A provider's own admin secret, against a plain model of its server.

    The server holds exactly one admin password, set when its data directory was initialised;
    recreating its container with another value in the environment changes nothing. Only the
    provisioner changes it: it logs in with the generation its declaration says is in force,
    else the pending one; if the server accepted the one in force and a pending one is
    declared, it changes the password to the pending one. An apply that cannot log in fails,
    and a failed apply's report is never recorded. `mesh applied` records the last report only
    when it names the declaration in force now (the digest check), as `record_applied` does:
    the provider's granted generation first, then what its containers hold. The operator may
    change the password by hand, and later set it back to the generation in force.

    At every step: the ledger still holds sealed a generation the server accepts (unless the
    operator changed it by hand), never retires the generation the server holds, and tells
    holders only a generation the server has accepted."""

    ID = "secret/pg@anchor/admin"

    @initialize()
    def initialised(self):
        self.cred = provider_applied(first_generation({"anchor": "sealed-1"}), 1,
                                     credential_id=self.ID)
        self.cred = holder_applied(self.cred, "anchor", 1)
        self.server = 1  # the generation whose password the server accepts
        self.accepted_ever = {1}
        self.by_hand = False
        self.report = None  # (declared (active, pending), granted, held) of the last success
        self.rotations = 0

    def declared(self):
        pending = self.cred.pending.generation if self.cred.pending else None
        return self.cred.active.generation, pending

    @rule()
    def rotate(self):
        try:
            self.cred = begin_rotation(self.ID, self.cred, {"anchor": "sealed-x"},
                                       server_held=True)
        except RotationError:
            assert in_progress(self.cred) is not None
            return
        self.rotations += 1

    @rule(recreate=st.booleans())
    def node_applies(self, recreate):
        """An apply of the declaration in force: containers (a recreate never changes the
        server's password), then the provisioner."""
        active, pending = self.declared()
        tried = [active] + ([pending] if pending is not None else [])
        if self.server not in tried or self.by_hand:
            self.report = None  # failed: nothing recorded (the record says so)
            return
        if pending is not None and self.server == active:
            self.server = pending  # ALTER ROLE, authenticated with the one in force
            self.accepted_ever.add(pending)
        self.report = ((active, pending), self.server, active)

    @rule()
    def operator_reports(self):
        if self.report is None or self.report[0] != self.declared():
            return  # a failed apply, or a declaration no longer in force: refused
        _, granted, held = self.report
        self.cred = provider_applied(self.cred, granted, credential_id=self.ID)
        self.cred = holder_applied(self.cred, "anchor", held)

    @rule()
    def changed_by_hand(self):
        self.by_hand = True

    @rule()
    def set_back_by_hand(self):
        if self.by_hand:
            self.by_hand = False
            self.server = self.cred.active.generation

    @invariant()
    def never_locked_out(self):
        sealed = {g.generation for g in (self.cred.active, self.cred.pending,
                                         self.cred.retiring) if g is not None}
        assert self.server in sealed, \
            f"the server holds generation {self.server}; the ledger keeps only {sorted(sealed)}"
        assert self.server not in self.cred.retired

    @invariant()
    def holders_told_only_what_the_server_accepted(self):
        assert self.cred.active.generation in self.accepted_ever, \
            f"holders are told generation {self.cred.active.generation}, which the server " \
            f"never accepted"

    @invariant()
    def the_old_one_retires_only_once_the_holder_applied(self):
        applied = self.cred.applied.get("anchor", 0)
        if self.cred.retiring is not None:
            assert applied < self.cred.active.generation
        assert all(g < applied for g in self.cred.retired), \
            f"retired {list(self.cred.retired)} before the holder applied a newer one ({applied})"
        newest = max(g.generation for g in (self.cred.active, self.cred.pending) if g)
        assert newest == self.rotations + 1

    @invariant()
    def the_plan_says_the_server_changes_first_and_keeps_its_container(self):
        from resolver.rotation import describe_rotation

        said = describe_rotation(self.ID, self.cred)
        pending, active = self.cred.pending, self.cred.active
        if pending is not None:
            assert said.startswith(
                f"{self.ID}: the provisioner changes the password on the running server from "
                f"generation {active.generation} to {pending.generation} first"), said
            assert "the server's own container is not recreated" in said, said


TestServerAdmin = ServerAdminMachine.TestCase


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
    cred = provider_applied(cred, 1, credential_id="c")
    pending = begin_rotation("c", cred, pmap({"anchor": "t", "lab": "t"}))
    promoted = provider_applied(pending, 2, credential_id="c")
    assert grant_view(pending) == grant_view(promoted)
    assert promoted.active.slot == "b" and promoted.retiring.slot == "a"
