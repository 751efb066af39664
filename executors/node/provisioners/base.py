"""What the provisioners share: a provider's admin endpoint and credential, the outcome types,
the verdict of a binding check, and the bounded readiness wait.

Invariants:
- A provider is reached at the host side of its published ports on this node
  (`derive_endpoint`); its admin credential is what its declaration says it provides with
  (`admin`, and `admin_pending` while a rotation of it is in progress: `admin_of`), or failing
  that what its grants name.
- Which provisioner makes which grant kind true is the registry's to say (registry.py); this
  module knows the kinds only to find a provider's admin interface in its declaration.
- A wait is an observation, never an operation (`Report.begin(..., check=True)`): bounded,
  with a progress line at least every few seconds, ended at once by an answer that is not
  about starting up (a refused password).
- Nothing here holds or says a secret value: credentials are SecretRefs until a provider's
  own interface receives the value.
- Which slot holds which generation is said once (`held_slots`), and which account is an idle
  slot once (`idle_slot_of`): every kind with two logins per grant builds on them.
- A service-backed provisioner's plan is carried out by one block (`carry_out`): refusals
  listed, the steps announced and run in order up to the first failure (`run_steps`), one
  outcome per grant; each kind passes in how it runs a step and how it names a grant.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Literal, Optional, Protocol, \
    Sequence, TypeVar

import attrs

from resolver import BindingDecl, Declaration, GrantDecl, MeshError, PublishedPort, SecretRef
from resolver.certificates import server_certificate_path
from resolver.rotation import SLOTS

from executors.common.report import Report
from executors.node.node_paths import NodePaths

if TYPE_CHECKING:  # the Docker Engine client is the node extra's; only its type is named here
    import docker

POSTGRES_KIND = "database+login"
AMQP_KIND = "vhost+account"

# Where each kind's admin interface listens inside its container, and who the admin is, when
# the declaration does not say otherwise (the catalogue's postgres and lavinmq modules).
DEFAULT_ADMIN_PORT = {POSTGRES_KIND: 5432, AMQP_KIND: 15672}
DEFAULT_ADMIN_LISTEN = {POSTGRES_KIND: "postgres", AMQP_KIND: "management"}
DEFAULT_ADMIN_USER = {POSTGRES_KIND: "postgres", AMQP_KIND: "admin"}
ADMIN_USER_ENV = {POSTGRES_KIND: "POSTGRES_USER", AMQP_KIND: "RABBITMQ_DEFAULT_USER"}


class ProvisionError(MeshError):
    """A provider that cannot be provisioned (unreachable admin interface, refused admin…)."""


@attrs.frozen
class Endpoint:
    """How the provisioner reaches a provider's admin interface from the provider's node."""

    host: str
    port: int
    user: str
    database: str = "postgres"  # postgres only: the database the admin connects to
    scheme: str = "http"  # amqp management API only
    # https: the server's certificate as its declaration gives it (pinned) and the name in it
    pinned_pem: Optional[str] = attrs.field(default=None, repr=False)
    server_name: Optional[str] = None


GrantStatus = Literal["in-force", "planned", "pending-credential", "not-provisioned", "failed"]


@attrs.frozen
class GrantOutcome:
    """Where one grant stands after a run (what `mesh apply` reports back)."""

    credential: str
    provider: str
    consumer: str
    status: GrantStatus
    generation: Optional[int] = None  # the generation now in force on the provider
    message: str = ""
    kind: str = ""  # the grant kind

    @classmethod
    def of(cls, grant: GrantDecl, status: GrantStatus, *, generation: Optional[int] = None,
           message: str = "") -> "GrantOutcome":
        """The outcome of `grant` on its provider."""
        return cls(grant.credential.credential, grant.provider, grant.consumer, status,
                   generation, message, grant.kind)

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.define
class ProvisionResult:
    outcomes: list[GrantOutcome] = attrs.field(factory=list)
    statements: int = 0  # changing statements / requests issued (0 on an idempotent re-run)
    orphaned: list[str] = attrs.field(factory=list)  # resources kept after their grant went
    admins: dict[str, int] = attrs.field(factory=dict)  # admin credential → generation in force
    problems: list[str] = attrs.field(factory=list)  # providers that could not be provisioned

    @property
    def failed(self) -> bool:
        return bool(self.problems) or any(o.status == "failed" for o in self.outcomes)

    def to_json(self) -> dict[str, Any]:
        return {"outcomes": [o.to_json() for o in self.outcomes],
                "statements": self.statements, "orphaned": list(self.orphaned),
                "admins": dict(self.admins)}



@attrs.frozen
class Admin:
    """A provider's admin credential as its declaration states it."""

    current: SecretRef  # in force (what holders are told)
    pending: Optional[SecretRef] = None  # a rotation: put in force on the running server first

    @property
    def credential(self) -> str:
        return self.current.credential

    def refs(self) -> tuple[SecretRef, ...]:
        """The generations to try, the one in force first."""
        pending = self.pending if self.pending is not None \
            and self.pending.generation is not None else None
        return (self.current,) + ((pending,) if pending is not None else ())

    def tried(self, generations: Iterable[Optional[int]]) -> str:
        roles = {self.current.generation: "in force"}
        if self.pending is not None:
            roles[self.pending.generation] = "pending"
        return ", ".join(f"generation {g} ({roles.get(g, 'tried')})" for g in generations)


@attrs.frozen
class AdminReading:
    """What logging in as the admin showed: accepted (with which generation), refused (every
    generation tried was refused) or unreachable (nothing answered, or a value not held)."""

    status: str  # accepted | refused | unreachable | unsealed
    generation: Optional[int] = None
    detail: str = ""  # the server's self-description, or why not
    tried: tuple[Optional[int], ...] = ()


# What a provisioner's check of one binding found (Provisioner.check_binding): the statuses
# `mesh verify` reports for a binding of a kind the mesh provisions.
OK = "ok"
UNREACHABLE = "unreachable"
AUTH_FAILED = "auth-failed"
MISSING = "missing-resource"


@attrs.frozen
class BindingCheck:
    """One binding checked by its kind's provisioner: `status` (ok | unreachable |
    auth-failed | missing-resource) and what to do about it (for unreachable: why not)."""

    status: str
    message: str
    # unreachable because the provider's TLS certificate is not the mesh CA's (it answered:
    # no firewall or routing advice applies)
    untrusted: bool = False


def idle_slot_of(account: str, logins: Iterable[str]) -> Optional[str]:
    """The slot (`a`|`b`) when `account` is `<login>_<slot>` of one of `logins` (a grant's
    second account, idle once its rotation ended), else None."""
    login, _, slot = account.rpartition("_")
    return slot if slot in SLOTS and login in set(logins) else None


@attrs.frozen
class HeldSlot:
    """A login slot a grant's holders may use, and the credential generation it holds."""

    slot: Optional[str]  # a | b; None: the one login of an account issued with one slot
    ref: SecretRef


def held_slots(grant: GrantDecl, unslotted: Optional[str] = None) -> tuple[HeldSlot, ...]:
    """The slots a grant's holders may log in with: the grant's slot with its newest
    generation and, while a rotation retires the other slot's generation, that slot with the
    retiring one. Every other slot is idle (disabled or removed, so a retired password never
    works; `idle_slot_of` names it). A grant without a slot takes `unslotted`: None for an
    account issued before accounts had two (its one login, nothing retiring), a kind's first
    slot for a kind whose logins always come in two."""
    slot = grant.slot or unslotted
    held = [HeldSlot(slot, grant.credential)]
    if slot and grant.retiring is not None and grant.retiring_slot is not None \
            and grant.retiring_slot in SLOTS and grant.retiring_slot != slot:
        held.append(HeldSlot(grant.retiring_slot, grant.retiring))
    return tuple(held)


def issued_grants(grants: Iterable[GrantDecl], report: Report, result: ProvisionResult,
                  subject: Callable[[GrantDecl], str]) -> list[GrantDecl]:
    """The grants whose credential is issued; each other one is skipped and said so (a notice
    under `subject(grant)`, a `pending-credential` outcome). One rule for every provisioner,
    the file-backed ones included: provision_grants applies it to each provider's grants."""
    issued = []
    for grant in grants:
        if grant.credential.generation is not None:
            issued.append(grant)
            continue
        report.notice(subject(grant), f"skipped: credential {grant.credential.credential} is "
                      "not issued yet; run `mesh plan --issue` to issue it")
        result.outcomes.append(GrantOutcome.of(grant, "pending-credential",
                                               message="credential not issued yet"))
    return issued


@attrs.frozen
class NodeFiles:
    """Where a file-backed provisioner keeps its files on the provider's node: the node's
    paths (its file root, what the provider's containers mount) and the Docker Engine whose
    containers read them when they start (None: nothing is restarted)."""

    paths: NodePaths
    engine: Optional[docker.APIClient] = None


# --------------------------------------------------------------------------- carrying out a plan


class PlanStep(Protocol):
    """One step of a service-backed provisioner's plan (a statement, a request), as the shared
    block announces it: what it does, to what, and why. Never a secret."""

    @property
    def op(self) -> str: ...

    @property
    def subject(self) -> str: ...

    @property
    def cause(self) -> str: ...


StepT = TypeVar("StepT", bound=PlanStep)


def _no_detail(step: object) -> list[str]:
    return []


@attrs.frozen
class StepRunner(Generic[StepT]):
    """How one kind runs a step of its plan: `run` sends it to the server; an exception of
    `errors` is the server refusing it (anything else is a fault and propagates), said by
    `describe` (the server's words, never a value) with `detail(step)` beside it."""

    run: Callable[[StepT], object]
    errors: tuple[type[Exception], ...]
    describe: Callable[[Exception], str] = str
    detail: Callable[[StepT], list[str]] = _no_detail


def run_steps(steps: Sequence[StepT], runner: StepRunner[StepT],
              report: Report) -> tuple[int, Optional[str]]:
    """Run `steps` in order, each announced as it runs, stopping at the first failure (a
    REASSIGN that failed must not be followed by its DROP OWNED): how many ran, and the
    failure as `<op> <subject>: <why>` (None when every step ran)."""
    ran = 0
    for step in steps:
        op = report.begin(step.op, step.subject, step.cause)
        try:
            runner.run(step)
        except runner.errors as error:
            why = runner.describe(error)
            report.end(op, f"failed: {why}", ok=False, detail=runner.detail(step))
            return ran, f"{step.op} {step.subject}: {why}"
        report.end(op, "done")
        ran += 1
    return ran, None


def carry_out(steps: Sequence[StepT], runner: StepRunner[StepT], grants: Sequence[GrantDecl],
              report: Report, result: ProvisionResult, *,
              refusals: Sequence[tuple[str, str]], refusal_key: Callable[[GrantDecl], str],
              in_force: Callable[[GrantDecl], str], provider: str,
              untouched: Sequence[tuple[str, str]] = (), dry_run: bool = False) -> None:
    """What every service-backed provisioner does with its plan (its connection open): list
    the refused grants (`refusals`: (subject, reason)) and the objects left untouched; on a dry
    run record each step as planned and each grant `planned`; else run the steps (run_steps),
    count those that ran in `result.statements`, and add one outcome per grant: `failed` with
    its refusal (found by `refusal_key(grant)`) or the failure that stopped the run, else
    `in-force` with its generation and `in_force(grant)` saying what holds it."""
    for subject, refusal in refusals:
        report.record("grant", subject, "refused", f"failed: {refusal}", ok=False)
    for what, why in untouched:
        report.notice(f"{what} on {provider}", f"not touched: {why}")
    if dry_run:
        for step in steps:
            report.record(step.op, step.subject, step.cause, "planned")
        result.outcomes.extend(GrantOutcome.of(g, "planned") for g in grants)
        return
    ran, failed = run_steps(steps, runner, report)
    result.statements += ran
    refused = dict(refusals)
    for grant in grants:
        reason = refused.get(refusal_key(grant)) or failed
        if reason:
            result.outcomes.append(GrantOutcome.of(grant, "failed", message=reason))
        else:
            result.outcomes.append(GrantOutcome.of(grant, "in-force",
                                                   generation=grant.credential.generation,
                                                   message=in_force(grant)))


def binding_address(binding: BindingDecl) -> tuple[str, int]:
    """The host and port a binding's values announce to its consumer."""
    return binding.values.get("host", ""), int(binding.values.get("port", "0") or 0)


def credential_name(secret: SecretRef) -> str:
    """How a credential generation is named in a message (never its value)."""
    return f"credential {secret.credential} generation {secret.generation}"


def _loopback(host_ip: str) -> str:
    return "127.0.0.1" if host_ip in ("", "0.0.0.0", "::") else host_ip


def derive_endpoint(declaration: Declaration, provider: str, kind: str) -> Optional[Endpoint]:
    """The provider's admin endpoint from its published ports on this node (host side), or
    None when the declaration publishes none for it."""
    ports: list[PublishedPort] = []
    user = DEFAULT_ADMIN_USER[kind]
    for container in declaration.containers:
        if container.instance != provider:
            continue
        ports.extend(container.ports)
        user = container.env.get(ADMIN_USER_ENV[kind], user)
    if not ports:
        return None
    wanted = [p for p in ports if p.listen == DEFAULT_ADMIN_LISTEN[kind]] or \
        [p for p in ports if p.container_port == DEFAULT_ADMIN_PORT[kind]] or ports
    chosen = sorted(wanted)[0]
    endpoint = Endpoint(host=_loopback(chosen.host_ip), port=chosen.host_port, user=user)
    served = next((f.content for f in declaration.files
                   if f.path == server_certificate_path(provider)), None)
    if kind == AMQP_KIND and served is not None:
        # a broker serving TLS serves its management API with it too (the catalogue's
        # lavinmq): reached on loopback, verified against the certificate its declaration
        # gives it, for the node's address its certificate names
        endpoint = attrs.evolve(endpoint, scheme="https", pinned_pem=served,
                                server_name=declaration.address)
    return endpoint


def wait_ready(report: Report, subject: str, probe: Callable[[], Optional[str]], *,
               timeout: float, fatal: Callable[[Exception], bool],
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep, every: float = 5.0) -> None:
    """Call `probe` until it returns without raising (bounded by `timeout` seconds), with a
    progress line at least every `every` seconds. An exception `fatal` says is not about
    starting up (a refused admin password) ends the wait at once. Raises ProvisionError."""
    op = report.begin("wait-ready", subject, f"readiness before provisioning (up to {timeout:g}s)",
                      check=True)
    start = clock()
    next_progress = start + every
    while True:
        try:
            said = probe()
        except Exception as error:  # noqa: BLE001 - the probe's failure is the reading
            reason = _one_line(error, limit=1000 if fatal(error) else 300)
            if fatal(error):
                report.end(op, f"failed: {reason}", ok=False)
                raise ProvisionError(f"{subject}: {reason}") from None
            now = clock()
            if now - start >= timeout:
                report.end(op, f"failed: not ready after {timeout:g}s: {reason}", ok=False)
                raise ProvisionError(f"{subject}: not ready after {timeout:g}s: {reason}") from None
            if now >= next_progress:
                report.progress(op, f"not ready yet ({now - start:.0f}s/{timeout:g}s): {reason}")
                next_progress = now + every
            sleep(0.5)
            continue
        report.end(op, f"ready after {clock() - start:.1f}s" + (f": {said}" if said else ""))
        return


def _one_line(error: Exception, limit: int = 300) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text[:limit]


def idle_providers(declaration: Declaration) -> dict[str, tuple[str, SecretRef]]:
    """Providers on this node with no grant left: {instance: (kind, admin ref)}. Their managed
    logins, whose grants all went, must still be dropped.

    The declaration says what each instance provides (`providers`). A declaration written
    without that list (by hand, in tests) falls back to the shape of the catalogue's postgres
    module: a published container port 5432 and its own `admin` secret."""
    granted = {g.provider for g in declaration.grants}
    found: dict[str, tuple[str, SecretRef]] = {}
    for provider in declaration.providers:
        if provider.instance not in granted and provider.admin is not None and \
                provider.kind in (POSTGRES_KIND, AMQP_KIND):
            found[provider.instance] = (provider.kind, provider.admin)
    if declaration.providers:
        return found
    for container in declaration.containers:
        if container.instance in granted:
            continue
        admin = next((ref for ref in container.secrets
                      if ref.credential == f"secret/{container.instance}/admin"), None)
        serves = any(p.listen == DEFAULT_ADMIN_LISTEN[POSTGRES_KIND]
                     and p.container_port == DEFAULT_ADMIN_PORT[POSTGRES_KIND]
                     for p in container.ports)
        if admin is not None and serves:
            found[container.instance] = (POSTGRES_KIND, admin)
    return found



def admin_of(declaration: Declaration, provider: str, kind: str,
             grants: Iterable[GrantDecl] = (),
             fallback: Optional[SecretRef] = None) -> Optional[Admin]:
    """The admin credential of `provider` for grants of `kind`: from what the declaration says
    the instance provides (with a rotation's pending generation), else from its grants."""
    for p in declaration.providers:
        if p.instance == provider and p.kind == kind and p.admin is not None:
            return Admin(p.admin, p.admin_pending)
    ref = next((g.admin for g in grants if g.admin is not None), fallback)
    return Admin(ref) if ref is not None else None


def needs_provisioning(declaration: Declaration) -> bool:
    """Whether an apply of `declaration` runs the provisioners: a grant to make, or a provider
    whose admin credential it must check (and rotate) and whose orphans it must sweep."""
    return bool(declaration.grants) or any(p.admin is not None
                                           for p in declaration.providers)


