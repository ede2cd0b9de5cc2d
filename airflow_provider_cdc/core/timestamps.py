"""Microsecond-precision UTC timestamps: conversions and RFC 3339 text."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
ONE_MICROSECOND = timedelta(microseconds=1)

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:\s*([Zz]|[+-]\d{2}(?::?\d{2})?))?$"
)


def ensure_utc(value: datetime) -> datetime:
    """Return ``value`` as an aware UTC datetime; naive values are taken to be UTC."""
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def to_micros(value: datetime) -> int:
    """Microseconds since the Unix epoch (exact, no float rounding)."""
    elapsed = ensure_utc(value) - EPOCH
    return (elapsed.days * 86_400 + elapsed.seconds) * 1_000_000 + elapsed.microseconds


def from_micros(micros: int) -> datetime:
    """Aware UTC datetime for microseconds since the Unix epoch."""
    return EPOCH + timedelta(microseconds=int(micros))


def parse_timestamp(text: str) -> datetime:
    """Parse RFC 3339 text (``2022-09-27T12:30:00.123456Z``, ``2022-05-01 09:00:01-00``).

    Digits beyond microseconds are truncated; a missing offset means UTC.
    """
    match = _RFC3339.match(text.strip()) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    tz = timezone.utc
    if offset and offset not in ("Z", "z"):
        sign = -1 if offset[0] == "-" else 1
        digits = offset[1:].replace(":", "")
        hours, minutes = int(digits[:2]), int(digits[2:4] or 0)
        tz = timezone(sign * timedelta(hours=hours, minutes=minutes))
    value = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micros, tzinfo=tz)
    return value.astimezone(timezone.utc)


def format_timestamp(value: datetime) -> str:
    """RFC 3339 text in UTC with a four-digit year, exactly six fractional digits and a ``Z`` suffix."""
    v = ensure_utc(value)
    return (
        f"{v.year:04d}-{v.month:02d}-{v.day:02d}T{v.hour:02d}:{v.minute:02d}:{v.second:02d}."
        f"{v.microsecond:06d}Z"
    )


def coerce_timestamp(value: datetime | str) -> datetime:
    """Accept a datetime (any subclass, e.g. ``DatetimeWithNanoseconds``) or RFC 3339 text."""
    if isinstance(value, datetime):
        return from_micros(to_micros(value))
    if isinstance(value, str):
        return parse_timestamp(value)
    raise TypeError(f"expected a timestamp, got {type(value).__name__}")


def seconds_duration(value: timedelta | float | str | None, name: str) -> timedelta | None:
    """A duration from a ``timedelta`` or a non-negative number of seconds (or its text); ``None`` and
    blank text are ``None``. Anything else fails naming ``name``."""
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"{name} must be a number of seconds, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{name} must be a non-negative number of seconds, got {value!r}")
    return timedelta(seconds=value)
