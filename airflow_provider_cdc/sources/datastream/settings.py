"""What a Datastream stream's events do not say: database kind, primary keys, JSONL column types.

- ``source_database``: ``mysql``, ``oracle``, ``postgresql`` or ``sqlserver``; ``None`` detects the
  kind from each event's ``read_method``.
- ``primary_keys``: per target table name, its key columns, used when an event carries none
  (``source_metadata.primary_keys`` / SQL Server's ``replication_index`` win when present).
- ``column_types``: per target table name, column → logical type text (``NUMERIC``,
  ``TIMESTAMP``, ``ARRAY<INT64>``). JSONL files carry no types: declared types come first there,
  the JSON value's kind otherwise. In Avro files a declared type replaces the schema's.
- ``table_names``: Datastream object → target table name. An object it does not name maps to
  :func:`default_table_name` (every character that is not a letter, digit or ``_`` replaced by
  ``_``: ``ea-main_users`` → ``ea_main_users``); two objects mapping to one table are refused
  (:meth:`DatastreamSettings.object_tables`) unless ``table_names`` maps both there.

The settings travel as JSON (XCom, templated operator arguments): :meth:`DatastreamSettings.to_dict`
and :meth:`DatastreamSettings.from_dict`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.types import LogicalType, LogicalTypeError, parse_logical_type
from airflow_provider_cdc.sources.datastream.names import is_object_name
from airflow_provider_cdc.sources.datastream.read_methods import database_kind

_NOT_IN_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")


class DatastreamSettingsError(ValueError):
    """Datastream settings that are malformed (the message names the setting and the value)."""


def default_table_name(object_name: str) -> str:
    """The table of a Datastream object that ``table_names`` does not map: the object name with each
    character that is not an ASCII letter, digit or ``_`` replaced by ``_`` (``ea-main_users`` →
    ``ea_main_users``, ``SAMPLE.TBL`` → ``SAMPLE_TBL``). Not validated: a name that does not start
    with a letter, or is longer than 128 characters, stays invalid."""
    return _NOT_IN_IDENTIFIER.sub("_", object_name)


def _mapping(value: Any, setting: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise DatastreamSettingsError(f"{setting} must be a mapping, got {type(value).__name__}: {value!r}")
    return value


def _identifier(name: Any, kind: str, setting: str) -> str:
    try:
        return validate_identifier(name, kind)
    except ValueError as exc:
        raise DatastreamSettingsError(f"{setting}: {exc}") from None


@dataclass(frozen=True)
class DatastreamSettings:
    """A stream's settings; every name is validated and every type parsed when built."""

    source_database: str | None = None
    primary_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    column_types: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    table_names: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        database = self.source_database
        if database is not None:
            try:
                database = database_kind(database)
            except ValueError as exc:
                raise DatastreamSettingsError(f"source_database: {exc}") from None
        keys: dict[str, tuple[str, ...]] = {}
        for table, columns in _mapping(self.primary_keys, "primary_keys").items():
            table = _identifier(table, "table", "primary_keys")
            if isinstance(columns, str) or not isinstance(columns, (list, tuple)) or not columns:
                raise DatastreamSettingsError(
                    f"primary_keys[{table!r}] must be a non-empty list of column names, got {columns!r}"
                )
            names = tuple(_identifier(c, "column", f"primary_keys[{table!r}]") for c in columns)
            if len(set(names)) != len(names):
                raise DatastreamSettingsError(f"primary_keys[{table!r}] names a column twice: {list(names)}")
            keys[table] = names
        types: dict[str, Mapping[str, str]] = {}
        parsed: dict[str, Mapping[str, LogicalType]] = {}
        for table, columns in _mapping(self.column_types, "column_types").items():
            table = _identifier(table, "table", "column_types")
            texts: dict[str, str] = {}
            logical: dict[str, LogicalType] = {}
            for column, text in _mapping(columns, f"column_types[{table!r}]").items():
                column = _identifier(column, "column", f"column_types[{table!r}]")
                try:
                    logical[column] = parse_logical_type(text, column)
                except LogicalTypeError as exc:
                    raise DatastreamSettingsError(f"column_types[{table!r}]: {exc}") from None
                texts[column] = str(logical[column])
            types[table] = MappingProxyType(texts)
            parsed[table] = MappingProxyType(logical)
        names: dict[str, str] = {}
        for object_name, table in _mapping(self.table_names, "table_names").items():
            if not is_object_name(object_name):
                raise DatastreamSettingsError(
                    f"table_names: {object_name!r} is not a Datastream object name (non-empty, no '/')"
                )
            names[object_name] = _identifier(table, "table", f"table_names[{object_name!r}]")
        object.__setattr__(self, "source_database", database)
        object.__setattr__(self, "primary_keys", MappingProxyType(keys))
        object.__setattr__(self, "column_types", MappingProxyType(types))
        object.__setattr__(self, "table_names", MappingProxyType(names))
        object.__setattr__(self, "_logical_types", MappingProxyType(parsed))

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def declared_types(self, table: str) -> Mapping[str, LogicalType]:
        """The declared logical types of ``table``'s columns (empty when none are declared)."""
        return self._logical_types.get(table, MappingProxyType({}))  # type: ignore[attr-defined]

    def table_name(self, object_name: str) -> str:
        """The target table of a Datastream object (``table_names``, else :func:`default_table_name`),
        validated."""
        table = self.table_names.get(object_name)
        if table is None:
            table = default_table_name(object_name) if isinstance(object_name, str) else object_name
            try:
                validate_identifier(table, "table")
            except ValueError as exc:
                raise DatastreamSettingsError(
                    f"Datastream object {object_name!r} gives no valid table name ({exc}); "
                    "map it to one in table_names"
                ) from None
        return table

    def object_tables(self, objects: Iterable[str]) -> dict[str, str]:
        """Each object's target table (:meth:`table_name`). Two objects mapping to one table are
        refused, naming both, unless ``table_names`` maps both of them there."""
        tables: dict[str, str] = {}
        first_of: dict[str, str] = {}
        for object_name in sorted(set(objects)):
            table = self.table_name(object_name)
            other = first_of.setdefault(table, object_name)
            if other != object_name and not {other, object_name} <= self.table_names.keys():
                raise DatastreamSettingsError(
                    f"Datastream objects {other!r} and {object_name!r} both map to table {table!r}; "
                    "map one of them to another table in table_names"
                )
            tables[object_name] = table
        return tables

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON values (:meth:`from_dict` reads them back)."""
        return {
            "source_database": self.source_database,
            "primary_keys": {table: list(columns) for table, columns in self.primary_keys.items()},
            "column_types": {table: dict(columns) for table, columns in self.column_types.items()},
            "table_names": dict(self.table_names),
        }

    @classmethod
    def from_dict(cls, value: Mapping[str, Any] | str | None) -> DatastreamSettings:
        """Settings from :meth:`to_dict`'s form (or its JSON text); unknown fields are refused."""
        if value is None:
            return cls()
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise DatastreamSettingsError(f"Datastream settings are not valid JSON: {exc}") from None
        if not isinstance(value, Mapping):
            raise DatastreamSettingsError(
                f"Datastream settings must be a mapping, got {type(value).__name__}: {value!r}"
            )
        unknown = sorted(set(value) - {"source_database", "primary_keys", "column_types", "table_names"})
        if unknown:
            raise DatastreamSettingsError(f"unknown Datastream setting(s) {unknown}")
        primary_keys = _mapping(value.get("primary_keys"), "primary_keys")
        return cls(
            source_database=value.get("source_database"),
            primary_keys={
                table: tuple(columns) if isinstance(columns, (list, tuple)) else columns
                for table, columns in primary_keys.items()
            },
            column_types=_mapping(value.get("column_types"), "column_types"),
            table_names=_mapping(value.get("table_names"), "table_names"),
        )
