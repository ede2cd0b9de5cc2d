"""Delta Lake target: applies a window's change set to one Delta table per source table (delta-rs).

Guarantees, per table and window:

* **One commit.** A window's apply is a single Delta commit (a MERGE, or the write that creates
  the table on its first window) carrying the app transaction
  ``("airflow-provider-cdc:{pipeline_id}", window_version)`` with ``window_version`` = the
  window's end in µs. Data files written by an apply that dies before its commit are never
  referenced, so a re-run produces the same table.
* **Idempotence.** If the table's recorded version for the pipeline is at or past the window's,
  the apply is skipped and reported as ``already_applied``; re-running, clearing or backfilling an
  applied window changes nothing.
* **Order.** A stored row changes only for a change with a greater sequence number
  (``source._CHANGE_SEQUENCE_NUMBER > target._change_sequence_number``, sortable strings). An
  ``UPSERT`` with a full image inserts or replaces the row; a partial image updates only its
  present columns (a missing row is inserted with NULLs elsewhere); ``DELETE`` removes the row.
* **No resurrection.** A deleted row leaves no tombstone; what stops an older window from bringing
  it back is the version guard: a replay of an applied older window is skipped, and an older
  window that was never applied is refused (windows must be applied in order).
* **Schema.** The first window creates the table from the column types (plus
  ``_change_sequence_number`` and ``_commit_timestamp``); new columns are added (nullable) in the
  window's commit; a changed column type fails naming table and column.

Layout (see ``benchmarks/apply_window.py``): tables are created sorted by key with
``delta.targetFileSize`` (default 8 MiB), and the MERGE runs on a materialised source (up to
``max_materialized_rows``) so that delta-rs prunes target files by the source's key range: a
window whose changes fall in a narrow key range (time-ordered keys) rewrites a few small files
whatever the table's size. A window of keys spread over the whole key space (hash-like keys)
rewrites every file it touches, which is nearly all of them: copy-on-write without deletion
vectors (which delta-rs does not write) costs in proportion to the table. Hash-partitioning by a
key bucket was measured and not kept: such a change set touches every bucket, and the partitions
only added overhead (0.53 s instead of 0.38 s for 10k changes into 1M rows).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pa_ds
from deltalake import CommitProperties, DeltaTable, QueryBuilder, Transaction, write_deltalake
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from airflow_provider_cdc.domain.identifiers import validate_identifier, validate_pipeline_id
from airflow_provider_cdc.domain.spanner_types import FIELD_METADATA_PRIMARY_KEY
from airflow_provider_cdc.lake.change_set import (
    SOURCE_CHANGE_TYPE,
    SOURCE_COMMIT_TIMESTAMP,
    SOURCE_FULL_IMAGE,
    SOURCE_KEYS_JSON,
    SOURCE_PRESENT,
    SOURCE_SEQUENCE,
    ChangeSetError,
    TableColumns,
    iter_batches,
    to_merge_source,
    verbatim_key,
)

log = logging.getLogger(__name__)

APP_ID_PREFIX = "airflow-provider-cdc:"
COMMIT_METADATA_APP_ID = "airflow-provider-cdc.appId"
COMMIT_METADATA_WINDOW_VERSION = "airflow-provider-cdc.windowVersion"
COMMIT_METADATA_SNAPSHOT = "airflow-provider-cdc.snapshot"
DEFAULT_TARGET_FILE_SIZE = 8 * 1024 * 1024
DEFAULT_MAX_MATERIALIZED_ROWS = 2_000_000
_DELTA_STATS_COLUMNS = 32
_COLUMN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")  # source columns and ours
# Merge-source flags "this row's image carries column X"; source columns start with a letter.
_CARRIES_PREFIX = "_carries_"


_COMMIT_ATTEMPTS = 5


class _ConcurrentCommit(Exception):
    """Raised from a commit that lost to a concurrent writer (the cause tells which)."""


class LakeError(RuntimeError):
    """The lake refuses an apply (order, schema); the message names table and window."""


class WindowOrderError(LakeError):
    """A window older than the table's applied window that was never applied to it."""


class IncompatibleSchemaError(LakeError):
    """A column whose type in the change set differs from the stored type."""


ApplyStatus = Literal["applied", "already_applied", "empty"]


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
    metrics: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        result = asdict(self)
        result["added_columns"] = list(self.added_columns)
        result.pop("metrics")
        return result


def app_id_for(pipeline_id: str) -> str:
    """The Delta app transaction id of a pipeline (the id validated first)."""
    return APP_ID_PREFIX + validate_pipeline_id(pipeline_id)


def _check_window_version(window_version: Any) -> int:
    if isinstance(window_version, bool) or not isinstance(window_version, int) or window_version <= 0:
        raise ValueError(
            f"window_version must be a positive integer (window end in µs), got {window_version!r}"
        )
    return window_version


def _quote(name: str) -> str:
    return f"`{name}`"


def _strip_nullability(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip_nullability(v)
            for k, v in value.items()
            if k not in ("containsNull", "nullable", "metadata", "valueContainsNull")
        }
    if isinstance(value, list):
        return [_strip_nullability(v) for v in value]
    return value


def _delta_types(schema: DeltaSchema) -> dict[str, Any]:
    return {f["name"]: _strip_nullability(f["type"]) for f in json.loads(schema.to_json())["fields"]}


def _type_text(delta_type: Any) -> str:
    return delta_type if isinstance(delta_type, str) else json.dumps(delta_type, sort_keys=True)


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


class DeltaLakeTarget:
    """One Delta table per source table at ``{lake_root}/{table}``, local or on object storage.

    ``storage_options`` are delta-rs object-store options (for ``gs://``:
    ``google_service_account_key`` with the key JSON, ``google_service_account`` with a key file
    path, or ``google_application_credentials``); they are passed to delta-rs only and never
    logged or shown in ``repr``.
    """

    def __init__(
        self,
        lake_root: str,
        storage_options: Mapping[str, str] | None = None,
        *,
        target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
        max_materialized_rows: int = DEFAULT_MAX_MATERIALIZED_ROWS,
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
        """The last window version of ``pipeline_id`` the table holds (``None`` if none); a window
        whose commit a RESTORE undid is not held (see :func:`_held_window`)."""
        dt = self._load(table)
        return None if dt is None else _held_window(dt, app_id_for(pipeline_id))

    def window_commit_version(self, table: str, pipeline_id: str, window_version: int) -> int | None:
        """The table version whose commit applied the window (or the snapshot load covering it);
        None when the table does not hold the window, or its commit is no longer in the log."""
        dt = self._load(table)
        app_id = app_id_for(pipeline_id)
        if dt is None:
            return None
        applied = _held_window(dt, app_id)
        if applied is None or applied < window_version:
            return None
        found, snapshot, _complete = _find_window_commit(dt, app_id, window_version)
        return found if found is not None else snapshot

    def optimize(self, table: str, *, z_order: bool = False) -> dict[str, Any]:
        """Compact small files, or rewrite the table Z-ordered by its key columns.

        A separate commit that changes no rows; run it between windows (e.g. daily) to keep the
        number of files, and so the cost of each MERGE, in check.
        """
        dt = self.open(table)
        if not z_order:
            return dt.optimize.compact(target_size=self.target_file_size)
        keys = [
            f.name
            for f in pa.schema(dt.schema().to_arrow())
            if (f.metadata or {}).get(FIELD_METADATA_PRIMARY_KEY.encode()) == b"true"
        ]
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
        window_version = _check_window_version(window_version)
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
        if dt is not None:
            skipped = self._window_guard(dt, name, app_id, window_version)
            if skipped is not None:
                return skipped
            added = self._check_schema(dt, table)

        materialize = rows_hint is not None and rows_hint <= self.max_materialized_rows
        source: pa.Table | pa.RecordBatchReader
        if materialize:
            source = materialized_source(change_set, table)
            if source.num_rows == 0:
                return ApplyResult(name, "empty", window_version, dt.version() if dt else None)
        else:
            batches = (to_merge_source(batch, table) for batch in iter_batches(change_set))
            source = pa.RecordBatchReader.from_batches(table.source_schema(), batches)

        commit = self._commit_properties(app_id, window_version)
        if dt is None:
            try:
                return self._create(table, source, commit, window_version)
            except DeltaError as exc:
                if isinstance(exc, CommitFailedError) or self._load(name) is not None:
                    raise _ConcurrentCommit from exc  # the table was created meanwhile
                raise
        try:
            return self._merge(dt, table, source, materialize, commit, window_version, added)
        except CommitFailedError as exc:
            raise _ConcurrentCommit from exc

    def _window_guard(
        self, dt: DeltaTable, table: str, app_id: str, window_version: int
    ) -> ApplyResult | None:
        applied = dt.transaction_version(app_id)
        if applied is None or window_version > applied:
            return None
        # A RESTORE keeps the app transaction versions of the commits it undoes: ask the log.
        applied = _held_window(dt, app_id)
        if applied is None or window_version > applied:
            log.info("table %s: window %s was undone by a restore; applying it again", table, window_version)
            return None
        version = dt.version()
        if window_version == applied:
            detail = f"window {window_version} is the table's last applied window"
            log.info("table %s: %s; skipping", table, detail)
            return ApplyResult(table, "already_applied", window_version, version, detail=detail)
        found, snapshot, complete = _find_window_commit(dt, app_id, window_version)
        if found is not None:
            detail = f"window {window_version} was applied in table version {found}"
        elif snapshot is not None:
            detail = f"window {window_version} is covered by the snapshot loaded in table version {snapshot}"
        elif not complete:
            detail = (
                f"window {window_version} is older than the applied window {applied}; its commit is no "
                "longer in the retained log, so it is taken as applied"
            )
        else:
            raise WindowOrderError(
                f"table {table!r}: window version {window_version} was never applied and is older than the "
                f"table's applied window version {applied} (app id {app_id!r}); windows must be applied in "
                "order, so this window cannot be applied any more"
            )
        log.info("table %s: %s; skipping", table, detail)
        return ApplyResult(table, "already_applied", window_version, version, detail=detail)

    def _check_schema(self, dt: DeltaTable, table: TableColumns) -> tuple[str, ...]:
        stored = _delta_types(dt.schema())
        expected = _delta_types(DeltaSchema.from_arrow(table.table_schema()))
        added = []
        for column, delta_type in expected.items():
            if column not in stored:
                added.append(column)
            elif stored[column] != delta_type:
                raise IncompatibleSchemaError(
                    f"table {table.table!r}: column {column!r} is stored as {_type_text(stored[column])} "
                    f"but the change set has {_type_text(delta_type)}; an incompatible type change "
                    "needs the table to be rebuilt"
                )
        return tuple(added)

    def _commit_properties(
        self, app_id: str, window_version: int, *, snapshot: bool = False
    ) -> CommitProperties:
        metadata = {COMMIT_METADATA_APP_ID: app_id, COMMIT_METADATA_WINDOW_VERSION: str(window_version)}
        if snapshot:
            metadata[COMMIT_METADATA_SNAPSHOT] = "true"
        # No silent retry at a later version: a concurrent commit fails ours, and the apply starts
        # over from the new snapshot (delta-rs would otherwise re-commit a table creation as an
        # append, and does not treat an equal app transaction as a conflict).
        return CommitProperties(
            app_transactions=[Transaction(app_id, window_version)],
            custom_metadata=metadata,
            max_commit_retries=0,
        )

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

        ``rows`` has the table's columns (Arrow types of ``domain.spanner_types``) plus
        ``_change_sequence_number`` and ``_commit_timestamp``; a Table is sorted by key first,
        a RecordBatchReader is written as it streams (sort it by key for the best layout). Windows
        after ``window_version`` then apply on top; earlier ones count as applied (the snapshot
        holds their effects). Fails if the table exists.
        """
        table = TableColumns.from_column_types(table_name, column_types)
        commit = self._commit_properties(
            app_id_for(pipeline_id), _check_window_version(window_version), snapshot=True
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
        target_schema = table.table_schema()
        names = target_schema.names
        keys = [c.name for c in table.keys]
        data: pa.Table | pa.RecordBatchReader
        counts = {"source": 0, "inserted": 0}
        if isinstance(source, pa.Table):
            upserts = source.filter(pc.equal(source[SOURCE_CHANGE_TYPE], "UPSERT"))
            data = upserts.select(names).sort_by([(k, "ascending") for k in keys]).cast(target_schema)
            counts = {"source": source.num_rows, "inserted": data.num_rows}
        else:

            def _upserts(reader: pa.RecordBatchReader):
                for batch in reader:
                    counts["source"] += batch.num_rows
                    kept = batch.filter(pc.equal(batch[SOURCE_CHANGE_TYPE], "UPSERT")).select(names)
                    counts["inserted"] += kept.num_rows
                    yield kept

            data = pa.RecordBatchReader.from_batches(target_schema, _upserts(source))
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
        conditions = []
        for key in table.keys:
            quoted = _quote(key.name)
            null_safe = not materialized or source[key.name].null_count > 0
            operator = "IS NOT DISTINCT FROM" if null_safe else "="
            conditions.append(f"(target.{quoted} {operator} source.{quoted})")
        predicate = " AND ".join(conditions)
        newer = f"(target.{SOURCE_SEQUENCE} IS NULL OR source.{SOURCE_SEQUENCE} > target.{SOURCE_SEQUENCE})"
        names = table.table_schema().names
        values = [c.name for c in table.values if c.name not in added]
        updates = {name: f"source.{_quote(name)}" for name in added}  # no stored value to keep
        if materialized:
            # Which images carry each column, decided per column where every or no image does;
            # delta-rs then gets only the columns its clauses read.
            carried = _carried_columns(source, values)
            flags = {}
            for name, carries in carried.items():
                quoted = _quote(name)
                if carries is True:
                    updates[name] = f"source.{quoted}"
                elif carries is not False:  # False: no image carries it, the stored value stays
                    flag = _CARRIES_PREFIX + name
                    flags[flag] = carries
                    updates[name] = (
                        f"CASE WHEN source.{_quote(flag)} THEN source.{quoted} ELSE target.{quoted} END"
                    )
            source = source.select([*names, SOURCE_CHANGE_TYPE])
            for flag, carries in flags.items():
                source = source.append_column(flag, carries)
        else:
            for name in values:
                updates[name] = (
                    f"CASE WHEN source.{SOURCE_FULL_IMAGE} OR array_has(source.{SOURCE_PRESENT}, "
                    f"'{name}') THEN source.{_quote(name)} ELSE target.{_quote(name)} END"
                )
        updates[SOURCE_SEQUENCE] = f"source.{SOURCE_SEQUENCE}"
        updates[SOURCE_COMMIT_TIMESTAMP] = f"source.{SOURCE_COMMIT_TIMESTAMP}"
        inserts = {name: f"source.{_quote(name)}" for name in names}
        read_version = dt.version()
        metrics = (
            dt.merge(
                source,
                predicate,
                source_alias="source",
                target_alias="target",
                merge_schema=bool(added),
                streamed_exec=not materialized,
                commit_properties=commit,
            )
            .when_matched_delete(predicate=f"source.{SOURCE_CHANGE_TYPE} = 'DELETE' AND {newer}")
            .when_matched_update(updates, predicate=f"source.{SOURCE_CHANGE_TYPE} = 'UPSERT' AND {newer}")
            .when_not_matched_insert(inserts, predicate=f"source.{SOURCE_CHANGE_TYPE} = 'UPSERT'")
            .execute()
        )
        if dt.version() == read_version:
            # The change set changed no row (e.g. deletes of absent keys), so the MERGE wrote no
            # commit; the window is still recorded, by a commit without data.
            dt.create_write_transaction([], mode="append", schema=dt.schema(), commit_properties=commit)
            dt.update_incremental()
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
            metrics=dict(metrics),
        )


def materialized_source(change_set: Any, table: TableColumns) -> pa.Table:
    """A whole change set decoded into one merge source, refused if it holds a key twice."""
    batches = [to_merge_source(batch, table) for batch in iter_batches(change_set)]
    source = pa.Table.from_batches(batches, schema=table.source_schema())
    if source.num_rows:
        _check_unique_keys(source, table)
    return source


def _carried_columns(source: pa.Table, columns: Sequence[str]) -> dict[str, bool | pa.Array]:
    """Per column, whether the image of each UPSERT row carries it (a full image, or named present).

    ``True`` if every UPSERT row's image does, ``False`` if none does, else a boolean per row.
    """
    upserts = pc.equal(source[SOURCE_CHANGE_TYPE], "UPSERT").to_numpy()
    full = source[SOURCE_FULL_IMAGE].to_numpy()
    present = source[SOURCE_PRESENT].combine_chunks()
    named = pc.list_flatten(present)
    rows = pc.list_parent_indices(present).to_numpy()
    result: dict[str, bool | pa.Array] = {}
    for column in columns:
        carries = full.copy()
        carries[rows[pc.fill_null(pc.equal(named, column), False).to_numpy(zero_copy_only=False)]] = True
        relevant = carries[upserts]
        result[column] = True if relevant.all() else False if not relevant.any() else pa.array(carries)
    return result


def _check_unique_keys(source: pa.Table, table: TableColumns) -> None:
    """Refuse a change set with several rows for one key (compared typed for a single INT64/STRING key)."""
    key = verbatim_key(table)
    keys = source[key.name] if key is not None else source[SOURCE_KEYS_JSON]
    if pc.count_distinct(keys, mode="all").as_py() == source.num_rows:
        return
    counts = pa.table({"k": keys}).group_by("k").aggregate([("k", "count", pc.CountOptions(mode="all"))])
    duplicate = counts.filter(pc.greater(counts["k_count"], 1))["k"][0]
    row = pc.index(pc.is_null(keys), True) if not duplicate.is_valid else pc.index(keys, duplicate)
    raise ChangeSetError(
        f"table {table.table!r}: the change set holds several rows for key "
        f"{source[SOURCE_KEYS_JSON][row.as_py()].as_py()}; a change set must hold one row per key "
        "(collapsed per window)"
    )


_RECENT_COMMITS = 16


def _held_window(dt: DeltaTable, app_id: str) -> int | None:
    """The last window version of ``app_id`` whose commit the table's data still holds.

    Delta keeps the newest app transaction version of each app id across a RESTORE, so after a
    restore to an older version ``transaction_version`` still names windows whose data is gone. The
    log tells: walking it from the newest commit, a RESTORE to version ``r`` undoes the commits
    between ``r`` and itself; the newest commit of ``app_id`` not undone is the held window. The
    newest commits are read first (usually the held window is among them), the whole retained log
    only when needed.
    """
    if dt.transaction_version(app_id) is None:
        return None
    ceiling: int | None = None
    for limit in (_RECENT_COMMITS, None):
        entries = dt.history(limit) if limit else dt.history()
        for entry in sorted(entries, key=lambda e: e.get("version", -1), reverse=True):
            version = entry.get("version")
            if not isinstance(version, int) or (ceiling is not None and version > ceiling):
                continue
            if entry.get("operation") == "RESTORE":
                restored = int((entry.get("operationParameters") or {}).get("version", version))
                ceiling = restored if ceiling is None else min(ceiling, restored)
            elif entry.get(COMMIT_METADATA_APP_ID) == app_id and entry.get(COMMIT_METADATA_WINDOW_VERSION):
                return int(entry[COMMIT_METADATA_WINDOW_VERSION])
        if limit is not None and len(entries) < limit:
            break  # that was the whole retained log
    # None of the app's commits is in the retained log: without a restore its version stands.
    return dt.transaction_version(app_id) if ceiling is None else None


def _find_window_commit(
    dt: DeltaTable, app_id: str, window_version: int
) -> tuple[int | None, int | None, bool]:
    """Where the log accounts for an older window of ``app_id``.

    Returns the table version whose commit applied the window, the version of a snapshot load
    at or past the window (which covers it), and whether the retained log reaches version 0.
    """
    versions = []
    for entry in dt.history():
        version = entry.get("version")
        if isinstance(version, int):
            versions.append(version)
        if entry.get(COMMIT_METADATA_APP_ID) != app_id:
            continue
        committed = entry.get(COMMIT_METADATA_WINDOW_VERSION)
        if committed == str(window_version):
            return version, None, True
        if entry.get(COMMIT_METADATA_SNAPSHOT) == "true" and committed and int(committed) >= window_version:
            return None, version, True
    return None, None, bool(versions) and min(versions) == 0
