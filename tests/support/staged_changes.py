"""Staged change rows for tests: a builder of a Spanner mod's staged row, and the staged rows of a
window compared with a workload's committed history, as multisets of changes."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from airflow_provider_cdc.core.contract.staged_rows import DEDUPLICATION_KEY, STAGED_CHANGE_COLUMNS
from airflow_provider_cdc.core.timestamps import to_micros
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.sources.spanner.change_row import source_metadata_json
from airflow_provider_cdc.sources.spanner.sequence_numbers import spanner_change_sequence_number
from airflow_provider_cdc.testing.workload import ALL_CHANGES_STREAM, TABLES_BY_NAME, Workload


def spanner_staged_row(
    *,
    operation: str,
    table: str,
    keys_json: str,
    after_json: str,
    commit_timestamp: datetime,
    transaction: str,
    column_types_json: str,
    record_sequence: str = "00000000",
    mod_index: int = 0,
    records_in_transaction: int | None = 1,
    before_json: str | None = "{}",
    unit: str = "token-a",
    value_capture_type: str = "OLD_AND_NEW_VALUES",
    partitions_in_transaction: int = 1,
    is_last_record_in_partition: bool = True,
) -> dict[str, Any]:
    """The staged row of one Spanner mod (as ``change_rows`` builds it), in contract column order."""
    row = {
        "unit": unit,
        "commit_timestamp": commit_timestamp,
        "transaction_id": transaction,
        "transaction_record": record_sequence,
        "transaction_record_count": records_in_transaction,
        "table_name": table,
        "operation": operation,
        "keys_json": keys_json,
        "after_json": after_json,
        "before_json": before_json,
        "column_types_json": column_types_json,
        "source_metadata_json": source_metadata_json(
            value_capture_type, partitions_in_transaction, is_last_record_in_partition
        ),
        "change_sequence_number": spanner_change_sequence_number(
            to_micros(commit_timestamp), transaction, record_sequence, mod_index
        ),
    }
    assert tuple(row) == STAGED_CHANGE_COLUMNS
    return row


def _plain(value: Any) -> str:
    if isinstance(value, Decimal):  # NUMERIC compares by value: 1.50 == 1.5
        return format(value.normalize(), "f")
    return str(value)


def canonical(value: Any) -> str:
    """One change as comparable text."""
    return json.dumps(value, sort_keys=True, default=_plain)


def staged_row_change(row: dict[str, Any]) -> str:
    """A staged row as :func:`canonical` text of (commit timestamp, table, operation, keys, after,
    before)."""
    spec = TABLES_BY_NAME[row["table_name"]]
    return canonical(
        [
            row["commit_timestamp"].isoformat(),
            row["table_name"],
            row["operation"],
            spec.decode_values(json.loads(row["keys_json"])),
            spec.decode_values(json.loads(row["after_json"])),
            spec.decode_values(json.loads(row["before_json"])),
        ]
    )


def expected_changes(workload: Workload, window: Window) -> Counter:
    """The window's committed mods."""
    return Counter(
        canonical([t.commit_timestamp.isoformat(), m.table, m.mod_type, m.keys, m.new_values, m.old_values])
        for t in workload.history_between(window.start, window.end)
        for m in t.mods
    )


def staged_changes(root: Path, window: Window, *, dedupe: bool = False) -> Counter:
    """Every staged row of the window under ``root`` (``dedupe``: each change identity once)."""
    folder = root / ALL_CHANGES_STREAM / window.window_id
    if not folder.exists():
        return Counter()
    seen: set = set()
    found: Counter = Counter()
    for row in ds.dataset(str(folder), format="parquet").to_table().to_pylist():
        ident = tuple(row[column] for column in DEDUPLICATION_KEY)
        if dedupe and ident in seen:
            continue
        seen.add(ident)
        found[staged_row_change(row)] += 1
    return found


def difference(staged: Counter, expected: Counter) -> str:
    """What differs, for an assertion message."""
    extra, missing = staged - expected, expected - staged
    return (
        f"{sum(extra.values())} staged but not committed (or staged twice), e.g. {list(extra)[:2]}; "
        f"{sum(missing.values())} committed but not staged, e.g. {list(missing)[:2]}"
    )
