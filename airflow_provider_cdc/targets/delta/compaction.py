"""Deferred apply: when to defer a window, when to compact, and the compaction itself.

A compaction folds every pending window after the table's apply watermark into the table with one
MERGE (:mod:`.fold` gives one net change per key), committed with the app transaction of the last
folded window and, in its commit metadata, the list of the windows it folded
(``airflow-provider-cdc.foldedWindows``). The table's held window, its apply watermark, is then the
last folded window's end, which lags the appended windows. Pending rows of windows at or
below the watermark are removed after the commit, and ignored until then, so a crash between the
table's commit and the clean-up, or a compaction run again, neither loses nor repeats a window.
Columns the pending windows add are committed to the table just before the MERGE (:func:`.merge.add_columns`).

Which changes of a key apply depends on its stored row's sequence number. When the table's greatest
sequence number (from its files' statistics) is below the pending changes' smallest, the usual case,
nothing needs reading; otherwise (late or repeated changes) the stored keys and sequence numbers of
the pending keys are read first, streamed, in memory bounded by the pending rows.

Keys spread over the key space (``apply_mode="auto"``): a window is deferred when the table has at
least :data:`SPREAD_MIN_FILES` data files and the window's keys fall within the key range (first key
column, from the files' statistics) of at least :data:`SPREAD_FRACTION` of them, since its MERGE
would rewrite about as many files as it touches; a table with pending windows keeps deferring.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from airflow_provider_cdc.changesets.typed_batches import SOURCE_SEQUENCE, TableColumns
from airflow_provider_cdc.targets.delta.fold import (
    PENDING_WINDOW,
    InitialState,
    KeyIndex,
    fold_changes,
    group_starts,
    initial_state,
    sort_changes,
)
from airflow_provider_cdc.targets.delta.log import (
    COMMIT_METADATA_FOLDED_WINDOWS,
    commit_properties,
    held_window,
)
from airflow_provider_cdc.targets.delta.merge import added_columns, merge_into
from airflow_provider_cdc.targets.delta.pending import PendingChanges

log = logging.getLogger(__name__)

APPLY_MODES = ("immediate", "deferred", "auto")
DEFAULT_COMPACT_EVERY = 10
#: ``auto``: a window is deferred when it touches at least this fraction of the table's files …
SPREAD_FRACTION = 0.5
#: … and the table has at least this many files (rewriting fewer is cheap).
SPREAD_MIN_FILES = 8


def check_apply_mode(mode: str) -> str:
    if mode not in APPLY_MODES:
        raise ValueError(f"apply_mode must be one of {APPLY_MODES}, got {mode!r}")
    return mode


@dataclass(frozen=True)
class CompactionResult:
    """What one compaction of a table did."""

    table: str
    status: str  # "compacted" or "nothing_pending"
    watermark: int | None  # the table's apply watermark after it (window end in µs)
    folded_windows: tuple[int, ...] = ()
    table_version: int | None = None
    pending_rows: int = 0
    source_rows: int = 0
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    read_stored_keys: bool = False  # the stored sequence numbers were read (late changes possible)
    seconds: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        result = asdict(self)
        result["folded_windows"] = list(self.folded_windows)
        result.pop("metrics")
        return result


def compaction_due(
    pending_windows: list[int],
    watermark: int | None,
    current: int,
    compact_every: int | None,
    max_staleness: timedelta | None,
) -> bool:
    """Whether to compact after window ``current`` was appended: ``compact_every`` windows are
    pending, or the table's staleness (``current`` minus the watermark) would exceed
    ``max_staleness`` by the end of the next window (taken as long as ``current``'s)."""
    if not pending_windows:
        return False
    if watermark is None:
        return True
    if compact_every is not None and len(pending_windows) >= compact_every:
        return True
    if max_staleness is not None:
        earlier = [w for w in [watermark, *pending_windows] if w < current]
        length = current - max(earlier) if earlier else 0
        limit = max_staleness // timedelta(microseconds=1)
        return current + length - watermark > limit
    return False


def keys_spread(dt: DeltaTable, source: pa.Table, table: TableColumns) -> bool:
    """Whether the window's keys touch most of the table's files (see the module docstring)."""
    key = table.keys[0].name
    actions = pa.table(dt.get_add_actions(flatten=True))
    low, high = f"min.{key}", f"max.{key}"
    if actions.num_rows < SPREAD_MIN_FILES or low not in actions.column_names:
        return False
    lows, highs = actions[low], actions[high]
    keys = source[key].drop_null()
    if lows.null_count or highs.null_count or len(keys) == 0:
        return False
    try:
        values = np.sort(keys.cast(lows.type).to_numpy(zero_copy_only=False))
        lo = lows.to_numpy(zero_copy_only=False)
        hi = highs.cast(lows.type).to_numpy(zero_copy_only=False)
        at = np.minimum(np.searchsorted(values, lo, side="left"), len(values) - 1)
        touched = (values[at] >= lo) & (values[at] <= hi)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError, ValueError):
        return False
    return bool(touched.mean() >= SPREAD_FRACTION)


def sequence_below(dt: DeltaTable, smallest: str) -> bool:
    """Whether every stored sequence number is below ``smallest``, by the files' statistics (which
    may hold a prefix of the greatest value: compared on the common prefix, strictly)."""
    actions = pa.table(dt.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return True
    column = f"max.{SOURCE_SEQUENCE}"
    if column not in actions.column_names:
        return False
    maxima = actions[column]
    if maxima.null_count == len(maxima):
        return True  # no file holds a sequence number
    if maxima.null_count:
        counts = f"null_count.{SOURCE_SEQUENCE}"
        if counts not in actions.column_names:
            return False
        rows = actions["num_records"] if "num_records" in actions.column_names else None
        if rows is None or not pc.all(pc.or_(pc.is_valid(maxima), pc.equal(actions[counts], rows))).as_py():
            return False
    largest = str(pc.max(maxima).as_py())
    n = min(len(largest), len(smallest))
    return smallest[:n] > largest[:n]


def stored_sequences(dt: DeltaTable, changes: pa.Table, keys: list[str]) -> pa.Table:
    """The stored keys and sequence numbers of the keys of ``changes`` (key-sorted), read streaming."""
    distinct = changes.filter(pa.array(group_starts(changes, keys))).select(keys)
    schema = pa.schema([*(distinct.schema.field(k) for k in keys), pa.field(SOURCE_SEQUENCE, pa.string())])
    found = [schema.empty_table()]
    index = KeyIndex(distinct, keys)
    for batch in dt.to_pyarrow_dataset().to_batches(columns=[*keys, SOURCE_SEQUENCE]):
        part = pa.Table.from_batches([batch])
        rows, _ = index.match(part)
        if rows.size:
            found.append(part.take(pa.array(rows)).cast(schema))
    return pa.concat_tables(found)


def folded_changes(dt: DeltaTable, table: TableColumns, rows: pa.Table) -> tuple[pa.Table, bool]:
    """The net change per key of pending ``rows`` against ``dt``, and whether the stored sequence
    numbers had to be read."""
    keys = [c.name for c in table.keys]
    rows = sort_changes(rows, keys)
    initial: InitialState | None = None
    smallest = pc.min(rows[SOURCE_SEQUENCE]).as_py()
    read = not sequence_below(dt, smallest)
    if read:
        initial = initial_state(rows, stored_sequences(dt, rows, keys), keys)
    return fold_changes(rows, table, initial), read


def compact(
    dt: DeltaTable, pending: PendingChanges, app_id: str, *, through: int | None = None
) -> CompactionResult:
    """Fold the pending windows after the table's watermark (up to ``through``) into the table as
    one commit (see the module docstring). A concurrent commit fails it (``CommitFailedError``)."""
    began = time.perf_counter()
    name = pending.table
    watermark = held_window(dt, app_id)
    found = pending.read(watermark, through)
    if found is None:
        if watermark is not None:
            pending.clean(watermark)
        return CompactionResult(name, "nothing_pending", watermark, table_version=dt.version())
    table, rows = found
    windows = tuple(sorted(int(w) for w in pc.unique(rows[PENDING_WINDOW]).to_pylist()))
    last = windows[-1]
    source, read = folded_changes(dt, table, rows)
    commit = commit_properties(app_id, last)
    commit.custom_metadata[COMMIT_METADATA_FOLDED_WINDOWS] = json.dumps(list(windows))
    added = added_columns(dt.schema(), table)
    metrics = merge_into(dt, table, source, True, commit, added, guarded=False)
    version = dt.version()
    log.info(
        "table %s: compacted %s pending window(s) (%s rows, %s keys) as version %s; apply watermark %s",
        name,
        len(windows),
        rows.num_rows,
        source.num_rows,
        version,
        last,
    )
    pending.clean(last)
    return CompactionResult(
        name,
        "compacted",
        last,
        windows,
        version,
        pending_rows=rows.num_rows,
        source_rows=source.num_rows,
        rows_inserted=int(metrics.get("num_target_rows_inserted", 0)),
        rows_updated=int(metrics.get("num_target_rows_updated", 0)),
        rows_deleted=int(metrics.get("num_target_rows_deleted", 0)),
        read_stored_keys=read,
        seconds=time.perf_counter() - began,
        metrics=metrics,
    )


__all__ = [
    "APPLY_MODES",
    "DEFAULT_COMPACT_EVERY",
    "SPREAD_FRACTION",
    "SPREAD_MIN_FILES",
    "CompactionResult",
    "check_apply_mode",
    "compact",
    "compaction_due",
    "folded_changes",
    "keys_spread",
    "sequence_below",
    "stored_sequences",
]
