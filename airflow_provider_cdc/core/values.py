"""Spanner's JSON value encoding: decoding values to Python and encoding them back.

Values travel in Spanner's JSON encoding: INT64, NUMERIC, DATE, TIMESTAMP and STRING as JSON
strings, FLOAT32/FLOAT64 as numbers (or ``"NaN"``, ``"Infinity"``, ``"-Infinity"``), BOOL as
booleans, BYTES as base64, JSON as a string holding the JSON text, ARRAY as a JSON array, NULL as
``null``. INT64 is also accepted as a JSON number. :func:`decode_value` gives a value's Python
value (exact error messages), :func:`write_json_value` its encoding.

Column types (:class:`ColumnType`, :class:`SpannerType`, :func:`parse_column_types`,
:func:`union_column_types`, :func:`column_types_json`) live in :mod:`.columns` and are importable
from here too; the Arrow forms of types and values are :mod:`airflow_provider_cdc.changesets.arrow_values`.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from array import array
from datetime import date, datetime
from decimal import Context, Decimal, InvalidOperation
from typing import Any

from airflow_provider_cdc.core.columns import (
    SCALAR_TYPE_CODES,
    SUPPORTED_TYPE_CODES,
    ColumnType,
    SpannerType,
    SpannerTypeError,
    canonical_spanner_json,
    column_types_json,
    parse_column_types,
    parse_spanner_type,
    spanner_type_to_json,
    union_column_types,
)
from airflow_provider_cdc.core.timestamps import format_timestamp, parse_timestamp

NUMERIC_PRECISION = 38
NUMERIC_SCALE = 9
_NUMERIC_QUANTUM = Decimal(1).scaleb(-NUMERIC_SCALE)
_NUMERIC_CONTEXT = Context(prec=NUMERIC_PRECISION + 10)

_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class SpannerValueError(ValueError):
    """A value that does not match its column's Spanner type."""


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
    # Rounded to single precision (beyond its range: infinity), as a FLOAT32 column holds it.
    return array("f", [result])[0] if math.isfinite(result) else result


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
assert _SCALAR_DECODERS.keys() == SCALAR_TYPE_CODES


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
    "NUMERIC_PRECISION",
    "NUMERIC_SCALE",
    "SCALAR_TYPE_CODES",
    "SUPPORTED_TYPE_CODES",
    "ColumnType",
    "SpannerType",
    "SpannerTypeError",
    "SpannerValueError",
    "canonical_spanner_json",
    "column_types_json",
    "decode_value",
    "parse_column_types",
    "parse_spanner_type",
    "spanner_type_to_json",
    "union_column_types",
    "write_json_value",
]
