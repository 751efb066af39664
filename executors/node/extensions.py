"""The extension points of a node's apply: where a secret comes from, what makes a firewall
intent true, and what makes grants of one kind true on their provider (one family: a
`GrantProvisioner` is either service-backed, a `Provisioner` speaking to a running server's
admin interface, or file-backed, a `FileProvisioner` keeping a file on the provider's node),
and the hooks an apply runs (`Check`, `ProvisionHook`).

Each is a typed `Protocol`: anything with these methods fits, nothing needs to inherit from
it. `mesh apply` (node/apply/runner.py, node/apply/pipeline.py), `mesh verify` (node/verify/check.py) and
`mesh firewall` call them; the provisioners of this repository are listed in one registry
(node/provisioners/registry.py), which is also what says a grant kind has none.

Invariants every implementation keeps:
- Secret values travel only from a `SecretSource` to the interface of the server that needs
  them (a statement parameter, a request body, an env file of mode 0600). They are never in
  a Report, an Op's cause, an exception message, a log line or a return value other than the
  secret source's own.
- Observation is split from decision: a provisioner's query (I/O) returns plain rows, its
  `parse(rows)` and `diff` are pure, and `after` states what the server holds once the plan
  ran. `diff(desired, after(observed, diff(desired, observed)))` has nothing left to do
  (tests/diff_cases hold examples of each, and check exactly that).
- Refusing is better than guessing: an object the mesh does not own (another mesh's mark, an
  unmarked administrator) is reported and left alone.

This module defines types only; it imports nothing at run time but `typing`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Optional, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    from resolver import BindingDecl, Declaration, FirewallIntent, GrantDecl, SecretRef

    from executors.common.report import Report
    from executors.node.provisioners.base import (BindingCheck, Endpoint, NodeFiles,
                                                  ProvisionResult)


@runtime_checkable
class SecretSource(Protocol):
    """Where the value of a credential generation comes from (`--secrets` and `--key`)."""

    def __call__(self, ref: SecretRef, /) -> str:
        """Return the value of credential `ref.credential` at generation `ref.generation`.

        Called once per value per use, at the moment the value goes to the interface that
        needs it, so an implementation may hold the values opened once in memory (the one
        `mesh apply` builds from a ledger's sealed boxes and the node key does) or ask a
        vault each time.

        Raise a MeshError (any exception is taken as "not available") naming the credential
        and the generation, never the value, when this node does not hold it: the caller
        turns that into a refusal of the container, a failed provider or a
        `not-yet-provisioned` verdict, naming what to do. Never return a placeholder.
        """
        ...


@runtime_checkable
class Firewall(Protocol):
    """What makes a node's firewall intent true on the machine (`mesh apply`'s firewall phase).

    The one in this repository is node/apply/runner.py's `firewall_hook` over node/firewall/executor.py:
    render the intent as one nftables transaction for table `inet mesh`, observe the running
    table, replace it when its digest differs."""

    def __call__(self, intent: FirewallIntent, report: Report, dry_run: bool, /) -> None:
        """Make the machine's filtering match `intent`, or say why not, through `report`.

        `intent` is the declaration's `firewall` (never None here: a declaration without one
        leaves the firewall as it is). Called before any container is created or recreated,
        so a container never runs without the firewall it was declared with.

        Report every change as an operation (`report.record` or `begin`/`end`), with the
        cause; an intent already in force is no operation at all. A refused intent (one that
        would not keep the ssh floor, a malformed address) and a failed transaction are
        operations with `ok=False`: the apply then stops before the containers and keeps the
        last good declaration in force. Never raise for those; raise only for a programming
        error.

        With `dry_run`, check what would be done (the kernel's dry run of the transaction)
        and record it as planned; change nothing, write no record.
        """
        ...


@runtime_checkable
class GrantProvisioner(Protocol):
    """What every provisioner of a grant kind is: the family's shared part.

    A grant (resolver.GrantDecl) says: on provider instance P, login L of consumer C gets
    resource R, with the value of credential generation G. The provisioner of the grant's
    kind is asked, on P's node, to make every grant of P true and nothing else of P's that
    the mesh manages. The registry (node/provisioners/registry.py) maps each kind to one
    provisioner, service-backed (`Provisioner`) or file-backed (`FileProvisioner`).

    What the family shares is decided once, by provisioners/grants.py (`provision_grants`),
    before a variant is called: grants are grouped by provider; a kind the registry does not
    list is reported on every apply as not provisioned, never skipped silently; without
    secret values every grant of the provider fails, saying to pass --secrets and --key; a
    grant whose credential is not issued yet is skipped and said so (`pending-credential`);
    a provider whose variant raises a ProvisionError, a MeshError or a KeyError (a value not
    held) fails with each of its issued grants. A variant sees only issued grants. Which slot
    holds which generation (provisioners/base.held_slots) and which account is an idle slot
    (base.idle_slot_of) are said once for every kind with two logins per grant.
    """

    kind: str
    """The grant kind provisioned, as the catalogue's provisions.yaml names it, e.g.
    `database+login`. Unique in the registry."""

    description: str
    """How a provider of this kind is named in reports, e.g. `postgres`."""


@runtime_checkable
class Provisioner(GrantProvisioner, Protocol):
    """A service-backed provisioner: makes grants of one kind true on a provider's running
    server through its admin interface, and checks them.

    Logins of grants that went are dropped, their data kept and reported. Its plan is carried
    out by the family's one block (provisioners/base.carry_out: refusals listed, steps run in
    order up to the first failure, one outcome per grant).
    """

    connect_timeout: float
    """Seconds one login attempt may take while waiting for a server to answer."""

    def login(self, endpoint: Endpoint, password: str, timeout: float) -> str:
        """Log in to the server's admin interface at `endpoint` as `endpoint.user`.

        Return the server's self-description (product and version), which the readiness
        check reports. Raise anything on failure: `auth_refused` tells a refused password
        (fatal: the wait ends at once, naming the generations tried) from a server still
        starting (waited for, up to the readiness timeout). Change nothing.
        """
        ...

    def auth_refused(self, error: Exception) -> bool:
        """Whether `error`, raised by `login`, means the server refused the credential (as
        opposed to not answering yet or not at all)."""
        ...

    def set_admin_password(self, endpoint: Endpoint, password: str, new_password: str) -> None:
        """Change the admin's password on the running server from `password` (the
        generation in force, used to authenticate) to `new_password` (a rotation's pending
        generation), through the server's own interface.

        The server keeps its data and is never recreated for this; the caller then waits
        until a login with `new_password` succeeds. Send the new value the way the server
        stores it best (a SCRAM verifier rather than the password, where it takes one), and
        raise a MeshError naming the account, never the value, on failure.
        """
        ...

    def parse(self, rows: Mapping[str, Any]) -> Any:
        """The observed state from what the provisioner's query read (pure).

        `rows` are the query's answers as plain JSON-able data (catalog rows, API
        documents), exactly as the server gave them; the result is this provisioner's
        Observed value, the only input `diff` reads about the server. Keeping the query
        apart is what lets tests/diff_cases state a server's state as the rows it answers.
        """
        ...

    def diff(self, mesh: str, provider: str, desired: Sequence[Any], observed: Any) -> Any:
        """The plan that makes `observed` hold `desired` and nothing else the mesh manages
        for `provider` of `mesh` (pure, deterministic).

        Every step names its subject and its cause (why it is needed), never a secret. A
        grant whose objects another mesh or provider manages is refused (listed, untouched),
        not adopted; resources of grants that went are listed as orphaned, never dropped.
        """
        ...

    def after(self, observed: Any, plan: Any) -> Any:
        """What the server holds once every step of `plan` succeeded (pure): the
        provisioner's contract as data. A diff of the same desired state against it is empty.
        """
        ...

    def provision_provider(self, mesh: str, provider: str, endpoint: Endpoint,
                           admin_password: str, grants: Sequence[GrantDecl],
                           secret_source: SecretSource, report: Report,
                           result: ProvisionResult, *, dry_run: bool = False) -> None:
        """Observe the server at `endpoint` (logged in as its admin), diff, apply.

        Called on the provider's node once its server answers and accepts `admin_password`
        (the caller waited, and put a rotated admin password in force first). `grants` are
        every issued grant of this kind on `provider`, possibly none (then only the logins
        of grants that went are dropped). Announce every step on `report` as it runs
        (`begin`/`end`, with its cause), stop at the first failure, add one GrantOutcome per
        grant to `result` (`in-force` with the generation now in force, `failed` with why,
        or `planned` on a dry run) and count the changing steps in `result.statements` (a
        second run counts none). Report orphaned resources as notices naming the command
        that removes them, and add them to `result.orphaned`.

        With `dry_run`, observe and record the plan as planned; change nothing.
        """
        ...

    def check_binding(self, binding: BindingDecl, password: str, timeout: float) -> BindingCheck:
        """Check, from the calling thread's network namespace, that a consumer of this kind's
        grant can use its binding: connect to the host and port its values announce, log in
        as its user with `password` and reach its resource (e.g. a database, a vhost where it
        may declare its own reply queue).

        Return a BindingCheck: `ok`, `auth-failed`, `missing-resource`, or `unreachable`
        (the message then says why, and the caller names where from). Create nothing that
        outlives the check. Never raise for what the server answers.
        """
        ...


@runtime_checkable
class FileProvisioner(GrantProvisioner, Protocol):
    """A file-backed provisioner: makes grants of one kind true in a file on the provider's
    node, which the provider's containers read (the mesh registry's htpasswd, a tool server's
    tokens file).

    Its pure half is a plan module as a service's is: parse the file's text (and what the
    shell observed about it, e.g. whether a stored hash matches) → diff → after, where a
    second diff against `after` is empty. Lines the mesh does not manage are kept byte for
    byte; an entry another mesh or provider marks is refused and left alone. The file is
    written whole (temp, fsync, rename; 0600) only when it changes, and the containers that
    read it only when they start are restarted then (a server that reads it again when it
    changes, as the tool servers do, is not).
    """

    def grant_subject(self, grant: GrantDecl) -> str:
        """How one grant is named in a notice, e.g. `registry account node-n1 on registry`."""
        ...

    def provision_file(self, declaration: Declaration, provider: str,
                       grants: Sequence[GrantDecl], secret_source: SecretSource,
                       report: Report, result: ProvisionResult, files: NodeFiles, *,
                       dry_run: bool = False) -> None:
        """Make the file of `provider` on this node (under `files.paths`' file root) hold
        exactly the entries of `grants` (issued, possibly none) of `declaration`'s mesh.

        Report each change as an operation with its cause, naming the entry and the
        credential generation, never a value or a hash; add one GrantOutcome per grant to
        `result` and count the changing steps in `result.statements` (a second run counts
        none). Restart `provider`'s running containers through `files.engine` when the file
        changed. With `dry_run`, record the plan as planned; write nothing, restart nothing.
        """
        ...


@runtime_checkable
class BindingChecker(Protocol):
    """What checks the bindings of one grant kind for `mesh verify`: every service-backed
    Provisioner is one, and a FileProvisioner may be (a tool server's tokens: its consumers
    are checked against the running server, the file is only how the server learns them)."""

    kind: str

    def check_binding(self, binding: BindingDecl, password: str, timeout: float) -> BindingCheck:
        """As Provisioner.check_binding: `password` is the binding's credential (a token)."""
        ...


@runtime_checkable
class ProtocolProbe(Protocol):
    """What checks the bindings of one provision that grants nothing (no credential) for `mesh
    verify`, by speaking its protocol: a `metrics` entry answers Prometheus exposition
    (provisioners/metrics_probe.py). Run from the consumer's network namespace after the TCP
    connection opened; read-only towards the provider."""

    provision: str

    def check_binding(self, binding: BindingDecl, timeout: float) -> BindingCheck:
        """ok, unreachable (why not) or missing-resource (what it answered instead)."""
        ...


class Check(Protocol):
    """An observation an apply makes before anything changes (`mesh apply`'s checks phase,
    e.g. provisioners.check_admins: each provider's running server accepts its admin)."""

    def __call__(self, declaration: Declaration, secret_source: Optional[SecretSource],
                 report: Report, /) -> None:
        """Report each observation (`report.begin(..., check=True)`); one not ok stops the
        apply before anything changes. Change nothing; raise only for a programming error."""
        ...


class ProvisionHook(Protocol):
    """A provisioning step an apply runs once the containers are up (provisioners.provision,
    provisioners.provision_files)."""

    def __call__(self, declaration: Declaration, secret_source: Optional[SecretSource],
                 report: Report, dry_run: bool = False, /) -> ProvisionResult:
        """Make the declaration's grants true (the family's rules, provision_grants), report
        each step, and return what is now in force."""
        ...
