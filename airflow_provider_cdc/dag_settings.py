"""Settings that shape a pipeline DAG itself, read from the environment when the DAG file is parsed.

A DAG's schedule, start date and the number of mapped readers cannot be DAG params (Airflow fixes them
when it parses the file), so the example DAGs read them here:

- ``CDC_WINDOW_SECONDS`` or ``CDC_WINDOW_MINUTES``: the window length (default 10 minutes; seconds win);
- ``CDC_START_DATE``: the first window's start, RFC 3339 (default ``2026-01-01T00:00:00Z``);
- ``CDC_READERS``: mapped reader tasks per window (default 2);
- ``CDC_DEMO_HOME``: where the default roots lie (default ``$AIRFLOW_HOME/cdc-demo``).

A value that is not a positive integer or not an RFC 3339 timestamp fails the parse naming the variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow_provider_cdc.core.timestamps import parse_timestamp

__all__ = ["DagSettings", "positive_int_env", "start_date_env", "window_env"]

DEFAULT_START_DATE = datetime(2026, 1, 1, tzinfo=timezone.utc)


def positive_int_env(name: str, default: int) -> int:
    """A positive integer from the environment variable ``name`` (``default`` when unset)."""
    text = os.environ.get(name, "").strip() or str(default)
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"environment variable {name} must be a positive integer, got {text!r}")
    return int(text)


def window_env() -> timedelta:
    """The window length: ``CDC_WINDOW_SECONDS`` if set, else ``CDC_WINDOW_MINUTES`` (default 10)."""
    if os.environ.get("CDC_WINDOW_SECONDS", "").strip():
        return timedelta(seconds=positive_int_env("CDC_WINDOW_SECONDS", 600))
    return timedelta(minutes=positive_int_env("CDC_WINDOW_MINUTES", 10))


def start_date_env(name: str = "CDC_START_DATE", default: datetime = DEFAULT_START_DATE) -> datetime:
    """An RFC 3339 timestamp from the environment variable ``name`` (``default`` when unset), in UTC."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        return parse_timestamp(text)
    except ValueError as exc:
        raise ValueError(
            f"environment variable {name} must be an RFC 3339 timestamp such as 2026-01-01T00:00:00Z, "
            f"got {text!r} ({exc})"
        ) from None


@dataclass(frozen=True)
class DagSettings:
    """The window length, the first window's start, the readers per window and the demo's home."""

    window: timedelta
    start_date: datetime
    readers: int
    demo_home: str

    @classmethod
    def from_env(cls) -> DagSettings:
        home = os.environ.get("CDC_DEMO_HOME") or str(
            Path(os.environ.get("AIRFLOW_HOME", "~/airflow")).expanduser() / "cdc-demo"
        )
        return cls(window_env(), start_date_env(), positive_int_env("CDC_READERS", 2), home)
