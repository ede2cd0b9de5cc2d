"""Logical types and values in Arrow: table schemas and vectorised JSON decoding.

Each type's Arrow type is declared in :mod:`airflow_provider_cdc.core.types` (``NUMERIC`` is
``decimal128(38, 9)``, ``TIMESTAMP`` ``timestamp[us, UTC]``, ``ARRAY<T>`` ``list<T>``, ...).

Two decoders produce identical results: :func:`decode_column` (per value, through
:func:`airflow_provider_cdc.core.types.decode_value` and its exact error messages) and
:func:`decode_json_objects` (vectorised over a column of JSON objects, falling back to the
per-value decoder when the fast path cannot represent a batch).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from airflow_provider_cdc.core.columns import ColumnType, parse_column_types
from airflow_provider_cdc.core.types import (
    SCALAR_TYPES,
    LogicalType,
    ValueEncodingError,
    decode_value,
    parse_logical_type,
)

# Field metadata keys written to the schemas of tables that hold the columns' types. Tables written
# by earlier versions carry the type and key flag under the LEGACY_* keys and keep them (a schema's
# metadata is not rewritten); readers take either (field_type_text, field_is_primary_key, key_column_names).
#: Field metadata key of a column's logical type in its text form (``ARRAY<INT64>``).
FIELD_METADATA_TYPE = "cdc.type"
#: Field metadata key of a column's primary-key flag (``true``/``false``).
FIELD_METADATA_PRIMARY_KEY = "cdc.primary_key"
#: Field metadata key of a column's nullability as the source declares it (``true``/``false``);
#: absent when the source does not say.
FIELD_METADATA_NULLABLE = "cdc.nullable"
#: The keys of :data:`FIELD_METADATA_TYPE` and :data:`FIELD_METADATA_PRIMARY_KEY` in tables written
#: by earlier versions.
LEGACY_FIELD_METADATA_TYPE = "spanner.type"
LEGACY_FIELD_METADATA_PRIMARY_KEY = "spanner.primary_key"
#: Each key with the keys earlier versions wrote the same fact under, newest first.
_FIELD_METADATA_KEYS: dict[str, tuple[bytes, ...]] = {
    key: tuple(name.encode() for name in names)
    for key, *names in (
        (FIELD_METADATA_TYPE, FIELD_METADATA_TYPE, LEGACY_FIELD_METADATA_TYPE),
        (FIELD_METADATA_PRIMARY_KEY, FIELD_METADATA_PRIMARY_KEY, LEGACY_FIELD_METADATA_PRIMARY_KEY),
        (FIELD_METADATA_NULLABLE, FIELD_METADATA_NULLABLE),
    )
}

_SCALAR_ARROW_TYPES: dict[str, pa.DataType] = {code: t.arrow(pa) for code, t in SCALAR_TYPES.items()}

# Digits beyond microseconds: Arrow's parser refuses them, a source may send nanoseconds.
_SUBMICRO_DIGITS = r"(\.\d{6})\d+"
#: Longest RFC 3339 text with at most microseconds and a ``Z``: shorter texts need no trimming.
_MICROS_TIMESTAMP_LENGTH = len("0001-01-01T00:00:00.000000Z")
#: A DATETIME as the per-value decoder reads it (``T`` or a space, no zone), and its longest text
#: with at most microseconds.
_DATETIME_TEXT = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?$"
_MICROS_DATETIME_LENGTH = len("0001-01-01T00:00:00.000000")
#: The JSON reader's blocks: about ``_JSON_BLOCKS`` per batch, within these bounds.
_JSON_BLOCKS = 4
_MIN_JSON_BLOCK = 64 << 10
_MAX_JSON_BLOCK = 1 << 20


def arrow_type(logical_type: LogicalType | Any, column: str = "?") -> pa.DataType:
    """Arrow type for a logical type (given as a :class:`LogicalType` or one of its forms)."""
    logical_type = parse_logical_type(logical_type, column)
    if logical_type.element is not None:
        return pa.list_(arrow_type(logical_type.element, column))
    return _SCALAR_ARROW_TYPES[logical_type.code]


def arrow_schema(column_types: str | Iterable[Mapping[str, Any] | ColumnType]) -> pa.Schema:
    """Arrow schema of a table's columns ordered by ordinal position, key columns as ordinary columns.

    Each field carries metadata :data:`FIELD_METADATA_TYPE` (the logical type's text, e.g.
    ``ARRAY<INT64>``), :data:`FIELD_METADATA_PRIMARY_KEY` (``true``/``false``) and, where the source
    says, :data:`FIELD_METADATA_NULLABLE` (``true``/``false``). Every field is nullable in Arrow (a
    partial image or an added column leaves values NULL).
    """
    fields = []
    for column in parse_column_types(column_types):
        metadata = {
            FIELD_METADATA_TYPE: str(column.logical_type),
            FIELD_METADATA_PRIMARY_KEY: "true" if column.is_primary_key else "false",
        }
        if column.is_nullable is not None:
            metadata[FIELD_METADATA_NULLABLE] = "true" if column.is_nullable else "false"
        fields.append(pa.field(column.name, arrow_type(column.logical_type, column.name), True, metadata))
    return pa.schema(fields)


def field_metadata(field: pa.Field, key: str) -> str | None:
    """The value of one of the field metadata keys above (under its earlier key in a table written
    by an earlier version), ``None`` when the field has none."""
    metadata = field.metadata or {}
    for name in _FIELD_METADATA_KEYS[key]:
        value = metadata.get(name)
        if value is not None:
            return value.decode()
    return None


def field_type_text(field: pa.Field) -> str | None:
    """The logical type's text a field's metadata records (``ARRAY<INT64>``), if any."""
    return field_metadata(field, FIELD_METADATA_TYPE)


def field_is_primary_key(field: pa.Field) -> bool:
    """Whether a field's metadata marks it a primary-key column."""
    return field_metadata(field, FIELD_METADATA_PRIMARY_KEY) == "true"


def field_is_nullable(field: pa.Field) -> bool | None:
    """The source's nullability of a field's column, ``None`` when its metadata does not record it."""
    value = field_metadata(field, FIELD_METADATA_NULLABLE)
    return None if value is None else value == "true"


def key_column_names(schema: pa.Schema | Iterable[pa.Field]) -> list[str]:
    """The primary-key columns of a table schema, in schema order."""
    return [field.name for field in schema if field_is_primary_key(field)]


def decode_column(logical_type: LogicalType | Any, values: Iterable[Any], column: str = "?") -> pa.Array:
    """Decode JSON-encoded values of one column into an Arrow array of the column's Arrow type."""
    logical_type = parse_logical_type(logical_type, column)
    decoded = [decode_value(logical_type, value, column) for value in values]
    return pa.array(decoded, type=arrow_type(logical_type, column))


# --------------------------------------------------------------------------- batch decoding


class _FastPathUnavailable(Exception):
    """The vectorised decoder cannot represent this batch; the per-value decoder takes over."""


def decode_json_objects(
    texts: pa.Array | pa.ChunkedArray | Sequence[str | None],
    columns: Sequence[ColumnType],
    *,
    what: str = "values",
) -> pa.Table:
    """Decode a column of JSON objects (one row image each) into typed columns.

    Keys missing from an object decode as NULL; a key that names no column of ``columns`` is an
    error naming it. ``None``/NULL texts decode as rows of NULLs. ``what`` names the source
    column in errors.
    """
    if not isinstance(texts, (pa.Array, pa.ChunkedArray)):
        texts = pa.array(list(texts), type=pa.string())
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks() if texts.num_chunks != 1 else texts.chunk(0)
    if pa.types.is_large_string(texts.type) or pa.types.is_string_view(texts.type):
        texts = texts.cast(pa.string())
    schema = pa.schema([pa.field(c.name, arrow_type(c.logical_type, c.name)) for c in columns])
    if len(texts) == 0:
        return schema.empty_table()
    try:
        return _decode_json_objects_fast(texts, columns, schema)
    except _FastPathUnavailable:
        return _decode_json_objects_python(texts.to_pylist(), columns, schema, what)


def _decode_json_objects_python(
    texts: Sequence[str | None], columns: Sequence[ColumnType], schema: pa.Schema, what: str
) -> pa.Table:
    names = {c.name for c in columns}
    objects = []
    for row, text in enumerate(texts):
        if text is None:
            objects.append({})
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueEncodingError(f"{what} of row {row} is not valid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise ValueEncodingError(f"{what} of row {row} is not a JSON object: {text[:80]!r}")
        unknown = set(obj) - names
        if unknown:
            raise ValueEncodingError(
                f"{what} of row {row} names column(s) {sorted(unknown)} missing from the table's column types"
            )
        objects.append(obj)
    arrays = [
        decode_column(c.logical_type, (obj.get(c.name) for obj in objects), c.name) for c in columns
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _wire_type(logical_type: LogicalType) -> pa.DataType:
    """The Arrow type the JSON reader parses a column as before conversion."""
    if logical_type.element is not None:
        return pa.list_(_wire_type(logical_type.element))
    if logical_type.code == "BOOL":
        return pa.bool_()
    if logical_type.code in ("FLOAT32", "FLOAT64"):
        return pa.float64()
    return pa.string()


def _ndjson_buffer(texts: pa.Array) -> pa.Buffer:
    """Concatenate the JSON texts, one per line, without copying them through Python."""
    if texts.null_count:
        texts = pc.fill_null(texts, "{}")
    # Every text must be one object. One spread over several lines then makes the reader fail or
    # count more rows than texts, which the caller checks (and falls back to per-value decoding).
    if not (pc.all(pc.starts_with(texts, "{")).as_py() and pc.all(pc.ends_with(texts, "}")).as_py()):
        raise _FastPathUnavailable
    joined = pc.binary_join_element_wise(texts, "", "\n")
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int32)
    start, end = int(offsets[joined.offset]), int(offsets[joined.offset + len(joined)])
    return joined.buffers()[2][start:end]


def _decode_json_objects_fast(texts: pa.Array, columns: Sequence[ColumnType], schema: pa.Schema) -> pa.Table:
    buffer = _ndjson_buffer(texts)
    # A block must hold the longest object; a few blocks per batch let the reader parse them on
    # several threads (one block per MiB leaves a typical 10k-row image column on one core).
    longest = int(pc.max(pc.binary_length(texts)).as_py() or 0) + 2
    block_size = max(longest, _MIN_JSON_BLOCK, min(_MAX_JSON_BLOCK, -(-buffer.size // _JSON_BLOCKS)))
    wire_schema = pa.schema([pa.field(c.name, _wire_type(c.logical_type)) for c in columns])
    try:
        wire = pa_json.read_json(
            pa.BufferReader(buffer),
            read_options=pa_json.ReadOptions(use_threads=True, block_size=block_size),
            parse_options=pa_json.ParseOptions(
                explicit_schema=wire_schema, unexpected_field_behavior="error"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        raise _FastPathUnavailable from None
    if wire.num_rows != len(texts):
        raise _FastPathUnavailable
    arrays = []
    for column in columns:
        try:
            arrays.append(_convert_wire(wire.column(column.name).combine_chunks(), column.logical_type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, binascii.Error):
            raise _FastPathUnavailable from None
    return pa.Table.from_arrays(arrays, schema=schema)


def _convert_wire(array: pa.Array, logical_type: LogicalType) -> pa.Array:
    if logical_type.element is not None:
        offsets = array.offsets
        values = _convert_wire(array.values, logical_type.element)
        return pa.ListArray.from_arrays(offsets, values, mask=array.is_null() if array.null_count else None)
    code = logical_type.code
    target = _SCALAR_ARROW_TYPES[code]
    if code in ("BOOL", "FLOAT32", "FLOAT64", "STRING", "JSON", "UUID", "DATE"):
        return array.cast(target)
    if code == "INT64":
        if pc.any(pc.invert(pc.match_substring_regex(array, r"^[+-]?\d+$"))).as_py():
            raise _FastPathUnavailable
        return array.cast(target)
    if code in ("NUMERIC", "BIGNUMERIC"):
        if pc.any(pc.invert(pc.match_substring_regex(array, r"^[+-]?(\d+\.?\d*|\.\d+)$"))).as_py():
            raise _FastPathUnavailable
        return array.cast(target)  # a value beyond the type's digits fails: the per-value path names it
    if code == "DATETIME":
        if pc.any(pc.invert(pc.match_substring_regex(array, _DATETIME_TEXT))).as_py():
            raise _FastPathUnavailable
        if (pc.max(pc.binary_length(array)).as_py() or 0) > _MICROS_DATETIME_LENGTH:
            array = pc.replace_substring_regex(array, _SUBMICRO_DIGITS, r"\1")
        return array.cast(target)
    if code == "TIMESTAMP":
        if (pc.max(pc.binary_length(array)).as_py() or 0) > _MICROS_TIMESTAMP_LENGTH:
            array = pc.replace_substring_regex(array, _SUBMICRO_DIGITS, r"\1")
        return array.cast(target)
    if code == "BYTES":
        return pa.array(
            [None if v is None else base64.b64decode(v, validate=True) for v in array.to_pylist()],
            type=target,
        )
    raise _FastPathUnavailable  # TIME (Arrow does not cast text to a time of day): value by value


__all__ = [
    "FIELD_METADATA_NULLABLE",
    "FIELD_METADATA_PRIMARY_KEY",
    "FIELD_METADATA_TYPE",
    "LEGACY_FIELD_METADATA_PRIMARY_KEY",
    "LEGACY_FIELD_METADATA_TYPE",
    "arrow_schema",
    "arrow_type",
    "decode_column",
    "decode_json_objects",
    "field_is_nullable",
    "field_is_primary_key",
    "field_metadata",
    "field_type_text",
    "key_column_names",
]
