"""The snapshot window and the database's version retention, which bounds every read at a timestamp.

A pipeline that starts on a database with data begins with a snapshot of its tables at ``T - 1µs``
(``T`` = the first window's start): the window ``[T - 1µs, T)``. The change-stream TVF includes
commits at exactly its start timestamp, so the snapshot and the stream read from ``T`` neither miss
nor repeat a commit. Spanner keeps old row versions for the database's ``version_retention_period``
(one hour unless the database sets it): a read at a timestamp older than that is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, ensure_utc, format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.sources.spanner.durations import format_duration, parse_duration
from airflow_provider_cdc.sources.spanner.table_batches import PlannedTable
from airflow_provider_cdc.sources.spanner.table_schema import TableSchema

#: Spanner keeps row versions this long when the database sets no ``version_retention_period``.
DEFAULT_VERSION_RETENTION = timedelta(hours=1)
VERSION_RETENTION_QUERY = (
    "SELECT OPTION_VALUE FROM INFORMATION_SCHEMA.DATABASE_OPTIONS "
    "WHERE OPTION_NAME = 'version_retention_period'"
)
#: Reads closer than this to the retention's edge count as outside it (the read takes time).
RETENTION_MARGIN = timedelta(minutes=1)


def snapshot_window(first_window_start: datetime) -> Window:
    """The snapshot window ``[T - 1µs, T)`` of a pipeline whose first stream window starts at ``T``."""
    start = ensure_utc(first_window_start)
    return Window(start - ONE_MICROSECOND, start)


def is_snapshot_window(window: Window) -> bool:
    """Whether ``window`` is one microsecond long (a snapshot window)."""
    return window.end - window.start == ONE_MICROSECOND


@dataclass(frozen=True)
class VersionRetention:
    """A database's ``version_retention_period`` and its option text (``None``: Spanner's default)."""

    period: timedelta
    option_value: str | None = None

    def describe(self) -> str:
        if self.option_value is None:
            where = "Spanner's default; the database sets no version_retention_period"
        else:
            where = f"the database's version_retention_period option {self.option_value!r}"
        return f"{format_duration(self.period)} ({where})"


def version_retention(snapshot: Any) -> VersionRetention:
    """The database's version retention, read in ``snapshot`` (a read-only snapshot)."""
    rows = list(snapshot.execute_sql(VERSION_RETENTION_QUERY))
    text = str(rows[0][0]).strip() if rows and rows[0][0] not in (None, "") else None
    if text is None:
        return VersionRetention(DEFAULT_VERSION_RETENTION)
    try:
        return VersionRetention(parse_duration(text), text)
    except ValueError:
        return VersionRetention(DEFAULT_VERSION_RETENTION, None)


def within_retention(timestamp: datetime, now: datetime, retention: VersionRetention) -> bool:
    """Whether a read at ``timestamp`` is safely within the retention at ``now``."""
    return ensure_utc(now) - ensure_utc(timestamp) <= retention.period - RETENTION_MARGIN


def retention_message(
    what: str, timestamp: datetime, now: datetime, retention: VersionRetention, database_id: str
) -> str:
    """Why a read at ``timestamp`` cannot be made, and the option that allows it."""
    age = timedelta(seconds=int((ensure_utc(now) - ensure_utc(timestamp)).total_seconds()))
    return (
        f"{what} {format_timestamp(timestamp)} is {age} before the database's current time "
        f"{format_timestamp(now)}, outside its version retention period of {retention.describe()}: "
        "Spanner no longer keeps the row versions of that time. Raise the retention (up to 7 days) before "
        f"the timestamp falls out of it: ALTER DATABASE `{database_id}` SET OPTIONS "
        "(version_retention_period='7d'), or start the pipeline with a later first window"
    )


def snapshot_table(schema: TableSchema) -> PlannedTable:
    """What a snapshot reads of a table: every column, each row an INSERT of its key."""
    return PlannedTable(
        table=schema.table,
        target=schema.table,
        select=schema.column_names,
        columns=schema.columns,
        primary_key=schema.key,
    )
