"""Spanner's JSON encoding of values, as a change stream's mods carry them."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from datetime import date
from decimal import Decimal
from typing import Any

from airflow_provider_cdc.core.timestamps import format_timestamp, parse_timestamp


def encode_json_value(value: Any, type_json: Mapping[str, Any]) -> Any:
    """Spanner's JSON encoding of a Python value of the given type (``{"code": ...}``)."""
    if value is None:
        return None
    code = type_json["code"]
    if code == "ARRAY":
        return [encode_json_value(item, type_json["array_element_type"]) for item in value]
    if code in ("INT64", "ENUM"):
        return str(int(value))
    if code == "NUMERIC":
        return format(Decimal(value), "f")
    if code in ("FLOAT64", "FLOAT32"):
        number = float(value)
        if math.isnan(number):
            return "NaN"
        if math.isinf(number):
            return "Infinity" if number > 0 else "-Infinity"
        return number
    if code == "BYTES":
        return base64.b64encode(bytes(value)).decode("ascii")
    if code == "DATE":
        return value.isoformat()
    if code == "TIMESTAMP":
        return format_timestamp(value)
    if code == "JSON":
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if code == "BOOL":
        return bool(value)
    return value


def decode_json_value(value: Any, type_json: Mapping[str, Any], where: str = "value") -> Any:
    """Python value of a Spanner-JSON-encoded value; ``where`` names the column in errors."""
    if value is None:
        return None
    code = type_json.get("code")
    try:
        if code == "ARRAY":
            if not isinstance(value, list):
                raise TypeError(f"expected a JSON array, got {type(value).__name__}")
            element = type_json["array_element_type"]
            return [decode_json_value(item, element, f"{where}[]") for item in value]
        if code == "INT64":
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise TypeError(f"expected an INT64 as text, got {type(value).__name__}")
            return int(value)
        if code == "NUMERIC":
            if not isinstance(value, str):
                raise TypeError(f"expected a NUMERIC as text, got {type(value).__name__}")
            return Decimal(value)
        if code in ("FLOAT64", "FLOAT32"):
            if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
                return float(value.replace("Infinity", "inf"))
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"expected a number, got {type(value).__name__}")
            return float(value)
        if code == "BOOL":
            if not isinstance(value, bool):
                raise TypeError(f"expected a boolean, got {type(value).__name__}")
            return value
        if code == "STRING":
            if not isinstance(value, str):
                raise TypeError(f"expected a string, got {type(value).__name__}")
            return value
        if code == "BYTES":
            return base64.b64decode(value, validate=True)
        if code == "DATE":
            return date.fromisoformat(value)
        if code == "TIMESTAMP":
            return parse_timestamp(value)
        if code == "JSON":
            if not isinstance(value, str):
                raise TypeError(f"expected JSON text, got {type(value).__name__}")
            return json.loads(value)
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"{where}: cannot decode {value!r} as {type_json}: {exc}") from None
    raise ValueError(f"{where}: unsupported type {type_json}")
