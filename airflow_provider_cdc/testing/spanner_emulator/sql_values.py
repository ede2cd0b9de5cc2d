"""Typed values of queries: parameters, literals and their coercions, as GoogleSQL reads them.

A value has two forms: its stored *cell* (Spanner's JSON encoding, as rows hold it and results carry it)
and its *comparable* form (``int``, ``float``, ``Decimal``, ``bytes``, or the cell itself for STRING,
BOOL, DATE and TIMESTAMP, whose normalized text orders as the values do).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import grpc
from google.protobuf import struct_pb2, text_format

from airflow_provider_cdc.core.timestamps import format_timestamp, parse_timestamp

from .model import EmulatorError
from .values import SpannerType, ValueError_, decode_cell

NUMBERS = frozenset({"INT64", "FLOAT64", "FLOAT32", "NUMERIC"})
UNORDERED = frozenset({"JSON", "ARRAY", "STRUCT"})
_CONVERT = {
    "INT64": int,
    "FLOAT64": float,
    "FLOAT32": float,
    "NUMERIC": Decimal,
    "BYTES": base64.b64decode,
}
#: GoogleSQL's default time zone, for timestamp text without one.
DEFAULT_ZONE = "America/Los_Angeles"
_TIMESTAMP_TEXT = re.compile(
    r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})(?:[Tt ](\d{1,2}):(\d{1,2}):(\d{1,2})(\.\d{1,9})?)?"
    r"\s*(?:([Zz])|([+-]\d{1,2}(?::?\d{2})?)|([A-Za-z_]+(?:/[A-Za-z_]+)*))?\s*$"
)
_TIMESTAMP_MESSAGE = (
    "Could not parse {} as a TIMESTAMP. The timestamp value must end with an uppercase literal 'Z' to "
    "specify Zulu time (UTC-0). For details on the TIMESTAMP type encoding, see "
    "https://cloud.google.com/spanner/docs/data-types#timestamp-type"
)


Row = dict[str, Any]


class CastError(ValueError):
    """Text that does not read as the wanted type."""


def comparable(cell: Any, code: str) -> Any:
    """The comparable form of a stored cell."""
    if cell is None:
        return None
    convert = _CONVERT.get(code)
    return cell if convert is None else convert(cell)


def getter(name: str, code: str) -> Any:
    """A function of a row giving column ``name``'s comparable value."""
    convert = _CONVERT.get(code)
    if convert is None:
        return lambda row: row.get(name)

    def get(row: Row) -> Any:
        cell = row.get(name)
        return None if cell is None else convert(cell)

    return get


def timestamp_text(text: str) -> str:
    """GoogleSQL timestamp text (zone optional: then America/Los_Angeles) as a stored cell."""
    match = _TIMESTAMP_TEXT.match(text)
    if not match:
        raise CastError(text)
    year, month, day, hour, minute, second, fraction, zulu, offset, zone_name = match.groups()
    try:
        if offset:
            sign = -1 if offset[0] == "-" else 1
            digits = offset[1:].replace(":", "")
            hours, minutes = (int(digits), 0) if len(digits) <= 2 else (int(digits[:-2]), int(digits[-2:]))
            zone: Any = _fixed(sign * timedelta(hours=hours, minutes=minutes))
        elif zulu or (zone_name or "").upper() == "UTC":
            zone = _fixed(timedelta(0))
        else:
            from zoneinfo import ZoneInfo

            zone = ZoneInfo(zone_name or DEFAULT_ZONE)
        micros = int(((fraction or ".0")[1:] + "000000")[:6])
        moment = datetime(
            int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0), micros, zone
        )
    except (ValueError, KeyError, OSError) as exc:
        raise CastError(text) from exc
    return format_timestamp(moment)


def _fixed(offset: timedelta) -> Any:
    from datetime import timezone

    return timezone(offset)


def cast_text(text: str, code: str) -> Any:
    """String text as a stored cell of type ``code`` (literal and parameter coercion)."""
    if code == "TIMESTAMP":
        return timestamp_text(text)
    if code == "DATE":
        match = re.fullmatch(r"\s*(\d{4})-(\d{1,2})-(\d{1,2})\s*", text)
        try:
            return date(*(int(g) for g in match.groups())).isoformat()  # type: ignore[union-attr]
        except (AttributeError, ValueError) as exc:
            raise CastError(text) from exc
    if code == "BOOL":
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise CastError(text)
    if code in ("FLOAT64", "FLOAT32"):
        try:
            number = float(text)
        except ValueError as exc:
            raise CastError(text) from exc
        if number != number:
            return "NaN"
        return number if abs(number) != float("inf") else ("Infinity" if number > 0 else "-Infinity")
    try:
        return decode_cell(struct_pb2.Value(string_value=text), SpannerType(code), "value", None)
    except ValueError_ as exc:
        raise CastError(text) from exc


def literal_value(kind: str, value: Any, sql_error: Any) -> tuple[SpannerType | None, Any]:
    """A literal's type (``None``: NULL) and stored cell; ``sql_error(message)`` builds its error."""
    if kind == "NULL":
        return None, None
    if kind == "INT64":
        if not -(2**63) <= value < 2**63:
            raise sql_error(f"Invalid integer literal: {value}")
        return SpannerType(kind), str(value)
    if kind == "BYTES":
        return SpannerType(kind), base64.b64encode(value.encode("latin-1", "ignore")).decode("ascii")
    if kind in ("FLOAT64", "BOOL", "STRING"):
        return SpannerType(kind), value
    try:
        return SpannerType(kind), cast_text(value, kind)
    except CastError:
        raise sql_error(f"Invalid {kind} literal") from None


def _describe(value: struct_pb2.Value) -> str:
    return text_format.MessageToString(value)


def typed_param(name: str, value: struct_pb2.Value, code: str) -> Any:
    """A parameter's stored cell given its declared type code (FAILED_PRECONDITION if it does not read)."""
    failed = grpc.StatusCode.FAILED_PRECONDITION
    kind = value.WhichOneof("kind")
    if kind in (None, "null_value"):
        return None
    if code in ("ARRAY", "STRUCT", "PROTO", "ENUM", "INTERVAL", "UUID"):
        raise EmulatorError(
            grpc.StatusCode.INVALID_ARGUMENT, f"Unsupported by the emulator: {code} parameters (@{name})"
        )
    if code == "BOOL":
        if kind != "bool_value":
            raise EmulatorError(failed, f"Could not parse {_describe(value)} as BOOL")
        return value.bool_value
    if code in ("FLOAT64", "FLOAT32") and kind == "number_value":
        return cast_text(repr(value.number_value), code)
    if kind != "string_value":
        raise EmulatorError(failed, f"Could not parse {_describe(value)} as {code}")
    text = value.string_value
    if code == "TIMESTAMP":
        if not text.endswith("Z"):
            raise EmulatorError(failed, _TIMESTAMP_MESSAGE.format(text))
        try:
            return format_timestamp(parse_timestamp(text))
        except ValueError:
            raise EmulatorError(failed, _TIMESTAMP_MESSAGE.format(text)) from None
    try:
        return cast_text(text, code)
    except CastError:
        if code == "INT64":
            raise EmulatorError(failed, f"Could not parse {text} as an integer") from None
        if code == "BYTES":
            raise EmulatorError(
                failed,
                f"Could not parse {text} as BYTES. Byte strings must be base64-encoded. For more details, "
                "see https://cloud.google.com/spanner/docs/reference/rpc/google.spanner.v1#typecode",
            ) from None
        raise EmulatorError(failed, f"Could not parse {text} as {code}") from None


def untyped_param(value: struct_pb2.Value, code: str) -> Any:
    """An untyped parameter read as type ``code`` (INVALID_ARGUMENT if it does not)."""
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    kind = value.WhichOneof("kind")
    if kind in (None, "null_value"):
        return None
    if kind == "bool_value" and code == "BOOL":
        return value.bool_value
    if kind == "number_value" and code in ("FLOAT64", "FLOAT32", "NUMERIC"):
        return cast_text(repr(value.number_value), code)
    if kind != "string_value":
        raise EmulatorError(invalid, f"Could not parse {_describe(value)} as {code}")
    try:
        return cast_text(value.string_value, code)
    except CastError:
        what = "an integer" if code == "INT64" else code
        raise EmulatorError(invalid, f"Could not parse {value.string_value} as {what}") from None


def default_type(value: struct_pb2.Value) -> str:
    """The type an untyped parameter takes on its own: STRING, BOOL, FLOAT64 (NULL: INT64)."""
    kind = value.WhichOneof("kind")
    return {"string_value": "STRING", "bool_value": "BOOL", "number_value": "FLOAT64"}.get(
        kind or "", "INT64"
    )


@dataclass
class Operand:
    """A bound value: a column (``get``/``cell_of`` of a row) or a constant (``value``/``cell``)."""

    type: SpannerType | None  # None: untyped (a NULL literal or an untyped parameter)
    pos: int
    get: Callable[[Row], Any] | None = None
    cell_of: Callable[[Row], Any] | None = None
    value: Any = None
    cell: Any = None
    node: Any = None
    raw: Any = None  # an untyped parameter's protobuf value
    column: str | None = None  # the column it reads

    def typed(self, type_: SpannerType) -> Operand:
        """This constant as ``type_`` (coercion of an untyped parameter or a string literal/parameter)."""
        cell = self.cell if self.raw is None else untyped_param(self.raw, type_.code)
        if (
            self.raw is None
            and isinstance(cell, str)
            and self.type is not None
            and self.type.code == "STRING"
        ):
            try:
                cell = cast_text(cell, type_.code)
            except CastError:
                raise self._cast_error(type_) from None
        return Operand(type_, self.pos, value=comparable(cell, type_.code), cell=cell, node=self.node)

    def _cast_error(self, type_: SpannerType) -> EmulatorError:
        if type(self.node).__name__ == "Literal":
            return EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT, f'Could not cast literal "{self.cell}" to type {type_}'
            )
        return EmulatorError(
            grpc.StatusCode.INVALID_ARGUMENT, f"Could not cast {self.cell!r} to type {type_}"
        )


def flip(test: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    return lambda a, b: test(b, a)


def all_of(tests: list[Callable[[Row], bool | None]]) -> Callable[[Row], bool | None]:
    def conjunction(row: Row) -> bool | None:
        unknown = False
        for test in tests:
            value = test(row)
            if value is False:
                return False
            if value is None:
                unknown = True
        return None if unknown else True

    return conjunction


def any_of(tests: list[Callable[[Row], bool | None]]) -> Callable[[Row], bool | None]:
    def disjunction(row: Row) -> bool | None:
        unknown = False
        for test in tests:
            value = test(row)
            if value is True:
                return True
            if value is None:
                unknown = True
        return None if unknown else False

    return disjunction


def negate(test: Callable[[Row], bool | None]) -> Callable[[Row], bool | None]:
    def negation(row: Row) -> bool | None:
        value = test(row)
        return None if value is None else not value

    return negation


def _type_names() -> dict[int, str]:
    from google.cloud.spanner_v1 import TypeCode

    return {int(code): code.name for code in TypeCode}


TYPE_NAMES = _type_names()
