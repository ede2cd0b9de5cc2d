"""Merge-on-read: a table's latest state, its rows with the pending windows applied, before compaction.

The pending windows after the table's apply watermark are folded per key (:mod:`.fold`, as the
compaction would), then the table is read batch by batch: a row whose key has a net ``DELETE`` is
left out, a row with a net ``UPSERT`` is replaced (a full image) or has the carried columns replaced
(a partial one), and the upserts of keys the table does not hold follow the table's rows. The result
equals the table after a compaction of the same windows; memory holds the folded pending changes and
one batch of the table.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from airflow_provider_cdc.changesets.typed_batches import SOURCE_CHANGE_TYPE, TableColumns
from airflow_provider_cdc.core.contract.change_set import UPSERT
from airflow_provider_cdc.targets.delta.compaction import folded_changes
from airflow_provider_cdc.targets.delta.fold import KeyIndex
from airflow_provider_cdc.targets.delta.log import held_window
from airflow_provider_cdc.targets.delta.merge import carried_columns
from airflow_provider_cdc.targets.delta.pending import PendingChanges


def _output_schema(dt: DeltaTable, table: TableColumns | None) -> pa.Schema:
    """The table's stored columns, then the columns only pending windows carry."""
    stored = pa.schema(dt.schema().to_arrow())
    if table is None:
        return stored
    extra = [f for f in table.table_schema() if f.name not in stored.names]
    return pa.schema([*stored, *extra])


def _conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data`` with ``schema``'s columns (missing ones NULL), cast to its types."""
    columns = [
        data[f.name] if f.name in data.column_names else pa.nulls(data.num_rows, f.type) for f in schema
    ]
    return pa.table(columns, names=schema.names).cast(schema)


def latest_batches(dt: DeltaTable, pending: PendingChanges, app_id: str | None) -> pa.RecordBatchReader:
    """The table's latest state (stored rows with the pending windows after its watermark applied),
    streamed as record batches."""
    watermark = None if app_id is None else held_window(dt, app_id)
    found = pending.read(watermark)
    schema = _output_schema(dt, None if found is None else found[0])
    dataset = dt.to_pyarrow_dataset()
    if found is None:
        conformed = (_conform(pa.Table.from_batches([b]), schema) for b in dataset.to_batches())
        return pa.RecordBatchReader.from_batches(schema, (b for part in conformed for b in part.to_batches()))
    table, rows = found
    folded, _read = folded_changes(dt, table, rows)
    return pa.RecordBatchReader.from_batches(schema, _apply(dataset.to_batches(), folded, table, schema))


def _apply(
    stored: Iterator[pa.RecordBatch], folded: pa.Table, table: TableColumns, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    keys = [c.name for c in table.keys]
    values = [c.name for c in table.values]
    upsert = pc.equal(folded[SOURCE_CHANGE_TYPE], UPSERT).to_numpy(zero_copy_only=False)
    carries = carried_columns(folded, values) if folded.num_rows else {}
    changed = _conform(folded, schema)
    matched = np.zeros(folded.num_rows, dtype=bool)
    index = KeyIndex(folded, keys)
    for batch in stored:
        part = _conform(pa.Table.from_batches([batch]), schema)
        rows, net = index.match(part)
        if rows.size == 0:
            yield from part.to_batches()
            continue
        matched[net] = True
        keep = np.ones(part.num_rows, dtype=bool)
        keep[rows] = False
        yield from part.filter(pa.array(keep)).to_batches()
        replaced = upsert[net]
        rows, net = rows[replaced], net[replaced]
        if rows.size == 0:
            continue
        old, new = part.take(pa.array(rows)), changed.take(pa.array(net))
        columns = []
        for f in schema:
            ours = f.name not in keys and f.name not in values and f.name in folded.column_names
            carried = carries.get(f.name, ours)  # sequence number and commit timestamp: the change's
            if f.name in keys or carried is False:
                columns.append(old[f.name])
            elif carried is True:
                columns.append(new[f.name])
            else:
                columns.append(pc.if_else(carried.take(pa.array(net)), new[f.name], old[f.name]))
        yield from pa.table(columns, schema=schema).to_batches()
    inserted = upsert & ~matched
    if inserted.any():
        yield from changed.filter(pa.array(inserted)).to_batches()


def read_latest(dt: DeltaTable, pending: PendingChanges, app_id: str | None) -> pa.Table:
    """:func:`latest_batches` read into one table."""
    return latest_batches(dt, pending, app_id).read_all()


__all__ = ["latest_batches", "read_latest"]
