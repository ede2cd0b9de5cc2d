"""Staged rows of a window compared with a workload's committed history, as multisets of changes."""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from airflow_provider_cdc.core.contract.staged_rows import DEDUPLICATION_KEY
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.testing.workload import ALL_CHANGES_STREAM, TABLES_BY_NAME, Workload


def _plain(value: Any) -> str:
    if isinstance(value, Decimal):  # NUMERIC compares by value: 1.50 == 1.5
        return format(value.normalize(), "f")
    return str(value)


def canonical(value: Any) -> str:
    """One change as comparable text."""
    return json.dumps(value, sort_keys=True, default=_plain)


def staged_row_change(row: dict[str, Any]) -> str:
    """A staged row as :func:`canonical` text of (commit timestamp, table, mod type, keys, new, old)."""
    spec = TABLES_BY_NAME[row["table_name"]]
    return canonical(
        [
            row["commit_timestamp"].isoformat(),
            row["table_name"],
            row["mod_type"],
            spec.decode_values(json.loads(row["keys_json"])),
            spec.decode_values(json.loads(row["new_values_json"])),
            spec.decode_values(json.loads(row["old_values_json"])),
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
    """Every staged row of the window under ``root`` (``dedupe``: each mod identity once)."""
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
