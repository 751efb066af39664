"""The firewall executor: observe our nftables table, diff against the rendered intent, replace it.

Invariants:
- Only table `inet mesh` is ever read or written; never `flush ruleset`, never another table.
- A change is one transaction (add, delete, re-add our table with its full contents), checked
  first as a dry run; a batch the kernel refuses changes nothing and the report says why.
- No document without the ssh floor is applied, whatever the caller passes.
- observe is a query of the kernel's listings and the recorded digest (I/O) and a pure
  parse(rows); diff and `after` (what the machine holds once the ops ran) are pure
  (tests/diff_cases/firewall).
- The digest of the applied document is kept twice on the node: as the name of an empty chain
  in our table (so the running table says what it is) and in `<state_dir>/firewall.digest`
  (written atomically). When both say the desired digest and the table exists, nothing is done.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Iterable, Mapping, Optional, Protocol, TypedDict

import attrs

from resolver import FirewallIntent, MeshError

from executors.common.atomic import write_atomic
from executors.common.marks import digest_from_chain_name
from executors.node.node_paths import DEFAULT_STATE_ROOT, FIREWALL_DIGEST_FILE, NodePaths

from executors.node.firewall.readback import ListedChain, Listing, keeps_ssh_floor
from executors.node.firewall.render import (
    DEFAULT_BRIDGES,
    FAMILY,
    TABLE,
    FirewallError,
    Rendered,
    SshFloorMissing,
    render,
)

DEFAULT_STATE_DIR = str(NodePaths(DEFAULT_STATE_ROOT).root)  # `mesh apply`'s own files
DIGEST_FILE = FIREWALL_DIGEST_FILE
TABLE_NAME = f"{FAMILY} {TABLE}"

REPLACE_TABLE = "replace-table"
RECORD_DIGEST = "record-digest"


class NftablesUnavailable(MeshError):
    """The nftables binding (python3-nftables over libnftables1) cannot be loaded."""


class Nftables(Protocol):
    """What the executor asks of a libnftables context (python3-nftables' `nftables.Nftables`,
    which is untyped; tests may pass their own)."""

    def json_cmd(self, json_root: Mapping[str, object], /) -> tuple[int, Listing, str]:
        """(rc, output, error) of a command in JSON syntax: a `list` command's output is the
        listing, parsed."""
        ...

    def cmd(self, cmdline: str, /) -> tuple[int, str, str]:
        """(rc, output, error) of a script in nft syntax (or JSON, in JSON output mode)."""
        ...

    def set_json_output(self, val: bool, /) -> bool:
        """Turn JSON output on or off; the previous setting."""
        ...

    def set_dry_run(self, onoff: bool, /) -> bool:
        """Turn dry runs (the kernel checks a batch, commits nothing) on or off; the previous
        setting."""
        ...


class TableRows(TypedDict):
    """The kernel's listings that say whether our table runs (`_query_table`)."""

    chains: Listing  # `list chains`
    tables: Optional[Listing]  # `list tables`, only when none of the chains is ours


class FirewallRows(TableRows):
    """What observing the machine reads (`query`)."""

    recorded: Optional[str]  # the digest in <state_dir>/firewall.digest


@attrs.frozen
class Observed:
    table_exists: bool
    running_digest: Optional[str]  # from the digest comment in our running table
    recorded_digest: Optional[str]  # from <state_dir>/firewall.digest


@attrs.frozen
class Op:
    kind: str  # replace-table | record-digest
    digest: str
    cause: str


@attrs.define
class Step:
    op: Op
    result: str  # applied | checked | would-apply | failed | refused
    detail: str = ""
    seconds: float = 0.0


@attrs.define
class FirewallReport:
    """What the firewall executor did, step by step; `emit` sees each line as it happens."""

    digest: str = ""
    dry_run: bool = False
    steps: list[Step] = attrs.Factory(list)
    refusal: Optional[str] = None
    transactions: int = 0  # commits sent to the kernel (dry-run checks not counted)
    emit: Optional[Callable[[str], None]] = attrs.field(default=None, repr=False, eq=False)

    @property
    def ok(self) -> bool:
        return self.refusal is None and all(s.result != "failed" for s in self.steps)

    @property
    def changed(self) -> bool:
        return any(s.result == "applied" for s in self.steps)

    def say(self, line: str) -> None:
        if self.emit is not None:
            self.emit(line)

    def record(self, step: Step) -> Step:
        self.steps.append(step)
        extra = f": {step.detail}" if step.detail else ""
        self.say(f"firewall {step.op.kind} [{step.result}] ({step.op.cause}){extra}")
        return step

    def refuse(self, why: str) -> "FirewallReport":
        self.refusal = why
        self.say(f"firewall refused: {why}")
        return self

    def lines(self) -> list[str]:
        out = [f"firewall {s.op.kind} [{s.result}] ({s.op.cause})"
               + (f": {s.detail}" if s.detail else "") for s in self.steps]
        if self.refusal:
            out.append(f"firewall refused: {self.refusal}")
        if not self.steps and not self.refusal:
            out.append(f"firewall: table {TABLE_NAME} is up to date ({self.digest})")
        return out


# ---------------------------------------------------------------------------- the machine


def open_nftables() -> Nftables:
    """A libnftables context (Debian's python3-nftables binding)."""
    try:
        # Imported here: a system package, absent on a machine that never applies a firewall.
        import nftables
    except ImportError as error:
        raise NftablesUnavailable(
            "cannot import the nftables binding: install python3-nftables and libnftables1 "
            f"and make it importable (scripts/services.sh does): {error}"
        ) from None
    try:
        context: Nftables = nftables.Nftables()
    except OSError as error:
        raise NftablesUnavailable(f"cannot load libnftables.so.1: {error}") from None
    return context


def digest_path(state_dir: str) -> str:
    return os.path.join(state_dir, DIGEST_FILE)


def read_recorded_digest(state_dir: str) -> Optional[str]:
    try:
        with open(digest_path(state_dir), encoding="ascii") as handle:
            return handle.read().strip() or None
    except FileNotFoundError:
        return None


def write_recorded_digest(state_dir: str, digest: str) -> None:
    """Record the digest of the document now in force, atomically."""
    write_atomic(digest_path(state_dir), digest + "\n", mode=0o644)


def _our_chains(chains: Listing) -> list[ListedChain]:
    return [o["chain"] for o in chains.get("nftables", [])
            if o.get("chain", {}).get("family") == FAMILY and o["chain"].get("table") == TABLE]


def _query_table(nft: Nftables) -> TableRows:
    """The kernel's listings that say whether our table runs and what it carries (I/O).

    One `list chains` (no rules, no set elements: the cheapest listing there is); other
    tables' chains are listed by the kernel but never read here. Only when none of the chains
    is ours, one `list tables` (an empty table of our name); `tables` is None otherwise, or
    when the kernel answers that listing with an error."""
    rc, chains, error = nft.json_cmd({"nftables": [{"list": {"chains": {}}}]})
    if rc != 0:
        raise FirewallError(f"cannot list nftables chains: {error.strip()}")
    tables = None
    if not _our_chains(chains):
        rc, output, _ = nft.json_cmd({"nftables": [{"list": {"tables": {}}}]})
        tables = output if rc == 0 else None
    return {"chains": chains, "tables": tables}


def _parse_table(rows: TableRows) -> tuple[bool, Optional[str]]:
    """Whether our table exists and the one digest its chains carry (pure)."""
    ours = _our_chains(rows["chains"])
    if not ours:
        tables = rows.get("tables")
        exists = tables is not None and any(
            o.get("table", {}).get("family") == FAMILY and o["table"].get("name") == TABLE
            for o in tables.get("nftables", []))
        return exists, None  # an empty table of our name: replace it
    digests = [d for d in (digest_from_chain_name(c["name"]) for c in ours) if d]
    return True, digests[0] if len(digests) == 1 else None


def _running_table(nft: Nftables) -> tuple[bool, Optional[str]]:
    return _parse_table(_query_table(nft))


def query(nft: Nftables, state_dir: str) -> FirewallRows:
    """What observing the machine reads (I/O): the kernel's listings and the recorded digest."""
    return {**_query_table(nft), "recorded": read_recorded_digest(state_dir)}


def parse(rows: FirewallRows) -> Observed:
    """The observed firewall from `query`'s rows (pure)."""
    exists, running = _parse_table(rows)
    return Observed(table_exists=exists, running_digest=running,
                    recorded_digest=rows.get("recorded"))


def observe(nft: Nftables, state_dir: str) -> Observed:
    return parse(query(nft, state_dir))


# ---------------------------------------------------------------------------- diff (pure)


def diff(desired_digest: str, observed: Observed) -> tuple[Op, ...]:
    """The operations that make the node carry `desired_digest`; () when it already does."""
    if not observed.table_exists:
        cause = f"table {TABLE_NAME} absent"
        if observed.recorded_digest:
            cause += f" (last applied {observed.recorded_digest}: ruleset flushed or rebooted?)"
        return (Op(REPLACE_TABLE, desired_digest, cause),)
    if observed.running_digest != desired_digest:
        running = observed.running_digest or "no digest (changed outside the mesh)"
        return (Op(REPLACE_TABLE, desired_digest,
                   f"running table is {running}, declaration wants {desired_digest}"),)
    if observed.recorded_digest != desired_digest:
        return (Op(RECORD_DIGEST, desired_digest,
                   f"running table is {desired_digest}, "
                   f"recorded {observed.recorded_digest or 'nothing'}"),)
    return ()


def after(observed: Observed, ops: Iterable[Op]) -> Observed:
    """What the machine holds once `ops` succeeded (pure): a replaced table runs and carries
    the op's digest, which `apply` then records; a recorded digest is recorded."""
    for op in ops:
        if op.kind == REPLACE_TABLE:
            observed = Observed(table_exists=True, running_digest=op.digest,
                                recorded_digest=op.digest)
        elif op.kind == RECORD_DIGEST:
            observed = attrs.evolve(observed, recorded_digest=op.digest)
        else:
            raise FirewallError(f"the model of the firewall cannot read {op.kind!r}")
    return observed


# ---------------------------------------------------------------------------- apply


def _run_document(nft: Nftables, text: str) -> tuple[int, str]:
    """Hand libnftables the script (nft syntax: in JSON mode it would try JSON first)."""
    previous = nft.set_json_output(False)
    try:
        rc, _, error = nft.cmd(text)
    finally:
        nft.set_json_output(previous)
    return rc, error


def _first_error(error: str) -> str:
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    return " | ".join(lines) or "libnftables gave no reason"


def apply(ops: Iterable[Op], rendered: Rendered, nft: Nftables, state_dir: str,
          report: FirewallReport, *, dry_run: bool = False,
          check_first: bool = True) -> FirewallReport:
    """Perform `ops` for `rendered`; a refused or failed batch leaves the running table in force.

    `check_first=False` skips the dry-run check (tests use it to show the kernel's own
    rollback); callers should keep the default."""
    report.digest = rendered.digest
    for op in ops:
        if op.kind == RECORD_DIGEST:
            if dry_run:
                report.record(Step(op, "would-apply"))
            else:
                write_recorded_digest(state_dir, op.digest)
                report.record(Step(op, "applied", f"wrote {digest_path(state_dir)}"))
            continue
        try:
            keeps = keeps_ssh_floor(rendered.text, rendered.ssh_triples)
        except FirewallError as error:
            report.record(Step(op, "refused", f"the script cannot be read back: {error}"))
            return report.refuse("a script the mesh cannot read back is never applied")
        if not keeps:
            why = f"it does not accept {sorted(rendered.ssh_triples)} under a dropping policy"
            report.record(Step(op, "refused", f"the script lacks the ssh floor: {why}"))
            return report.refuse("a ruleset without the ssh floor is never applied")
        if check_first or dry_run:
            report.say(f"firewall: checking the batch for {TABLE_NAME} (dry run)")
            started = time.monotonic()
            previous = nft.set_dry_run(True)
            try:
                rc, stderr = _run_document(nft, rendered.text)
            finally:
                nft.set_dry_run(previous)
            if rc != 0:
                report.record(Step(op, "failed", "the batch check failed, nothing applied, the "
                                   f"running ruleset stays in force: {_first_error(stderr)}",
                                   time.monotonic() - started))
                return report
            if dry_run:
                report.record(Step(op, "checked", "the batch checks out; dry run, not applied",
                                   time.monotonic() - started))
                continue
        started = time.monotonic()
        rc, stderr = _run_document(nft, rendered.text)
        report.transactions += 1
        if rc != 0:
            report.record(Step(op, "failed", "the kernel refused the transaction, the running "
                               f"ruleset stays in force: {_first_error(stderr)}",
                               time.monotonic() - started))
            return report
        elapsed = time.monotonic() - started
        write_recorded_digest(state_dir, op.digest)
        exists, running = _running_table(nft)
        if not exists or running != op.digest:
            report.record(Step(op, "failed", f"applied, but the running table reads back as "
                               f"{running or 'absent'}", elapsed))
            return report
        report.record(Step(op, "applied", f"one transaction, {elapsed * 1000:.1f} ms", elapsed))
    return report


def apply_firewall(intent: FirewallIntent, state_dir: str = DEFAULT_STATE_DIR, *,
                   dry_run: bool = False, nft: Optional[Nftables] = None,
                   emit: Optional[Callable[[str], None]] = None,
                   bridges: Iterable[str] = DEFAULT_BRIDGES) -> FirewallReport:
    """Make this machine's table `inet mesh` match `intent`: render, observe, diff, apply.
    `bridges` are the container runtime's bridges same-node consumers arrive on.

    Runs in the caller's network namespace. Never raises for a refused intent or a failed
    batch: the report carries the refusal or the failure (report.ok is False)."""
    report = FirewallReport(dry_run=dry_run, emit=emit)
    try:
        rendered = render(intent, bridges)
    except SshFloorMissing as error:
        return report.refuse(str(error))
    except FirewallError as error:
        return report.refuse(f"the firewall intent is malformed: {error}")
    report.digest = rendered.digest
    nft = nft if nft is not None else open_nftables()
    observed = observe(nft, state_dir)
    ops = diff(rendered.digest, observed)
    if not ops:
        report.say(f"firewall: table {TABLE_NAME} is up to date ({rendered.digest})")
        return report
    return apply(ops, rendered, nft, state_dir, report, dry_run=dry_run)
