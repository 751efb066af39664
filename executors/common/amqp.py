"""The mesh's own objects on its broker (AMQP 0-9-1), and talking to it reliably.

Invariants:
- One vhost per mesh, `mesh.<mesh>`, holds everything the mesh delivers; the names of its
  accounts carry the mesh (`mesh.<mesh>.control`, `mesh.<mesh>.node.<node>`,
  `mesh.<mesh>.enrol.<token id>`), so two meshes on one broker never share an object.
- Exchanges (direct, durable): `declarations` (routing key: the node) → queue `node.<node>`;
  `reports` → queue `reports`; `enrolment` → queue `enrolment`; `answers` (routing key: the
  token id) → queue `answer.<token id>`; `logs` (routing key: a `mesh logs` or `mesh
  backup|restore DIR` request's id) →
  the asker's own exclusive queue, gone with its connection. Queues are durable, messages persistent
  (delivery_mode 2), publishes confirmed by the broker (`publish` raises unless the broker
  confirmed and routed it).
- What each account may do is stated here once (`permissions`): a node account reads only its
  own queue and writes only the `reports` and `logs` exchanges, configures nothing; an enrolment account
  writes only `enrolment` and reads only its answer queue; the control account does
  everything inside the vhost and nothing outside it.
- Connecting is retried with capped exponential backoff and a line per attempt, never
  silently, until it succeeds or the caller's deadline passes (`connect_retrying`), or, for a
  long-running server, until it is stopped, connecting again whenever the connection breaks
  (`serve_reconnecting`). Both go through the one backoff loop (`connect_backing_off`).
- The mesh's traffic is TLS (amqps, port 5671) verified against the mesh CA: `parameters`
  is given the CA certificate (`BrokerTls`) and the connection is refused unless the broker's
  certificate chains to that CA and names the broker's address (its SAN), checked by the TLS
  handshake, which ends before the AMQP login: a broker with another certificate never sees
  an account's password (`BrokerTrustError`). Plain AMQP happens only when the caller was told
  so in so many words (`BrokerTls.plain()`: `--broker-plain`, a token made with it).
- pika (the node and control extras) is imported by the functions that speak AMQP only: the
  names and addresses here are read by modules that never open a connection.
"""

from __future__ import annotations

import re
import ssl
import time
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Optional, TypeVar

import attrs

from resolver import MeshError

if TYPE_CHECKING:  # pika has no type information: these names are for the reader
    import pika
    from pika.adapters.blocking_connection import BlockingChannel

DECLARATIONS, REPORTS, ENROLMENT, ANSWERS = "declarations", "reports", "enrolment", "answers"
LOGS = "logs"  # a node's answer to `mesh logs` or `mesh backup|restore DIR` (routing key: the
# request id) → the asker's queue
EXCHANGES = (DECLARATIONS, REPORTS, ENROLMENT, ANSWERS, LOGS)
REPORT_QUEUE, ENROLMENT_QUEUE = "reports", "enrolment"
PERSISTENT = 2
DEFAULT_PORT = 5671  # amqps: the mesh's traffic is TLS
PLAIN_PORT = 5672  # plain AMQP, only when asked for (BrokerTls.plain())
BACKOFF_CAP = 30.0


class BrokerError(MeshError):
    """The broker cannot be reached, refused us, or did not confirm a message."""


class BrokerTrustError(BrokerError):
    """The broker's TLS certificate is not one the mesh CA issued for its address: nothing
    was sent to it (the handshake failed before the login)."""


@attrs.frozen
class BrokerTls:
    """How a connection to the broker is secured: TLS verified against `ca_pem` (the mesh
    CA's certificate), or, only when asked for, plain AMQP (`ca_pem` None)."""

    ca_pem: Optional[str] = attrs.field(default=None, repr=False)

    @classmethod
    def plain(cls) -> "BrokerTls":
        return cls(None)

    @property
    def enabled(self) -> bool:
        return self.ca_pem is not None

    @property
    def scheme(self) -> str:
        return "amqps" if self.enabled else "amqp"

    def context(self) -> ssl.SSLContext:
        """A client context that trusts the mesh CA alone and checks the broker's name."""
        if self.ca_pem is None:
            raise BrokerError("plain AMQP has no TLS context")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verify + check_hostname on
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_verify_locations(cadata=self.ca_pem)
        except (ssl.SSLError, ValueError) as exc:
            raise BrokerError(f"the mesh CA certificate cannot be used for TLS: {exc}") from None
        return context


@attrs.frozen
class Permissions:
    configure: str
    write: str
    read: str

    def as_body(self) -> dict[str, str]:
        return {"configure": self.configure, "write": self.write, "read": self.read}


NOTHING = "^$"


@attrs.frozen
class FleetNames:
    """Every name the mesh uses on its broker, and what each account may do."""

    mesh: str

    @property
    def vhost(self) -> str:
        return f"mesh.{self.mesh}"

    @property
    def control_user(self) -> str:
        return f"mesh.{self.mesh}.control"

    def node_user(self, node: str) -> str:
        return f"mesh.{self.mesh}.node.{node}"

    def enrol_user(self, token_id: str) -> str:
        return f"mesh.{self.mesh}.enrol.{token_id}"

    def node_of(self, user: Optional[str]) -> Optional[str]:
        """The node a node account speaks for; None for any other account."""
        prefix = f"mesh.{self.mesh}.node."
        return user[len(prefix):] if user and user.startswith(prefix) else None

    def token_of(self, user: Optional[str]) -> Optional[str]:
        prefix = f"mesh.{self.mesh}.enrol."
        return user[len(prefix):] if user and user.startswith(prefix) else None

    @staticmethod
    def node_queue(node: str) -> str:
        return f"node.{node}"

    @staticmethod
    def answer_queue(token_id: str) -> str:
        return f"answer.{token_id}"

    def control_permissions(self) -> Permissions:
        return Permissions(".*", ".*", ".*")

    def node_permissions(self, node: str) -> Permissions:
        return Permissions(NOTHING, f"^({re.escape(REPORTS)}|{re.escape(LOGS)})$",
                           f"^{re.escape(self.node_queue(node))}$")

    def enrol_permissions(self, token_id: str) -> Permissions:
        return Permissions(NOTHING, f"^{re.escape(ENROLMENT)}$",
                           f"^{re.escape(self.answer_queue(token_id))}$")


@attrs.frozen
class BrokerAddress:
    host: str
    port: int = DEFAULT_PORT

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> "BrokerAddress":
        """`host`, `host:port`, `[v6]:port` or `amqp[s]://host:port[/…]` (port: 5671)."""
        value = text.strip()
        for scheme in ("amqps://", "amqp://"):
            if value.startswith(scheme):
                value = value[len(scheme):].split("/", 1)[0].rsplit("@", 1)[-1]
                break
        if value.startswith("["):
            host, _, rest = value[1:].partition("]")
            port = rest.lstrip(":")
        elif value.count(":") == 1:
            host, port = value.split(":")
        else:
            host, port = value, ""
        if not host:
            raise BrokerError(f"{text!r}: not a broker address (expected HOST:PORT)")
        try:
            return cls(host, int(port) if port else DEFAULT_PORT)
        except ValueError:
            raise BrokerError(f"{text!r}: the port is not a number") from None


def parameters(address: BrokerAddress, vhost: str, user: str, password: str, *,
               tls: BrokerTls, heartbeat: int = 30,
               timeout: float = 10.0) -> pika.ConnectionParameters:
    """How to log in as `user`; over TLS verified against the mesh CA unless `tls` is plain
    (the handshake, with the check of the broker's certificate and name, comes before the
    login that carries the password)."""
    import pika  # the extra's: see the module's invariants

    ssl_options = pika.SSLOptions(tls.context(), server_hostname=address.host) \
        if tls.enabled else None
    return pika.ConnectionParameters(
        host=address.host, port=address.port, virtual_host=vhost, ssl_options=ssl_options,
        credentials=pika.PlainCredentials(user, password, erase_on_connect=True),
        heartbeat=heartbeat, blocked_connection_timeout=60, socket_timeout=timeout,
        stack_timeout=timeout * 2, connection_attempts=1, client_properties={
            "connection_name": user, "product": "mesh"})


def connect(params: pika.ConnectionParameters) -> pika.BlockingConnection:
    """One connection attempt; BrokerError with the reason in one line."""
    import pika.exceptions  # the extra's: see the module's invariants

    try:
        return pika.BlockingConnection(params)
    except pika.exceptions.ProbableAuthenticationError as exc:
        raise BrokerError(f"the broker refused the account {params.credentials.username}: "
                          f"{exc}") from None
    except pika.exceptions.ProbableAccessDeniedError as exc:
        raise BrokerError(f"the broker refused access to vhost {params.virtual_host}: "
                          f"{exc}") from None
    except (pika.exceptions.AMQPError, OSError) as exc:
        untrusted = _certificate_refusal(exc)
        if untrusted is not None:
            raise BrokerTrustError(
                f"{params.host}:{params.port}: the broker's TLS certificate is not the mesh "
                f"CA's for {params.host} ({untrusted}): refused before any password was "
                f"sent") from None
        if params.ssl_options is not None and _is_tls_failure(exc):
            raise BrokerError(f"{params.host}:{params.port}: no TLS handshake with the broker "
                              f"({describe(exc)}); does it listen with TLS (amqps) there?"
                              ) from None
        raise BrokerError(f"{params.host}:{params.port}: {describe(exc)}") from None


def _causes(exc: BaseException) -> Iterable[BaseException]:
    """`exc` and what pika wrapped in it (see describe)."""
    current: Optional[BaseException] = exc
    for _ in range(5):
        if current is None:
            return
        yield current
        inner = getattr(current, "exception", None)
        if not isinstance(inner, BaseException):
            inner = current.args[0] if current.args else None
        current = inner if isinstance(inner, BaseException) else current.__cause__


def _certificate_refusal(exc: BaseException) -> Optional[str]:
    """Why the broker's certificate was not believed, if that is what `exc` is."""
    for cause in _causes(exc):
        if isinstance(cause, ssl.SSLCertVerificationError):
            return str(cause.verify_message or cause.reason or cause)
    return None


def _is_tls_failure(exc: BaseException) -> bool:
    return any(isinstance(cause, ssl.SSLError) or "SSL" in type(cause).__name__
               for cause in _causes(exc))


def describe(exc: BaseException) -> str:
    """One line naming the error and, through pika's wrappers, the cause underneath.

    pika wraps a refused or reset socket twice (AMQPConnectionError holding an
    AMQPConnectorSocketConnectError holding the OSError) and the wrappers' own text is
    empty, so the innermost cause is the part worth printing."""
    names: list[str] = []
    current = exc
    for _ in range(5):  # (pika wraps twice; a cycle of causes cannot keep this going)
        names.append(type(current).__name__)
        text = " ".join(str(current).split())
        if text and text != names[-1]:
            return f"{' < '.join(names)}: {text}"
        inner = getattr(current, "exception", None)
        if not isinstance(inner, BaseException):
            inner = current.args[0] if current.args else None
        if not isinstance(inner, BaseException):
            break
        current = inner
    return " < ".join(names)


_Connection = TypeVar("_Connection")


def connect_backing_off(connect: Callable[[], _Connection], *,
                        retry: Callable[[int, Exception, float], bool],
                        retried: tuple[type[Exception], ...] = (BrokerError,),
                        stopping: Callable[[], bool] = lambda: False,
                        before_attempt: Callable[[], None] = lambda: None,
                        sleep: Callable[[float], None] = time.sleep,
                        cap: float = BACKOFF_CAP) -> Optional[tuple[_Connection, int]]:
    """The one backoff loop: call `connect` until it returns, waiting 1 s, 2 s, 4 s … `cap`
    between attempts; the connection and the attempt that made it. Each failed attempt (an
    error of `retried`) is told to `retry(attempt, error, delay)`, which says its line and
    answers whether to wait and try again (False: give up, None is returned) or raises.
    `stopping()` is asked before each attempt (None once it says so), `before_attempt()` is
    run then."""
    delay, attempt = 1.0, 0
    while not stopping():
        before_attempt()
        attempt += 1
        try:
            return connect(), attempt
        except retried as error:
            if not retry(attempt, error, delay):
                return None
            sleep(delay)
            delay = min(delay * 2, cap)
    return None


def connect_retrying(params: pika.ConnectionParameters, say: Callable[[str], None], *,
                     deadline: Optional[float] = None, cap: float = BACKOFF_CAP,
                     stop: Callable[[], bool] = lambda: False,
                     sleep: Callable[[float], None] = time.sleep,
                     clock: Callable[[], float] = time.monotonic) -> pika.BlockingConnection:
    """Connect, retrying with capped exponential backoff (1 s, 2 s, 4 s … cap) and one line
    per failed attempt; refusals of the account are retried too (an account may be made
    later). BrokerError when `deadline` (a clock value) passes or `stop()` says so."""

    def retry(attempt: int, error: Exception, delay: float) -> bool:
        if stop() or (deadline is not None and clock() + delay > deadline):
            raise error
        say(f"broker {params.host}:{params.port} not reachable (attempt {attempt}): "
            f"{error}; retrying in {delay:.0f}s")
        return True

    opened = connect_backing_off(lambda: connect(params), retry=retry, sleep=sleep, cap=cap)
    if opened is None:  # never: it neither stops nor gives up without raising
        raise BrokerError(f"broker {params.host}:{params.port}: not connected")
    connection, attempt = opened
    if attempt > 1:
        say(f"connected to the broker {params.host}:{params.port} after {attempt} attempts")
    return connection


def is_connection_error(error: Exception) -> bool:
    """Whether `error` is the broker connection breaking (reconnect), not a fault of ours."""
    import pika.exceptions  # a node without the broker's client never gets this far

    return isinstance(error, (BrokerError, pika.exceptions.AMQPError, OSError))


def serve_reconnecting(connect: Callable[[], _Connection],
                       serve: Callable[[_Connection], None], *,
                       close: Callable[[_Connection], None],
                       stopping: Callable[[], bool], say: Callable[[str], None],
                       unreachable: Callable[[int, Exception, float], str],
                       connected: Callable[[int], str],
                       retried: tuple[type[Exception], ...] = (BrokerError,),
                       before_attempt: Callable[[], None] = lambda: None,
                       sleep: Callable[[float], None] = time.sleep,
                       cap: float = BACKOFF_CAP) -> None:
    """Serve over the broker until `stopping()`: connect, retrying with capped exponential
    backoff (1 s, 2 s, 4 s … cap) and one line per failed attempt (`unreachable(attempt, error,
    delay)`); serve; when the connection breaks, say so and connect again (the backoff starts
    over). The one reconnect loop of the agent and the control loop; an error that is not the
    connection breaking is raised."""

    def retry(attempt: int, error: Exception, delay: float) -> bool:
        if stopping():
            return False
        say(unreachable(attempt, error, delay))
        return True

    while True:
        opened = connect_backing_off(connect, retry=retry, retried=retried, stopping=stopping,
                                     before_attempt=before_attempt, sleep=sleep, cap=cap)
        if opened is None:
            return
        connection, attempt = opened
        say(connected(attempt))
        try:
            serve(connection)
        except Exception as error:  # noqa: BLE001 - a broken connection: reconnect
            if not is_connection_error(error):
                raise
            say(f"broker connection lost: {describe(error)}; reconnecting")
        finally:
            try:
                close(connection)
            except Exception:  # noqa: BLE001 - already gone
                pass


def properties(*, message_id: str, kind: str, user_id: Optional[str] = None,
               headers: Optional[Mapping[str, object]] = None) -> pika.BasicProperties:
    import pika  # the extra's: see the module's invariants

    return pika.BasicProperties(content_type="application/json", delivery_mode=PERSISTENT,
                                message_id=message_id, type=kind, user_id=user_id,
                                timestamp=int(time.time()), headers=headers or None,
                                app_id="mesh")


def publish(channel: BlockingChannel, exchange: str, routing_key: str, body: bytes,
            props: pika.BasicProperties) -> None:
    """Publish persistently on a channel in confirm mode; returns only once the broker
    confirmed it and routed it to a queue (BrokerError otherwise)."""
    import pika.exceptions  # the extra's: see the module's invariants

    try:
        channel.basic_publish(exchange, routing_key, body, props, mandatory=True)
    except pika.exceptions.UnroutableError:
        raise BrokerError(f"the broker has no queue for {exchange}/{routing_key}: "
                          f"not delivered") from None
    except pika.exceptions.NackError:
        raise BrokerError(f"the broker did not accept the message for "
                          f"{exchange}/{routing_key}") from None
    except pika.exceptions.ChannelClosedByBroker as exc:
        raise BrokerError(f"the broker refused the message for {exchange}/{routing_key}: "
                          f"{exc.reply_code} {exc.reply_text}") from None
    except (pika.exceptions.AMQPError, OSError) as exc:
        raise BrokerError(f"publishing to {exchange}/{routing_key} failed: "
                          f"{describe(exc)}") from None


def declare_fleet(channel: BlockingChannel, nodes: Iterable[str], token_ids: Iterable[str] = ()) -> None:
    """Exchanges, queues and bindings of the fleet, declared idempotently (control account)."""
    for exchange in EXCHANGES:
        channel.exchange_declare(exchange, "direct", durable=True)
    for queue, exchange, key in ((REPORT_QUEUE, REPORTS, REPORTS),
                                 (ENROLMENT_QUEUE, ENROLMENT, ENROLMENT)):
        channel.queue_declare(queue, durable=True)
        channel.queue_bind(queue, exchange, key)
    for node in nodes:
        declare_node_queue(channel, node)
    for token_id in token_ids:
        declare_answer_queue(channel, token_id)


def declare_node_queue(channel: BlockingChannel, node: str) -> None:
    queue = FleetNames.node_queue(node)
    channel.queue_declare(queue, durable=True)
    channel.queue_bind(queue, DECLARATIONS, node)


def declare_answer_queue(channel: BlockingChannel, token_id: str) -> None:
    queue = FleetNames.answer_queue(token_id)
    channel.queue_declare(queue, durable=True)
    channel.queue_bind(queue, ANSWERS, token_id)
