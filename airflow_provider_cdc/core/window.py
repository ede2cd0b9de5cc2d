"""Bounded windows ``[start, end)`` of commit timestamps."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from airflow_provider_cdc.core.timestamps import (
    ONE_MICROSECOND,
    coerce_timestamp,
    format_timestamp,
    from_micros,
    to_micros,
)

_WINDOW_ID = re.compile(r"(-?[0-9]+)-(-?[0-9]+)")


def _aware_utc(value: object, name: str) -> datetime:
    """``value`` as a UTC datetime at microsecond precision; naive datetimes are refused."""
    if not isinstance(value, datetime):
        raise TypeError(f"window {name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"window {name} must be timezone-aware (UTC), got naive {value.isoformat()}")
    return from_micros(to_micros(value))


@dataclass(frozen=True, slots=True)
class Window:
    """Commit timestamps from ``start`` (inclusive) to ``end`` (exclusive), both aware UTC.

    Aware datetimes in other zones are converted to UTC; naive ones are refused.
    """

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        start = _aware_utc(self.start, "start")
        end = _aware_utc(self.end, "end")
        if not start < end:
            raise ValueError(
                "window start must be before its end, got "
                f"[{format_timestamp(start)}, {format_timestamp(end)})"
            )
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)

    @property
    def start_micros(self) -> int:
        """``start`` in microseconds since the epoch."""
        return to_micros(self.start)

    @property
    def end_micros(self) -> int:
        """``end`` in microseconds since the epoch."""
        return to_micros(self.end)

    @property
    def query_end(self) -> datetime:
        """``end - 1µs``: the change-stream TVF's ``end_timestamp`` is inclusive."""
        return self.end - ONE_MICROSECOND

    @property
    def window_id(self) -> str:
        """Stable name of the window, ``{start_micros}-{end_micros}``."""
        return f"{self.start_micros}-{self.end_micros}"

    @classmethod
    def from_window_id(cls, window_id: str) -> Window:
        """The window a :attr:`window_id` names."""
        match = _WINDOW_ID.fullmatch(window_id) if isinstance(window_id, str) else None
        if not match:
            raise ValueError(f"not a window id (expected '{{start_micros}}-{{end_micros}}'): {window_id!r}")
        return cls(from_micros(int(match.group(1))), from_micros(int(match.group(2))))

    def contains(self, timestamp: datetime) -> bool:
        """Whether ``timestamp`` falls in ``[start, end)``."""
        value = _aware_utc(timestamp, "timestamp")
        return self.start <= value < self.end

    def overlaps(self, partition_start: datetime, partition_end: datetime | None) -> bool:
        """Whether a partition covering ``[partition_start, partition_end)`` has changes in the window.

        ``partition_end`` is ``None`` while the partition has not reported its children.
        """
        begin = _aware_utc(partition_start, "partition start")
        if begin >= self.end:
            return False
        return partition_end is None or _aware_utc(partition_end, "partition end") > self.start

    def __str__(self) -> str:
        return f"[{format_timestamp(self.start)}, {format_timestamp(self.end)})"


def snapshot_start(first_window_start: datetime | str) -> str:
    """The pipeline's first window start when it begins with a snapshot of its source as of ``T - 1µs``:
    the snapshot window is ``[T - 1µs, T)`` (RFC 3339)."""
    return format_timestamp(coerce_timestamp(first_window_start) - ONE_MICROSECOND)
