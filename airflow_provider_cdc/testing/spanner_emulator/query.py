"""Parsing ``SELECT ChangeRecord FROM READ_<stream>(...)`` with its bound parameters."""

from __future__ import annotations

import re
from typing import Any

import grpc

from airflow_provider_cdc.domain.timestamps import parse_timestamp, to_micros

from .database import ChangeStreamQuery, EmulatorError
from .ddl import split_top_level

_TVF = re.compile(
    r"^\s*SELECT\s+ChangeRecord\s+FROM\s+READ_([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*;?\s*$",
    re.IGNORECASE | re.DOTALL,
)
_ARGUMENTS = ("start_timestamp", "end_timestamp", "partition_token", "heartbeat_milliseconds", "read_options")


def is_change_stream_query(sql: str) -> bool:
    return bool(re.match(r"^\s*SELECT\s+ChangeRecord\s+FROM\s+READ_", sql, re.IGNORECASE))


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
