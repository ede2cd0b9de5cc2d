"""Parsing ``SELECT ChangeRecord FROM READ_<stream>(...)`` with its bound parameters."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import grpc

from airflow_provider_cdc.core.timestamps import parse_timestamp, to_micros

from .ddl import split_top_level
from .model import ChangeStreamQuery, EmulatorError

_TVF = re.compile(
    r"^\s*SELECT\s+ChangeRecord\s+FROM\s+READ_([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*;?\s*$",
    re.IGNORECASE | re.DOTALL,
)
_CALL = re.compile(r"^\s*SELECT\s+ChangeRecord\s+FROM\s+(READ_([A-Za-z_][A-Za-z0-9_]*))", re.IGNORECASE)
_ARGUMENTS = ("start_timestamp", "end_timestamp", "partition_token", "heartbeat_milliseconds", "read_options")


def is_change_stream_query(sql: str) -> bool:
    return bool(re.match(r"^\s*SELECT\s+ChangeRecord\s+FROM\s+READ_", sql, re.IGNORECASE))


def change_stream_function(sql: str) -> tuple[str, str] | None:
    """``(stream, position)`` of the ``READ_<stream>`` a change-stream query calls, ``position`` as
    Spanner names a place in a query (``1:26``: line and column of ``READ_``); ``None``: no call."""
    match = _CALL.match(sql)
    if not match:
        return None
    before = sql[: match.start(1)]
    line = before.count("\n") + 1
    column = len(before) - (before.rfind("\n") + 1) + 1
    return match.group(2), f"{line}:{column}"


def parse_change_stream_query(sql: str, params: Any) -> ChangeStreamQuery:
    """Build the query from SQL text and its ``params`` (a protobuf ``Struct``)."""
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    match = _TVF.match(sql)
    if not match:
        raise EmulatorError(invalid, f"Syntax error in change stream query: {sql[:120]!r}")
    stream, body = match.group(1), match.group(2)
    values: dict[str, Any] = {}
    for position, item in enumerate(split_top_level(body, angle_brackets=False)):
        named = re.fullmatch(r"([A-Za-z_]+)\s*=>\s*(.+)", item.strip(), re.DOTALL)
        if named:
            name, text = named.group(1).lower(), named.group(2).strip()
        elif position < len(_ARGUMENTS):
            name, text = _ARGUMENTS[position], item.strip()
        else:
            raise EmulatorError(invalid, f"Too many arguments to READ_{stream}")
        if name not in _ARGUMENTS:
            raise EmulatorError(invalid, f"Unknown argument {name} to READ_{stream}")
        values[name] = _literal(text, params, name)

    def timestamp(name: str, required: bool) -> int | None:
        value = values.get(name)
        if value is None:
            if required:
                raise EmulatorError(invalid, f"READ_{stream}: {name} is required and cannot be NULL")
            return None
        try:
            return to_micros(parse_timestamp(str(value)))
        except ValueError as exc:
            raise EmulatorError(
                invalid, f"READ_{stream}: {name} is not a valid timestamp: {value!r}"
            ) from exc

    heartbeat = values.get("heartbeat_milliseconds")
    if heartbeat is None:
        raise EmulatorError(invalid, f"READ_{stream}: heartbeat_milliseconds is required")
    try:
        heartbeat_ms = int(heartbeat)
    except (TypeError, ValueError) as exc:
        raise EmulatorError(invalid, f"READ_{stream}: heartbeat_milliseconds must be INT64") from exc
    token = values.get("partition_token")
    return ChangeStreamQuery(
        stream=stream,
        start_us=timestamp("start_timestamp", True),  # type: ignore[arg-type]
        end_us=timestamp("end_timestamp", False),
        token=None if token is None else str(token),
        heartbeat_ms=heartbeat_ms,
    )


def _literal(text: str, params: Any, name: str) -> Any:
    if text.startswith("@"):
        key = text[1:]
        fields = params.fields if params is not None else {}
        if key not in fields:
            raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, f"No parameter found for binding: {key}")
        value = fields[key]
        kind = value.WhichOneof("kind")
        if kind in (None, "null_value"):
            return None
        if kind == "number_value":
            return int(value.number_value)
        if kind == "string_value":
            return value.string_value
        raise EmulatorError(
            grpc.StatusCode.INVALID_ARGUMENT, f"Parameter {key} for {name} has an invalid type"
        )
    if text.upper() == "NULL":
        return None
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, f"Cannot parse {name} value {text!r}")


# ----- INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS and CURRENT_TIMESTAMP() --------------------------

#: Columns of ``INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS``, in Spanner's order.
OPTIONS_COLUMNS = (
    "change_stream_catalog",
    "change_stream_schema",
    "change_stream_name",
    "option_name",
    "option_type",
    "option_value",
)
_OPTIONS_QUERY = re.compile(
    r"^\s*SELECT\s+(.+?)\s+FROM\s+INFORMATION_SCHEMA\.CHANGE_STREAM_OPTIONS(?:\s+WHERE\s+(.+?))?\s*;?\s*$",
    re.IGNORECASE | re.DOTALL,
)
_CONDITION = re.compile(r"([A-Za-z_]+)\s*=\s*(@[A-Za-z_][A-Za-z0-9_]*|'[^']*'|\"[^\"]*\")", re.DOTALL)
_CURRENT_TIMESTAMP = re.compile(
    r"^\s*SELECT\s+CURRENT_TIMESTAMP\s*\(\s*\)(?:\s+AS\s+([A-Za-z_][A-Za-z0-9_]*))?\s*;?\s*$", re.IGNORECASE
)


@dataclass(frozen=True)
class OptionsQuery:
    """``SELECT <columns> FROM INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS [WHERE col = value AND …]``."""

    columns: tuple[tuple[str, str], ...]  # (column, output name as written)
    filters: tuple[tuple[str, str | None], ...]  # (column, value); NULL matches nothing

    def rows(self, options: list[dict[str, str]]) -> list[list[str]]:
        """The selected columns of the option rows that pass every filter."""
        return [
            [row[column] for column, _ in self.columns]
            for row in options
            if all(value is not None and row[column] == value for column, value in self.filters)
        ]


def parse_options_query(sql: str, params: Any) -> OptionsQuery | None:
    """The query when ``sql`` reads ``INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS``, else ``None``."""
    match = _OPTIONS_QUERY.match(sql)
    if not match:
        return None
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    selected = [item.strip() for item in match.group(1).split(",")]
    if selected == ["*"]:
        columns = tuple((c, c.upper()) for c in OPTIONS_COLUMNS)
    else:
        columns = tuple((name.lower(), name) for name in selected)
    filters: list[tuple[str, str | None]] = []
    if match.group(2):
        for condition in re.split(r"\s+AND\s+", match.group(2).strip(), flags=re.IGNORECASE):
            found = _CONDITION.fullmatch(condition.strip())
            if not found:
                raise EmulatorError(invalid, f"unsupported condition on CHANGE_STREAM_OPTIONS: {condition!r}")
            value = _literal(found.group(2), params, found.group(1))
            filters.append((found.group(1).lower(), None if value is None else str(value)))
    for column in [c for c, _ in columns] + [c for c, _ in filters]:
        if column not in OPTIONS_COLUMNS:
            raise EmulatorError(invalid, f"Unrecognized name: {column}")
    return OptionsQuery(columns, tuple(filters))


def parse_current_timestamp_query(sql: str) -> tuple[str] | None:
    """``(output name,)`` when ``sql`` is ``SELECT CURRENT_TIMESTAMP() [AS name]``, else ``None``."""
    match = _CURRENT_TIMESTAMP.match(sql)
    return (match.group(1) or "",) if match else None
