"""The merge job's per-key collapse over Arrow batches (what runs in Spark's Python workers).

:func:`collapse_sorted_batches` receives a window's staged changes sorted by :data:`SORT_COLUMNS`
and yields one row per (table, key), exactly as :func:`airflow_provider_cdc.core.collapse.collapse_key`
collapses them: each key's last segment is found with array operations, and Python only decodes
the after images the result is made of (to check them, list their columns and merge several).

Imports only pyarrow, NumPy and the domain (with its window contract), so it runs and is tested without
Spark; the merge job ships it to the executors with the domain package.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_cdc.core.collapse import (
    _DECODER,
    EMPTY_IMAGE,
    CollapseError,
    _loads_object,
    dumps_image,
)
from airflow_provider_cdc.core.contract.change_set import (
    CHANGE_SEQUENCE_NUMBER,
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    FULL_IMAGE,
    KEYS_JSON,
    PRESENT_COLUMNS,
    UPSERT,
    VALUES_JSON,
    change_set_schema,
)
from airflow_provider_cdc.core.contract.locations import TABLE_DIR_PREFIX
from airflow_provider_cdc.core.contract.staged_rows import DEDUPLICATION_KEY, DELETE, INSERT, OPERATIONS

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

#: Change-set columns the collapse computes; the table's ``_column_types_json`` is added in Spark.
COLLAPSED_COLUMNS = (
    KEYS_JSON, VALUES_JSON, PRESENT_COLUMNS, FULL_IMAGE, CHANGE_TYPE, CHANGE_SEQUENCE_NUMBER, COMMIT_TIMESTAMP
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


def _image_encoder() -> Callable[[dict[str, Any]], str]:
    """:func:`~airflow_provider_cdc.core.collapse.dumps_image`, with ``json``'s C encoder built once
    instead of per call where this Python has it with the arguments ``JSONEncoder`` passes (the
    result is checked against ``dumps_image``; otherwise ``dumps_image`` itself)."""
    try:
        from json import encoder

        chunks = encoder.c_make_encoder(  # type: ignore[attr-defined]
            None, json.JSONEncoder().default, encoder.encode_basestring, None, ":", ",", True, False, False
        )

        def encode(image: dict[str, Any]) -> str:
            return "".join(chunks(image, 0))

        sample = {"b": [1, -0.0, 2.5e-7, None, True, {"y": 'é"\\\n\u2028', "x": 1e16}], "a": 10**20}
        if encode(sample) == dumps_image(sample):
            return encode
    except Exception:  # no C encoder, or other arguments: the encoder JSONEncoder builds per call
        pass
    return dumps_image


_encode_image = _image_encoder()


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


def _not_an_object(rows: pa.Table, row: int) -> CollapseError:
    """The error for a key's only change whose after image is not a JSON object."""
    text = rows.column("after_json")[row].as_py()
    return CollapseError(
        f"{VALUES_JSON} of table {rows.column('table_name')[row].as_py()}, key "
        f"{rows.column('keys_json')[row].as_py()} is not a JSON object: {'null' if text is None else text}"
    )


def _image_columns(
    rows: pa.Table, begins: list[int], ends: list[int], firsts: list[int]
) -> tuple[list[str], list[str], list[int]]:
    """Each key's image (``_values_json``) and its sorted column names: the after images of its
    last segment (rows ``begins[i]..ends[i]``; none where ``begins[i] > ends[i]``, a DELETE),
    one passed through as it was staged, several merged column-wise (``collapse_chain``).

    Images are decoded as ``collapse_chain`` decodes them; the decoder's scanner is called
    directly, and a text it does not take whole as an object goes through ``collapse_chain``'s
    own check, which accepts it (surrounding whitespace) or raises its error.
    """
    texts = rows.column("after_json").to_pylist()
    scan = _DECODER.scan_once
    values: list[str] = []
    names: list[str] = []
    offsets = [0]

    def image_at(position: int, first: int) -> dict:
        text = texts[position]
        try:
            image, end = scan(text, 0)
            if end == len(text) and type(image) is dict:
                return image
        except (TypeError, ValueError, StopIteration):
            pass
        try:
            return _loads_object(text, position - first)
        except CollapseError as error:
            if position == first and (position + 1 == len(texts) or position + 1 in starts):
                raise _not_an_object(rows, position) from None
            raise _named(rows, first, error) from None

    starts = set(firsts)
    for begin, end, first in zip(begins, ends, firsts, strict=True):
        if begin > end:
            values.append(EMPTY_IMAGE)
        elif begin == end:
            image = image_at(end, first)
            values.append(texts[end])
            names.extend(sorted(image))
        else:
            image = {}
            for position in range(begin, end + 1):
                image.update(image_at(position, first))
            values.append(_encode_image(image))
            names.extend(sorted(image))
        offsets.append(len(names))
    return values, names, offsets


def _named(rows: pa.Table, row: int, error: CollapseError) -> CollapseError:
    """``error`` of the chain of the key at ``row``, naming its table and key."""
    table, key = rows.column("table_name")[row].as_py(), rows.column("keys_json")[row].as_py()
    return CollapseError(f"table {table!r}, key {key}: {error}")


def _collapse_complete_groups(rows: pa.Table) -> Iterator[pa.RecordBatch]:
    """Collapse sorted rows holding every change of each of their keys.

    Where each key's last segment begins (as in ``collapse_chain``: at an INSERT, or at an UPDATE
    that opens the key or follows a DELETE) is found with array operations; Python only decodes
    the after images of those segments.
    """
    if rows.num_rows == 0:
        return
    _check_changes(rows)
    # Sorted by (table, key, sequence number), the repeats of a change (retried reads) are adjacent.
    first_of_change = _differs_from_previous(rows, DEDUPLICATION_KEY)
    if not pc.all(first_of_change).as_py():
        rows = rows.filter(first_of_change)
    count = rows.num_rows
    key_start = _differs_from_previous(rows, KEY_COLUMNS).to_numpy(zero_copy_only=False)
    operation = rows.column("operation")
    is_delete = pc.equal(operation, DELETE).to_numpy(zero_copy_only=False)
    is_insert = pc.equal(operation, INSERT).to_numpy(zero_copy_only=False)
    after_delete = np.zeros(count, dtype=bool)
    after_delete[1:] = is_delete[:-1]
    opens_segment = is_insert | (~is_delete & (key_start | after_delete))
    segment_begin = np.maximum.accumulate(np.where(opens_segment, np.arange(count), -1))
    newest = np.flatnonzero(np.append(key_start[1:], True))  # each key's last change
    deleted = is_delete[newest]
    begin = np.where(deleted, newest + 1, segment_begin[newest])
    values, names, offsets = _image_columns(
        rows, begin.tolist(), newest.tolist(), np.flatnonzero(key_start).tolist()
    )
    last = rows.take(pa.array(newest))
    # An UPSERT's image is full when its segment begins with an INSERT or right after a DELETE of
    # the same key (the row starts empty); ``begin`` of a DELETE row may be past the last row.
    segment = np.minimum(begin, count - 1)
    upsert_full = is_insert[segment] | (after_delete[segment] & ~key_start[segment])
    yield from pa.table(
        [
            last.column("table_name"),
            last.column("keys_json"),
            pa.array(values, pa.string()),
            pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(names, pa.string())),
            pa.array(deleted | upsert_full),
            pa.array(np.where(deleted, DELETE, UPSERT).astype(object), pa.string()),
            last.column("change_sequence_number"),
            last.column("commit_timestamp").cast(_TIMESTAMP),
        ],
        schema=COLLAPSED_ARROW_SCHEMA,
    ).to_batches()


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
