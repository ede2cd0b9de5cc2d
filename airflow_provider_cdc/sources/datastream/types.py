"""Datastream column types as logical types, and column values in their JSON value encoding.

Avro payload columns (each a union with ``null``):

| Avro | logical |
| --- | --- |
| boolean | BOOL |
| int, long | INT64 |
| float / double | FLOAT32 / FLOAT64 |
| string (also ``varchar``, ``json`` → JSON, unknown string logical types), enum | STRING |
| bytes, fixed | BYTES |
| decimal(p, s) | NUMERIC when s ≤ 9 and p - s ≤ 29, else BIGNUMERIC (s ≤ 38, p - s ≤ 38) |
| timestamp-millis/micros / local-timestamp-millis/micros | TIMESTAMP / DATETIME |
| date / time-millis/micros / uuid | DATE / TIME / UUID |
| array of T; PostgreSQL's ``multidimensionalArray_*`` record | ARRAY<T> |

A PostgreSQL array value with more than one dimension has no ARRAY type: declare the column JSON
in ``column_types`` (the nested lists become its JSON text). A type without a mapping is refused
naming the object, the column and the Avro type.

JSONL files carry no types: a column's type is declared in ``column_types``, else the kind of its
values in the file (bool → BOOL, int → INT64, float → FLOAT64 (int and float: FLOAT64), text →
STRING, object or list → JSON); a column null in every event of a file is STRING. So declare
``column_types`` for JSONL columns that are not text (numbers as text, timestamps, decimals) or
that may be null throughout a file.

Values are encoded by :mod:`airflow_provider_cdc.core.types` (each scalar type's ``encode``);
a converter is ``None`` where the Python value already is its JSON value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.core.types import (
    ARRAY,
    BIGNUMERIC_PRECISION,
    BIGNUMERIC_SCALE,
    NUMERIC_PRECISION,
    NUMERIC_SCALE,
    SCALAR_TYPES,
    LogicalType,
    LogicalTypeError,
    array_type,
)

#: Python value → JSON value.
Converter = Callable[[Any], Any]

_BOOL, _INT64, _FLOAT32, _FLOAT64 = (LogicalType(c) for c in ("BOOL", "INT64", "FLOAT32", "FLOAT64"))
_STRING, _JSON, _BYTES, _UUID = (LogicalType(c) for c in ("STRING", "JSON", "BYTES", "UUID"))
_NUMERIC, _BIGNUMERIC = LogicalType("NUMERIC"), LogicalType("BIGNUMERIC")
_PRIMITIVES = {
    "boolean": _BOOL,
    "int": _INT64,
    "long": _INT64,
    "float": _FLOAT32,
    "double": _FLOAT64,
    "string": _STRING,
    "enum": _STRING,
    "bytes": _BYTES,
    "fixed": _BYTES,
}
_LOGICAL = {
    "timestamp-millis": LogicalType("TIMESTAMP"),
    "timestamp-micros": LogicalType("TIMESTAMP"),
    "local-timestamp-millis": LogicalType("DATETIME"),
    "local-timestamp-micros": LogicalType("DATETIME"),
    "date": LogicalType("DATE"),
    "time-millis": LogicalType("TIME"),
    "time-micros": LogicalType("TIME"),
    "uuid": _UUID,
    "json": _JSON,
    "varchar": _STRING,
}
#: Value-level types without a converter: the Python value is its JSON value.
_IDENTITY_CODES = frozenset({"BOOL", "STRING", "JSON"})
_ARRAY_RECORD_PREFIX = "multidimensionalArray"
_COMPACT = json.JSONEncoder(separators=(",", ":"), sort_keys=True)


class DatastreamTypeError(LogicalTypeError):
    """A Datastream column type without a logical type (names object, column and type)."""


class MultidimensionalArrayError(ValueError):
    """A PostgreSQL array value with more than one dimension in a column typed ARRAY<T>."""


def _unwrap_null(avro_type: Any) -> Any:
    """The non-null branch of a ``["null", T]`` union (``avro_type`` itself when not a union)."""
    if isinstance(avro_type, list):
        branches = [branch for branch in avro_type if branch != "null"]
        if len(branches) == 1:
            return branches[0]
    return avro_type


def _fits_numeric(precision: int, scale: int) -> bool:
    return 0 <= scale <= NUMERIC_SCALE and precision - scale <= NUMERIC_PRECISION - NUMERIC_SCALE


def _decimal_type(avro_type: Mapping[str, Any], where: str) -> LogicalType:
    precision, scale = avro_type.get("precision"), avro_type.get("scale", 0)
    if not isinstance(precision, int) or not isinstance(scale, int):
        raise DatastreamTypeError(f"{where}: decimal type {avro_type!r} has no precision/scale")
    if _fits_numeric(precision, scale):
        return _NUMERIC
    if 0 <= scale <= BIGNUMERIC_SCALE and precision - scale <= BIGNUMERIC_PRECISION - BIGNUMERIC_SCALE:
        return _BIGNUMERIC
    raise DatastreamTypeError(f"{where}: decimal({precision}, {scale}) fits neither NUMERIC nor BIGNUMERIC")


def _array_record_element(record: Mapping[str, Any], named: dict[str, Any], where: str) -> Any:
    """The element type of PostgreSQL's ``multidimensionalArray_*`` record (its ``elementValue``)."""
    fields = {f.get("name"): f.get("type") for f in record.get("fields", ()) if isinstance(f, Mapping)}
    if "elementValue" not in fields:
        raise DatastreamTypeError(f"{where}: array record {record.get('name')!r} has no elementValue field")
    nested = _unwrap_null(fields.get("nestedArray"))
    if isinstance(nested, Mapping) and nested.get("type") == "array":
        _register(nested.get("items"), named)
    return _unwrap_null(fields["elementValue"])


def _register(avro_type: Any, named: dict[str, Any]) -> None:
    if isinstance(avro_type, Mapping) and avro_type.get("type") in ("record", "enum", "fixed"):
        name = avro_type.get("name")
        if isinstance(name, str):
            named[name] = avro_type
            named[name.rsplit(".", 1)[-1]] = avro_type


def _is_array_record(avro_type: Any) -> bool:
    return (
        isinstance(avro_type, Mapping)
        and avro_type.get("type") == "record"
        and str(avro_type.get("name", "")).rsplit(".", 1)[-1].startswith(_ARRAY_RECORD_PREFIX)
    )


def avro_logical_type(
    avro_type: Any, column: str, object_name: str = "?", named: dict[str, Any] | None = None
) -> LogicalType:
    """The logical type of an Avro column type (a ``["null", T]`` union is a nullable T)."""
    named = {} if named is None else named
    where = f"object {object_name!r}, column {column!r} (Avro type {json.dumps(avro_type)})"
    avro_type = _unwrap_null(avro_type)
    if isinstance(avro_type, str) and avro_type in named:
        avro_type = named[avro_type]
    if isinstance(avro_type, list):
        raise DatastreamTypeError(f"{where}: a union of several types has no logical type")
    if isinstance(avro_type, str):
        found = _PRIMITIVES.get(avro_type)
        if found is None or avro_type in ("enum", "fixed"):
            raise DatastreamTypeError(f"{where}: no logical type for {avro_type!r}")
        return found
    if not isinstance(avro_type, Mapping):
        raise DatastreamTypeError(f"{where}: malformed Avro type")
    _register(avro_type, named)
    logical = avro_type.get("logicalType")
    base = avro_type.get("type")
    if logical == "decimal" and base in ("bytes", "fixed"):
        return _decimal_type(avro_type, where)
    if logical in _LOGICAL:
        found = _LOGICAL[logical]
        if found.code in ("STRING", "JSON", "UUID") and base != "string":
            raise DatastreamTypeError(f"{where}: logical type {logical!r} on {base!r}")
        return found
    if base == "array":
        items = _unwrap_null(avro_type.get("items"))
        if isinstance(items, str) and items in named:
            items = named[items]
        if _is_array_record(items):
            return array_type(
                avro_logical_type(_array_record_element(items, named, where), column, object_name, named)
            )
        element = avro_logical_type(items, column, object_name, named)
        try:
            return array_type(element, column, avro_type)
        except LogicalTypeError as exc:
            raise DatastreamTypeError(f"{where}: {exc}") from None
    if _is_array_record(avro_type):
        element = avro_logical_type(
            _array_record_element(avro_type, named, where), column, object_name, named
        )
        return array_type(element)
    if base in _PRIMITIVES and base not in ("record", "array", "map"):
        return _PRIMITIVES[base]  # a primitive with an unknown (string) logical type or attributes
    raise DatastreamTypeError(f"{where}: no logical type")


def _array_values(value: Any) -> Any:
    """A PostgreSQL array record value (or a list of them) as nested Python lists."""
    if isinstance(value, Mapping) and ("nestedArray" in value or "elementValue" in value):
        nested = value.get("nestedArray")
        if nested is not None:
            return [_array_values(item) for item in nested]
        return value.get("elementValue")
    if isinstance(value, list):
        return [_array_values(item) for item in value]
    return value


def _flat_array(value: Any, column: str) -> list[Any]:
    values = _array_values(value)
    if not isinstance(values, list):
        values = [values]
    if any(isinstance(item, list) for item in values):
        raise MultidimensionalArrayError(
            f"column {column!r} holds a multi-dimensional array; declare the column JSON in column_types"
        )
    return values


def _json_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8")
    return _COMPACT.encode(_array_values(value) if isinstance(value, list) else value)


def utc_timestamp_text(value: datetime) -> str:
    """RFC 3339 text of an aware UTC datetime, as ``format_timestamp`` writes it (``…:SS.ffffffZ``)."""
    return value.isoformat(timespec="microseconds")[:-6] + "Z"


def _timestamp_text(value: Any) -> str:
    """TIMESTAMP's JSON value of a datetime (fastavro's ``timestamp-millis/micros``)."""
    if type(value) is datetime and value.tzinfo is timezone.utc:
        return value.isoformat(timespec="microseconds")[:-6] + "Z"
    return format_timestamp(value)


# RFC 3339 text in UTC (``Z`` or no zone) with up to 9 fractional digits.
_UTC_TEXT = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2})[Tt ]([0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.([0-9]{1,9}))?[Zz]?"
)


def utc_text_of(text: str) -> str | None:
    """TIMESTAMP's JSON value of RFC 3339 text in UTC (``Z`` or no zone), as ``format_timestamp``
    writes the parsed text (microseconds kept, further digits dropped); ``None`` for other text."""
    match = _UTC_TEXT.fullmatch(text)
    if match is None:
        return None
    day, clock, fraction = match.groups()
    try:
        datetime.fromisoformat(f"{day}T{clock}")  # the date and time exist
    except ValueError:
        return None
    return f"{day}T{clock}.{(fraction or '')[:6].ljust(6, '0')}Z"


def _timestamp_text_converter(slow: Converter) -> Converter:
    """``slow`` (decode then encode a JSONL timestamp), short-cut for text in UTC."""

    def convert(value: Any) -> Any:
        text = utc_text_of(value) if type(value) is str else None
        return slow(value) if text is None else text

    return convert


#: Converters of types whose encoding is ``str`` of the value fastavro gives (int, Decimal).
_STR_CODES = frozenset({"INT64", "NUMERIC"})


def value_converter(
    logical_type: LogicalType, column: str = "?", array_records: bool = False
) -> Converter | None:
    """Python value (as fastavro or ``json.loads`` gives it, never ``None``) → JSON value.

    ``array_records``: the values are PostgreSQL ``multidimensionalArray_*`` records.
    """
    if logical_type.code == ARRAY:
        assert logical_type.element is not None
        element = value_converter(logical_type.element, column)
        if array_records:
            if element is None:
                return lambda value: _flat_array(value, column)
            return lambda value: [None if v is None else element(v) for v in _flat_array(value, column)]
        if element is None:
            return list
        return lambda value: [None if v is None else element(v) for v in value]
    if logical_type.code == "JSON":
        return _json_text
    if logical_type.code == "UUID":
        return str
    if logical_type.code in _IDENTITY_CODES:
        return None
    if logical_type.code in _STR_CODES:
        return str
    if logical_type.code == "TIMESTAMP":
        return _timestamp_text
    return SCALAR_TYPES[logical_type.code].encode


def json_value_converter(logical_type: LogicalType, column: str = "?") -> Converter | None:
    """JSON value of a JSONL payload → the JSON value encoding of ``logical_type`` (decoded by the
    core type's ``decode`` and encoded back, so text is normalised: ``"2021-05-16 01:13:01"`` →
    ``"2021-05-16T01:13:01.000000Z"``)."""
    if logical_type.code == ARRAY:
        assert logical_type.element is not None
        element = json_value_converter(logical_type.element, column)
        if element is None:
            return list
        return lambda value: [None if v is None else element(v) for v in value]
    if logical_type.code == "JSON":
        return _json_text
    if logical_type.code in ("BOOL", "STRING", "UUID"):
        return None
    scalar = SCALAR_TYPES[logical_type.code]
    decode, encode = scalar.decode, scalar.encode
    if logical_type.code == "TIMESTAMP":
        return _timestamp_text_converter(lambda value: encode(decode(value)))
    return lambda value: encode(decode(value))


def json_value_type(value: Any) -> LogicalType | None:
    """The logical type a JSONL value's kind implies (``None`` for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, int):
        return _INT64
    if isinstance(value, float):
        return _FLOAT64
    if isinstance(value, str):
        return _STRING
    return _JSON


def widen(current: LogicalType | None, seen: LogicalType | None) -> LogicalType | None:
    """The type of a JSONL column after one more value (INT64 and FLOAT64 give FLOAT64);
    ``None`` when the kinds conflict."""
    if seen is None or current == seen:
        return current if seen is None else seen
    if current is None:
        return seen
    if {current.code, seen.code} == {"INT64", "FLOAT64"}:
        return _FLOAT64
    return None


__all__ = [
    "Converter",
    "DatastreamTypeError",
    "MultidimensionalArrayError",
    "avro_logical_type",
    "json_value_converter",
    "inferred_value_converter",
    "json_value_type",
    "utc_text_of",
    "utc_timestamp_text",
    "value_converter",
    "widen",
]


def _kind_check(logical_type: LogicalType, column: str) -> Converter | None:
    code = logical_type.code
    if code == "JSON":
        return _json_text
    if code == "BOOL":
        accepts: tuple[type, ...] = (bool,)
    elif code == "INT64":
        accepts = (int,)
    elif code == "FLOAT64":
        accepts = (int, float)
    else:
        accepts = (str,)
    encode = SCALAR_TYPES[code].encode if code in ("INT64", "FLOAT64") else None
    exact = frozenset(accepts) | {type(None)}

    def check(value: Any) -> Any:
        if not isinstance(value, accepts) or (code != "BOOL" and isinstance(value, bool)):
            raise ValueError(
                f"column {column!r} was typed {code} from its values in the file, but holds {value!r}; "
                "declare its type in column_types"
            )
        return value if encode is None else encode(value)

    def check_column(values: list[Any]) -> list[Any]:
        if not exact.issuperset(map(type, values)):
            return [value if value is None else check(value) for value in values]
        if encode is None:
            return values
        if code == "INT64" and None not in values:
            return list(map(str, values))  # INT64's encoding of an int
        return [value if value is None else encode(value) for value in values]

    check.column = check_column  # type: ignore[attr-defined]
    return check


def inferred_value_converter(logical_type: LogicalType, column: str = "?") -> Converter | None:
    """A JSONL column typed from its values' kind: values of another kind are refused. Its
    ``column`` attribute converts a list of values (``None`` kept) at once."""
    return _kind_check(logical_type, column)
