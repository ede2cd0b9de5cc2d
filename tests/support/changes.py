"""Building blocks of test changes: Spanner's column types of a table, and changes numbered by the
second they commit at (from :data:`BASE`), with their sequence numbers and window versions."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

BASE = datetime(2024, 5, 1, tzinfo=timezone.utc)


def spanner_columns(keys: int, *columns: tuple[str, str | dict[str, Any]]) -> list[dict[str, Any]]:
    """A change record's ``column_types``: ``(name, type)`` in the table's order, a type being a type
    code (``"INT64"``) or Spanner's type object; the first ``keys`` columns are the primary key."""
    return [
        {
            "name": name,
            "type": {"code": kind} if isinstance(kind, str) else kind,
            "is_primary_key": position <= keys,
            "ordinal_position": position,
        }
        for position, (name, kind) in enumerate(columns, start=1)
    ]


def seq(n: int) -> str:
    """The sequence number of change ``n`` (sortable text)."""
    return f"{n:016X}/{0:016X}/{0:016X}/{0:016X}"


def at(n: int) -> datetime:
    """The commit time of change ``n``: ``n`` seconds after :data:`BASE`."""
    return BASE + timedelta(seconds=n)


def version(n: int) -> int:
    """The window version (end in µs) of the window ending at second ``n``."""
    return (at(n) - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1)
