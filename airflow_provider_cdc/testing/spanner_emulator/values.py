"""Column types and values: protobuf ``Value`` in, Spanner's JSON encoding of typed values out.

Cells are kept in the form change-stream mods carry them (Spanner's JSON encoding): INT64, NUMERIC,
DATE, TIMESTAMP, STRING, BYTES (base64) and JSON (text) as strings, FLOAT32/FLOAT64 as numbers or
``"NaN"``/``"Infinity"``/``"-Infinity"``, BOOL as booleans, ARRAY as lists, NULL as ``None``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass
from datetime import date
from decimal import Context, Decimal, InvalidOperation
from typing import Any

from google.protobuf import struct_pb2

from airflow_provider_cdc.core.timestamps import format_timestamp, from_micros, parse_timestamp

COMMIT_TIMESTAMP_PLACEHOLDER = "spanner.commit_timestamp()"
#: Room for NUMERIC's 38 digits (29 integer, 9 fractional) and more, so checks never round.
_NUMERIC_CONTEXT = Context(prec=80)
_NUMERIC_QUANTUM = Decimal("1e-9")
_NUMERIC_LIMIT = Decimal("1e29")
SCALAR_CODES = {
    "BOOL",
    "INT64",
    "FLOAT32",
    "FLOAT64",
    "NUMERIC",
    "STRING",
    "JSON",
    "BYTES",
    "DATE",
    "TIMESTAMP",
}


class ValueError_(ValueError):
    """A mutation value that does not fit its column (reported as INVALID_ARGUMENT)."""


@dataclass(frozen=True)
class SpannerType:
    """A column type: a scalar code, or ARRAY of a scalar element type."""

    code: str
    element: SpannerType | None = None

    def to_json(self) -> dict[str, Any]:
        """The type as change records' ``column_types[].type`` JSON carries it."""
        if self.code == "ARRAY":
            assert self.element is not None
            return {"code": "ARRAY", "array_element_type": self.element.to_json()}
        return {"code": self.code}

    def __str__(self) -> str:
        return f"ARRAY<{self.element}>" if self.code == "ARRAY" else self.code


def decode_cell(value: struct_pb2.Value, type_: SpannerType, where: str, commit_ts: str | None) -> Any:
    """Decode a mutation's protobuf value into the stored (JSON-encoded) form, validating it."""
    kind = value.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return None
    if type_.code == "ARRAY":
        if kind != "list_value":
            raise ValueError_(f"{where}: expected {type_}, got {kind}")
        assert type_.element is not None
        return [decode_cell(v, type_.element, where, None) for v in value.list_value.values]
    return _decode_scalar(value, kind, type_.code, where, commit_ts)


def _decode_scalar(value: struct_pb2.Value, kind: str, code: str, where: str, commit_ts: str | None) -> Any:
    if code == "BOOL":
        if kind != "bool_value":
            raise ValueError_(f"{where}: expected BOOL, got {kind}")
        return value.bool_value
    if code in ("FLOAT64", "FLOAT32"):
        if kind == "number_value":
            number = value.number_value
            if math.isnan(number):
                return "NaN"
            if math.isinf(number):
                return "Infinity" if number > 0 else "-Infinity"
            return number
        if kind == "string_value" and value.string_value in ("NaN", "Infinity", "-Infinity"):
            return value.string_value
        raise ValueError_(f"{where}: expected {code}, got {kind}")
    if kind != "string_value":
        raise ValueError_(f"{where}: expected {code} encoded as a string, got {kind}")
    text = value.string_value
    try:
        if code == "INT64":
            number = int(text)
            if not -(2**63) <= number < 2**63:
                raise ValueError_(f"{where}: {text} is out of range for INT64")
            return str(number)
        if code == "STRING":
            return text
        if code == "NUMERIC":
            return _normalize_numeric(Decimal(text), where)
        if code == "DATE":
            return date.fromisoformat(text).isoformat()
        if code == "TIMESTAMP":
            if text == COMMIT_TIMESTAMP_PLACEHOLDER:
                if commit_ts is None:
                    raise ValueError_(
                        f"{where}: spanner.commit_timestamp() needs allow_commit_timestamp=true"
                    )
                return commit_ts
            return format_timestamp(parse_timestamp(text))
        if code == "BYTES":
            return base64.b64encode(base64.b64decode(text, validate=True)).decode("ascii")
        if code == "JSON":
            return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (ValueError, InvalidOperation, binascii.Error) as exc:
        if isinstance(exc, ValueError_):
            raise
        raise ValueError_(f"{where}: invalid {code} value {text!r}") from exc
    raise ValueError_(f"{where}: unsupported type {code}")


def display_timestamp(value: str | int) -> str:
    """A timestamp (stored text or µs) as Spanner's messages show it: ``2026-01-01T00:00:00.5+00:00``."""
    moment = from_micros(value) if isinstance(value, int) else parse_timestamp(value)
    fraction = f".{moment.microsecond:06d}".rstrip("0") if moment.microsecond else ""
    return format_timestamp(moment)[:19] + fraction + "+00:00"


def _normalize_numeric(number: Decimal, where: str) -> str:
    """Canonical text of a NUMERIC (up to 29 integer and 9 fractional digits), as Spanner writes it."""
    if not number.is_finite():
        raise ValueError_(f"{where}: NUMERIC must be finite")
    quantized = number.quantize(_NUMERIC_QUANTUM, context=_NUMERIC_CONTEXT)
    if number != quantized or number.copy_abs() >= _NUMERIC_LIMIT:
        raise ValueError_(f"{where}: {number} does not fit NUMERIC (precision 38, scale 9)")
    text = format(number.normalize(context=_NUMERIC_CONTEXT), "f")
    return "0" if text in ("-0", "0") else text


def sort_key(value: Any, type_: SpannerType) -> tuple:
    """Order of stored values as Spanner orders keys (NULL first)."""
    if value is None:
        return (0,)
    code = type_.code
    if code == "INT64":
        return (1, int(value))
    if code in ("FLOAT64", "FLOAT32"):
        return (1, float(value) if not isinstance(value, str) else float(value.replace("Infinity", "inf")))
    if code == "NUMERIC":
        return (1, Decimal(value))
    if code == "BYTES":
        return (1, base64.b64decode(value))
    return (1, value)


_DEBUG_NAMES = {
    "BOOL": "Bool",
    "INT64": "Int64",
    "FLOAT32": "Float",
    "FLOAT64": "Double",
    "NUMERIC": "Numeric",
    "STRING": "String",
    "JSON": "Json",
    "BYTES": "Bytes",
    "DATE": "Date",
    "TIMESTAMP": "Timestamp",
}


def debug_value(type_: SpannerType, value: Any) -> str:
    """A stored value as Google's emulator prints key parts in messages: ``Int64(1)``, ``String("a")``,
    ``Bytes(b"\\x01")``, ``Timestamp(2021-06-01 12:00:00.500+00)``, ``Double(1.5)``, ``String(NULL)``."""
    name = _DEBUG_NAMES.get(type_.code, type_.code.title())
    if value is None:
        return f"{name}(NULL)"
    code = type_.code
    if code == "STRING":
        text = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'{name}("{text}")'
    if code == "BYTES":
        try:
            raw = base64.b64decode(value)
        except binascii.Error:
            raw = value.encode()
        return f'{name}(b"{_bytes_literal(raw)}")'
    if code == "BOOL":
        return f"{name}({'true' if value else 'false'})"
    if code == "TIMESTAMP":
        moment = parse_timestamp(value)
        fraction = ""
        if moment.microsecond:
            digits = f"{moment.microsecond:06d}"
            fraction = "." + (digits[:3] if digits.endswith("000") else digits)
        return f"{name}({moment.strftime('%Y-%m-%d %H:%M:%S')}{fraction}+00)"
    if code in ("FLOAT64", "FLOAT32"):
        number = {"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}.get(str(value))
        if number is None:
            number = repr(float(value))
            number = number[:-2] if number.endswith(".0") else number
        return f"{name}({number})"
    return f"{name}({value})"


def _bytes_literal(raw: bytes) -> str:
    escapes = {0x22: '\\"', 0x5C: "\\\\", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x27: "\\'"}
    return "".join(escapes.get(b) or (chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}") for b in raw)
