"""Row mappers: metastore table rows to the records the metastore returns, and µs ↔ datetime helpers.

Every ``*_us`` column holds integer microseconds since the Unix epoch; records hold aware UTC
datetimes. Nothing here runs a query.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from airflow_provider_cdc.core.timestamps import from_micros
from airflow_provider_cdc.metastore.model import (
    PartitionRecord,
    PartitionState,
    WindowError,
    WindowPartitionRecord,
    WindowPartitionState,
    WindowRecord,
    WindowState,
    decode_tokens,
    timestamp_micros,
)


def optional_datetime(micros: int | None) -> datetime | None:
    """The aware UTC datetime of ``micros``, or None."""
    return None if micros is None else from_micros(micros)


def window_bounds(start: datetime | str, end: datetime | str, of: str) -> tuple[int, int]:
    """Start and end in microseconds; ``ValueError`` (naming it ``of``) unless end > start."""
    start_us, end_us = timestamp_micros(start, "window start"), timestamp_micros(end, "window end")
    if end_us <= start_us:
        raise ValueError(
            f"window of {of}: end {from_micros(end_us)} is not after start {from_micros(start_us)}"
        )
    return start_us, end_us


def to_partition(row: Mapping[str, Any]) -> PartitionRecord:
    """A ``cdc_partitions`` row as a :class:`PartitionRecord`."""
    return PartitionRecord(
        stream=row["stream"],
        token=row["token"],
        parent_tokens=decode_tokens(row["parent_tokens"]),
        start_timestamp=from_micros(row["start_us"]),
        end_timestamp=optional_datetime(row["end_us"]),
        state=PartitionState(row["state"]),
        watermark=from_micros(row["watermark_us"]),
        heartbeat_ms=row["heartbeat_ms"],
        lease_owner=row["lease_owner"],
        lease_expires_at=optional_datetime(row["lease_expires_us"]),
        attempts=row["attempts"],
        record_count=row["record_count"],
        created_at=from_micros(row["created_us"]),
        updated_at=from_micros(row["updated_us"]),
        finished_at=optional_datetime(row["finished_us"]),
        progress_at=optional_datetime(row["progress_us"]),
    )


def to_window(row: Mapping[str, Any]) -> WindowRecord:
    """A ``cdc_windows`` row as a :class:`WindowRecord`."""
    return WindowRecord(
        pipeline=row["pipeline"],
        stream=row["stream"],
        start=from_micros(row["start_us"]),
        end=from_micros(row["end_us"]),
        state=WindowState(row["state"]),
        attempt=row["attempt"],
        staging_uri=row["staging_uri"],
        change_set_uri=row["change_set_uri"],
        record_count=row["record_count"],
        transaction_count=row["transaction_count"],
        key_count=row["key_count"],
        opened_at=from_micros(row["opened_us"]),
        updated_at=from_micros(row["updated_us"]),
        applied_at=optional_datetime(row["applied_us"]),
        error=to_window_error(row),
    )


def to_window_error(row: Mapping[str, Any]) -> WindowError | None:
    """The window's recorded failure of a ``cdc_windows`` row (``None``: none, or a row selected without
    the error columns)."""
    text = row.get("last_error")
    if text is None or row.get("last_error_us") is None:
        return None
    return WindowError(
        text, row.get("last_error_task"), row.get("last_error_try"), from_micros(row["last_error_us"])
    )


def to_window_partition(row: Mapping[str, Any]) -> WindowPartitionRecord:
    """A ``cdc_window_partitions`` row as a :class:`WindowPartitionRecord`."""
    transactions = row["transactions"]
    return WindowPartitionRecord(
        stream=row["stream"],
        window_start=from_micros(row["window_start_us"]),
        window_end=from_micros(row["window_end_us"]),
        token=row["token"],
        state=WindowPartitionState(row["state"]),
        lease_owner=row["lease_owner"],
        lease_expires_at=optional_datetime(row["lease_expires_us"]),
        attempts=row["attempts"],
        rows=row["rows"],
        transactions=None if transactions is None else float(transactions),
        created_at=from_micros(row["created_us"]),
        updated_at=from_micros(row["updated_us"]),
        done_at=optional_datetime(row["done_us"]),
        claim_id=row["claim_id"],
        output_files=row["output_files"],
    )
