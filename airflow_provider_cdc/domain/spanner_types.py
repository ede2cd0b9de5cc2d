"""Spanner column types: mapping to Arrow types and decoding of Spanner's JSON value encoding.

A change stream describes a table's columns as ``column_types`` entries
(``{"name", "type", "is_primary_key", "ordinal_position"}``) whose ``type`` is a Spanner type
code such as ``{"code": "INT64"}`` or ``{"code": "ARRAY", "array_element_type": {"code": "STRING"}}``.
Values travel in Spanner's JSON encoding: INT64, NUMERIC, DATE, TIMESTAMP and STRING as JSON
strings, FLOAT32/FLOAT64 as numbers (or ``"NaN"``, ``"Infinity"``, ``"-Infinity"``), BOOL as
booleans, BYTES as base64, JSON as a string holding the JSON text, ARRAY as a JSON array, NULL as
``null``. INT64 is also accepted as a JSON number.

Two decoders produce identical results: :func:`decode_value`/:func:`decode_column` (per value,
exact error messages) and :func:`decode_json_objects` (vectorised over a column of JSON objects,
falling back to the per-value decoder when the fast path cannot represent a batch).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Context, Decimal, InvalidOperation
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from airflow_provider_cdc.domain.identifiers import validate_identifier
from airflow_provider_cdc.domain.timestamps import format_timestamp, parse_timestamp

NUMERIC_PRECISION = 38
NUMERIC_SCALE = 9
_NUMERIC_QUANTUM = Decimal(1).scaleb(-NUMERIC_SCALE)
_NUMERIC_CONTEXT = Context(prec=NUMERIC_PRECISION + 10)

FIELD_METADATA_TYPE = "spanner.type"
FIELD_METADATA_PRIMARY_KEY = "spanner.primary_key"

_SCALAR_ARROW_TYPES: dict[str, pa.DataType] = {
    "BOOL": pa.bool_(),
    "INT64": pa.int64(),
    "FLOAT32": pa.float32(),
    "FLOAT64": pa.float64(),
    "NUMERIC": pa.decimal128(NUMERIC_PRECISION, NUMERIC_SCALE),
    "STRING": pa.string(),
    "JSON": pa.string(),
    "BYTES": pa.binary(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "UUID": pa.string(),
}
SUPPORTED_TYPE_CODES = frozenset(_SCALAR_ARROW_TYPES) | {"ARRAY"}

_TEXT_TYPE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(?:\(\s*(?:MAX|\d+)\s*\))?\s*$", re.IGNORECASE)
_ARRAY_TEXT_TYPE = re.compile(r"^\s*ARRAY\s*<(.*)>\s*$", re.IGNORECASE | re.DOTALL)
_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# Digits beyond microseconds: Arrow's parser refuses them, Spanner may send nanoseconds.
_SUBMICRO_DIGITS = r"(\.\d{6})\d+"
#: Longest RFC 3339 text with at most microseconds and a ``Z``: shorter texts need no trimming.
_MICROS_TIMESTAMP_LENGTH = len("0001-01-01T00:00:00.000000Z")
#: The JSON reader's blocks: about ``_JSON_BLOCKS`` per batch, within these bounds.
_JSON_BLOCKS = 4
_MIN_JSON_BLOCK = 64 << 10
_MAX_JSON_BLOCK = 1 << 20


class SpannerTypeError(ValueError):
    """A column type that is unknown, malformed or not representable."""


class SpannerValueError(ValueError):
    """A value that does not match its column's Spanner type."""


@dataclass(frozen=True)
class SpannerType:
    """A Spanner type code; ``element`` is set for ``ARRAY``."""

    code: str
    element: SpannerType | None = None

    def __str__(self) -> str:
        return f"ARRAY<{self.element}>" if self.code == "ARRAY" else self.code


@dataclass(frozen=True)
class ColumnType:
    """One ``column_types`` entry of a change record."""

    name: str
    type: SpannerType
    is_primary_key: bool
    ordinal_position: int

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": spanner_type_to_json(self.type),
            "is_primary_key": self.is_primary_key,
            "ordinal_position": self.ordinal_position,
        }


def spanner_type_to_json(spanner_type: SpannerType) -> dict[str, Any]:
    """The change-stream JSON form of a type (``{"code": ..., "array_element_type": ...}``)."""
    if spanner_type.element is None:
        return {"code": spanner_type.code}
    return {"code": "ARRAY", "array_element_type": spanner_type_to_json(spanner_type.element)}


def parse_spanner_type(value: Any, column: str = "?") -> SpannerType:
    """Parse a type given as a change-stream dict, its JSON text, or text such as ``ARRAY<INT64>``.

    Unknown codes raise :class:`SpannerTypeError` naming the column and the type.
    """
    if isinstance(value, SpannerType):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise SpannerTypeError(f"column {column!r}: malformed type JSON {value!r}") from exc
        else:
            return _parse_type_text(text, column)
    if isinstance(value, Mapping):
        code = value.get("code")
        if not isinstance(code, str):
            raise SpannerTypeError(f"column {column!r}: type {value!r} has no 'code'")
        code = code.upper()
        if code == "ARRAY":
            element = value.get("array_element_type", value.get("arrayElementType"))
            if element is None:
                raise SpannerTypeError(f"column {column!r}: ARRAY type {value!r} has no element type")
            try:
                element_type = parse_spanner_type(element, column)
            except SpannerTypeError as exc:
                raise SpannerTypeError(
                    f"column {column!r}: unsupported Spanner type {value!r}: {exc}"
                ) from None
            return _array_of(element_type, column, value)
        return _scalar(code, column, value)
    raise SpannerTypeError(f"column {column!r}: unsupported type description {value!r}")


def _parse_type_text(text: str, column: str) -> SpannerType:
    array = _ARRAY_TEXT_TYPE.match(text)
    if array:
        return _array_of(_parse_type_text(array.group(1), column), column, text)
    match = _TEXT_TYPE.match(text)
    if not match:
        raise SpannerTypeError(f"column {column!r}: unsupported Spanner type {text!r}")
    return _scalar(match.group(1).upper(), column, text)


def _scalar(code: str, column: str, original: Any) -> SpannerType:
    if code not in _SCALAR_ARROW_TYPES:
        raise SpannerTypeError(f"column {column!r}: unsupported Spanner type {original!r} (code {code})")
    return SpannerType(code)


def _array_of(element: SpannerType, column: str, original: Any) -> SpannerType:
    if element.code == "ARRAY":
        raise SpannerTypeError(f"column {column!r}: nested arrays are not Spanner types: {original!r}")
    return SpannerType("ARRAY", element)


def arrow_type(spanner_type: SpannerType | Any, column: str = "?") -> pa.DataType:
    """Arrow type for a Spanner type (see the module docstring for the mapping)."""
    spanner_type = parse_spanner_type(spanner_type, column)
    if spanner_type.element is not None:
        return pa.list_(arrow_type(spanner_type.element, column))
    return _SCALAR_ARROW_TYPES[spanner_type.code]


def parse_column_types(value: str | Iterable[Mapping[str, Any] | ColumnType]) -> list[ColumnType]:
    """Parse ``column_types`` (JSON text or a list of entries), validate names, order by ordinal position."""
    entries: Any = value
    if isinstance(value, str):
        try:
            entries = json.loads(value)
        except json.JSONDecodeError as exc:
            raise SpannerTypeError(f"column_types is not valid JSON: {exc}") from exc
    if not isinstance(entries, Iterable) or isinstance(entries, (str, bytes, Mapping)):
        raise SpannerTypeError(f"column_types must be a list of column entries, got {type(entries).__name__}")
    columns: list[ColumnType] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        if isinstance(entry, ColumnType):
            column = entry
        else:
            if not isinstance(entry, Mapping) or "name" not in entry or "type" not in entry:
                raise SpannerTypeError(f"column_types[{index}] needs 'name' and 'type': {entry!r}")
            name = validate_identifier(entry["name"], "column")
            position = entry.get("ordinal_position", index + 1)
            if isinstance(position, bool) or not isinstance(position, int):
                raise SpannerTypeError(
                    f"column {name!r}: ordinal_position must be an integer, got {position!r}"
                )
            column = ColumnType(
                name=name,
                type=parse_spanner_type(entry["type"], name),
                is_primary_key=bool(entry.get("is_primary_key", False)),
                ordinal_position=position,
            )
        folded = column.name.lower()
        if folded in seen:
            raise SpannerTypeError(f"column {column.name!r} appears twice in column_types")
        seen.add(folded)
        columns.append(column)
    return sorted(columns, key=lambda c: (c.ordinal_position, c.name))


def union_column_types(texts: Iterable[str | Iterable[Mapping[str, Any] | ColumnType]]) -> list[ColumnType]:
    """A table's columns as every record of a window describes them, oldest record first.

    Spanner's UPDATE records list only the key columns and the columns the mods change; INSERT and
    DELETE records list every column. The union (by name, case-insensitively) holds every column any
    record names, each as the newest record naming it describes it (type, key flag, ordinal position),
    so a column whose type changed in the window has its newest type. Ordered by ordinal position.
    """
    union: dict[str, ColumnType] = {}
    for text in texts:
        for column in parse_column_types(text):
            union[column.name.lower()] = column
    return sorted(union.values(), key=lambda c: (c.ordinal_position, c.name))


def column_types_json(columns: Iterable[ColumnType]) -> str:
    """Canonical JSON text of column entries (compact, sorted keys, in the given order)."""
    return json.dumps([column.to_json_dict() for column in columns], sort_keys=True, separators=(",", ":"))


def arrow_schema(column_types: str | Iterable[Mapping[str, Any] | ColumnType]) -> pa.Schema:
    """Arrow schema of a table's columns ordered by ordinal position, key columns as ordinary columns.

    Each field carries metadata ``spanner.type`` (e.g. ``ARRAY<INT64>``) and ``spanner.primary_key``
    (``true``/``false``).
    """
    fields = []
    for column in parse_column_types(column_types):
        metadata = {
            FIELD_METADATA_TYPE: str(column.type),
            FIELD_METADATA_PRIMARY_KEY: "true" if column.is_primary_key else "false",
        }
        fields.append(pa.field(column.name, arrow_type(column.type, column.name), True, metadata))
    return pa.schema(fields)


# --------------------------------------------------------------------------- per-value decoding


def decode_value(spanner_type: SpannerType | Any, value: Any, column: str = "?") -> Any:
    """Decode one JSON-encoded value to its Python value (``None`` for NULL).

    INT64 → int, FLOAT32/FLOAT64 → float, NUMERIC → Decimal, BOOL → bool, STRING/JSON/UUID → str,
    BYTES → bytes, DATE → date, TIMESTAMP → aware UTC datetime (µs), ARRAY → list.
    """
    spanner_type = parse_spanner_type(spanner_type, column)
    if value is None:
        return None
    code = spanner_type.code
    try:
        if code == "ARRAY":
            if not isinstance(value, list):
                raise SpannerValueError("expected a JSON array")
            assert spanner_type.element is not None
            return [decode_value(spanner_type.element, item, column) for item in value]
        return _SCALAR_DECODERS[code](value)
    except SpannerValueError as exc:
        raise SpannerValueError(f"column {column!r} ({spanner_type}): {exc}: {value!r}") from None
    except (ValueError, TypeError, InvalidOperation, binascii.Error, OverflowError) as exc:
        raise SpannerValueError(
            f"column {column!r} ({spanner_type}): cannot decode {value!r}: {exc}"
        ) from None


def _decode_int64(value: Any) -> int:
    if isinstance(value, bool):
        raise SpannerValueError("expected an integer")
    if isinstance(value, int):
        result = value
    elif isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        result = int(value)
    elif isinstance(value, float) and value.is_integer():
        result = int(value)
    else:
        raise SpannerValueError("expected an integer")
    if not -(2**63) <= result < 2**63:
        raise SpannerValueError("integer out of INT64 range")
    return result


def _decode_float(value: Any) -> float:
    if isinstance(value, bool):
        raise SpannerValueError("expected a number")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        if value in _FLOAT_WORDS:
            return _FLOAT_WORDS[value]
        return float(value)
    raise SpannerValueError("expected a number")


def _decode_float32(value: Any) -> float:
    result = _decode_float(value)
    return float(np.float32(result)) if math.isfinite(result) else result


def _decode_numeric(value: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SpannerValueError("expected a decimal string")
    number = Decimal(str(value))
    if not number.is_finite():
        raise SpannerValueError("NUMERIC must be finite")
    quantized = number.quantize(_NUMERIC_QUANTUM, context=_NUMERIC_CONTEXT)
    if quantized != number:
        raise SpannerValueError(f"more than {NUMERIC_SCALE} fractional digits")
    if len(quantized.as_tuple().digits) > NUMERIC_PRECISION:
        raise SpannerValueError(f"more than {NUMERIC_PRECISION} digits")
    return quantized


def _decode_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpannerValueError("expected true or false")
    return value


def _decode_string(value: Any) -> str:
    if not isinstance(value, str):
        raise SpannerValueError("expected a string")
    return value


def _decode_json(value: Any) -> str:
    if isinstance(value, str):
        return value
    # Tolerate a JSON value given as a structure instead of its text.
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _decode_bytes(value: Any) -> bytes:
    if not isinstance(value, str):
        raise SpannerValueError("expected a base64 string")
    return base64.b64decode(value, validate=True)


def _decode_date(value: Any) -> date:
    if not isinstance(value, str):
        raise SpannerValueError("expected a date string")
    return date.fromisoformat(value)


def _decode_timestamp(value: Any) -> datetime:
    if not isinstance(value, str):
        raise SpannerValueError("expected an RFC 3339 timestamp string")
    return parse_timestamp(value)


_SCALAR_DECODERS = {
    "BOOL": _decode_bool,
    "INT64": _decode_int64,
    "FLOAT32": _decode_float32,
    "FLOAT64": _decode_float,
    "NUMERIC": _decode_numeric,
    "STRING": _decode_string,
    "JSON": _decode_json,
    "BYTES": _decode_bytes,
    "DATE": _decode_date,
    "TIMESTAMP": _decode_timestamp,
    "UUID": _decode_string,
}


def decode_column(spanner_type: SpannerType | Any, values: Iterable[Any], column: str = "?") -> pa.Array:
    """Decode JSON-encoded values of one column into an Arrow array of the column's Arrow type."""
    spanner_type = parse_spanner_type(spanner_type, column)
    decoded = [decode_value(spanner_type, value, column) for value in values]
    return pa.array(decoded, type=arrow_type(spanner_type, column))


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
    schema = pa.schema([pa.field(c.name, arrow_type(c.type, c.name)) for c in columns])
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
            raise SpannerValueError(f"{what} of row {row} is not valid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise SpannerValueError(f"{what} of row {row} is not a JSON object: {text[:80]!r}")
        unknown = set(obj) - names
        if unknown:
            raise SpannerValueError(
                f"{what} of row {row} names column(s) {sorted(unknown)} missing from the table's column types"
            )
        objects.append(obj)
    arrays = [decode_column(c.type, (obj.get(c.name) for obj in objects), c.name) for c in columns]
    return pa.Table.from_arrays(arrays, schema=schema)


def _wire_type(spanner_type: SpannerType) -> pa.DataType:
    """The Arrow type the JSON reader parses a column as before conversion."""
    if spanner_type.element is not None:
        return pa.list_(_wire_type(spanner_type.element))
    if spanner_type.code == "BOOL":
        return pa.bool_()
    if spanner_type.code in ("FLOAT32", "FLOAT64"):
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
    wire_schema = pa.schema([pa.field(c.name, _wire_type(c.type)) for c in columns])
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
            arrays.append(_convert_wire(wire.column(column.name).combine_chunks(), column.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, binascii.Error):
            raise _FastPathUnavailable from None
    return pa.Table.from_arrays(arrays, schema=schema)


def _convert_wire(array: pa.Array, spanner_type: SpannerType) -> pa.Array:
    if spanner_type.element is not None:
        offsets = array.offsets
        values = _convert_wire(array.values, spanner_type.element)
        return pa.ListArray.from_arrays(offsets, values, mask=array.is_null() if array.null_count else None)
    code = spanner_type.code
    target = _SCALAR_ARROW_TYPES[code]
    if code in ("BOOL", "FLOAT32", "FLOAT64", "STRING", "JSON", "UUID", "DATE"):
        return array.cast(target)
    if code == "INT64":
        if pc.any(pc.invert(pc.match_substring_regex(array, r"^[+-]?\d+$"))).as_py():
            raise _FastPathUnavailable
        return array.cast(target)
    if code == "NUMERIC":
        if pc.any(pc.invert(pc.match_substring_regex(array, r"^[+-]?(\d+\.?\d*|\.\d+)$"))).as_py():
            raise _FastPathUnavailable
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
    raise _FastPathUnavailable  # pragma: no cover - every supported code is handled above


def canonical_spanner_json(columns: Sequence[ColumnType]) -> str:
    """``column_types`` as compact JSON text (inverse of :func:`parse_column_types`)."""
    return json.dumps([c.to_json_dict() for c in columns], separators=(",", ":"))


def write_json_value(spanner_type: SpannerType | Any, value: Any, column: str = "?") -> Any:
    """Encode a Python value in Spanner's JSON encoding (inverse of :func:`decode_value`)."""
    spanner_type = parse_spanner_type(spanner_type, column)
    if value is None:
        return None
    code = spanner_type.code
    if code == "ARRAY":
        assert spanner_type.element is not None
        return [write_json_value(spanner_type.element, item, column) for item in value]
    if code in ("INT64", "NUMERIC"):
        return str(value)
    if code in ("FLOAT32", "FLOAT64"):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return float(value)
    if code == "BYTES":
        return base64.b64encode(value).decode("ascii")
    if code == "DATE":
        return value.isoformat()
    if code == "TIMESTAMP":
        return format_timestamp(value)
    return value


__all__ = [
    "FIELD_METADATA_PRIMARY_KEY",
    "FIELD_METADATA_TYPE",
    "ColumnType",
    "SUPPORTED_TYPE_CODES",
    "SpannerType",
    "SpannerTypeError",
    "SpannerValueError",
    "arrow_schema",
    "arrow_type",
    "canonical_spanner_json",
    "decode_column",
    "decode_json_objects",
    "decode_value",
    "parse_column_types",
    "parse_spanner_type",
    "spanner_type_to_json",
    "write_json_value",
]
