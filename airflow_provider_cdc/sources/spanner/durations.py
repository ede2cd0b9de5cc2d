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
