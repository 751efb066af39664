"""The agent's answer to `mesh logs DIR INSTANCE --follow`: the instance's containers' output
streamed, a series of answers on the request's own queue, until nobody follows any more.

Invariants:
- A follow request is verified like any logs request (agent/logs_answer.check_request: this
  mesh, this node, unexpired, signed by the mesh's key) before anything is read. The control
  side renews its lease by sending the same request (same id) again, signed, with a later
  `expires`; the follower ends at the latest when the lease it holds expires.
- Each follower runs in a daemon thread of its own with a broker connection of its own (this
  node's account, as every answer): the agent's loop is never blocked and its connection is
  never shared between threads. The lines are read from the Engine as a stream (the history
  `--tail`/`--since` ask for, then every new line), and each batch is scrubbed exactly as a
  one-shot answer is (logs_answer.scrub, the values sealed to this node from the declaration
  in force, opened once when the follower starts): no secret value is ever published.
- The follower ends, and says why in a last answer (`end`) when the asker can still hear it,
  when: the asker is gone (its exclusive queue was deleted: an answer, or the empty keep-alive
  sent every KEEPALIVE seconds, is unroutable), the lease expired, every container stopped, or
  the agent stops. It closes the Engine streams it opened.
"""

from __future__ import annotations

import datetime
import queue
import threading
import time
from typing import TYPE_CHECKING, Callable, Mapping, Optional

import docker

from executors.common import amqp, messages
from executors.common.amqp import BrokerError
from executors.node.agent.logs_answer import scrub
from executors.node.logs import (InstanceContainer, LogsError, instance_containers, pick,
                                 split_lines)

if TYPE_CHECKING:  # pika has no type information: the name is for the reader
    import pika

KEEPALIVE = 5.0  # seconds between empty answers that find out whether the asker still listens
BATCH_SECONDS = 0.5  # lines are gathered this long into one answer
BATCH_LINES = 500



class Publisher:
    """Answers published as this node's account on a broker connection of the follower's own."""

    def __init__(self, connection: "pika.BlockingConnection", user: str, node: str) -> None:
        self.connection, self.user, self.node = connection, user, node
        self.channel = connection.channel()
        self.channel.confirm_delivery()

    def __call__(self, routing: str, body: bytes) -> None:
        amqp.publish(self.channel, amqp.LOGS, routing, body,
                     amqp.properties(message_id=f"logs/{self.node}/{routing}/{time.time_ns()}",
                                     kind="logs", user_id=self.user))

    def close(self) -> None:
        try:
            self.connection.close()
        except Exception:  # noqa: BLE001 - closing a broken connection: nothing left to do
            pass


def expiry(body: Mapping[str, object]) -> datetime.datetime:
    """The request's `expires` (check_request accepted it already)."""
    return datetime.datetime.fromisoformat(str(body.get("expires")).replace("Z", "+00:00"))


class Follower:
    """One followed request."""

    def __init__(self, body: Mapping[str, object], request: str, node: str,
                 engine: Callable[[], docker.APIClient], tokens: Callable[[], Mapping[str, str]],
                 connect: Callable[[], Publisher], say: Callable[[str], None]) -> None:
        self.body, self.request, self.node = body, request, node
        self.instance = str(body["instance"])
        self.engine, self.tokens, self.connect, self.say = engine, tokens, connect, say
        self.expires = expiry(body)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"mesh-agent-logs-{request[:8]}",
                                       daemon=True)

    def renew(self, body: Mapping[str, object]) -> None:
        self.expires = max(self.expires, expiry(body))

    def _document(self, **fields: object) -> messages.Document:
        document: messages.Document = {"format": messages.LOGS_ANSWER_FORMAT, "node": self.node,
                                       "request": self.request, "instance": self.instance,
                                       "following": True}
        document.update(fields)
        return document

    def _run(self) -> None:
        try:
            publish = self.connect()
        except BrokerError as error:
            self.say(f"following logs for request {self.request}: no broker connection "
                     f"({error}); not followed")
            return
        try:
            why = self._follow(publish)
            if why is not None:
                try:
                    publish(self.request, messages.plain(self._document(lines=[], end=why)))
                except BrokerError:
                    pass
                self.say(f"stopped following {self.instance} for request {self.request}: "
                         f"{why}")
        finally:
            publish.close()

    def _follow(self, publish: Publisher) -> Optional[str]:
        """Stream until the follow ends; why (None: the asker is gone, nobody to tell)."""
        try:
            api = self.engine()
            wanted = self.body.get("container")
            chosen = pick(instance_containers(api, self.instance, str(self.body["mesh"])),
                          wanted if isinstance(wanted, str) else None, self.instance)
            held = self.tokens()
        except LogsError as error:
            return str(error)
        except Exception as error:  # noqa: BLE001 - unscrubbed lines are never sent instead
            return (f"the secret values in force cannot be opened to take them out of the "
                    f"lines ({type(error).__name__}: {error}); nothing sent")
        lines: "queue.Queue[Optional[str]]" = queue.Queue()
        streams = [self._stream(api, c, len(chosen) > 1, lines) for c in chosen]
        open_streams = len(streams)
        sent_at = time.monotonic()
        try:
            while True:
                batch: list[str] = []
                until = time.monotonic() + BATCH_SECONDS
                while len(batch) < BATCH_LINES and time.monotonic() < until:
                    try:
                        line = lines.get(timeout=max(0.0, until - time.monotonic()))
                    except queue.Empty:
                        break
                    if line is None:
                        open_streams -= 1
                    else:
                        batch.append(line)
                if self.stopping.is_set():
                    return "the agent stops"
                if batch or time.monotonic() - sent_at >= KEEPALIVE:
                    clean, touched = scrub(batch, held)
                    try:
                        publish(self.request, messages.plain(self._document(
                            lines=clean, scrubbed=touched, truncated=False)))
                    except BrokerError:
                        self.say(f"stopped following {self.instance} for request "
                                 f"{self.request}: nobody follows any more")
                        return None
                    sent_at = time.monotonic()
                if not open_streams and lines.empty():
                    return "every container stopped"
                if datetime.datetime.now(datetime.timezone.utc) >= self.expires:
                    return "the request's lease expired (it was not renewed)"
        finally:
            for stream in streams:
                close = getattr(stream, "close", None)
                if close is not None:
                    try:
                        close()
                    except Exception:  # noqa: BLE001 - closing a broken stream: nothing left
                        pass

    def _stream(self, api: docker.APIClient, container: InstanceContainer, several: bool,
                out: "queue.Queue[Optional[str]]") -> object:
        """The Engine's stream of `container`'s output, read into `out` by a thread of its
        own (None put last)."""
        since = self.body.get("since")
        tail = self.body.get("tail")
        chunks = api.logs(container.name, stdout=True, stderr=True, stream=True, follow=True,
                          timestamps=bool(self.body.get("timestamps")),
                          since=since if isinstance(since, (int, float)) else None,
                          tail=tail if isinstance(tail, int) else "all")
        prefix = f"{container.container or container.name} | " if several else ""

        def read() -> None:
            try:
                for line in split_lines(chunks):
                    out.put(prefix + line)
            except Exception:  # noqa: BLE001 - a closed stream ends the reading
                pass
            finally:
                out.put(None)

        threading.Thread(target=read, name="mesh-agent-logs-stream", daemon=True).start()
        return chunks


class Followers:
    """Every follow under way on this agent, by request id."""

    def __init__(self, node: str, connect: Callable[[], Publisher],
                 say: Callable[[str], None]) -> None:
        self.node, self.connect, self.say = node, connect, say
        self.running: dict[str, Follower] = {}
        self.lock = threading.Lock()

    def follow(self, body: Mapping[str, object], request: str,
               engine: Callable[[], docker.APIClient],
               tokens: Callable[[], Mapping[str, str]]) -> messages.Document:
        """Start following (or renew the lease of the follow under way); the answer that
        says so, with no lines."""
        with self.lock:
            self.running = {r: f for r, f in self.running.items() if f.thread.is_alive()}
            found = self.running.get(request)
            if found is not None:
                found.renew(body)
                return found._document(lines=[])
            follower = Follower(body, request, self.node, engine, tokens, self.connect,
                                self.say)
            self.running[request] = follower
            follower.thread.start()
        self.say(f"following {follower.instance} for request {request} until "
                 f"{body.get('expires')} (renewed while the asker follows)")
        return follower._document(lines=[])

    def close(self) -> None:
        with self.lock:
            for follower in self.running.values():
                follower.stopping.set()
            for follower in self.running.values():
                follower.thread.join(2)
            self.running = {}


def publisher(parameters: Callable[[], "pika.ConnectionParameters"], user: str,
              node: str) -> Callable[[], Publisher]:
    """A function opening a broker connection of its own (pika parameters from
    `parameters()`): how a follower publishes its answers as `user`."""
    def connect() -> Publisher:
        return Publisher(amqp.connect(parameters()), user, node)
    return connect
