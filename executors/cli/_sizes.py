"""Bytes and ages as the backup verbs and `mesh status` print them (standard library only, so
`mesh status` reads them without the node's extra)."""

from __future__ import annotations


def size(count: int) -> str:
    """Bytes for a person: 512 B, 3.4 KiB, 12.0 MiB."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def age(seconds: int) -> str:
    if seconds < 120:
        return f"{max(seconds, 0)}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


__all__ = ["size", "age"]
