"""The applied record and `mesh applied`: a node's record names a declaration as in force only
when an apply of it succeeded in every phase, and a rotation advances only on such a report.

The chain property runs the real pieces end to end on a plain model of a provider: apply
attempts that fail in any phase (sometimes after the provider already put the new generation in
force), the record each leaves, `acceptance`, and `record_applied` on the ledger. Holders must
only ever be told a generation the provider has put in force.
"""

from __future__ import annotations

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st
from pyrsistent import pmap, pvector

from executors.common.applied_record import (
    PHASES,
    Attempt,
    acceptance,
    in_force,
    newest_serial,
    record_after,
)
from resolver import ContainerDecl, Declaration, GrantDecl, Ledger, SecretRef
from resolver.rotation import begin_rotation, first_generation, provider_applied, record_applied

DIGESTS = st.sampled_from(["sha256:a", "sha256:b", "sha256:c"])
CREDS = st.sampled_from(["amqp/mq@n/app@n", "secret/pg@n/admin", "postgres-database/pg@n/x@n"])


@st.composite
def attempts(draw, min_size=1, max_size=8):
    """Apply attempts on one node, serials never going backwards (older ones are superseded)."""
    serial = draw(st.integers(1, 3))
    out = []
    for _ in range(draw(st.integers(min_size, max_size))):
        serial += draw(st.integers(0, 2))
        failed = draw(st.booleans())
        out.append(Attempt(
            mesh="m", node="n", serial=serial, digest=draw(DIGESTS),
            generations=draw(st.dictionaries(CREDS, st.integers(1, 4), max_size=2)),
            granted=draw(st.dictionaries(CREDS, st.integers(1, 4), max_size=2)),
            phase=draw(st.sampled_from(PHASES)) if failed else None,
            failures=[{"op": "x", "subject": "y", "result": "failed: z"}] if failed else ()))
    return out


@settings(max_examples=200, deadline=None)
@given(attempts())
def test_the_record_names_the_new_serial_only_when_every_phase_succeeded(sequence):
    record = None
    for attempt in sequence:
        record = record_after(record, attempt)
    last = sequence[-1]
    successes = [a for a in sequence if a.succeeded]
    good = in_force(record)
    if successes:
        s = successes[-1]
        assert (good["serial"], good["digest"], good["generations"], good["granted"]) == \
            (s.serial, s.digest, dict(s.generations), dict(s.granted))
    else:
        assert good is None, "a declaration is in force though no apply ever succeeded"
    assert (record["result"] == "applied") == last.succeeded
    if not last.succeeded:
        assert record["failed"]["serial"] == last.serial
        assert record["failed"]["phase"] == last.phase
        assert record["failed"]["operations"], "what failed is not stated"
    assert newest_serial(record) == last.serial  # an older declaration is superseded


@settings(max_examples=200, deadline=None)
@given(attempts(), DIGESTS)
def test_mesh_applied_accepts_only_a_successful_report_of_the_declared_digest(sequence, declared):
    record = None
    for attempt in sequence:
        record = record_after(record, attempt)
    why, granted = acceptance(record, "n", declared)
    last = sequence[-1]
    if last.succeeded and last.digest == declared:
        assert why is None and granted == dict(last.granted)
    else:
        assert why is not None and granted == {}
        if not last.succeeded:
            assert "failed" in why and last.phase in why


def test_a_record_of_an_earlier_version_is_refused():
    why, _ = acceptance({"serial": 3, "digest": "sha256:a", "generations": {}}, "n", "sha256:a")
    assert why is not None and "earlier version" in why


CRED = "amqp/mq@anchor/app@lab"


def _declarations(cred):
    """The provider node's declaration (its grant at the newest generation) and the holder's
    (its container at the active one)."""
    newest = cred.pending or cred.active
    grant = GrantDecl(provision="amqp", kind="vhost+account", provider="mq@anchor",
                      consumer="app@lab", consumer_node="lab", login="app", resource="app",
                      credential=SecretRef(CRED, newest.generation))
    app = ContainerDecl(name="app", instance="app@lab", container="main", image="x@sha256:0",
                        secrets=pvector([SecretRef(CRED, cred.active.generation)]))
    anchor = Declaration(mesh="m", node="anchor", address="10.0.0.1", grants=pvector([grant]))
    lab = Declaration(mesh="m", node="lab", address="10.0.0.2", containers=pvector([app]))
    return {n: attrs.evolve(d, digest=f"sha256:{n}-{newest.generation}-"
                            f"{cred.active.generation}") for n, d in (("anchor", anchor),
                                                                     ("lab", lab))}


EVENTS = st.lists(st.one_of(
    st.just(("rotate",)),
    st.tuples(st.just("apply"), st.sampled_from(["anchor", "lab"]),
              st.sampled_from((None,) + PHASES), st.booleans()),
    st.tuples(st.just("report"), st.sampled_from(["anchor", "lab"]))), max_size=30)


@settings(max_examples=300, deadline=None)
@given(EVENTS)
def test_holders_are_told_only_what_the_provider_put_in_force(events):
    """Whatever fails where, a rotation moves holders only to a generation the provider had
    in force: the provider's put-in-force happens in the provisioning phase, which may still
    fail afterwards (another grant), and then the node's record says failed."""
    cred = provider_applied(first_generation({"anchor": "s", "lab": "s"}), 1,
                            credential_id=CRED)
    ledger = Ledger(credentials=pmap({CRED: cred}))
    in_force_on_provider = {1}
    records: dict = {"anchor": None, "lab": None}
    for event in events:
        cred = ledger.credentials[CRED]
        declarations = _declarations(cred)
        if event[0] == "rotate":
            try:
                cred = begin_rotation(CRED, cred, {"anchor": "t", "lab": "t"})
            except Exception:  # noqa: BLE001 - one rotation at a time
                continue
            ledger = attrs.evolve(ledger, credentials=ledger.credentials.set(CRED, cred))
        elif event[0] == "apply":
            _, node, phase, put_before_failing = event
            declaration = declarations[node]
            granted = {}
            if node == "anchor" and (phase is None or (phase == "provisioning"
                                                       and put_before_failing)):
                generation = declaration.grants[0].credential.generation
                in_force_on_provider.add(generation)  # the broker holds it now
                granted = {CRED: generation}
            records[node] = record_after(records[node], Attempt(
                mesh="m", node=node, serial=cred.active.generation, digest=declaration.digest,
                granted=granted, phase=phase,
                failures=[{"op": "o", "subject": "s", "result": "failed"}] if phase else ()))
        else:
            node = event[1]
            why, granted = acceptance(records[node], node, declarations[node].digest)
            if why is None:
                ledger = record_applied(ledger, node, declarations[node], granted=granted)
        active = ledger.credentials[CRED].active.generation
        assert active in in_force_on_provider, \
            f"holders are told generation {active}; the provider only ever had " \
            f"{sorted(in_force_on_provider)}"
