"""When a scheduled backup is due, as a pure rule: the node's agent asks it which of its
instances to back up now, `mesh status` and `mesh backups` ask it which are overdue.

Invariants:
- Pure: the clock (`now`, epoch seconds) and what the node recorded are arguments.
- One rule for "too old": `is_overdue` (no good snapshot, or the newest is older than the
  schedule). `overdue` in resolver/_backups.py and `due` here both use it, so what the agent
  runs and what status calls overdue never disagree.
- An instance without a schedule is never due. A failed attempt is retried after a back-off
  that doubles with each failure in a row (RETRY_FIRST, at most RETRY_CAP and never longer
  than the schedule itself); a good snapshot clears it.
- `due` orders the instances: never backed up first, then the longest overdue, then by name.
"""

from __future__ import annotations

from typing import Mapping, Optional

import attrs

RETRY_FIRST = 60  # seconds after the first failure in a row
RETRY_CAP = 3600


@attrs.frozen
class LastBackup:
    """What a node recorded of one instance's backups: the time of its newest good snapshot
    (`good`), and of the failed attempts since (`failed`: the last one, `failures`: how many
    in a row)."""

    good: Optional[int] = None
    failed: Optional[int] = None
    failures: int = 0


def is_overdue(last_good: Optional[int], every: int, now: int) -> bool:
    """Whether an instance backed up last at `last_good` (None: never) is older than its
    schedule of `every` seconds at `now`."""
    return last_good is None or now - last_good > every


def retry_after(failures: int, every: int) -> int:
    """Seconds to wait after the last of `failures` failed attempts in a row (0: none)."""
    if failures <= 0:
        return 0
    doubled: int = RETRY_FIRST << min(failures - 1, 16)
    return min(every, RETRY_CAP, doubled)


def due(schedule: Mapping[str, int], last: Mapping[str, LastBackup],
        now: int) -> tuple[str, ...]:
    """The instances of `schedule` (instance → seconds) to back up at `now`, in order."""
    ready: list[tuple[int, int, str]] = []
    for instance, every in schedule.items():
        seen = last.get(instance, LastBackup())
        if not is_overdue(seen.good, every, now):
            continue
        if seen.failures > 0 and seen.failed is not None \
                and now < seen.failed + retry_after(seen.failures, every):
            continue
        never = 0 if seen.good is None else 1
        ready.append((never, seen.good if seen.good is not None else 0, instance))
    return tuple(instance for _, _, instance in sorted(ready))

