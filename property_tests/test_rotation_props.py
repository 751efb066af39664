"""Rotation as a state machine, against a plain model of the physical world.

ServerAdminMachine models a provider's own admin secret and a server that keeps the password
it was initialised with: it is what `mesh rotate DIR secret/<postgres>/admin` must never lock out.

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

from resolver import (
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
        cred = provider_applied(cred, 1, credential_id=self.id)
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
        self.cred = provider_applied(self.cred, newest.generation, credential_id=self.id)

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
        self.cred = provider_applied(self.cred, max(1, self.cred.provider_applied - back),
                                     credential_id=self.id)
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
    """A module's own secret that no server holds (an app's token): active at once, the old
    one kept sealed until its holder applied."""

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
