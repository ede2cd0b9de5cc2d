"""Tombstones of a Delta table's deleted keys, so that a late older change never brings a row back.

A ``DELETE`` removes its row, so without a record of it a later window carrying an older ``UPSERT``
of the key (a late file, an at-least-once redelivery, a backfill overlapping the changes) would
insert the row again. With tombstones on, each ``DELETE`` leaves a tombstone in a Delta table of its
own, ``{lake_root}/_tombstones/{table}``: the table's key columns, ``_change_sequence_number``,
``_commit_timestamp`` and ``_deleted_in_window`` (the end in µs of the window that wrote it). The
user's table holds no deleted rows and nothing to filter.

Applying a window to a table with tombstones:

1. Every ``UPSERT`` of the change set whose key has a tombstone with an equal or greater sequence
   number is dropped from the merge source (:meth:`TableTombstones.drop_tombstoned`).
2. The window's tombstones are committed first, as one Delta commit tagged with the window's app
   transaction (:meth:`TableTombstones.record_window`): one per ``DELETE`` (a key keeps the greater
   sequence number), and tombstones past the horizon are purged. A tombstone table that holds the
   window already (a re-run after a crash before the table's own commit) is left as it is.
3. The table's own commit follows, guarded by its own app transaction.

A tombstone blocks only windows after the one that wrote it and ending within ``horizon`` of that
window's end (``_deleted_in_window``), whatever the window's basis: an arrival window (Datastream) is
what arrived in it, so its end is when the delete arrived, however old its source commit; a
commit-time window ends at most one window after the delete's commit, so counting from its end
protects at least as long as counting from the commit would. Replayed old files (a backfill over last
month's files, a stream read again from its start) therefore keep their tombstones for the whole
horizon after they are applied. Lookups apply both rules, so what a window drops does not depend on
whether its own tombstone commit, or a purge, already happened: a re-run lands the same rows as one
clean run. A key's change-set row is a ``DELETE`` or an ``UPSERT``, never both, so the window's own
tombstones could not drop its upserts anyway.

The horizon is recorded in every tombstone commit's metadata; a run that does not name it keeps
using the table's tombstones with the recorded horizon.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pa_ds
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from airflow_provider_cdc.changesets.reader import iter_batches
from airflow_provider_cdc.changesets.typed_batches import (
    SOURCE_CHANGE_TYPE,
    SOURCE_COMMIT_TIMESTAMP,
    SOURCE_SEQUENCE,
    TableColumns,
    to_merge_source,
)
from airflow_provider_cdc.core.contract.change_set import CHANGE_TYPE, DELETE, UPSERT
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.targets.delta.log import LakeError, commit_properties
from airflow_provider_cdc.targets.delta.merge import key_predicate

log = logging.getLogger(__name__)

#: The folder under the lake root that holds the tombstone tables (table names start with a letter).
TOMBSTONES_FOLDER = "_tombstones"
DELETED_IN_WINDOW = "_deleted_in_window"
#: Commit metadata of every tombstone commit: the horizon, in seconds, the commit was written with.
COMMIT_METADATA_HORIZON = "airflow-provider-cdc.tombstoneHorizonSeconds"
_RECENT_COMMITS = 16
# Columns of the key join (source column names start with a letter, so these never collide).
_ROW = "_row"
_TOMBSTONE_SEQUENCE = "_tombstone_sequence_number"
_KEY_VALUE = "_key_value_{}"
_KEY_IS_NULL = "_key_is_null_{}"


#: What a horizon that is not positive should be instead (0 would keep tombstones that block nothing).
HORIZON_FIX = (
    "give a horizon longer than the latest a change can arrive (e.g. 7 days), or leave it unset to keep "
    "no tombstones; 0 does not turn them off"
)


def check_horizon(horizon: timedelta | None) -> timedelta | None:
    """``horizon`` if it is ``None`` (tombstones not asked for) or a positive ``timedelta``, else
    ``ValueError`` naming ``tombstone_horizon`` and the fix."""
    if horizon is None:
        return None
    if not isinstance(horizon, timedelta) or horizon <= timedelta(0):
        raise ValueError(f"tombstone_horizon must be a positive timedelta, got {horizon!r}: {HORIZON_FIX}")
    return horizon


def tombstone_uri(lake_root: str, table: str) -> str:
    """Where the tombstones of ``table`` live: ``{lake_root}/_tombstones/{table}``."""
    return f"{lake_root}/{TOMBSTONES_FOLDER}/{validate_identifier(table, 'table')}"


def tombstone_schema(table: TableColumns) -> pa.Schema:
    """The tombstone table's columns: the table's keys, sequence number, commit timestamp, window."""
    schema = table.table_schema()
    return pa.schema(
        [
            *(schema.field(c.name) for c in table.keys),
            schema.field(SOURCE_SEQUENCE),
            schema.field(SOURCE_COMMIT_TIMESTAMP),
            pa.field(DELETED_IN_WINDOW, pa.int64()),
        ]
    )


def horizon_cutoff(window_version: int, horizon: timedelta) -> int:
    """The window end (µs) before which a window's tombstones (``_deleted_in_window``) no longer block
    the changes of window ``window_version``."""
    return window_version - horizon // timedelta(microseconds=1)


def window_tombstones(
    source: pa.Table | pa.RecordBatch, table: TableColumns, window_version: int
) -> pa.Table:
    """The tombstones the ``DELETE`` rows of a decoded merge source leave in window ``window_version``."""
    source = pa.Table.from_batches([source]) if isinstance(source, pa.RecordBatch) else source
    deletes = source.filter(pc.equal(source[SOURCE_CHANGE_TYPE], DELETE))
    schema = tombstone_schema(table)
    columns = [deletes[name] for name in schema.names[:-1]]
    windows = pa.array(np.full(deletes.num_rows, window_version, dtype=np.int64))
    return pa.Table.from_arrays([*columns, windows], schema=schema)


def change_set_tombstones(change_set: Any, table: TableColumns, window_version: int) -> pa.Table:
    """The tombstones of a change set read batch by batch (only its ``DELETE`` rows are decoded)."""
    parts = [tombstone_schema(table).empty_table()]
    for batch in iter_batches(change_set):
        deletes = batch.filter(pc.equal(batch.column(CHANGE_TYPE), DELETE))
        if deletes.num_rows:
            parts.append(window_tombstones(to_merge_source(deletes, table), table, window_version))
    return pa.concat_tables(parts)


def _join_columns(data: pa.Table, table: TableColumns) -> tuple[pa.Table, list[str]]:
    """``data`` with, per key column, a NULL flag and the value with NULLs filled, so that a hash
    join matches NULL keys as the MERGE's ``IS NOT DISTINCT FROM`` does."""
    names = []
    for i, column in enumerate(table.keys):
        values = data[column.name]
        flag, value = _KEY_IS_NULL.format(i), _KEY_VALUE.format(i)
        data = data.append_column(flag, pc.is_null(values))
        data = data.append_column(value, pc.fill_null(values, _fill_value(values.type)))
        names += [flag, value]
    return data, names


def _fill_value(arrow_type: pa.DataType) -> pa.Scalar:
    """A value of ``arrow_type`` standing in for NULL (the NULL flag beside it tells them apart)."""
    try:
        return pa.scalar(0).cast(arrow_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.scalar("0").cast(arrow_type)


def blocked_upserts(
    source: pa.Table | pa.RecordBatch, tombstones: pa.Table, table: TableColumns
) -> np.ndarray:
    """Per row of ``source``, whether it is an ``UPSERT`` that a tombstone of ``tombstones`` blocks: a
    tombstone of its key with an equal or greater sequence number."""
    source = pa.Table.from_batches([source]) if isinstance(source, pa.RecordBatch) else source
    blocked = np.zeros(source.num_rows, dtype=bool)
    if source.num_rows == 0 or tombstones.num_rows == 0:
        return blocked
    keys = [c.name for c in table.keys]
    left = source.select([*keys, SOURCE_SEQUENCE, SOURCE_CHANGE_TYPE]).append_column(
        _ROW, pa.array(np.arange(source.num_rows, dtype=np.int64))
    )
    left = left.filter(pc.equal(left[SOURCE_CHANGE_TYPE], UPSERT))
    right = tombstones.select(keys).append_column(_TOMBSTONE_SEQUENCE, tombstones[SOURCE_SEQUENCE])
    left, on = _join_columns(left, table)
    right, _ = _join_columns(right, table)
    matched = left.select([*on, _ROW, SOURCE_SEQUENCE]).join(
        right.select([*on, _TOMBSTONE_SEQUENCE]), on, join_type="inner"
    )
    older = pc.less_equal(matched[SOURCE_SEQUENCE], matched[_TOMBSTONE_SEQUENCE])
    blocked[matched.filter(older)[_ROW].to_numpy()] = True
    return blocked


def _load(uri: str, storage_options: dict[str, str] | None) -> DeltaTable | None:
    try:
        return DeltaTable(uri, storage_options=storage_options)
    except TableNotFoundError:
        return None


def recorded_horizon(dt: DeltaTable) -> timedelta | None:
    """The horizon of the newest tombstone commit in the table's log (``None``: none recorded)."""
    for limit in (_RECENT_COMMITS, None):
        entries = dt.history(limit) if limit else dt.history()
        for entry in sorted(entries, key=lambda e: e.get("version", -1), reverse=True):
            seconds = entry.get(COMMIT_METADATA_HORIZON)
            if seconds is not None:
                return timedelta(seconds=float(seconds))
        if limit is not None and len(entries) < limit:
            break
    return None


@dataclass
class TableTombstones:
    """The tombstones of one Delta table (see the module docstring)."""

    table: TableColumns
    uri: str
    horizon: timedelta
    storage_options: dict[str, str] | None = None
    delta_table: DeltaTable | None = None  # None until the first tombstone commit creates it

    @classmethod
    def open(
        cls,
        lake_root: str,
        table: TableColumns,
        horizon: timedelta | None,
        storage_options: dict[str, str] | None = None,
    ) -> TableTombstones | None:
        """The table's tombstones: ``None`` when tombstones are off (no ``horizon``) and the table has
        none; a table that has tombstones keeps using them, with their recorded horizon."""
        uri = tombstone_uri(lake_root, table.table)
        dt = _load(uri, storage_options)
        if dt is None:
            return None if check_horizon(horizon) is None else cls(table, uri, horizon, storage_options)
        if horizon is None:
            horizon = recorded_horizon(dt)
            if horizon is None:
                raise LakeError(
                    f"table {table.table!r} has tombstones at {uri!r} but their log records no horizon; "
                    "set tombstone_horizon to apply windows to it"
                )
            log.info(
                "table %s has tombstones (%s): using them with their recorded horizon %s, though no "
                "tombstone horizon was given",
                table.table,
                uri,
                horizon,
            )
        return cls(table, uri, check_horizon(horizon), storage_options, dt)

    def holds_window(self, app_id: str, window_version: int) -> bool:
        """Whether the tombstones of window ``window_version`` (or a later one) are committed."""
        if self.delta_table is None:
            return False
        held = self.delta_table.transaction_version(app_id)
        return held is not None and held >= window_version

    def lookup(self, window_version: int) -> pa.Table:
        """The tombstones that can block the window's upserts (keys and sequence numbers): written
        before the window, and within the horizon.

        Read with those two conditions pushed down; the keys are matched in memory
        (:func:`blocked_upserts`): delta-rs writes string columns as ``string_view``, on which Arrow
        cannot push a key filter down.
        """
        keys = [c.name for c in self.table.keys]
        schema = tombstone_schema(self.table)
        schema = pa.schema([schema.field(name) for name in (*keys, SOURCE_SEQUENCE)])
        if self.delta_table is None:
            return schema.empty_table()
        cutoff = horizon_cutoff(window_version, self.horizon)
        condition = (pc.field(DELETED_IN_WINDOW) >= cutoff) & (pc.field(DELETED_IN_WINDOW) < window_version)
        dataset: pa_ds.Dataset = self.delta_table.to_pyarrow_dataset()
        return dataset.to_table(columns=schema.names, filter=condition).cast(schema)

    def drop_tombstoned(
        self, source: pa.Table | pa.RecordBatch, window_version: int, found: pa.Table | None = None
    ) -> tuple[pa.Table | pa.RecordBatch, int]:
        """``source`` without the ``UPSERT`` rows a tombstone blocks, and how many were dropped.

        ``found``: the tombstones to check against (:meth:`lookup` when ``None``).
        """
        if found is None:
            if not pc.any(pc.equal(source[SOURCE_CHANGE_TYPE], UPSERT)).as_py():
                return source, 0
            found = self.lookup(window_version)
        blocked = blocked_upserts(source, found, self.table)
        dropped = int(blocked.sum())
        return (source.filter(pa.array(~blocked)) if dropped else source), dropped

    def drop_tombstoned_batches(
        self, batches: Iterable[pa.RecordBatch], window_version: int, dropped: list[int]
    ) -> Iterable[pa.RecordBatch]:
        """:meth:`drop_tombstoned` on each batch of a streamed source; ``dropped`` collects the counts.

        The tombstones within the horizon are read once, before the first batch: the batches are
        pulled by the MERGE itself, which cannot read another Delta table meanwhile.
        """
        found = self.lookup(window_version)
        return self._drop_from_batches(batches, window_version, found, dropped)

    def _drop_from_batches(
        self, batches: Iterable[pa.RecordBatch], window_version: int, found: pa.Table, dropped: list[int]
    ) -> Iterable[pa.RecordBatch]:
        for batch in batches:
            kept, count = self.drop_tombstoned(batch, window_version, found)
            dropped.append(count)
            yield kept

    def record_window(self, tombstones: pa.Table, app_id: str, window_version: int) -> bool:
        """Commit the window's tombstones (a key keeps the greater sequence number) and purge those past
        the horizon, as one commit tagged with the window; return whether a commit was written.

        Nothing is written when the tombstone table holds the window already, or when the window
        leaves no tombstone and none is past the horizon. A concurrent commit fails this one
        (``CommitFailedError``); the caller starts over.
        """
        name = self.table.table
        if self.holds_window(app_id, window_version):
            log.info(
                "table %s: tombstones of window %s are committed already; skipping", name, window_version
            )
            return False
        commit = commit_properties(app_id, window_version)
        commit.custom_metadata[COMMIT_METADATA_HORIZON] = str(self.horizon.total_seconds())
        data = tombstones.sort_by([(c.name, "ascending") for c in self.table.keys]).cast(
            tombstone_schema(self.table)
        )
        if self.delta_table is None:
            write_deltalake(
                self.uri,
                data,
                mode="error",
                name=f"{name}_tombstones",
                storage_options=self.storage_options,
                commit_properties=commit,
            )
            self.delta_table = DeltaTable(self.uri, storage_options=self.storage_options)
            log.info("table %s: window %s created its tombstones (%s)", name, window_version, data.num_rows)
            return True
        cutoff = horizon_cutoff(window_version, self.horizon)
        purge = self._has_tombstones_before(cutoff)
        if data.num_rows == 0 and not purge:
            return False
        dt = self.delta_table
        read_version = dt.version()
        merger = dt.merge(
            data,
            key_predicate(self.table, data, True),
            source_alias="source",
            target_alias="target",
            commit_properties=commit,
        )
        newer = f"source.{SOURCE_SEQUENCE} > target.{SOURCE_SEQUENCE}"
        merger = merger.when_matched_update_all(predicate=newer).when_not_matched_insert_all()
        if purge:
            merger = merger.when_not_matched_by_source_delete(
                predicate=f"target.{DELETED_IN_WINDOW} < {cutoff}"
            )
        metrics = merger.execute()
        if dt.version() == read_version:  # nothing changed: the window is still recorded
            dt.create_write_transaction([], mode="append", schema=dt.schema(), commit_properties=commit)
            dt.update_incremental()
        log.info(
            "table %s: window %s tombstones committed as version %s (%s new, %s newer, %s purged)",
            name,
            window_version,
            dt.version(),
            metrics.get("num_target_rows_inserted"),
            metrics.get("num_target_rows_updated"),
            metrics.get("num_target_rows_deleted"),
        )
        return True

    def _has_tombstones_before(self, cutoff: int) -> bool:
        """Whether a data file may hold a tombstone of a window ending before ``cutoff`` (by its
        statistics)."""
        assert self.delta_table is not None
        actions = pa.table(self.delta_table.get_add_actions(flatten=True))
        column = f"min.{DELETED_IN_WINDOW}"
        if actions.num_rows == 0:
            return False
        if column not in actions.column_names:
            return True
        oldest = actions[column]
        if oldest.null_count:
            return True
        return bool(pc.any(pc.less(oldest.cast(pa.int64()), pa.scalar(cutoff, pa.int64()))).as_py())


__all__ = [
    "COMMIT_METADATA_HORIZON",
    "DELETED_IN_WINDOW",
    "HORIZON_FIX",
    "TOMBSTONES_FOLDER",
    "TableTombstones",
    "blocked_upserts",
    "change_set_tombstones",
    "check_horizon",
    "horizon_cutoff",
    "recorded_horizon",
    "tombstone_schema",
    "tombstone_uri",
    "window_tombstones",
]
