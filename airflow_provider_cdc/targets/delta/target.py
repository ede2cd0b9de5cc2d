"""Delta Lake target: applies a window's change set to one Delta table per source table (delta-rs).

Guarantees, per table and window:

* **One commit.** A window's apply is a single Delta commit (a MERGE, or the write that creates
  the table on its first window) carrying the app transaction
  ``("airflow-provider-cdc:{pipeline_id}", window_version)`` with ``window_version`` = the
  window's end in µs. Data files written by an apply that dies before its commit are never
  referenced, so a re-run produces the same table. (A window adding columns commits them first,
  see *Schema*.)
* **Idempotence.** If the table's recorded version for the pipeline is at or past the window's,
  the apply is skipped and reported as ``already_applied``; re-running, clearing or backfilling an
  applied window changes nothing.
* **Order.** A stored row changes only for a change with a greater sequence number
  (``source._CHANGE_SEQUENCE_NUMBER > target._change_sequence_number``, sortable strings). An
  ``UPSERT`` with a full image inserts or replaces the row; a partial image updates only its
  present columns (a missing row is inserted with NULLs elsewhere); ``DELETE`` removes the row.
* **No resurrection.** A replay of an applied older window is skipped, and an older window that
  was never applied is refused (windows must be applied in order). A later window can still carry
  changes older than what the table holds (a source delivering late, out-of-order or repeated
  files, a backfill overlapping the changes): a stored row ignores them (order above), but a
  deleted row is absent, so an older ``UPSERT`` of its key would insert it again. With
  ``tombstone_horizon`` set, each ``DELETE`` leaves a tombstone in ``{lake_root}/_tombstones/{table}``
  and an ``UPSERT`` not newer than its key's tombstone is dropped before the MERGE, for windows
  ending within the horizon of the end of the window that applied the delete, whatever the delete's
  source commit time (:mod:`.tombstones`; the tombstone commit comes first,
  tagged with the window, so a crash between the two commits re-runs to the same table). A table
  that has tombstones keeps using them when a later run does not set the option. A table without
  tombstones costs one look for their table, nothing else.
* **Deferred apply.** With ``apply_mode="deferred"`` (or ``"auto"``, the default, for a window whose
  keys are spread over the table's files) the window's decoded change set is appended to
  ``{lake_root}/_pending/{table}`` as one commit with the same app transaction, and the pending
  windows are folded into the table with one MERGE every ``compact_every`` windows or before the
  table's staleness exceeds ``max_staleness`` (:mod:`.compaction`). The table's held window (its
  apply watermark) is then the last folded window; the target holds a window that is pending too.
  :meth:`DeltaLakeTarget.read_latest` reads the latest state before a compaction (:mod:`.merge_on_read`).
* **Schema.** The first window creates the table from the column types (plus
  ``_change_sequence_number`` and ``_commit_timestamp``); new columns are added (nullable) by a
  commit of their own just before the window's MERGE (the compaction's, when deferred), which
  records no window: a row the window leaves unchanged (a change older than it) keeps NULL there,
  and a crash between the two commits leaves the previous window's table with NULL columns, which
  a re-run of the window completes. A changed column type fails naming table and column.

Layout (see ``benchmarks/apply_window.py``): tables are created sorted by key with
``delta.targetFileSize`` (default 8 MiB), and the MERGE runs on a materialised source (up to
``max_materialized_rows``) so that delta-rs prunes target files by the source's key range: a
window whose changes fall in a narrow key range (time-ordered keys) rewrites a few small files
whatever the table's size. A window of keys spread over the whole key space (hash-like keys)
rewrites every file it touches, which is nearly all of them: copy-on-write without deletion
vectors (which delta-rs does not write) costs in proportion to the table. Hash-partitioning by a
key bucket was measured and not kept: such a change set touches every bucket, and the partitions
only added overhead (0.53 s instead of 0.38 s for 10k changes into 1M rows).

What the log records about windows (app transactions, RESTOREs) is :mod:`.log`; the MERGE
and a new table's rows are :mod:`.merge`; deleted keys' tombstones are :mod:`.tombstones`; pending
changes, folding and compaction are :mod:`.pending`, :mod:`.fold` and :mod:`.compaction`.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal

import pyarrow as pa
import pyarrow.dataset as pa_ds
from deltalake import CommitProperties, DeltaTable, QueryBuilder, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from airflow_provider_cdc.changesets.arrow_values import key_column_names
from airflow_provider_cdc.changesets.reader import ChangeSetTable, iter_batches
from airflow_provider_cdc.changesets.typed_batches import TableColumns, to_merge_source
from airflow_provider_cdc.core.contract.target import ALREADY_APPLIED, APPLIED, SKIPPED, TableApplyResult
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.timestamps import from_micros
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.targets.delta.compaction import (
    DEFAULT_COMPACT_EVERY,
    CompactionResult,
    check_apply_mode,
    compact,
    compaction_due,
    keys_spread,
)
from airflow_provider_cdc.targets.delta.log import (
    APP_ID_PREFIX,
    COMMIT_METADATA_APP_ID,
    COMMIT_METADATA_SNAPSHOT,
    COMMIT_METADATA_WINDOW_VERSION,
    LakeError,
    WindowOrderError,
    app_id_for,
    applied_window_detail,
    check_window_version,
    commit_properties,
    find_window_commit,
    held_window,
)
from airflow_provider_cdc.targets.delta.merge import (
    IncompatibleSchemaError,
    added_columns,
    materialized_source,
    merge_into,
    new_table_rows,
)
from airflow_provider_cdc.targets.delta.merge_on_read import latest_batches
from airflow_provider_cdc.targets.delta.pending import PendingChanges, pending_rows
from airflow_provider_cdc.targets.delta.tombstones import (
    TableTombstones,
    change_set_tombstones,
    check_horizon,
    window_tombstones,
)

log = logging.getLogger(__name__)

DEFAULT_TARGET_FILE_SIZE = 8 * 1024 * 1024
DEFAULT_MAX_MATERIALIZED_ROWS = 2_000_000
_DELTA_STATS_COLUMNS = 32
_COLUMN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")  # source columns and ours

_COMMIT_ATTEMPTS = 5


class _ConcurrentCommit(Exception):
    """Raised from a commit that lost to a concurrent writer (the cause tells which)."""


ApplyStatus = Literal["applied", "already_applied", "empty"]
#: The metastore key of this target (its registered name).
DELTA = "delta"
_OUTCOMES = {"applied": APPLIED, "already_applied": ALREADY_APPLIED, "empty": SKIPPED}


@dataclass(frozen=True)
class ApplyResult:
    """Outcome of applying one table's change set for one window."""

    table: str
    status: ApplyStatus
    window_version: int
    table_version: int | None
    source_rows: int = 0
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    created: bool = False
    added_columns: tuple[str, ...] = ()
    detail: str = ""
    #: UPSERTs dropped because a tombstone of their key is as new or newer
    rows_tombstoned: int = 0
    #: deferred apply: the window's rows went to the table's pending changes (at ``pending_version``)
    deferred: bool = False
    pending_version: int | None = None
    #: the windows a compaction after this window folded into the table (its apply watermark: the last)
    compacted_windows: tuple[int, ...] = ()
    metrics: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        result = asdict(self)
        result["added_columns"] = list(self.added_columns)
        result["compacted_windows"] = list(self.compacted_windows)
        result.pop("metrics")
        return result

    def table_result(self) -> TableApplyResult:
        """This outcome as the target protocol's result."""
        return TableApplyResult(
            DELTA,
            self.table,
            self.window_version,
            _OUTCOMES[self.status],
            self.source_rows,
            self.table_version,
            self.detail,
        )


def _row_count_hint(change_set: Any) -> int | None:
    if isinstance(change_set, (pa.Table, pa.RecordBatch)):
        return change_set.num_rows
    if isinstance(change_set, pa_ds.Dataset):
        return change_set.count_rows()
    if isinstance(change_set, (list, tuple)) and all(
        isinstance(b, (pa.Table, pa.RecordBatch)) for b in change_set
    ):
        return sum(b.num_rows for b in change_set)
    return None


def _readable_twice(change_set: Any, table: str) -> Any:
    """``change_set`` if it can be read twice (its tombstones, then the MERGE), else its batches in memory."""
    if _row_count_hint(change_set) is not None:  # a Table, batch, Dataset or list of them
        return change_set
    log.info("table %s: reading a one-pass change set into memory: its tombstones are committed first", table)
    return list(iter_batches(change_set))


def _record_tombstones(
    tombstones: TableTombstones, window: pa.Table, app_id: str, window_version: int
) -> None:
    """Commit the window's tombstones before the table's own commit (a concurrent commit starts over)."""
    created = tombstones.delta_table is None
    try:
        tombstones.record_window(window, app_id, window_version)
    except DeltaError as exc:
        if isinstance(exc, CommitFailedError) or (
            created and DeltaTable.is_deltatable(tombstones.uri, storage_options=tombstones.storage_options)
        ):
            raise _ConcurrentCommit from exc
        raise LakeError(
            f"table {tombstones.table.table!r}: window {window_version}: committing its tombstones to "
            f"{tombstones.uri!r} failed ({exc}); nothing was applied to the table"
        ) from exc


def _with_tombstoned(result: ApplyResult, dropped: int) -> ApplyResult:
    """``result`` counting the UPSERTs dropped for their keys' tombstones (logged when any were)."""
    if not dropped:
        return result
    log.info(
        "table %s: window %s: %s upsert(s) dropped: a tombstone of their key is as new or newer",
        result.table,
        result.window_version,
        dropped,
    )
    return replace(result, rows_tombstoned=dropped)


class DeltaLakeTarget:
    """One Delta table per source table at ``{lake_root}/{table}``, local or on object storage.

    ``tombstone_horizon``: keep a tombstone per deleted key for this long after the end of the window
    that applied the delete, so that an older ``UPSERT`` arriving in a later window does not insert
    the row again (see the module docstring); ``None`` (the default) keeps none, unless the table has
    tombstones already. A horizon that is not positive (0 included) is refused.

    ``apply_mode``: ``"immediate"`` merges each window into the table; ``"deferred"`` appends each
    window to the table's pending changes (``{lake_root}/_pending/{table}``) and folds them into the
    table with one MERGE when ``compact_every`` windows are pending or the table's staleness would
    exceed ``max_staleness`` by the next window (:mod:`.compaction`); ``"auto"`` (the default) defers
    the windows whose keys are spread over the table's files. A table with pending windows keeps
    deferring; tombstones and change sets too large to materialise apply immediately (after folding
    what is pending). :meth:`read_latest` reads the latest state before a compaction.

    ``storage_options`` are delta-rs object-store options (for ``gs://``:
    ``google_service_account_key`` with the key JSON, ``google_service_account`` with a key file
    path, or ``google_application_credentials``); they are passed to delta-rs only and never
    logged or shown in ``repr``.

    Implements :class:`~airflow_provider_cdc.core.contract.target.Target` (window versions are window ends
    in µs, recorded by each commit's app transaction) and is the row source partial images are
    completed from (:mod:`airflow_provider_cdc.targets.images`).
    """

    name = DELTA

    def __init__(
        self,
        lake_root: str,
        storage_options: Mapping[str, str] | None = None,
        *,
        target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
        max_materialized_rows: int = DEFAULT_MAX_MATERIALIZED_ROWS,
        tombstone_horizon: timedelta | None = None,
        apply_mode: str = "auto",
        max_staleness: timedelta | None = None,
        compact_every: int | None = DEFAULT_COMPACT_EVERY,
    ) -> None:
        if not isinstance(lake_root, str) or not lake_root.strip():
            raise ValueError("lake_root must be a non-empty path or URI")
        if "://" in lake_root and not lake_root.startswith("file://"):
            self.lake_root = lake_root.rstrip("/")
        else:
            local = lake_root[len("file://") :] if lake_root.startswith("file://") else lake_root
            self.lake_root = os.path.abspath(local)
        self._storage_options = {str(k): str(v) for k, v in (storage_options or {}).items()} or None
        self.target_file_size = int(target_file_size)
        self.max_materialized_rows = int(max_materialized_rows)
        self.tombstone_horizon = check_horizon(tombstone_horizon)
        self.apply_mode = check_apply_mode(apply_mode)
        if self.apply_mode == "deferred" and self.tombstone_horizon is not None:
            raise ValueError("apply_mode='deferred' keeps no tombstones: use it without tombstone_horizon")
        if max_staleness is not None and (
            not isinstance(max_staleness, timedelta) or max_staleness <= timedelta(0)
        ):
            raise ValueError(f"max_staleness must be a positive timedelta or None, got {max_staleness!r}")
        if compact_every is not None and (isinstance(compact_every, bool) or int(compact_every) < 1):
            raise ValueError(f"compact_every must be a positive number of windows, got {compact_every!r}")
        self.max_staleness = max_staleness
        self.compact_every = None if compact_every is None else int(compact_every)

    def __repr__(self) -> str:
        keys = sorted(self._storage_options or {})
        return f"DeltaLakeTarget({self.lake_root!r}, storage_options=<{len(keys)} option(s): {keys}>)"

    # ------------------------------------------------------------------ table access

    def table_uri(self, table: str) -> str:
        return f"{self.lake_root}/{validate_identifier(table, 'table')}"

    def _load(self, table: str) -> DeltaTable | None:
        try:
            return DeltaTable(self.table_uri(table), storage_options=self._storage_options)
        except TableNotFoundError:
            return None

    def exists(self, table: str) -> bool:
        return self._load(table) is not None

    def open(self, table: str) -> DeltaTable:
        """The table's current snapshot; a missing table is an error naming it."""
        dt = self._load(table)
        if dt is None:
            raise LakeError(f"table {table!r} does not exist under {self.lake_root!r}")
        return dt

    def key_columns(self, table: str) -> list[str]:
        """The table's primary-key columns, as its field metadata marks them (also under the key
        earlier versions wrote)."""
        return key_column_names(pa.schema(self.open(table).schema().to_arrow()))

    def read_table(self, table: str, columns: list[str] | None = None) -> pa.Table:
        """The table's current rows as a pyarrow Table (all columns, or ``columns`` in that order).

        Read by delta-rs itself (DataFusion), not through a Python file system, and cast to the
        table's schema.
        """
        dt = self.open(table)
        schema = pa.schema(dt.schema().to_arrow())
        selected = list(schema.names) if columns is None else list(columns)
        unknown = [c for c in selected if c not in schema.names or not _COLUMN_NAME.match(c)]
        if unknown:
            raise LakeError(f"table {table!r} has no column(s) {unknown} that can be read by name")
        projection = ", ".join(f'"{c}"' for c in selected)
        query = f"SELECT {projection} FROM lake_table"  # noqa: S608 - names checked just above
        reader = QueryBuilder().register("lake_table", dt).execute(query)
        result = pa.RecordBatchReader.from_stream(reader).read_all()
        return result.cast(pa.schema([schema.field(c) for c in selected]))

    def applied_window_version(self, table: str, pipeline_id: str) -> int | None:
        """The last window version of ``pipeline_id`` the target holds for the table, in the table or
        in its pending changes (``None`` if none); a window whose commit a RESTORE undid is not held
        (see :func:`.delta_log.held_window`)."""
        dt = self._load(table)
        if dt is None:
            return None
        app_id = app_id_for(pipeline_id)
        held = held_window(dt, app_id)
        appended = self.pending(table).appended_window(app_id)
        if appended is not None and (held is None or appended > held):
            return appended
        return held

    def compacted_window_version(self, table: str, pipeline_id: str) -> int | None:
        """The last window version of ``pipeline_id`` the table itself holds: its apply watermark."""
        dt = self._load(table)
        return None if dt is None else held_window(dt, app_id_for(pipeline_id))

    def pending(self, table: str) -> PendingChanges:
        """The table's pending changes (deferred apply)."""
        return PendingChanges.open(self.lake_root, table, self._storage_options)

    def pending_windows(self, table: str, pipeline_id: str) -> list[int]:
        """The windows appended to the table's pending changes and not yet folded into it."""
        return self.pending(table).windows(self.compacted_window_version(table, pipeline_id))

    def compact(self, table: str, pipeline_id: str, *, through: int | None = None) -> CompactionResult:
        """Fold the table's pending windows (up to ``through``) into it with one MERGE
        (:mod:`.compaction`)."""
        app_id = app_id_for(pipeline_id)
        for attempt in range(1, _COMMIT_ATTEMPTS + 1):
            dt = self.open(table)
            try:
                return compact(dt, self.pending(table), app_id, through=through)
            except CommitFailedError as exc:
                if attempt == _COMMIT_ATTEMPTS:
                    raise LakeError(
                        f"table {table!r}: compaction lost to concurrent commits ({exc}); run it again"
                    ) from exc
                log.info("table %s: concurrent commit during compaction (%s); compacting again", table, exc)
        raise AssertionError("unreachable")  # pragma: no cover

    def latest_batches(self, table: str, pipeline_id: str | None = None) -> pa.RecordBatchReader:
        """The table's latest state, pending windows applied (merge-on-read, :mod:`.merge_on_read`),
        streamed; ``pipeline_id`` defaults to the pipeline that last appended to the pending changes."""
        dt = self.open(table)
        pending = self.pending(table)
        app_id = app_id_for(pipeline_id) if pipeline_id is not None else pending.last_app_id()
        return latest_batches(dt, pending, app_id)

    def read_latest(self, table: str, pipeline_id: str | None = None) -> pa.Table:
        """:meth:`latest_batches` as one table (equal to :meth:`read_table` after a compaction)."""
        return self.latest_batches(table, pipeline_id).read_all()

    def applied_window(self, table: str, pipeline: str) -> int | None:
        """The protocol's name of :meth:`applied_window_version`."""
        return self.applied_window_version(table, pipeline)

    def apply_watermark(self, table: str, pipeline: str) -> datetime | None:
        """The end of the last window of ``pipeline`` the table holds (``None``: none)."""
        held = self.compacted_window_version(table, pipeline)
        return None if held is None else from_micros(held)

    def window_result(self, table: str, pipeline: str, window: Window) -> TableApplyResult | None:
        """The table version that holds ``window`` (see :meth:`window_commit_version`); ``None`` when
        the table does not hold it. ``rows`` is 0: the change set counts them."""
        version = self.window_commit_version(table, pipeline, window.end_micros)
        if version is not None:
            return TableApplyResult(DELTA, table, window.end_micros, ALREADY_APPLIED, 0, version)
        pending = self.pending(table)
        app_id = app_id_for(pipeline)
        appended = pending.appended_window(app_id)
        if pending.delta_table is None or appended is None or appended < window.end_micros:
            return None
        found, _snapshot, _complete = find_window_commit(pending.delta_table, app_id, window.end_micros)
        if found is None:
            return None
        detail = f"pending: appended in version {found} of {pending.uri}, not yet compacted"
        return TableApplyResult(DELTA, table, window.end_micros, ALREADY_APPLIED, 0, None, detail)

    def apply_window(self, change_set: ChangeSetTable, pipeline: str, window: Window) -> TableApplyResult:
        """Apply one table's change set of ``window`` (:meth:`apply_change_set`)."""
        return self.apply_change_set(
            change_set.name, change_set.dataset, change_set.column_types(), pipeline, window.end_micros
        ).table_result()

    def current_rows(self, table: str) -> pa_ds.Dataset | None:
        """The table's current rows (with ``_change_sequence_number``); ``None`` when it is missing.

        With pending windows, their latest state (merge-on-read) as a dataset that is read once.
        """
        dt = self._load(table)
        if dt is None:
            return None
        pending = self.pending(table)
        app_id = pending.last_app_id()
        if app_id is None or not pending.windows(held_window(dt, app_id)):
            return dt.to_pyarrow_dataset()
        return pa_ds.dataset(latest_batches(dt, pending, app_id))

    def window_commit_version(self, table: str, pipeline_id: str, window_version: int) -> int | None:
        """The table version whose commit applied the window (or the snapshot load covering it);
        None when the table does not hold the window, or its commit is no longer in the log."""
        dt = self._load(table)
        app_id = app_id_for(pipeline_id)
        if dt is None:
            return None
        applied = held_window(dt, app_id)
        if applied is None or applied < window_version:
            return None
        found, snapshot, _complete = find_window_commit(dt, app_id, window_version)
        return found if found is not None else snapshot

    def optimize(self, table: str, *, z_order: bool = False) -> dict[str, Any]:
        """Compact small files, or rewrite the table Z-ordered by its key columns.

        A separate commit that changes no rows; run it between windows (e.g. daily) to keep the
        number of files, and so the cost of each MERGE, in check.
        """
        dt = self.open(table)
        if not z_order:
            return dt.optimize.compact(target_size=self.target_file_size)
        keys = key_column_names(pa.schema(dt.schema().to_arrow()))
        if not keys:
            raise LakeError(f"table {table!r}: key columns unknown, cannot Z-order")
        return dt.optimize.z_order(keys, target_size=self.target_file_size)

    # ------------------------------------------------------------------ apply

    def apply_change_set(
        self,
        table_name: str,
        change_set: Any,
        column_types: Any,
        pipeline_id: str,
        window_version: int,
    ) -> ApplyResult:
        """Apply one table's change set for a window as one Delta commit (see module docstring).

        ``change_set`` is a pyarrow Table, RecordBatch, RecordBatchReader, Dataset or iterable of
        batches with the change-set columns; ``column_types`` the table's ``column_types``.
        """
        table = TableColumns.from_column_types(table_name, column_types)
        app_id = app_id_for(pipeline_id)
        window_version = check_window_version(window_version)
        rows_hint = _row_count_hint(change_set)
        for attempt in range(1, _COMMIT_ATTEMPTS + 1):
            try:
                return self._apply(table, change_set, rows_hint, app_id, window_version)
            except _ConcurrentCommit as exc:
                # Another writer committed between our snapshot and our commit. Start over from
                # the new snapshot: the guard then sees whether it applied this very window.
                if rows_hint is None or attempt == _COMMIT_ATTEMPTS:
                    raise LakeError(
                        f"table {table_name!r}: window {window_version}: another writer committed to the "
                        f"table during the apply ({exc.__cause__}); run the window again"
                    ) from exc.__cause__
                log.info("table %s: concurrent commit (%s); applying again", table_name, exc.__cause__)
        raise AssertionError("unreachable")  # pragma: no cover

    def _apply(
        self, table: TableColumns, change_set: Any, rows_hint: int | None, app_id: str, window_version: int
    ) -> ApplyResult:
        name = table.table
        dt = self._load(name)
        if rows_hint == 0:  # nothing to apply, in any order
            return ApplyResult(name, "empty", window_version, dt.version() if dt else None)
        added: tuple[str, ...] = ()
        pending: PendingChanges | None = None
        watermark: int | None = None
        unfolded: list[int] = []
        if dt is not None:
            skipped = self._window_guard(dt, name, app_id, window_version)
            if skipped is not None:
                return skipped
            added = added_columns(dt.schema(), table)
            pending = self.pending(name)
            if pending.exists:
                watermark = held_window(dt, app_id)
                appended = pending.appended_window(app_id)
                if appended is not None and window_version <= appended:
                    return self._already_pending(dt, pending, name, app_id, window_version, watermark)
                unfolded = pending.windows(watermark)

        materialize = rows_hint is not None and rows_hint <= self.max_materialized_rows
        tombstones = TableTombstones.open(
            self.lake_root, table, self.tombstone_horizon, self._storage_options
        )
        dropped: list[int] = []  # UPSERTs dropped for their keys' tombstones (counted as a stream is read)
        source: pa.Table | pa.RecordBatchReader
        decoded = materialized_source(change_set, table) if materialize else None
        if decoded is not None and decoded.num_rows == 0:
            return ApplyResult(name, "empty", window_version, dt.version() if dt else None)
        if dt is not None and pending is not None:
            if decoded is not None and tombstones is None and self._defers(dt, table, decoded, unfolded):
                return self._append_pending(
                    dt, pending, table, decoded, app_id, window_version, watermark, unfolded
                )
            if unfolded:  # this window applies immediately: what is pending goes first
                log.info("table %s: folding %s pending window(s) first", name, len(unfolded))
                try:
                    compact(dt, pending, app_id)
                except CommitFailedError as exc:
                    raise _ConcurrentCommit from exc
                dt = self.open(name)
                added = added_columns(dt.schema(), table)
        if decoded is not None:
            source = decoded
            if tombstones is not None:
                kept, count = tombstones.drop_tombstoned(source, window_version)
                dropped.append(count)
                _record_tombstones(
                    tombstones, window_tombstones(source, table, window_version), app_id, window_version
                )
                source = kept
        else:
            if tombstones is not None:
                change_set = _readable_twice(change_set, name)
                _record_tombstones(
                    tombstones,
                    change_set_tombstones(change_set, table, window_version),
                    app_id,
                    window_version,
                )
            batches = (to_merge_source(batch, table) for batch in iter_batches(change_set))
            if tombstones is not None:
                batches = tombstones.drop_tombstoned_batches(batches, window_version, dropped)
            source = pa.RecordBatchReader.from_batches(table.source_schema(), batches)

        commit = commit_properties(app_id, window_version)
        if dt is None:
            try:
                result = self._create(table, source, commit, window_version)
            except DeltaError as exc:
                if isinstance(exc, CommitFailedError) or self._load(name) is not None:
                    raise _ConcurrentCommit from exc  # the table was created meanwhile
                raise
        else:
            try:
                result = self._merge(dt, table, source, materialize, commit, window_version, added)
            except CommitFailedError as exc:
                raise _ConcurrentCommit from exc
        return _with_tombstoned(result, sum(dropped))

    def _defers(self, dt: DeltaTable, table: TableColumns, source: pa.Table, unfolded: list[int]) -> bool:
        """Whether the window goes to the pending changes: deferred mode, windows pending already (in
        ``immediate`` mode then folded at once), or ``auto`` and keys spread over the table's files."""
        if unfolded or self.apply_mode == "deferred":
            return True
        return self.apply_mode == "auto" and keys_spread(dt, source, table)

    def _append_pending(
        self,
        dt: DeltaTable,
        pending: PendingChanges,
        table: TableColumns,
        source: pa.Table,
        app_id: str,
        window_version: int,
        watermark: int | None,
        unfolded: list[int],
    ) -> ApplyResult:
        """Append the window's decoded change set to the pending changes as one commit, then compact
        when due."""
        name = table.table
        created = not pending.exists
        if created:
            watermark = held_window(dt, app_id)
        try:
            version = pending.append(pending_rows(source, table, window_version), app_id, window_version)
        except DeltaError as exc:
            if isinstance(exc, CommitFailedError) or (created and self.pending(name).exists):
                raise _ConcurrentCommit from exc
            raise
        log.info(
            "table %s: window %s appended to its pending changes as version %s (%s rows, %s pending)",
            name,
            window_version,
            version,
            source.num_rows,
            len(unfolded) + 1,
        )
        result = ApplyResult(
            name,
            "applied",
            window_version,
            dt.version(),
            source_rows=source.num_rows,
            deferred=True,
            pending_version=version,
        )
        return self._compact_if_due(dt, pending, result, app_id, watermark, [*unfolded, window_version])

    def _already_pending(
        self,
        dt: DeltaTable,
        pending: PendingChanges,
        name: str,
        app_id: str,
        window_version: int,
        watermark: int | None,
    ) -> ApplyResult:
        """A window the pending changes hold already (a re-run): skipped, then compacted if due; a
        never appended window older than the pending ones is refused (windows apply in order)."""
        assert pending.delta_table is not None
        found, _snapshot, complete = find_window_commit(pending.delta_table, app_id, window_version)
        if found is None and complete and window_version != pending.appended_window(app_id):
            raise WindowOrderError(
                f"Delta table {name!r}: window version {window_version} was never applied and is older than "
                f"the window version {pending.appended_window(app_id)} its pending changes hold (app id "
                f"{app_id!r}); windows must be applied in order, so this window cannot be applied any more"
            )
        detail = f"window {window_version} is in the table's pending changes" + (
            f" (appended in version {found})" if found is not None else ""
        )
        log.info("table %s: %s; skipping the append", name, detail)
        result = ApplyResult(
            name,
            "already_applied",
            window_version,
            dt.version(),
            detail=detail,
            deferred=True,
            pending_version=found,
        )
        return self._compact_if_due(dt, pending, result, app_id, watermark, pending.windows(watermark))

    def _compact_if_due(
        self,
        dt: DeltaTable,
        pending: PendingChanges,
        result: ApplyResult,
        app_id: str,
        watermark: int | None,
        unfolded: list[int],
    ) -> ApplyResult:
        due = self.apply_mode == "immediate" or compaction_due(
            unfolded, watermark, result.window_version, self.compact_every, self.max_staleness
        )
        if not due or not unfolded:
            return result
        try:
            done = compact(dt, pending, app_id)
        except CommitFailedError as exc:
            raise _ConcurrentCommit from exc
        return replace(
            result,
            table_version=done.table_version,
            compacted_windows=done.folded_windows,
            rows_inserted=done.rows_inserted,
            rows_updated=done.rows_updated,
            rows_deleted=done.rows_deleted,
        )

    def _window_guard(
        self, dt: DeltaTable, table: str, app_id: str, window_version: int
    ) -> ApplyResult | None:
        detail = applied_window_detail(dt, table, app_id, window_version)
        if detail is None:
            return None
        log.info("table %s: %s; skipping", table, detail)
        return ApplyResult(table, "already_applied", window_version, dt.version(), detail=detail)

    def _write_new_table(
        self, table: TableColumns, data: pa.Table | pa.RecordBatchReader, commit: CommitProperties
    ) -> int:
        """Create the table holding ``data`` (table schema) in one commit; return its version."""
        names = table.table_schema().names
        configuration = {"delta.targetFileSize": str(self.target_file_size)}
        last_key = max(names.index(c.name) for c in table.keys)
        if last_key >= _DELTA_STATS_COLUMNS:
            configuration["delta.dataSkippingNumIndexedCols"] = str(last_key + 1)
        write_deltalake(
            self.table_uri(table.table),
            data,
            mode="error",
            name=table.table,
            configuration=configuration,
            storage_options=self._storage_options,
            commit_properties=commit,
        )
        return self.open(table.table).version()

    def bulk_load(
        self,
        table_name: str,
        column_types: Any,
        rows: pa.Table | pa.RecordBatchReader,
        pipeline_id: str,
        window_version: int,
    ) -> ApplyResult:
        """Create a table from typed rows (an initial snapshot) as one commit tagged with a window.

        ``rows`` has the table's columns (Arrow types of ``lake.arrow_values``) plus
        ``_change_sequence_number`` and ``_commit_timestamp``; a Table is sorted by key first,
        a RecordBatchReader is written as it streams (sort it by key for the best layout). Windows
        after ``window_version`` then apply on top; earlier ones count as applied (the snapshot
        holds their effects). Fails if the table exists.
        """
        table = TableColumns.from_column_types(table_name, column_types)
        commit = commit_properties(
            app_id_for(pipeline_id), check_window_version(window_version), snapshot=True
        )
        schema = table.table_schema()
        data: pa.Table | pa.RecordBatchReader
        if isinstance(rows, pa.Table):
            data = rows.select(schema.names).cast(schema).sort_by([(c.name, "ascending") for c in table.keys])
        else:
            reader = rows
            data = pa.RecordBatchReader.from_batches(
                schema, (batch.select(schema.names).cast(schema) for batch in reader)
            )
        if self.exists(table_name):
            raise LakeError(f"table {table_name!r} already exists under {self.lake_root!r}")
        version = self._write_new_table(table, data, commit)
        loaded = self.open(table_name).count()
        return ApplyResult(table_name, "applied", window_version, version, rows_inserted=loaded, created=True)

    def _create(
        self,
        table: TableColumns,
        source: pa.Table | pa.RecordBatchReader,
        commit: CommitProperties,
        window_version: int,
    ) -> ApplyResult:
        data, counts = new_table_rows(source, table)
        version = self._write_new_table(table, data, commit)
        log.info(
            "table %s: created at version %s by window %s (%s rows)",
            table.table,
            version,
            window_version,
            counts["inserted"],
        )
        return ApplyResult(
            table.table,
            "applied",
            window_version,
            version,
            source_rows=counts["source"],
            rows_inserted=counts["inserted"],
            created=True,
        )

    def _merge(
        self,
        dt: DeltaTable,
        table: TableColumns,
        source: pa.Table | pa.RecordBatchReader,
        materialized: bool,
        commit: CommitProperties,
        window_version: int,
        added: tuple[str, ...],
    ) -> ApplyResult:
        metrics = merge_into(dt, table, source, materialized, commit, added)
        version = dt.version()  # advanced by our own commit
        log.info(
            "table %s: window %s applied as version %s (%s inserted, %s updated, %s deleted)",
            table.table,
            window_version,
            version,
            metrics.get("num_target_rows_inserted"),
            metrics.get("num_target_rows_updated"),
            metrics.get("num_target_rows_deleted"),
        )
        return ApplyResult(
            table.table,
            "applied",
            window_version,
            version,
            source_rows=int(metrics.get("num_source_rows", 0)),
            rows_inserted=int(metrics.get("num_target_rows_inserted", 0)),
            rows_updated=int(metrics.get("num_target_rows_updated", 0)),
            rows_deleted=int(metrics.get("num_target_rows_deleted", 0)),
            added_columns=added,
            metrics=metrics,
        )


__all__ = [
    "APP_ID_PREFIX",
    "COMMIT_METADATA_APP_ID",
    "COMMIT_METADATA_SNAPSHOT",
    "COMMIT_METADATA_WINDOW_VERSION",
    "DEFAULT_MAX_MATERIALIZED_ROWS",
    "DEFAULT_TARGET_FILE_SIZE",
    "DELTA",
    "ApplyResult",
    "DeltaLakeTarget",
    "IncompatibleSchemaError",
    "LakeError",
    "WindowOrderError",
    "app_id_for",
    "materialized_source",
]
