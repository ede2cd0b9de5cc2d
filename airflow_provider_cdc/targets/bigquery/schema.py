"""Source columns → BigQuery table schema and Storage Write API proto writer schema (pure mapping).

A column's BigQuery type is its logical type's (:data:`~airflow_provider_cdc.targets.bigquery.types.
BIGQUERY_TYPES`), NUMERIC excepted; the writer sends these logical types:

| logical type | BigQuery | proto field |
| --- | --- | --- |
| BOOL | BOOL | bool |
| INT64 | INT64 | int64 |
| FLOAT32, FLOAT64 | FLOAT64 | double |
| NUMERIC (precision ≤ 38, scale ≤ 9, ≤ 29 integer digits) | NUMERIC | string |
| NUMERIC beyond that | BIGNUMERIC | string |
| STRING, UUID | STRING | string |
| JSON | JSON | string |
| BYTES | BYTES | bytes |
| DATE | DATE | int32 (days since 1970-01-01) |
| TIMESTAMP | TIMESTAMP | int64 (µs since the epoch) |
| ARRAY<T> | T, mode REPEATED | repeated T |

A column of another logical type (BIGNUMERIC, TIME, DATETIME) is refused naming table and column.
BigQuery arrays hold no NULL elements and a NULL array is stored as an empty one; an array with a
NULL element is refused naming table and column. The pseudo columns ``_CHANGE_TYPE`` and
``_CHANGE_SEQUENCE_NUMBER`` are string fields of the writer schema only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from airflow_provider_cdc.core.columns import ColumnType, LogicalType
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.values import NUMERIC_PRECISION, NUMERIC_SCALE
from airflow_provider_cdc.targets.bigquery.types import BIGQUERY_TYPES

CHANGE_TYPE_FIELD = "_CHANGE_TYPE"
SEQUENCE_FIELD = "_CHANGE_SEQUENCE_NUMBER"
#: BigQuery CDC's limit on primary-key columns.
MAX_PRIMARY_KEY_COLUMNS = 16
#: Clustering takes at most four columns, of these types.
MAX_CLUSTERING_COLUMNS = 4
CLUSTERABLE_TYPES = frozenset({"BOOL", "INT64", "NUMERIC", "BIGNUMERIC", "STRING", "DATE", "TIMESTAMP"})
#: Legacy names the BigQuery API may return for standard SQL types.
TYPE_ALIASES = {
    "INTEGER": "INT64",
    "BOOLEAN": "BOOL",
    "FLOAT": "FLOAT64",
    "BIGDECIMAL": "BIGNUMERIC",
    "DECIMAL": "NUMERIC",
}
_BQ_NUMERIC_INTEGER_DIGITS = 29
_BQ_NUMERIC_SCALE = 9

_F = descriptor_pb2.FieldDescriptorProto
_PROTO_TYPES = {
    "BOOL": _F.TYPE_BOOL,
    "INT64": _F.TYPE_INT64,
    "FLOAT64": _F.TYPE_DOUBLE,
    "NUMERIC": _F.TYPE_STRING,
    "BIGNUMERIC": _F.TYPE_STRING,
    "STRING": _F.TYPE_STRING,
    "JSON": _F.TYPE_STRING,
    "BYTES": _F.TYPE_BYTES,
    "DATE": _F.TYPE_INT32,
    "TIMESTAMP": _F.TYPE_INT64,
}
#: Scalar logical types the writer sends (the table above); NUMERIC's BigQuery type is :func:`numeric_type`.
_WRITTEN_CODES = frozenset(
    {"BOOL", "INT64", "FLOAT32", "FLOAT64", "NUMERIC", "STRING", "UUID", "JSON", "BYTES", "DATE", "TIMESTAMP"}
)
# BigQuery project ids (optionally domain-scoped) and dataset ids.
_PROJECT = re.compile(r"^(?:[a-z][a-z0-9.\-]*[a-z0-9]:)?[a-z][a-z0-9\-]{4,28}[a-z0-9]$")
_DATASET = re.compile(r"^[A-Za-z0-9_]{1,1024}$")


class BigQuerySchemaError(ValueError):
    """A table or value that cannot be written to BigQuery CDC (names table and column)."""


def validate_project(project: object) -> str:
    if not isinstance(project, str) or not _PROJECT.match(project):
        raise BigQuerySchemaError(f"invalid BigQuery project id {project!r}")
    return project


def validate_dataset(dataset: object) -> str:
    if not isinstance(dataset, str) or not _DATASET.match(dataset):
        raise BigQuerySchemaError(
            f"invalid BigQuery dataset id {dataset!r}: expected letters, digits and underscores"
        )
    return dataset


def normalize_type(type_name: str) -> str:
    upper = type_name.upper()
    return TYPE_ALIASES.get(upper, upper)


@dataclass(frozen=True)
class BigQueryColumn:
    """One BigQuery column: name, standard SQL type and mode (``NULLABLE`` or ``REPEATED``)."""

    name: str
    type: str
    mode: str = "NULLABLE"

    def to_api(self) -> dict[str, str]:
        return {"name": self.name, "type": self.type, "mode": self.mode}

    @classmethod
    def from_api(cls, field: Mapping[str, Any]) -> BigQueryColumn:
        return cls(
            str(field["name"]), normalize_type(str(field["type"])), str(field.get("mode") or "NULLABLE")
        )

    def same_as(self, other: BigQueryColumn) -> bool:
        return normalize_type(self.type) == normalize_type(other.type) and (
            (self.mode == "REPEATED") == (other.mode == "REPEATED")
        )

    def describe(self) -> str:
        return f"ARRAY<{self.type}>" if self.mode == "REPEATED" else self.type


def numeric_type(precision: int = NUMERIC_PRECISION, scale: int = NUMERIC_SCALE) -> str:
    """NUMERIC when BigQuery's NUMERIC (29 integer, 9 fractional digits) holds all values, else BIGNUMERIC."""
    return (
        "NUMERIC"
        if scale <= _BQ_NUMERIC_SCALE and precision - scale <= _BQ_NUMERIC_INTEGER_DIGITS
        else ("BIGNUMERIC")
    )


def _scalar_type(logical_type: LogicalType, table: str, column: str) -> str:
    if logical_type.code not in _WRITTEN_CODES:
        raise BigQuerySchemaError(
            f"table {table!r}: column {column!r} has the logical type {logical_type}, which the BigQuery "
            "target does not write"
        )
    if logical_type.code == "NUMERIC":
        return numeric_type()
    return BIGQUERY_TYPES[logical_type.code]


def bigquery_column(column: ColumnType, table: str) -> BigQueryColumn:
    """The BigQuery column of a source column."""
    validate_identifier(column.name, "column")
    logical_type = column.logical_type
    if logical_type.element is not None:
        return BigQueryColumn(column.name, _scalar_type(logical_type.element, table, column.name), "REPEATED")
    return BigQueryColumn(column.name, _scalar_type(logical_type, table, column.name))


def bigquery_columns(columns: Sequence[ColumnType], table: str) -> list[BigQueryColumn]:
    return [bigquery_column(c, table) for c in columns]


def clustering_columns(key: Sequence[BigQueryColumn]) -> list[str]:
    """The leading key columns BigQuery can cluster on (at most four, stopping at the first other type)."""
    chosen: list[str] = []
    for column in key:
        if column.mode == "REPEATED" or column.type not in CLUSTERABLE_TYPES:
            break
        chosen.append(column.name)
        if len(chosen) == MAX_CLUSTERING_COLUMNS:
            break
    return chosen


def check_primary_key(table: str, key: Sequence[str]) -> None:
    if not key:
        raise BigQuerySchemaError(
            f"table {table!r}: BigQuery CDC needs a primary key; the change set names none"
        )
    if len(key) > MAX_PRIMARY_KEY_COLUMNS:
        raise BigQuerySchemaError(
            f"table {table!r}: primary key has {len(key)} columns ({', '.join(key)}); BigQuery CDC allows "
            f"at most {MAX_PRIMARY_KEY_COLUMNS}"
        )


def interval_text(value: timedelta | str | None) -> str | None:
    """``max_staleness`` as BigQuery's INTERVAL text (``Y-M D H:M:S``), e.g. 15 min → ``0-0 0 0:15:0``."""
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise BigQuerySchemaError(f"max_staleness must be a positive timedelta, got {value!r}")
    seconds = int(value.total_seconds())
    if seconds != value.total_seconds():
        raise BigQuerySchemaError(f"max_staleness must be whole seconds, got {value!r}")
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    return f"0-0 {days} {hours}:{minutes}:{secs}"


def evolve_schema(
    table: str, existing: Sequence[BigQueryColumn], wanted: Sequence[BigQueryColumn]
) -> list[BigQueryColumn]:
    """The columns to add so ``existing`` holds every ``wanted`` column; a wanted column that
    exists with another type or mode fails naming table and column."""
    by_name = {c.name.lower(): c for c in existing}
    added = []
    for column in wanted:
        found = by_name.get(column.name.lower())
        if found is None:
            added.append(column)
        elif not found.same_as(column):
            raise BigQuerySchemaError(
                f"table {table!r}: column {column.name!r} is {found.describe()} in BigQuery but the change "
                f"set needs {column.describe()}; BigQuery cannot change a column's type in place"
            )
    return added


# --------------------------------------------------------------------------- proto writer schema


def proto_descriptor(
    columns: Sequence[BigQueryColumn], name: str = "CdcRow"
) -> descriptor_pb2.DescriptorProto:
    """The self-contained proto2 ``DescriptorProto`` of a CDC row: the columns plus the pseudo columns."""
    message = descriptor_pb2.DescriptorProto(name=name)
    for number, column in enumerate(columns, start=1):
        message.field.add(
            name=column.name,
            number=number,
            type=_PROTO_TYPES[column.type],
            label=_F.LABEL_REPEATED if column.mode == "REPEATED" else _F.LABEL_OPTIONAL,
        )
    for offset, pseudo in enumerate((CHANGE_TYPE_FIELD, SEQUENCE_FIELD)):
        message.field.add(
            name=pseudo, number=len(columns) + 1 + offset, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL
        )
    return message


def message_class(descriptor: descriptor_pb2.DescriptorProto) -> type:
    """A protobuf message class for a self-contained descriptor (in a pool of its own)."""
    pool = descriptor_pool.DescriptorPool()
    file = descriptor_pb2.FileDescriptorProto(name=f"{descriptor.name}.proto", syntax="proto2")
    file.message_type.add().CopyFrom(descriptor)
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(descriptor.name))


def _wire_array(array: pa.Array, column: BigQueryColumn, table: str) -> pa.Array:
    """An Arrow column converted to the Python values the proto field takes."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_large_list(array.type):
        array = array.cast(pa.list_(array.type.value_type))
    if pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type):
        array = array.cast(pa.binary() if pa.types.is_large_binary(array.type) else pa.string())
    kind = array.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        if pc.list_flatten(array).null_count:
            raise BigQuerySchemaError(
                f"table {table!r}: column {column.name!r} holds an array with a NULL element; BigQuery "
                "arrays cannot hold NULLs"
            )
        values = _wire_array(array.values, column, table)
        return pa.ListArray.from_arrays(array.offsets, values, mask=array.is_null())
    if pa.types.is_timestamp(kind):
        return array.cast(pa.timestamp("us", tz=kind.tz)).cast(pa.int64())
    if pa.types.is_date32(kind):
        return array.cast(pa.int32())
    if pa.types.is_decimal(kind):
        return array.cast(pa.string())
    if pa.types.is_float32(kind):
        return array.cast(pa.float64())
    return array


def python_columns(
    batch: pa.Table | pa.RecordBatch, columns: Sequence[BigQueryColumn], table: str
) -> list[list]:
    """Per column, the Python values of its proto field (NULL → ``None``, NULL arrays → ``[]``)."""
    result = []
    for column in columns:
        values = _wire_array(batch.column(column.name), column, table).to_pylist()
        if column.mode == "REPEATED":
            values = [[] if v is None else v for v in values]
        result.append(values)
    return result


def encode_rows(
    message: type,
    names: Sequence[str],
    columns: Sequence[list],
    change_types: Sequence[str],
    sequences: Sequence[str],
) -> list[bytes]:
    """Serialize rows (column-wise Python values) one by one with their pseudo columns (the reference
    for :func:`encode_batch`)."""
    fields = (*names, CHANGE_TYPE_FIELD, SEQUENCE_FIELD)
    out = []
    append = out.append
    for values in zip(*columns, change_types, sequences, strict=True):
        append(
            message(
                **{f: v for f, v in zip(fields, values, strict=True) if v is not None}
            ).SerializeToString()
        )
    return out


# --------------------------------------------------------------------------- vectorised encoding
# The protobuf wire format of a row is the concatenation of its set fields, each a tag (field
# number and wire type) followed by a varint, eight little-endian bytes (double) or a length-prefixed
# payload. ``encode_batch`` builds every field of a column at once with Arrow and numpy, then joins
# the fields of each row; it produces what ``encode_rows`` produces, without a Python call per row.
_VARINT, _FIXED64, _LENGTH_DELIMITED = 0, 1, 2
_VARINT_TYPES = frozenset({"BOOL", "INT64", "DATE", "TIMESTAMP"})
_EMPTY = pa.scalar(b"", pa.binary())


def _tag(number: int, wire_type: int) -> pa.Scalar:
    value, out = (number << 3) | wire_type, bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return pa.scalar(bytes(out), pa.binary())


def _binary(data: np.ndarray, lengths: np.ndarray) -> pa.Array:
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _varints(values: np.ndarray) -> pa.Array:
    """Each value (int64, negative ones as their 64-bit two's complement) as varint bytes."""
    rest = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64).copy()
    groups = np.empty((len(rest), 10), np.uint8)
    lengths = np.ones(len(rest), np.int32)
    for k in range(10):
        groups[:, k] = (rest & np.uint64(0x7F)).astype(np.uint8)
        rest >>= np.uint64(7)
        more = rest != 0
        groups[:, k] |= more.astype(np.uint8) << 7
        lengths += more
    return _binary(groups[np.arange(10) < lengths[:, None]], lengths)


def _encode_scalars(array: pa.Array, kind: str, number: int) -> pa.Array:
    """The field of every value (``null`` for NULL), ``array`` already in wire form."""
    if kind in _VARINT_TYPES:
        ints = pc.fill_null(array.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
        body = _varints(ints)
        encoded = pc.binary_join_element_wise(_tag(number, _VARINT), body, _EMPTY)
    elif kind == "FLOAT64":
        doubles = pc.fill_null(array.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False)
        data = np.ascontiguousarray(doubles, dtype="<f8").view(np.uint8)
        body = _binary(data, np.full(len(doubles), 8, np.int32))
        encoded = pc.binary_join_element_wise(_tag(number, _FIXED64), body, _EMPTY)
    else:
        payload = array.cast(pa.binary())
        lengths = pc.fill_null(pc.binary_length(payload), 0).to_numpy(zero_copy_only=False)
        encoded = pc.binary_join_element_wise(
            _tag(number, _LENGTH_DELIMITED), _varints(lengths), payload, _EMPTY
        )
    return pc.if_else(array.is_valid(), encoded, _EMPTY) if array.null_count else encoded


def _encode_column(array: pa.Array, column: BigQueryColumn, number: int) -> pa.Array:
    if column.mode != "REPEATED":
        return _encode_scalars(array, column.type, number)
    offsets = array.offsets.to_numpy()
    base = int(offsets[0])
    elements = _encode_scalars(array.values.slice(base, int(offsets[-1]) - base), column.type, number)
    lists = pa.ListArray.from_arrays(pa.array(offsets - base, pa.int32()), elements)
    return pc.fill_null(pc.binary_join(lists, _EMPTY), _EMPTY)


def encode_batch(
    batch: pa.Table | pa.RecordBatch,
    columns: Sequence[BigQueryColumn],
    change_types: pa.Array,
    sequences: pa.Array,
    table: str,
) -> list[bytes]:
    """Serialized rows of ``batch`` for the writer schema ``proto_descriptor(columns)`` (vectorised)."""
    fields = []
    for number, column in enumerate(columns, start=1):
        array = _wire_array(batch.column(column.name), column, table)
        if pa.types.is_null(array.type) or array.null_count == len(array):
            continue  # every value NULL (or an empty array): no field is set
        fields.append(_encode_column(array, column, number))
    for offset, array in enumerate((change_types, sequences)):
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        fields.append(_encode_scalars(array.cast(pa.string()), "STRING", len(columns) + 1 + offset))
    return pc.binary_join_element_wise(*fields, _EMPTY).to_pylist()
