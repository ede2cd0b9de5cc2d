"""A table's columns: names, logical types, key flags and positions.

A table's columns travel as ``column_types`` entries ``{"name", "type", "is_primary_key",
"ordinal_position"}`` whose ``type`` is a logical type's JSON form (:mod:`.types`), such as
``{"code": "INT64"}`` or ``{"code": "ARRAY", "array_element_type": {"code": "STRING"}}``; a source
that describes its column types in this form stages its entries unchanged. An entry may add
``"is_nullable"`` (``true``/``false``) when the source knows whether the column may hold NULL; an
entry without it (a source that does not know, or files staged before it existed) leaves it unknown.
:class:`ColumnType` is one entry; :func:`parse_column_types` validates entries (names, supported
types) and :func:`union_column_types` joins the entries of a window's changes. A source whose type
descriptions differ passes its own type parser (``parse_type``), which maps them to logical types.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.types import (
    SCALAR_TYPE_CODES,
    SUPPORTED_TYPE_CODES,
    LogicalType,
    LogicalTypeError,
    parse_logical_type,
)

#: Parses one column's type description (``value``, ``column``) into a logical type.
TypeParser = Callable[[Any, str], LogicalType]


@dataclass(frozen=True)
class ColumnType:
    """One ``column_types`` entry: name, type JSON, key flag, schema position and nullability of a
    column.

    ``type`` is the type's JSON form as the source sent it (a :class:`LogicalType` given instead
    is stored as its JSON); :attr:`logical_type` is the parsed, validated type. ``is_nullable`` is
    ``None`` when the source does not say whether the column may hold NULL.
    """

    name: str
    type: dict[str, Any]
    is_primary_key: bool
    ordinal_position: int
    is_nullable: bool | None = None

    def __post_init__(self) -> None:
        if isinstance(self.type, LogicalType):
            object.__setattr__(self, "type", self.type.to_json())

    def __hash__(self) -> int:
        type_text = json.dumps(self.type, sort_keys=True, default=str)
        return hash((self.name, type_text, self.is_primary_key, self.ordinal_position, self.is_nullable))

    @cached_property
    def logical_type(self) -> LogicalType:
        """The column's type, parsed; an unsupported type raises :class:`LogicalTypeError`."""
        return parse_logical_type(self.type, self.name)

    def to_json_dict(self) -> dict[str, Any]:
        """The entry as sources describe it (``name``, ``type``, ``is_primary_key``, ...);
        ``is_nullable`` only when known."""
        entry = {
            "name": self.name,
            "type": self.type,
            "is_primary_key": self.is_primary_key,
            "ordinal_position": self.ordinal_position,
        }
        if self.is_nullable is not None:
            entry["is_nullable"] = self.is_nullable
        return entry


def parse_column_types(
    value: str | Iterable[Mapping[str, Any] | ColumnType], parse_type: TypeParser = parse_logical_type
) -> list[ColumnType]:
    """Parse ``column_types`` (JSON text or a list of entries), validate names and types, order by
    ordinal position. Types come out in their canonical JSON form (see :meth:`LogicalType.to_json`);
    ``parse_type`` reads each type description (default: the logical forms)."""
    entries: Any = value
    if isinstance(value, str):
        try:
            entries = json.loads(value)
        except json.JSONDecodeError as exc:
            raise LogicalTypeError(f"column_types is not valid JSON: {exc}") from exc
    if not isinstance(entries, Iterable) or isinstance(entries, (str, bytes, Mapping)):
        raise LogicalTypeError(f"column_types must be a list of column entries, got {type(entries).__name__}")
    columns: list[ColumnType] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        if isinstance(entry, ColumnType):
            column = _canonical_column(entry, parse_type)
        else:
            if not isinstance(entry, Mapping) or "name" not in entry or "type" not in entry:
                raise LogicalTypeError(f"column_types[{index}] needs 'name' and 'type': {entry!r}")
            name = validate_identifier(entry["name"], "column")
            position = entry.get("ordinal_position", index + 1)
            if isinstance(position, bool) or not isinstance(position, int):
                raise LogicalTypeError(
                    f"column {name!r}: ordinal_position must be an integer, got {position!r}"
                )
            nullable = entry.get("is_nullable")
            if nullable is not None and not isinstance(nullable, bool):
                raise LogicalTypeError(
                    f"column {name!r}: is_nullable must be true or false, got {nullable!r}"
                )
            column = ColumnType(
                name=name,
                type=parse_type(entry["type"], name).to_json(),
                is_primary_key=bool(entry.get("is_primary_key", False)),
                ordinal_position=position,
                is_nullable=nullable,
            )
        folded = column.name.lower()
        if folded in seen:
            raise LogicalTypeError(f"column {column.name!r} appears twice in column_types")
        seen.add(folded)
        columns.append(column)
    return sorted(columns, key=lambda c: (c.ordinal_position, c.name))


def _canonical_column(column: ColumnType, parse_type: TypeParser) -> ColumnType:
    """``column`` validated, with its type in canonical JSON form (itself when it already is)."""
    if parse_type is parse_logical_type:
        logical = column.logical_type
    else:
        logical = parse_type(column.type, column.name)
    canonical = logical.to_json()
    if canonical == column.type:
        return column
    return replace(column, type=canonical)


def union_column_types(texts: Iterable[str | Iterable[Mapping[str, Any] | ColumnType]]) -> list[ColumnType]:
    """A table's columns as every change of a window describes them, oldest change first.

    A change may list only some columns (e.g. a change stream's UPDATE may list only the key columns
    and the changed ones; INSERT and DELETE list every column). The union (by name,
    case-insensitively) holds every column any change names, each as the newest change naming it
    describes it (type, key flag, ordinal position),
    so a column whose type changed in the window has its newest type (and its newest nullability, or
    an older change's where the newest does not say). Ordered by ordinal position.
    """
    union: dict[str, ColumnType] = {}
    for text in texts:
        for column in parse_column_types(text):
            folded = column.name.lower()
            older = union.get(folded)
            if column.is_nullable is None and older is not None and older.is_nullable is not None:
                column = replace(column, is_nullable=older.is_nullable)
            union[folded] = column
    return sorted(union.values(), key=lambda c: (c.ordinal_position, c.name))


def column_types_json(columns: Iterable[ColumnType]) -> str:
    """Canonical JSON text of column entries (compact, sorted keys, in the given order)."""
    return json.dumps([column.to_json_dict() for column in columns], sort_keys=True, separators=(",", ":"))


def canonical_column_types_json(columns: Iterable[ColumnType]) -> str:
    """``column_types`` as compact JSON text (inverse of :func:`parse_column_types`)."""
    return json.dumps([c.to_json_dict() for c in columns], separators=(",", ":"))



__all__ = [
    "SCALAR_TYPE_CODES",
    "SUPPORTED_TYPE_CODES",
    "ColumnType",
    "LogicalType",
    "LogicalTypeError",
    "TypeParser",
    "canonical_column_types_json",
    "column_types_json",
    "parse_column_types",
    "parse_logical_type",
    "union_column_types",
]
