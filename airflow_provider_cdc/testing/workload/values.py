"""Seeded random values for workload columns, under a value profile."""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from .schema import WorkloadColumn, _type_code
from .truth import _COMMIT_TS

FULL_PROFILE = "full"
GOOGLE_EMULATOR_PROFILE = "google-emulator"
#: ``full``: every value the schema allows the generator to draw (microsecond TIMESTAMPs, NULL array
#: elements, commit-timestamp columns written with ``spanner.commit_timestamp()``).
#: ``google-emulator``: only values Google's Cloud Spanner emulator reports faithfully in change
#: records: whole-second TIMESTAMPs and DATEs from year 1000 on, no FLOAT64 NaN or infinities, no NULL
#: array elements, and commit-timestamp columns written with an explicit whole-second timestamp in the
#: past; NUMERICs include values with all 29 integer and 9 fractional digits.
VALUE_PROFILES = (FULL_PROFILE, GOOGLE_EMULATOR_PROFILE)

_WORDS = (
    "alpha", "bravo", "delta", "echo", "kilo", "lima", "oscar", "tango", "zulu", "Zoë", "Łódź",
    "東京", "São Paulo", "naïve", "quote'd", 'dq"x', "back\\slash", "tab\tstop", "🎵 tune",
)  # fmt: skip
_REGIONS = ("us", "eu", "ap", "sa", "af")
_TIERS = ("free", "pro", "team", "enterprise")


def _random_scalar(
    rng: random.Random, code: str, max_length: int | None = None, profile: str = FULL_PROFILE
) -> Any:
    if code == "INT64":
        if rng.random() < 0.1:
            return rng.choice((0, -1, 2**63 - 1, -(2**63), rng.randint(-(2**63), 2**63 - 1)))
        return rng.randint(-1_000_000, 1_000_000)
    if code == "FLOAT64":
        roll = rng.random()
        if roll < 0.05:
            return rng.choice((1e-300, -2.5e300, 1.7976931348623157e308, 5e-324))
        return round(rng.uniform(-1e6, 1e6), rng.randint(0, 9)) or 0.5
    if code == "BOOL":
        return rng.random() < 0.5
    if code == "STRING":
        text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3)))
        return text[:max_length] if max_length else text
    if code == "NUMERIC":
        if profile == GOOGLE_EMULATOR_PROFILE and rng.random() < 0.05:  # NUMERIC's full 29.9 digits
            whole = rng.randrange(10**28, 10**29) * rng.choice((1, -1))
            return Decimal(f"{whole}.{rng.randrange(10**9):09d}")
        whole = rng.randint(1, 10**12) * rng.choice((1, -1))
        scale = rng.randint(0, 9)
        if scale == 0:
            return Decimal(whole)
        return Decimal(f"{whole}.{rng.randrange(10**scale):0{scale}d}")
    if code == "DATE":
        return date(1990, 1, 1) + timedelta(days=rng.randrange(20_000))
    if code == "TIMESTAMP":
        base = datetime(2000, 1, 1, tzinfo=timezone.utc)
        if profile == GOOGLE_EMULATOR_PROFILE:  # whole seconds
            return base + timedelta(seconds=rng.randrange(30 * 365 * 86_400))
        return base + timedelta(microseconds=rng.randrange(30 * 365 * 86_400 * 10**6))
    if code == "BYTES":
        size = rng.randint(0, min(max_length or 24, 24))
        return bytes(rng.getrandbits(8) for _ in range(size))
    if code == "JSON":
        value: dict[str, Any] = {"tier": rng.choice(_TIERS), "visits": rng.randint(0, 10_000)}
        if rng.random() < 0.5:
            value["flags"] = [rng.random() < 0.5 for _ in range(rng.randint(0, 3))]
        if rng.random() < 0.3:
            value["address"] = {"city": rng.choice(_WORDS), "zip": f"{rng.randrange(100000):05d}"}
        if rng.random() < 0.1:
            value["note"] = None
        return value
    raise ValueError(f"no generator for type {code}")


def _max_length(ddl_type: str) -> int | None:
    inner = ddl_type.rsplit("(", 1)
    if len(inner) == 2 and inner[1].rstrip(">").rstrip(")").isdigit():
        return int(inner[1].rstrip(">").rstrip(")"))
    return None


def _random_value(rng: random.Random, column: WorkloadColumn, profile: str = FULL_PROFILE) -> Any:
    """A value for ``column`` under ``profile`` (see :data:`VALUE_PROFILES`)."""
    google = profile == GOOGLE_EMULATOR_PROFILE
    if column.commit_timestamp and not google:
        return _COMMIT_TS
    if rng.random() < 0.1:
        return None
    if column.commit_timestamp:  # an explicit whole-second timestamp in the past
        return datetime(2000, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=rng.randrange(20 * 365 * 86_400))
    if column.code == "ARRAY":
        element = _type_code(column.ddl_type[6:-1])
        size = rng.randint(0, 4)
        return [
            None
            if not google and rng.random() < 0.1
            else _random_scalar(rng, element, _max_length(column.ddl_type), profile)
            for _ in range(size)
        ]
    return _random_scalar(rng, column.code, _max_length(column.ddl_type), profile)


def _different_value(
    rng: random.Random, column: WorkloadColumn, current: Any, profile: str = FULL_PROFILE
) -> Any:
    """A value for ``column`` that differs from ``current`` (commit timestamps always differ)."""
    for _ in range(50):
        value = _random_value(rng, column, profile)
        if value is _COMMIT_TS or not _same(value, current):
            return value
    raise RuntimeError(f"could not draw a new value for column {column.name}")


def _same(left: Any, right: Any) -> bool:
    if left is None or right is None:
        return left is right
    return type(left) is type(right) and left == right
