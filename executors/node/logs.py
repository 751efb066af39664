"""What an instance's containers wrote, read back from the node's Docker Engine (`mesh logs`).

Invariants:
- Only containers the mesh manages are read: found by their labels (`mesh.instance`, and
  `mesh.mesh` when a mesh is named), never by a name pattern; nothing is started, stopped or
  changed.
- The output is the containers' own (what the Engine's logging driver kept within the limits
  the declaration set); the mesh adds only a `container |` prefix when an instance has more
  than one container, and never a value of its own.
- Lines of several containers are merged in the order the Engine stamped them; following
  streams each container as it writes, one line at a time, never a line cut in two.
- `since_epoch` is pure (the clock is an argument): a duration back from `now` (`90s`, `10m`,
  `2h`, `1d`) or an ISO 8601 time with an offset.
"""

from __future__ import annotations

import datetime
import re
import threading
from typing import Callable, Iterable, Iterator, Optional

import attrs
import docker
import requests
from docker.errors import APIError, NotFound

from resolver import MeshError

from executors.common.marks import LABEL_CONTAINER, LABEL_INSTANCE, LABEL_MESH

_DURATION = re.compile(r"^([0-9]+)([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
SINCE_EXPECTED = ("a duration back from now (90s, 10m, 2h, 1d) or an ISO 8601 time with an "
                  "offset (2026-01-31T12:00:00Z)")


class LogsError(MeshError):
    """The logs asked for cannot be read: no such instance here, or the Engine refused."""


@attrs.frozen(order=True)
class InstanceContainer:
    """One container of the instance: its runtime name and its name inside its module."""

    name: str
    container: str


def since_epoch(text: str, now: float) -> float:
    """The Unix time `--since TEXT` means at `now`; ValueError naming what was expected."""
    match = _DURATION.match(text.strip())
    if match:
        return now - int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not a time; expected {SINCE_EXPECTED}") from None
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no offset; expected {SINCE_EXPECTED}")
    return moment.timestamp()


def instance_containers(api: docker.APIClient, instance: str,
                        mesh: Optional[str] = None) -> list[InstanceContainer]:
    """The containers of `instance` on this Engine, running or not, sorted by name; a
    LogsError naming the instances that are here when it has none."""
    filters = [f"{LABEL_INSTANCE}={instance}", f"{LABEL_MESH}={mesh}" if mesh else LABEL_MESH]
    try:
        rows = api.containers(all=True, filters={"label": filters})
    except (APIError, requests.exceptions.ConnectionError) as exc:
        raise LogsError(f"the Docker Engine at {api.base_url} cannot be asked: "
                        f"{_explained(exc)}") from None
    found = sorted(InstanceContainer(str(row["Names"][0]).lstrip("/"),
                                     str((row.get("Labels") or {}).get(LABEL_CONTAINER, "")))
                   for row in rows)
    if not found:
        here = sorted({str((row.get("Labels") or {}).get(LABEL_INSTANCE))
                       for row in api.containers(all=True, filters={"label": LABEL_INSTANCE})})
        raise LogsError(f"no container of instance {instance} on this node"
                        + (f" (mesh {mesh})" if mesh else "") + "; instances here: "
                        + (", ".join(here) if here else "none"))
    return found


def pick(containers: list[InstanceContainer], wanted: Optional[str],
         instance: str) -> list[InstanceContainer]:
    """`containers`, or only the one called `wanted` (its name in the module or on the
    node); a LogsError listing the names there are when none is."""
    if wanted is None:
        return containers
    chosen = [c for c in containers if wanted in (c.container, c.name)]
    if not chosen:
        raise LogsError(f"instance {instance} has no container {wanted!r}; it has "
                        + ", ".join(c.container or c.name for c in containers))
    return chosen


def _prefix(c: InstanceContainer, several: bool) -> str:
    return f"{c.container or c.name} | " if several else ""


def _split_stamp(line: str) -> tuple[str, str]:
    """(the Engine's RFC 3339 timestamp, the line) of a line read with timestamps=True."""
    stamp, _, text = line.partition(" ")
    return stamp, text


def _normalised(stamp: str) -> str:
    """A stamp that sorts as time does: the Engine trims trailing zeros of the fraction."""
    head, _, rest = stamp.rstrip("Z").partition(".")
    return f"{head}.{rest:0<9}Z"


def recent(api: docker.APIClient, containers: list[InstanceContainer], *,
           since: Optional[float] = None, tail: Optional[int] = None,
           timestamps: bool = False) -> list[str]:
    """Every container's kept output (the last `tail` lines of each, from `since`), merged by
    the time the Engine stamped each line."""
    several = len(containers) > 1
    merged: list[tuple[str, int, str]] = []
    for order, c in enumerate(containers):
        try:
            raw = api.logs(c.name, stdout=True, stderr=True, timestamps=True,
                           since=since, tail=tail if tail is not None else "all")
        except (APIError, NotFound) as exc:
            raise LogsError(f"reading the logs of {c.name} failed: {_explained(exc)}") from None
        for line in raw.decode("utf-8", "replace").splitlines():
            stamp, text = _split_stamp(line)
            shown = f"{stamp} {text}" if timestamps else text
            merged.append((_normalised(stamp), order, _prefix(c, several) + shown))
    merged.sort(key=lambda entry: (entry[0], entry[1]))
    return [text for _, _, text in merged]


def _lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Whole lines out of a stream of chunks (a chunk may end mid-line)."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *whole, pending = pending.split(b"\n")
        for line in whole:
            yield line.decode("utf-8", "replace")
    if pending:
        yield pending.decode("utf-8", "replace")


split_lines = _lines  # the agent's follower (agent/logs_follow.py) reads streams too


def follow(api: docker.APIClient, containers: list[InstanceContainer],
           say: Callable[[str], None], *, since: Optional[float] = None,
           tail: Optional[int] = None, timestamps: bool = False) -> None:
    """Stream every container's output to `say`, a line at a time, until each container
    stops (or the caller is interrupted)."""
    several = len(containers) > 1
    lock = threading.Lock()
    failures: list[str] = []

    def stream(c: InstanceContainer) -> None:
        try:
            chunks = api.logs(c.name, stdout=True, stderr=True, stream=True, follow=True,
                              timestamps=timestamps, since=since,
                              tail=tail if tail is not None else "all")
            for line in _lines(chunks):
                with lock:
                    say(_prefix(c, several) + line)
        except (APIError, NotFound) as exc:
            failures.append(f"following the logs of {c.name} failed: {_explained(exc)}")

    threads = [threading.Thread(target=stream, args=(c,), daemon=True) for c in containers]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():  # a join with a timeout lets Ctrl-C through
            thread.join(0.5)
    if failures:
        raise LogsError("; ".join(failures))


def _explained(exc: Exception) -> str:
    return str(getattr(exc, "explanation", None) or exc)
