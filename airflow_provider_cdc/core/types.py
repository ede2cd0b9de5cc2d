"""Logical column types: the one type model sources map to and the merge job and targets map from.

Each scalar type is declared once (:data:`SCALAR_TYPES`) with its Arrow type, Spark SQL type and
JSON value encoding; ``ARRAY<T>`` holds any scalar ``T`` (no nested arrays). A target that stores
other types keeps its own mapping from these (in its folder).

| Type | Arrow | Spark SQL | JSON value |
| --- | --- | --- | --- |
| BOOL | bool | BOOLEAN | ``true``/``false`` |
| INT64 | int64 | BIGINT | decimal string (a JSON integer is accepted) |
| FLOAT32 | float32 | FLOAT | number, or ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` |
| FLOAT64 | float64 | DOUBLE | as FLOAT32 |
| NUMERIC | decimal128(38, 9) | DECIMAL(38,9) | decimal string, ≤ 9 fractional, ≤ 38 digits |
| BIGNUMERIC | decimal256(76, 38) | STRING | decimal string, ≤ 38 fractional and integer digits |
| STRING | string | STRING | string |
| BYTES | binary | BINARY | base64 string |
| JSON | string | STRING | string holding the JSON text |
| DATE | date32 | DATE | ``"YYYY-MM-DD"`` |
| TIME | time64[us] | STRING | ``"HH:MM:SS[.ffffff]"`` |
| DATETIME | timestamp[us] | TIMESTAMP_NTZ | ``"YYYY-MM-DDTHH:MM:SS[.ffffff]"``, no zone |
| TIMESTAMP | timestamp[us, UTC] | TIMESTAMP | RFC 3339 text, written in UTC with ``Z`` |
| UUID | string | STRING | string |
| ARRAY<T> | list<T> | ARRAY<T> | JSON array of T's values |

NULL is ``null`` for every type. TIME, DATETIME and TIMESTAMP keep microseconds: digits beyond
them are truncated when read (a DATETIME or TIME may also use a space or no fraction). Spark SQL
has no decimal wider than 38 digits and no time of day, so BIGNUMERIC and TIME are text there
(the merge job moves values as JSON text, never as Spark values).

A type's JSON form is ``{"code": "INT64"}`` or ``{"code": "ARRAY", "array_element_type": {...}}``
(the codes staged rows and change sets hold) and its text form
``INT64`` or ``ARRAY<INT64>`` (a target's table metadata may hold it). :func:`decode_value` gives a JSON
value's Python value, :func:`encode_value` the inverse.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Context, Decimal, InvalidOperation
from typing import Any

from airflow_provider_cdc.core.timestamps import format_timestamp, parse_timestamp

ARRAY = "ARRAY"
NUMERIC_PRECISION = 38
NUMERIC_SCALE = 9
BIGNUMERIC_PRECISION = 76
BIGNUMERIC_SCALE = 38

_NUMERIC_QUANTUM = Decimal(1).scaleb(-NUMERIC_SCALE)
_NUMERIC_CONTEXT = Context(prec=NUMERIC_PRECISION + 10)
_BIGNUMERIC_QUANTUM = Decimal(1).scaleb(-BIGNUMERIC_SCALE)
_BIGNUMERIC_CONTEXT = Context(prec=BIGNUMERIC_PRECISION + 10)
_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_TEXT_TYPE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(?:\(\s*(?:MAX|\d+)\s*\))?\s*$", re.IGNORECASE)
_ARRAY_TEXT_TYPE = re.compile(r"^\s*ARRAY\s*<(.*)>\s*$", re.IGNORECASE | re.DOTALL)
_TIME_TEXT = r"(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
_TIME = re.compile(rf"^{_TIME_TEXT}$")
_DATETIME = re.compile(rf"^(\d{{4}})-(\d{{2}})-(\d{{2}})[Tt ]{_TIME_TEXT}$")


class LogicalTypeError(ValueError):
    """A column type that is unknown, malformed or not representable."""


class ValueEncodingError(ValueError):
    """A value that does not match its column's type."""


@dataclass(frozen=True)
class LogicalType:
    """A logical type: a scalar code, or ``ARRAY`` with its ``element`` type."""

    code: str
    element: LogicalType | None = None

    def __str__(self) -> str:
        return f"ARRAY<{self.element}>" if self.code == ARRAY else self.code

    @property
    def scalar(self) -> ScalarType:
        """The scalar type (an array's element type) with its mappings and encoding."""
        return SCALAR_TYPES[self.element.code if self.element is not None else self.code]

    def to_json(self) -> dict[str, Any]:
        """The type's JSON form (``{"code": ..., "array_element_type": ...}``)."""
        if self.element is None:
            return {"code": self.code}
        return {"code": ARRAY, "array_element_type": self.element.to_json()}

    def arrow_type(self) -> Any:
        """The type's Arrow type (``pyarrow`` imported on first use)."""
        import pyarrow as pa

        if self.element is not None:
            return pa.list_(self.element.arrow_type())
        return self.scalar.arrow(pa)

    def spark_type(self) -> str:
        """The type's Spark SQL type (DDL text)."""
        if self.element is not None:
            return f"ARRAY<{self.element.spark_type()}>"
        return self.scalar.spark


# --------------------------------------------------------------------------- value decoding


def _decode_int64(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueEncodingError("expected an integer")
    if isinstance(value, int):
        result = value
    elif isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        result = int(value)
    elif isinstance(value, float) and value.is_integer():
        result = int(value)
    else:
        raise ValueEncodingError("expected an integer")
    if not -(2**63) <= result < 2**63:
        raise ValueEncodingError("integer out of INT64 range")
    return result


def _decode_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueEncodingError("expected a number")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        if value in _FLOAT_WORDS:
            return _FLOAT_WORDS[value]
        return float(value)
    raise ValueEncodingError("expected a number")


def _decode_float32(value: Any) -> float:
    result = _decode_float(value)
    # Rounded to single precision (beyond its range: infinity), as a FLOAT32 column holds it.
    return array("f", [result])[0] if math.isfinite(result) else result


def _decimal(value: Any, type_name: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueEncodingError("expected a decimal string")
    number = Decimal(str(value))
    if not number.is_finite():
        raise ValueEncodingError(f"{type_name} must be finite")
    return number


def _decode_numeric(value: Any) -> Decimal:
    number = _decimal(value, "NUMERIC")
    quantized = number.quantize(_NUMERIC_QUANTUM, context=_NUMERIC_CONTEXT)
    if quantized != number:
        raise ValueEncodingError(f"more than {NUMERIC_SCALE} fractional digits")
    if len(quantized.as_tuple().digits) > NUMERIC_PRECISION:
        raise ValueEncodingError(f"more than {NUMERIC_PRECISION} digits")
    return quantized


def _decode_bignumeric(value: Any) -> Decimal:
    number = _decimal(value, "BIGNUMERIC")
    exponent = number.as_tuple().exponent
    assert isinstance(exponent, int)
    if exponent < -BIGNUMERIC_SCALE:  # trailing zeros beyond the scale are dropped, other digits refused
        quantized = number.quantize(_BIGNUMERIC_QUANTUM, context=_BIGNUMERIC_CONTEXT)
        if quantized != number:
            raise ValueEncodingError(f"more than {BIGNUMERIC_SCALE} fractional digits")
        number = quantized
    if number and number.adjusted() >= BIGNUMERIC_PRECISION - BIGNUMERIC_SCALE:
        raise ValueEncodingError(f"more than {BIGNUMERIC_PRECISION - BIGNUMERIC_SCALE} integer digits")
    return number


def _decode_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueEncodingError("expected true or false")
    return value


def _decode_string(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueEncodingError("expected a string")
    return value


def _decode_json(value: Any) -> str:
    if isinstance(value, str):
        return value
    # Tolerate a JSON value given as a structure instead of its text.
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _decode_bytes(value: Any) -> bytes:
    if not isinstance(value, str):
        raise ValueEncodingError("expected a base64 string")
    return base64.b64decode(value, validate=True)


def _decode_date(value: Any) -> date:
    if not isinstance(value, str):
        raise ValueEncodingError("expected a date string")
    return date.fromisoformat(value)


def _decode_timestamp(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueEncodingError("expected an RFC 3339 timestamp string")
    return parse_timestamp(value)


def _micros(fraction: str | None) -> int:
    return int((fraction or "0")[:6].ljust(6, "0"))


def _decode_time(value: Any) -> time:
    match = _TIME.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueEncodingError("expected a time string HH:MM:SS[.ffffff]")
    hour, minute, second, fraction = match.groups()
    return time(int(hour), int(minute), int(second), _micros(fraction))


def _decode_datetime(value: Any) -> datetime:
    match = _DATETIME.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueEncodingError("expected a datetime string YYYY-MM-DDTHH:MM:SS[.ffffff] without a zone")
    year, month, day, hour, minute, second, fraction = match.groups()
    return datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), _micros(fraction))


# --------------------------------------------------------------------------- value encoding


def _encode_text(value: Any) -> Any:
    return value


def _encode_str(value: Any) -> str:
    return str(value)


def _encode_float(value: Any) -> Any:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float(value)


def _encode_bignumeric(value: Any) -> str:
    return format(Decimal(value), "f")


def _encode_bytes(value: Any) -> str:
    return base64.b64encode(value).decode("ascii")


def _encode_isoformat(value: Any) -> str:
    return value.isoformat()


def _encode_datetime(value: datetime) -> str:
    if value.tzinfo is not None:
        raise ValueEncodingError("a DATETIME has no time zone")
    return value.isoformat()


def _encode_time(value: time) -> str:
    if value.tzinfo is not None:
        raise ValueEncodingError("a TIME has no time zone")
    return value.isoformat()


@dataclass(frozen=True)
class ScalarType:
    """A scalar type's mappings and JSON value encoding, declared once."""

    code: str
    #: The Arrow type, given the ``pyarrow`` module.
    arrow: Callable[[Any], Any]
    #: The Spark SQL type (DDL text).
    spark: str
    #: JSON value → Python value (raises on a value of another type).
    decode: Callable[[Any], Any]
    #: Python value → JSON value.
    encode: Callable[[Any], Any]


SCALAR_TYPES: dict[str, ScalarType] = {
    t.code: t
    for t in (
        ScalarType("BOOL", lambda pa: pa.bool_(), "BOOLEAN", _decode_bool, _encode_text),
        ScalarType("INT64", lambda pa: pa.int64(), "BIGINT", _decode_int64, _encode_str),
        ScalarType("FLOAT32", lambda pa: pa.float32(), "FLOAT", _decode_float32, _encode_float),
        ScalarType("FLOAT64", lambda pa: pa.float64(), "DOUBLE", _decode_float, _encode_float),
        ScalarType(
            "NUMERIC",
            lambda pa: pa.decimal128(NUMERIC_PRECISION, NUMERIC_SCALE),
            f"DECIMAL({NUMERIC_PRECISION},{NUMERIC_SCALE})",
            _decode_numeric,
            _encode_str,
        ),
        ScalarType(
            "BIGNUMERIC",
            lambda pa: pa.decimal256(BIGNUMERIC_PRECISION, BIGNUMERIC_SCALE),
            "STRING",
            _decode_bignumeric,
            _encode_bignumeric,
        ),
        ScalarType("STRING", lambda pa: pa.string(), "STRING", _decode_string, _encode_text),
        ScalarType("JSON", lambda pa: pa.string(), "STRING", _decode_json, _encode_text),
        ScalarType("BYTES", lambda pa: pa.binary(), "BINARY", _decode_bytes, _encode_bytes),
        ScalarType("DATE", lambda pa: pa.date32(), "DATE", _decode_date, _encode_isoformat),
        ScalarType("TIME", lambda pa: pa.time64("us"), "STRING", _decode_time, _encode_time),
        ScalarType(
            "DATETIME",
            lambda pa: pa.timestamp("us"),
            "TIMESTAMP_NTZ",
            _decode_datetime,
            _encode_datetime,
        ),
        ScalarType(
            "TIMESTAMP",
            lambda pa: pa.timestamp("us", tz="UTC"),
            "TIMESTAMP",
            _decode_timestamp,
            format_timestamp,
        ),
        ScalarType("UUID", lambda pa: pa.string(), "STRING", _decode_string, _encode_text),
    )
}
#: Scalar type codes a column may have (``ARRAY`` of any of them as well).
SCALAR_TYPE_CODES = frozenset(SCALAR_TYPES)
SUPPORTED_TYPE_CODES = SCALAR_TYPE_CODES | {ARRAY}


# --------------------------------------------------------------------------- parsing


def parse_logical_type(value: Any, column: str = "?") -> LogicalType:
    """A type given as a :class:`LogicalType`, its JSON form (dict or text) or its text form.

    A length parameter in the text form (``STRING(MAX)``, ``BYTES(1024)``) is ignored. An unknown
    or malformed type raises :class:`LogicalTypeError` naming the column and the type.
    """
    if isinstance(value, LogicalType):
        return value
    if isinstance(value, str):
        text = value.strip()
        if not text.startswith("{"):
            return _parse_type_text(text, column)
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LogicalTypeError(f"column {column!r}: malformed type JSON {value!r}") from exc
    if isinstance(value, Mapping):
        code = value.get("code")
        if not isinstance(code, str):
            raise LogicalTypeError(f"column {column!r}: type {value!r} has no 'code'")
        code = code.upper()
        if code != ARRAY:
            return scalar_type(code, column, value)
        element = value.get("array_element_type")
        if element is None:
            raise LogicalTypeError(f"column {column!r}: ARRAY type {value!r} has no element type")
        try:
            element_type = parse_logical_type(element, column)
        except LogicalTypeError as exc:
            raise LogicalTypeError(f"column {column!r}: unsupported type {value!r}: {exc}") from None
        return array_type(element_type, column, value)
    raise LogicalTypeError(f"column {column!r}: unsupported type description {value!r}")


def _parse_type_text(text: str, column: str) -> LogicalType:
    array_match = _ARRAY_TEXT_TYPE.match(text)
    if array_match:
        return array_type(_parse_type_text(array_match.group(1), column), column, text)
    match = _TEXT_TYPE.match(text)
    if not match:
        raise LogicalTypeError(f"column {column!r}: unsupported type {text!r}")
    return scalar_type(match.group(1).upper(), column, text)


def scalar_type(code: str, column: str = "?", original: Any = None) -> LogicalType:
    """The scalar type ``code``; an unknown code raises :class:`LogicalTypeError`."""
    if code not in SCALAR_TYPE_CODES:
        shown = code if original is None else original
        raise LogicalTypeError(f"column {column!r}: unsupported type {shown!r} (code {code})")
    return LogicalType(code)


def array_type(element: LogicalType, column: str = "?", original: Any = None) -> LogicalType:
    """``ARRAY<element>``; arrays of arrays raise :class:`LogicalTypeError`."""
    if element.code == ARRAY:
        raise LogicalTypeError(f"column {column!r}: arrays of arrays are not supported: {original!r}")
    return LogicalType(ARRAY, element)


# --------------------------------------------------------------------------- values


def decode_value(logical_type: LogicalType | Any, value: Any, column: str = "?") -> Any:
    """Decode one JSON-encoded value to its Python value (``None`` for NULL).

    INT64 → int, FLOAT32/FLOAT64 → float, NUMERIC/BIGNUMERIC → Decimal, BOOL → bool,
    STRING/JSON/UUID → str, BYTES → bytes, DATE → date, TIME → time, DATETIME → naive datetime,
    TIMESTAMP → aware UTC datetime (µs), ARRAY → list.
    """
    logical_type = parse_logical_type(logical_type, column)
    if value is None:
        return None
    try:
        if logical_type.element is not None:
            if not isinstance(value, list):
                raise ValueEncodingError("expected a JSON array")
            return [decode_value(logical_type.element, item, column) for item in value]
        return SCALAR_TYPES[logical_type.code].decode(value)
    except ValueEncodingError as exc:
        raise ValueEncodingError(f"column {column!r} ({logical_type}): {exc}: {value!r}") from None
    except (ValueError, TypeError, InvalidOperation, binascii.Error, OverflowError) as exc:
        raise ValueEncodingError(
            f"column {column!r} ({logical_type}): cannot decode {value!r}: {exc}"
        ) from None


def encode_value(logical_type: LogicalType | Any, value: Any, column: str = "?") -> Any:
    """Encode a Python value as its JSON value (inverse of :func:`decode_value`)."""
    logical_type = parse_logical_type(logical_type, column)
    if value is None:
        return None
    if logical_type.element is not None:
        return [encode_value(logical_type.element, item, column) for item in value]
    try:
        return SCALAR_TYPES[logical_type.code].encode(value)
    except ValueEncodingError as exc:
        raise ValueEncodingError(f"column {column!r} ({logical_type}): {exc}: {value!r}") from None


__all__ = [
    "ARRAY",
    "BIGNUMERIC_PRECISION",
    "BIGNUMERIC_SCALE",
    "NUMERIC_PRECISION",
    "NUMERIC_SCALE",
    "SCALAR_TYPES",
    "SCALAR_TYPE_CODES",
    "SUPPORTED_TYPE_CODES",
    "LogicalType",
    "LogicalTypeError",
    "ScalarType",
    "ValueEncodingError",
    "array_type",
    "decode_value",
    "encode_value",
    "parse_logical_type",
    "scalar_type",
]
