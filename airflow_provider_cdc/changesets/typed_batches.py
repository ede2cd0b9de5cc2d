"""A change-set batch decoded into the typed merge source of a table.

A change set holds, per source table, one row per changed key of a window (see ARCHITECTURE.md,
"Change sets"): the key and row image in the JSON value encoding, the non-key columns the image
carries, ``_CHANGE_TYPE`` (``UPSERT``/``DELETE``) and the sortable ``_CHANGE_SEQUENCE_NUMBER``.
:func:`to_merge_source` checks one batch and decodes it into the table's typed columns plus the
change metadata (:meth:`TableColumns.source_schema`), the input of the targets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_cdc.changesets.arrow_values import arrow_schema, decode_json_objects
from airflow_provider_cdc.core.columns import ColumnType, parse_column_types
from airflow_provider_cdc.core.contract.change_set import (
    CHANGE_SEQUENCE_NUMBER,
    CHANGE_SET_COLUMNS,
    CHANGE_TYPE,
    CHANGE_TYPES,
    COLUMN_TYPES_JSON,
    COMMIT_TIMESTAMP,
    FULL_IMAGE,
    KEYS_JSON,
    PRESENT_COLUMNS,
    VALUES_JSON,
    ChangeSetError,
)
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.values import ValueEncodingError

# Columns of a decoded merge source besides the table's own columns. A source column name starts
# with a letter (core.identifiers), so these never collide with a source column.
SOURCE_SEQUENCE = "_change_sequence_number"
SOURCE_COMMIT_TIMESTAMP = "_commit_timestamp"
SOURCE_CHANGE_TYPE = "_change_type"
SOURCE_PRESENT = "_present_columns"
SOURCE_FULL_IMAGE = "_full_image"
SOURCE_KEYS_JSON = "_keys_json"

SEQUENCE_TYPE = pa.string()
COMMIT_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
_SORTABLE_SEQUENCE = r"^[0-9A-F]{16}(/[0-9A-F]{16}){0,3}$"
_SECTION_DIGITS = 16
_SORTABLE_LENGTHS = tuple(_SECTION_DIGITS * n + n - 1 for n in range(1, 5))  # 16, 33, 50, 67
_CHECK_ROWS = 2048
# Key types whose compact JSON text {"K":"v"} carries the value verbatim (see _decode_single_key).
_VERBATIM_KEY_CODES = ("INT64", "STRING")


@dataclass(frozen=True)
class TableColumns:
    """A table's columns split into key and non-key columns, in ordinal order."""

    table: str
    columns: tuple[ColumnType, ...]

    @classmethod
    def from_column_types(cls, table: str, column_types: Any) -> TableColumns:
        validate_identifier(table, "table")
        columns = tuple(parse_column_types(column_types))
        if not any(c.is_primary_key for c in columns):
            raise ChangeSetError(f"table {table!r}: column_types name no primary-key column")
        return cls(table, columns)

    @property
    def keys(self) -> tuple[ColumnType, ...]:
        return tuple(c for c in self.columns if c.is_primary_key)

    @property
    def values(self) -> tuple[ColumnType, ...]:
        return tuple(c for c in self.columns if not c.is_primary_key)

    def table_schema(self) -> pa.Schema:
        """Schema of a target table that keeps rows: source columns, then sequence number and commit
        timestamp."""
        fields = list(arrow_schema(self.columns))
        fields.append(pa.field(SOURCE_SEQUENCE, SEQUENCE_TYPE))
        fields.append(pa.field(SOURCE_COMMIT_TIMESTAMP, COMMIT_TIMESTAMP_TYPE))
        return pa.schema(fields)

    def source_schema(self) -> pa.Schema:
        """Schema of a decoded merge source (the table schema plus change metadata)."""
        return pa.schema(
            list(self.table_schema())
            + [
                pa.field(SOURCE_CHANGE_TYPE, pa.string()),
                pa.field(SOURCE_PRESENT, pa.list_(pa.string())),
                pa.field(SOURCE_FULL_IMAGE, pa.bool_()),
                pa.field(SOURCE_KEYS_JSON, pa.string()),
            ]
        )


def _first_offending(array: pa.Array, bad: pa.Array) -> Any:
    index = pc.index(bad, True).as_py()
    return array[index].as_py()


def to_merge_source(batch: pa.RecordBatch | pa.Table, table: TableColumns) -> pa.RecordBatch:
    """Decode one change-set batch into the typed merge source of ``table``.

    Validates change types, sequence numbers (sortable form), present columns and keys; the
    errors name the table and the offending value.
    """
    if isinstance(batch, pa.RecordBatch):
        batch = pa.Table.from_batches([batch])
    name = table.table
    missing = [c for c in CHANGE_SET_COLUMNS if c not in batch.column_names and c != COLUMN_TYPES_JSON]
    if missing:
        raise ChangeSetError(f"table {name!r}: change set lacks column(s) {missing}")
    rows = batch.num_rows
    schema = table.source_schema()
    if rows == 0:
        return pa.RecordBatch.from_pylist([], schema=schema)

    change_type = batch.column(CHANGE_TYPE).combine_chunks().cast(pa.string())
    bad = pc.invert(pc.fill_null(pc.is_in(change_type, pa.array(CHANGE_TYPES)), False))
    if pc.any(bad).as_py():
        raise ChangeSetError(
            f"table {name!r}: {CHANGE_TYPE} must be UPSERT or DELETE, "
            f"got {_first_offending(change_type, bad)!r}"
        )

    sequence = batch.column(CHANGE_SEQUENCE_NUMBER).combine_chunks().cast(pa.string())
    if not _all_sortable(sequence):
        bad = pc.invert(pc.fill_null(pc.match_substring_regex(sequence, _SORTABLE_SEQUENCE), False))
        if pc.any(bad).as_py():
            raise ChangeSetError(
                f"table {name!r}: {CHANGE_SEQUENCE_NUMBER} {_first_offending(sequence, bad)!r} is not in "
                "sortable form (1-4 '/'-separated sections of 16 upper-case hex digits)"
            )

    commit_ts = batch.column(COMMIT_TIMESTAMP).combine_chunks()
    if commit_ts.type != COMMIT_TIMESTAMP_TYPE:
        commit_ts = commit_ts.cast(COMMIT_TIMESTAMP_TYPE)

    present = batch.column(PRESENT_COLUMNS).combine_chunks()
    if present.type != pa.list_(pa.string()):  # e.g. Spark's list<element: string>
        present = present.cast(pa.list_(pa.string()))
    value_names = pa.array([c.name for c in table.values], pa.string())
    flat = pc.list_flatten(present)
    unknown = pc.invert(pc.is_in(flat, value_names))
    if len(flat) and pc.any(unknown).as_py():
        raise ChangeSetError(
            f"table {name!r}: {PRESENT_COLUMNS} names {_first_offending(flat, unknown)!r}, "
            "which is not a non-key column of the table's column types"
        )
    full_image = pc.fill_null(batch.column(FULL_IMAGE).combine_chunks().cast(pa.bool_()), False)

    keys_json = batch.column(KEYS_JSON).combine_chunks().cast(pa.string())
    if keys_json.null_count:
        raise ChangeSetError(f"table {name!r}: {KEYS_JSON} is NULL in {keys_json.null_count} row(s)")
    keys = _decode_keys(keys_json, table)
    try:
        values = decode_json_objects(
            batch.column(VALUES_JSON).combine_chunks().cast(pa.string()), table.values, what=VALUES_JSON
        )
    except ValueEncodingError as exc:
        raise ChangeSetError(f"table {name!r}: {exc}") from None

    arrays: list[pa.Array] = []
    for column in table.columns:
        source = keys if column.is_primary_key else values
        arrays.append(source.column(column.name).combine_chunks())
    arrays += [sequence, commit_ts, change_type, present, full_image, keys_json]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _all_sortable(sequence: pa.Array) -> bool:
    """Whether every sequence number is in sortable form, checked on the bytes of equal-length values.

    Equivalent to matching ``_SORTABLE_SEQUENCE`` on each value, for the common case of values of
    one length; ``False`` means "not shown here" (NULLs, mixed lengths or a bad value) and leaves
    the decision to the regex, which also finds the offending value.
    """
    if len(sequence) == 0 or sequence.null_count:
        return False
    offsets = np.frombuffer(sequence.buffers()[1], dtype=np.int32)
    offsets = offsets[sequence.offset : sequence.offset + len(sequence) + 1]
    length = int(offsets[1] - offsets[0])
    if length not in _SORTABLE_LENGTHS or not (np.diff(offsets) == length).all():
        return False
    data = np.frombuffer(sequence.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
    data = data.reshape(-1, length)
    separators = slice(_SECTION_DIGITS, None, _SECTION_DIGITS + 1)
    for start in range(0, len(data), _CHECK_ROWS):  # small temporaries: no fresh pages per call
        rows = data[start : start + _CHECK_ROWS]
        valid = ((rows - np.uint8(ord("0"))) < 10) | ((rows - np.uint8(ord("A"))) < 6)  # uint8 wraps
        valid[:, separators] = rows[:, separators] == ord("/")
        if not valid.all():
            return False
    return True


def verbatim_key(table: TableColumns) -> ColumnType | None:
    """The table's key when it is one INT64 or STRING column (whose compact JSON text carries the
    value verbatim, and whose typed values compare as the key does), else ``None``."""
    (first, *others) = table.keys
    if others or first.logical_type.code not in _VERBATIM_KEY_CODES:
        return None
    return first


def _decode_single_key(keys_json: pa.Array, key: ColumnType) -> pa.Array | None:
    """The values of a :func:`verbatim_key` whose texts all have the compact form ``{"K":"v"}``.

    Strips the constant prefix and suffix instead of parsing JSON; ``None`` when any text has
    another form (whitespace, escapes, a JSON number, NULL, another column) or ``v`` is not a
    decimal INT64, so that the JSON decoder handles (or refuses) the batch as before.
    """
    prefix, suffix = "{" + json.dumps(key.name) + ':"', '"}'
    if not (
        pc.min(pc.binary_length(keys_json)).as_py() >= len(prefix) + len(suffix)
        and pc.all(pc.starts_with(keys_json, prefix)).as_py()
        and pc.all(pc.ends_with(keys_json, suffix)).as_py()
    ):
        return None
    text = pc.utf8_slice_codeunits(keys_json, len(prefix), -len(suffix))  # prefix, suffix: ASCII
    if key.logical_type.code == "STRING":
        # A quote, a backslash or a control character would make the text another JSON value.
        return None if pc.any(pc.match_substring_regex(text, r'["\\\x00-\x1f]')).as_py() else text
    if not pc.all(pc.utf8_is_digit(pc.utf8_ltrim(text, "-"))).as_py():  # Arrow would read 0x.. as hex
        return None
    try:
        return text.cast(pa.int64())  # decimal digits with an optional '-' only
    except pa.ArrowInvalid:
        return None


def _decode_keys(keys_json: pa.Array, table: TableColumns) -> pa.Table:
    key = verbatim_key(table)
    if key is not None:
        verbatim = _decode_single_key(keys_json, key)
        if verbatim is not None:
            return pa.table({key.name: verbatim})
    try:
        keys = decode_json_objects(keys_json, table.keys, what=KEYS_JSON)
    except ValueEncodingError as exc:
        raise ChangeSetError(f"table {table.table!r}: {exc}") from None
    if any(keys.column(c.name).null_count for c in table.keys):
        # A NULL key may be a legitimate NULL or a missing key column: tell them apart.
        names = [c.name for c in table.keys]
        for row, text in enumerate(keys_json.to_pylist()):
            absent = [n for n in names if n not in json.loads(text)]
            if absent:
                raise ChangeSetError(
                    f"table {table.table!r}: {KEYS_JSON} of row {row} lacks key column(s) {absent}"
                )
    return keys
