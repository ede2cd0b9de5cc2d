"""Spanner's duration text (``'7d'``, ``'36h'``, ``'90m'``, ``'3600s'``): retention periods of change
streams and databases."""

from __future__ import annotations

import re
from datetime import timedelta

#: Seconds per unit, largest first.
UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_DURATION = re.compile(r"\s*([0-9]+)\s*([smhd])\s*", re.IGNORECASE)


def spanner_duration(text: str) -> timedelta | None:
    """The duration ``text`` names (zero included), or ``None`` when it is not one."""
    match = _DURATION.fullmatch(text)
    if not match:
        return None
    return timedelta(seconds=int(match.group(1)) * UNITS[match.group(2).lower()])


def parse_duration(text: str) -> timedelta:
    """A positive Spanner duration; ``ValueError`` otherwise."""
    period = spanner_duration(text)
    if period is None or period <= timedelta(0):
        raise ValueError(f"not a Spanner duration: {text!r}")
    return period


def format_duration(period: timedelta) -> str:
    """``period`` in Spanner's duration notation, in the largest whole unit (``7d``, ``36h``, ``90s``)."""
    seconds = period.total_seconds()
    for unit, size in UNITS.items():
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


#: The change-stream query's default heartbeat interval (milliseconds).
DEFAULT_HEARTBEAT_MS = 10_000
RetentionValue = timedelta | int | float | str


def parse_retention(value: RetentionValue) -> timedelta:
    """A retention period from a ``timedelta``, seconds (a number or digits) or Spanner duration text
    (``'7d'``, ``'36h'``, ``'90m'``, ``'3600s'``); raises ``ValueError`` for anything else or a period
    that is not positive."""
    period: timedelta | None = None
    try:
        if isinstance(value, timedelta):
            period = value
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            period = timedelta(seconds=value)
        elif isinstance(value, str):
            text = value.strip().lower()
            period = spanner_duration(text)
            if period is None and re.fullmatch(r"[0-9]+(\.[0-9]+)?", text):
                period = timedelta(seconds=float(text))
    except (OverflowError, ValueError):  # NaN, infinities, more days than a timedelta holds
        period = None
    if period is None:
        raise ValueError(
            f"retention {value!r} is not a duration: give a timedelta, seconds, or Spanner duration text "
            "such as '7d', '36h' or '3600s'"
        )
    if period <= timedelta(0):
        raise ValueError(f"retention must be positive, got {value!r}")
    return period
