"""A table's pending changes: windows appended, not yet folded into the table (deferred apply).

``{lake_root}/_pending/{table}`` is a Delta table of decoded merge-source rows (the table's columns,
``_change_sequence_number``, ``_commit_timestamp``, change type, present columns, full-image flag,
keys JSON) plus ``_pending_window`` (the window's end in µs) and ``_pending_column_types`` (the
window's column types, canonical JSON; dictionary-encoded in Parquet, so nearly free). Each window is
appended as one commit carrying the window's app transaction, so an append is done once: a pending
table whose transaction version is at or past the window holds it.

Rows of windows the table holds (its apply watermark, see :mod:`.compaction`) are ignored by every
read and removed after each compaction, so a crash between the table's commit and that clean-up
never applies a window twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pa_ds
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError

from airflow_provider_cdc.changesets.reader import merge_column_types
from airflow_provider_cdc.changesets.typed_batches import TableColumns
from airflow_provider_cdc.core.columns import canonical_column_types_json
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.targets.delta.fold import PENDING_WINDOW
from airflow_provider_cdc.targets.delta.log import COMMIT_METADATA_APP_ID, commit_properties

log = logging.getLogger(__name__)

#: The folder under the lake root that holds the pending tables (table names start with a letter).
PENDING_FOLDER = "_pending"
PENDING_COLUMN_TYPES = "_pending_column_types"


def pending_uri(lake_root: str, table: str) -> str:
    """Where the pending changes of ``table`` live: ``{lake_root}/_pending/{table}``."""
    return f"{lake_root}/{PENDING_FOLDER}/{validate_identifier(table, 'table')}"


def pending_schema(table: TableColumns) -> pa.Schema:
    """The pending table's columns: the merge source's, the window and its column types."""
    return pa.schema(
        [
            *table.source_schema(),
            pa.field(PENDING_WINDOW, pa.int64()),
            pa.field(PENDING_COLUMN_TYPES, pa.string()),
        ]
    )


def pending_rows(source: pa.Table, table: TableColumns, window_version: int) -> pa.Table:
    """A window's decoded merge source as pending rows, sorted by key."""
    n = source.num_rows
    types = canonical_column_types_json(table.columns)
    rows = source.select(table.source_schema().names)
    rows = rows.append_column(PENDING_WINDOW, pa.array(np.full(n, window_version, dtype=np.int64)))
    rows = rows.append_column(PENDING_COLUMN_TYPES, pa.array([types] * n, pa.string()))
    return rows.sort_by([(c.name, "ascending") for c in table.keys]).cast(pending_schema(table))


@dataclass
class PendingChanges:
    """The pending changes of one table (see the module docstring)."""

    table: str
    uri: str
    storage_options: dict[str, str] | None = None
    delta_table: DeltaTable | None = None  # None until the first append creates it

    @classmethod
    def open(
        cls, lake_root: str, table: str, storage_options: dict[str, str] | None = None
    ) -> PendingChanges:
        uri = pending_uri(lake_root, table)
        try:
            dt: DeltaTable | None = DeltaTable(uri, storage_options=storage_options)
        except TableNotFoundError:
            dt = None
        return cls(table, uri, storage_options, dt)

    @property
    def exists(self) -> bool:
        return self.delta_table is not None

    def appended_window(self, app_id: str) -> int | None:
        """The last window of ``app_id`` appended (``None``: none)."""
        return None if self.delta_table is None else self.delta_table.transaction_version(app_id)

    def last_app_id(self) -> str | None:
        """The app id of the newest append in the recent log (``None``: none found)."""
        if self.delta_table is None:
            return None
        for entry in sorted(self.delta_table.history(16), key=lambda e: e.get("version", -1), reverse=True):
            if entry.get(COMMIT_METADATA_APP_ID):
                return str(entry[COMMIT_METADATA_APP_ID])
        return None

    def append(self, rows: pa.Table, app_id: str, window_version: int) -> int:
        """Append a window's pending rows as one commit tagged with the window; return the version.

        A concurrent commit fails this one (``CommitFailedError``): the caller starts over.
        """
        commit = commit_properties(app_id, window_version)
        write_deltalake(
            self.uri,
            rows,
            mode="append",
            schema_mode="merge" if self.delta_table is not None else None,
            name=None if self.delta_table is not None else f"{self.table}_pending",
            storage_options=self.storage_options,
            commit_properties=commit,
        )
        if self.delta_table is None:
            self.delta_table = DeltaTable(self.uri, storage_options=self.storage_options)
        else:
            self.delta_table.update_incremental()
        return self.delta_table.version()

    def _dataset(self) -> pa_ds.Dataset | None:
        return None if self.delta_table is None else self.delta_table.to_pyarrow_dataset()

    def windows(self, after: int | None) -> list[int]:
        """The windows (ends in µs) with pending rows later than ``after`` (the table's watermark)."""
        dataset = self._dataset()
        if dataset is None:
            return []
        condition = None if after is None else pc.field(PENDING_WINDOW) > after
        found = dataset.to_table(columns=[PENDING_WINDOW], filter=condition)[PENDING_WINDOW]
        return sorted(int(v) for v in pc.unique(found).to_pylist())

    def read(self, after: int | None, through: int | None = None) -> tuple[TableColumns, pa.Table] | None:
        """The table's columns and the pending rows of windows in ``(after, through]`` (``None``:
        unbounded), typed as :func:`pending_schema`; ``None`` when there are none."""
        dataset = self._dataset()
        if dataset is None:
            return None
        condition = None
        if after is not None:
            condition = pc.field(PENDING_WINDOW) > after
        if through is not None:
            bound = pc.field(PENDING_WINDOW) <= through
            condition = bound if condition is None else condition & bound
        rows = dataset.to_table(filter=condition)
        if rows.num_rows == 0:
            return None
        texts = pc.unique(rows[PENDING_COLUMN_TYPES].cast(pa.string())).to_pylist()
        table = TableColumns.from_column_types(self.table, merge_column_types(sorted(texts), self.table))
        schema = pending_schema(table)
        return table, rows.select(schema.names).cast(schema)

    def clean(self, through: int) -> None:
        """Remove the rows of windows up to ``through`` (the table holds them); a failure is logged
        and left to the next compaction: those rows are ignored by every read meanwhile."""
        if self.delta_table is None:
            return
        try:
            self.delta_table.update_incremental()
            metrics = self.delta_table.delete(f"{PENDING_WINDOW} <= {int(through)}")
        except DeltaError as exc:
            log.warning("table %s: removing folded pending rows failed (%s); left for later", self.table, exc)
            return
        log.info(
            "table %s: removed %s pending row(s) of windows up to %s",
            self.table,
            metrics.get("num_deleted_rows"),
            through,
        )


__all__ = [
    "PENDING_COLUMN_TYPES",
    "PENDING_FOLDER",
    "PendingChanges",
    "pending_rows",
    "pending_schema",
    "pending_uri",
]
