"""The merge job's per-key collapse over Arrow batches (what runs in Spark's Python workers).

:func:`collapse_sorted_batches` receives a window's staged changes sorted by :data:`SORT_COLUMNS`
and yields one row per (table, key), exactly as :func:`airflow_provider_cdc.core.collapse.collapse_key`
collapses them. Keys with one change are handled with Arrow kernels; longer chains go through
:func:`~airflow_provider_cdc.core.collapse.collapse_chain`.

Imports only pyarrow and the domain (with its window contract), so it runs and is tested without
Spark; the merge job ships it to the executors with the domain package.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_cdc.core.collapse import EMPTY_IMAGE, CollapseError, collapse_chain
from airflow_provider_cdc.core.contract.change_set import (
    CHANGE_SEQUENCE_NUMBER,
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    FULL_IMAGE,
    KEYS_JSON,
    UPSERT,
    VALUES_JSON,
    change_set_schema,
)
from airflow_provider_cdc.core.contract.locations import TABLE_DIR_PREFIX
from airflow_provider_cdc.core.contract.staged_rows import DEDUPLICATION_KEY, DELETE, OPERATIONS, UPDATE

#: The column Spark partitions the change set by: it writes the ``table={name}/`` folders.
TABLE_PARTITION_COLUMN = TABLE_DIR_PREFIX.removesuffix("=")

#: A key of the change set: one row per (table, key).
KEY_COLUMNS = ("table_name", "keys_json")
#: The order the collapse needs: by key, then by sequence number (which tells a key's changes
#: apart, so a repeated change, a retried read's, is adjacent to the first and dropped).
SORT_COLUMNS = DEDUPLICATION_KEY
assert SORT_COLUMNS[: len(KEY_COLUMNS)] == KEY_COLUMNS

#: Staged columns the collapse needs, in the order it receives them.
COLLAPSE_INPUT_COLUMNS = (
    "table_name",
    "keys_json",
    "operation",
    "after_json",
    "change_sequence_number",
    "commit_timestamp",
)

#: Change-set columns the collapse computes; ``_present_columns`` and the table's
#: ``_column_types_json`` are added in Spark afterwards.
COLLAPSED_COLUMNS = (
    KEYS_JSON, VALUES_JSON, FULL_IMAGE, CHANGE_TYPE, CHANGE_SEQUENCE_NUMBER, COMMIT_TIMESTAMP
)
#: What the collapse yields: the table partition column, then :data:`COLLAPSED_COLUMNS` typed as
#: the change set declares them.
COLLAPSED_ARROW_SCHEMA = pa.schema(
    [
        pa.field(TABLE_PARTITION_COLUMN, pa.string()),
        *(change_set_schema().field(name) for name in COLLAPSED_COLUMNS),
    ]
)
_TIMESTAMP = COLLAPSED_ARROW_SCHEMA.field(COMMIT_TIMESTAMP).type


def _differs_from_previous(rows: pa.Table, columns: Sequence[str]) -> pa.Array:
    """Boolean per row: true where any of ``columns`` differs from the previous row (first row: true)."""
    if rows.num_rows <= 1:
        return pa.array([True] * rows.num_rows, pa.bool_())
    differs = None
    for name in columns:
        column = rows.column(name).combine_chunks()
        changed = pc.not_equal(column[1:], column[:-1])
        # Nulls only appear in bad input; treat a null as a change so nothing is merged across it.
        changed = pc.if_else(pc.is_null(changed), True, changed)
        differs = changed if differs is None else pc.or_(differs, changed)
    return pa.concat_arrays([pa.array([True]), differs])


def _check_changes(rows: pa.Table) -> None:
    """Refuse changes without a key or with an unknown operation, naming the first one."""
    if rows.column("keys_json").null_count:
        bad = rows.filter(pc.is_null(rows.column("keys_json"))).slice(0, 1).to_pylist()[0]
        raise CollapseError(
            f"table {bad['table_name']!r}: change {bad['change_sequence_number']} has no keys_json"
        )
    known = pc.is_in(rows.column("operation"), value_set=pa.array(OPERATIONS)).fill_null(False)
    if not pc.all(known).as_py():
        bad = rows.filter(pc.invert(known)).slice(0, 1).to_pylist()[0]
        raise CollapseError(
            f"table {bad['table_name']!r}, key {bad['keys_json']}: change {bad['change_sequence_number']} "
            f"has unknown operation {bad['operation']!r}; expected one of {', '.join(OPERATIONS)}"
        )


def _collapse_singletons(rows: pa.Table) -> pa.Table:
    """Rows of keys with exactly one change: same result as ``collapse_key``, with Arrow kernels."""
    operation = rows.column("operation")
    is_delete = pc.equal(operation, DELETE)
    return pa.table(
        [
            rows.column("table_name"),
            rows.column("keys_json"),
            pc.if_else(is_delete, pa.scalar(EMPTY_IMAGE), rows.column("after_json")),
            pc.not_equal(operation, UPDATE),
            pc.if_else(is_delete, pa.scalar(DELETE), pa.scalar(UPSERT)),
            rows.column("change_sequence_number"),
            rows.column("commit_timestamp").cast(_TIMESTAMP),
        ],
        schema=COLLAPSED_ARROW_SCHEMA,
    )


def _collapse_chains(rows: pa.Table, starts: pa.Array) -> pa.Table:
    """Rows of keys with several changes (contiguous, ordered, repeats dropped): folded by
    ``collapse_chain``."""
    operations = rows.column("operation").to_pylist()
    after_images = rows.column("after_json").to_pylist()
    bounds = pc.indices_nonzero(starts).to_pylist() + [rows.num_rows]
    newest: list[int] = []
    change_types: list[str] = []
    images: list[str] = []
    full_images: list[bool] = []
    for begin, end in zip(bounds[:-1], bounds[1:], strict=True):
        try:
            change_type, image, full_image = collapse_chain(operations[begin:end], after_images[begin:end])
        except CollapseError as error:
            raise CollapseError(
                f"table {rows.column('table_name')[begin].as_py()!r}, key "
                f"{rows.column('keys_json')[begin].as_py()}: {error}"
            ) from None
        newest.append(end - 1)
        change_types.append(change_type)
        images.append(image)
        full_images.append(full_image)
    last = rows.take(pa.array(newest, pa.int64()))
    return pa.table(
        [
            last.column("table_name"),
            last.column("keys_json"),
            pa.array(images, pa.string()),
            pa.array(full_images, pa.bool_()),
            pa.array(change_types, pa.string()),
            last.column("change_sequence_number"),
            last.column("commit_timestamp").cast(_TIMESTAMP),
        ],
        schema=COLLAPSED_ARROW_SCHEMA,
    )


def _collapse_complete_groups(rows: pa.Table) -> Iterator[pa.RecordBatch]:
    """Collapse sorted rows holding every change of each of their keys."""
    if rows.num_rows == 0:
        return
    _check_changes(rows)
    # Sorted by (table, key, sequence number), the repeats of a change (retried reads) are adjacent.
    first_of_change = _differs_from_previous(rows, DEDUPLICATION_KEY)
    if not pc.all(first_of_change).as_py():
        rows = rows.filter(first_of_change)
    starts = _differs_from_previous(rows, KEY_COLUMNS)
    single = pc.and_(starts, pa.concat_arrays([starts[1:], pa.array([True])]))
    singles = rows.filter(single)
    if singles.num_rows:
        yield from _collapse_singletons(singles).to_batches()
    if singles.num_rows < rows.num_rows:
        chained = pc.invert(single)
        yield from _collapse_chains(rows.filter(chained), starts.filter(chained)).to_batches()


def collapse_sorted_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Collapse a stream of staged changes sorted by :data:`SORT_COLUMNS` into :data:`COLLAPSED_ARROW_SCHEMA`.

    A key's changes may span batches: the last key of each batch is held back until the next
    batch shows where it ends, so memory stays at one batch plus one key's changes.
    """
    carry: pa.Table | None = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        current = pa.Table.from_batches([batch])
        if carry is not None:
            current = pa.concat_tables([carry, current])
        starts = _differs_from_previous(current, KEY_COLUMNS)
        last_start = pc.indices_nonzero(starts)[-1].as_py()
        yield from _collapse_complete_groups(current.slice(0, last_start))
        carry = current.slice(last_start).combine_chunks()
    if carry is not None:
        yield from _collapse_complete_groups(carry)
