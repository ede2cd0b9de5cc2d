"""A table's columns as a change stream describes them: names, Spanner types, keys and positions.

A data change record lists its table's columns as ``column_types`` entries
``{"name", "type", "is_primary_key", "ordinal_position"}`` whose ``type`` is Spanner's type JSON,
such as ``{"code": "INT64"}`` or ``{"code": "ARRAY", "array_element_type": {"code": "STRING"}}``.
:class:`ColumnType` is one entry, keeping the type JSON as the stream sent it (so staged rows carry
it unchanged); :class:`SpannerType` is the parsed type. :func:`parse_column_types` validates entries
(names, supported types) and :func:`union_column_types` joins the entries of a window's records.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from airflow_provider_cdc.core.identifiers import validate_identifier

#: Scalar type codes a column may have (``ARRAY`` of any of them as well).
SCALAR_TYPE_CODES = frozenset(
    {"BOOL", "INT64", "FLOAT32", "FLOAT64", "NUMERIC", "STRING", "JSON", "BYTES", "DATE", "TIMESTAMP", "UUID"}
)
SUPPORTED_TYPE_CODES = SCALAR_TYPE_CODES | {"ARRAY"}

_TEXT_TYPE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(?:\(\s*(?:MAX|\d+)\s*\))?\s*$", re.IGNORECASE)
_ARRAY_TEXT_TYPE = re.compile(r"^\s*ARRAY\s*<(.*)>\s*$", re.IGNORECASE | re.DOTALL)


class SpannerTypeError(ValueError):
    """A column type that is unknown, malformed or not representable."""


@dataclass(frozen=True)
class SpannerType:
    """A Spanner type code; ``element`` is set for ``ARRAY``."""

    code: str
    element: SpannerType | None = None

    def __str__(self) -> str:
        return f"ARRAY<{self.element}>" if self.code == "ARRAY" else self.code


@dataclass(frozen=True)
class ColumnType:
    """One ``column_types`` entry: name, type JSON, key flag and schema position of a column.

    ``type`` is Spanner's type JSON as the change stream sent it (a :class:`SpannerType` given
    instead is stored as its JSON); :attr:`spanner_type` is the parsed, validated type.
    """

    name: str
    type: dict[str, Any]
    is_primary_key: bool
    ordinal_position: int

    def __post_init__(self) -> None:
        if isinstance(self.type, SpannerType):
            object.__setattr__(self, "type", spanner_type_to_json(self.type))

    def __hash__(self) -> int:
        type_text = json.dumps(self.type, sort_keys=True, default=str)
        return hash((self.name, type_text, self.is_primary_key, self.ordinal_position))

    @cached_property
    def spanner_type(self) -> SpannerType:
        """The column's type, parsed; an unsupported type raises :class:`SpannerTypeError`."""
        return parse_spanner_type(self.type, self.name)

    def to_json_dict(self) -> dict[str, Any]:
        """The entry as the change stream describes it (``name``, ``type``, ``is_primary_key``, ...)."""
        return {
            "name": self.name,
            "type": self.type,
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
    if code not in SCALAR_TYPE_CODES:
        raise SpannerTypeError(f"column {column!r}: unsupported Spanner type {original!r} (code {code})")
    return SpannerType(code)


def _array_of(element: SpannerType, column: str, original: Any) -> SpannerType:
    if element.code == "ARRAY":
        raise SpannerTypeError(f"column {column!r}: nested arrays are not Spanner types: {original!r}")
    return SpannerType("ARRAY", element)


def parse_column_types(value: str | Iterable[Mapping[str, Any] | ColumnType]) -> list[ColumnType]:
    """Parse ``column_types`` (JSON text or a list of entries), validate names and types, order by
    ordinal position. Types come out in their canonical JSON form (see :func:`spanner_type_to_json`)."""
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
            column = _canonical_column(entry)
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
                type=spanner_type_to_json(parse_spanner_type(entry["type"], name)),
                is_primary_key=bool(entry.get("is_primary_key", False)),
                ordinal_position=position,
            )
        folded = column.name.lower()
        if folded in seen:
            raise SpannerTypeError(f"column {column.name!r} appears twice in column_types")
        seen.add(folded)
        columns.append(column)
    return sorted(columns, key=lambda c: (c.ordinal_position, c.name))


def _canonical_column(column: ColumnType) -> ColumnType:
    """``column`` validated, with its type in canonical JSON form (itself when it already is)."""
    canonical = spanner_type_to_json(column.spanner_type)
    if canonical == column.type:
        return column
    return ColumnType(column.name, canonical, column.is_primary_key, column.ordinal_position)


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


def canonical_spanner_json(columns: Iterable[ColumnType]) -> str:
    """``column_types`` as compact JSON text (inverse of :func:`parse_column_types`)."""
    return json.dumps([c.to_json_dict() for c in columns], separators=(",", ":"))


__all__ = [
    "SCALAR_TYPE_CODES",
    "SUPPORTED_TYPE_CODES",
    "ColumnType",
    "SpannerType",
    "SpannerTypeError",
    "canonical_spanner_json",
    "column_types_json",
    "parse_column_types",
    "parse_spanner_type",
    "spanner_type_to_json",
    "union_column_types",
]
