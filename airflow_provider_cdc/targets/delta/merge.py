"""A window's merge source as Delta data: the MERGE into an existing table, or a new table's rows.

A stored row changes only for a change with a greater sequence number; an ``UPSERT`` with a full
image replaces the row, a partial image updates its present columns, ``DELETE`` removes the row
(see :mod:`airflow_provider_cdc.targets.delta.target`). A materialised source is checked to hold each key
once, and the MERGE then reads only the columns its clauses need. A table created by its first
window holds that window's upserts (:func:`new_table_rows`).

Columns new to the table are added by a commit of their own before the MERGE (:func:`add_columns`),
never by the MERGE's schema evolution: delta-rs's evolving MERGE fills a new column of every matched
row from the source, also where no clause applies (a change older than the stored row), whereas
a row the window leaves unchanged must keep NULL there. The added columns' commit records no
window, so a crash before the MERGE leaves the previous window's table with NULL columns, and the
window is applied again by a re-run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable
from deltalake import Field as DeltaField
from deltalake import Schema as DeltaSchema

from airflow_provider_cdc.changesets.reader import iter_batches
from airflow_provider_cdc.changesets.typed_batches import (
    SOURCE_CHANGE_TYPE,
    SOURCE_COMMIT_TIMESTAMP,
    SOURCE_FULL_IMAGE,
    SOURCE_KEYS_JSON,
    SOURCE_PRESENT,
    SOURCE_SEQUENCE,
    TableColumns,
    to_merge_source,
    verbatim_key,
)
from airflow_provider_cdc.core.contract.change_set import ChangeSetError
from airflow_provider_cdc.targets.delta.log import (
    COMMIT_METADATA_COLUMNS_ADDED_FOR,
    COMMIT_METADATA_WINDOW_VERSION,
    LakeError,
)

# Merge-source flags "this row's image carries column X"; source columns start with a letter.
_CARRIES_PREFIX = "_carries_"


class IncompatibleSchemaError(LakeError):
    """A column whose type in the change set differs from the stored type."""


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


def added_columns(stored_schema: DeltaSchema, table: TableColumns) -> tuple[str, ...]:
    """The table's columns the stored schema lacks; a column stored with another type is an error."""
    stored = _delta_types(stored_schema)
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


def add_columns(dt: DeltaTable, table: TableColumns, added: tuple[str, ...], window: str | None) -> None:
    """Add the columns ``added`` (nullable, typed as in the change set) to ``dt`` as one commit.

    The commit carries no app transaction (the window is recorded by its MERGE only), just the
    window's version in its own metadata key; a concurrent commit fails it (``CommitFailedError``).
    """
    schema = DeltaSchema.from_arrow(table.table_schema())
    fields = [
        DeltaField(f.name, f.type, nullable=True, metadata=f.metadata)
        for f in schema.fields
        if f.name in added
    ]
    metadata = {COMMIT_METADATA_COLUMNS_ADDED_FOR: window} if window else None
    commit = CommitProperties(custom_metadata=metadata, max_commit_retries=0)
    dt.alter.add_columns(fields, commit_properties=commit)


def materialized_source(change_set: Any, table: TableColumns) -> pa.Table:
    """A whole change set decoded into one merge source, refused if it holds a key twice."""
    batches = [to_merge_source(batch, table) for batch in iter_batches(change_set)]
    source = pa.Table.from_batches(batches, schema=table.source_schema())
    if source.num_rows:
        _check_unique_keys(source, table)
    return source


def carried_columns(source: pa.Table, columns: Sequence[str]) -> dict[str, bool | pa.Array]:
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


def new_table_rows(
    source: pa.Table | pa.RecordBatchReader, table: TableColumns
) -> tuple[pa.Table | pa.RecordBatchReader, dict[str, int]]:
    """The rows a table created by its first window holds: the source's upserts (a Table sorted by
    key), with the counts ``{"source": rows read, "inserted": rows kept}`` (filled as a reader streams).
    """
    target_schema = table.table_schema()
    names = target_schema.names
    keys = [c.name for c in table.keys]
    if isinstance(source, pa.Table):
        upserts = source.filter(pc.equal(source[SOURCE_CHANGE_TYPE], "UPSERT"))
        data = upserts.select(names).sort_by([(k, "ascending") for k in keys]).cast(target_schema)
        return data, {"source": source.num_rows, "inserted": data.num_rows}
    counts = {"source": 0, "inserted": 0}

    def _upserts(reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
        for batch in reader:
            counts["source"] += batch.num_rows
            kept = batch.filter(pc.equal(batch[SOURCE_CHANGE_TYPE], "UPSERT")).select(names)
            counts["inserted"] += kept.num_rows
            yield kept

    return pa.RecordBatchReader.from_batches(target_schema, _upserts(source)), counts


def key_predicate(table: TableColumns, source: pa.Table | pa.RecordBatchReader, materialized: bool) -> str:
    """A MERGE's key match of ``target`` and ``source``: ``=`` per key column, ``IS NOT DISTINCT FROM``
    where the source may hold a NULL key (a streamed source, or a NULL in a materialised one)."""
    conditions = []
    for key in table.keys:
        quoted = _quote(key.name)
        null_safe = not materialized or source[key.name].null_count > 0
        operator = "IS NOT DISTINCT FROM" if null_safe else "="
        conditions.append(f"(target.{quoted} {operator} source.{quoted})")
    return " AND ".join(conditions)


def merge_into(
    dt: DeltaTable,
    table: TableColumns,
    source: pa.Table | pa.RecordBatchReader,
    materialized: bool,
    commit: CommitProperties,
    added: tuple[str, ...],
    *,
    guarded: bool = True,
) -> dict[str, Any]:
    """MERGE ``source`` into ``dt`` as one commit, after the commit adding the columns ``added``
    (:func:`add_columns`); returns delta-rs's metrics. A source that changes no row still commits,
    without data, to record the window.

    ``guarded``: a stored row changes only for a greater sequence number; ``False`` for a source whose
    rows are already decided against the stored rows (a compaction's folded changes, :mod:`.fold`).
    """
    if added:
        add_columns(dt, table, added, (commit.custom_metadata or {}).get(COMMIT_METADATA_WINDOW_VERSION))
    predicate = key_predicate(table, source, materialized)
    newer = (
        f"(target.{SOURCE_SEQUENCE} IS NULL OR source.{SOURCE_SEQUENCE} > target.{SOURCE_SEQUENCE})"
        if guarded
        else "TRUE"
    )
    names = table.table_schema().names
    values = [c.name for c in table.values]
    updates: dict[str, str] = {}
    if materialized:
        # Which images carry each column, decided per column where every or no image does;
        # delta-rs then gets only the columns its clauses read.
        flags = {}
        for name, carries in carried_columns(source, values).items():
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
    return dict(metrics)
