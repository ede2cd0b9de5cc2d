"""One Datastream event (a dict as fastavro or ``json.loads`` gives it) and what it stands for.

An event carries generic metadata (``uuid``, ``read_timestamp``, ``source_timestamp``,
``object``, ``read_method``, ``stream_name``, ``schema_key``, ``sort_keys``), the database's
``source_metadata`` and the row's whole image in ``payload``.

- Timestamps come as epoch milliseconds, datetimes (fastavro's ``timestamp-millis``) or text with
  or without a zone (no zone: UTC; a space for ``T`` is accepted).
- The change kind: ``DELETE``, ``UPDATE-DELETE`` (the old key of a key change; Oracle leaves
  ``is_deleted`` false on it) or ``is_deleted`` true delete the key; ``INSERT``, ``UPDATE``,
  ``UPDATE-INSERT`` and a missing ``change_type`` (backfill, legacy files) upsert the row.
- The primary key: ``source_metadata.primary_keys``, SQL Server's ``replication_index``, else the
  table's ``primary_keys`` setting.
- A delete without a payload takes its key values from ``source_metadata`` fields of the key
  columns' names when all are there; otherwise it is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_provider_cdc.core.timestamps import from_micros, parse_timestamp, to_micros
from airflow_provider_cdc.sources.datastream.settings import DatastreamSettings

UPSERT = "upsert"
DELETE = "delete"
#: ``change_type`` values and the change kind each stands for.
CHANGE_TYPES: dict[str, str] = {
    "INSERT": UPSERT,
    "UPDATE": UPSERT,
    "UPDATE-INSERT": UPSERT,
    "DELETE": DELETE,
    "UPDATE-DELETE": DELETE,
}


class DatastreamEventError(ValueError):
    """An event that cannot become a change (the message names file, event uuid and field)."""


def _where(uuid: Any, file_name: str | None) -> str:
    place = f"file {file_name!r}, " if file_name else ""
    return f"{place}event {uuid!r}"


def timestamp_micros(value: Any, field: str, uuid: Any = "?", file_name: str | None = None) -> int:
    """Microseconds since the epoch of a timestamp given as epoch ms, a datetime or text."""
    if isinstance(value, datetime):
        return to_micros(value)
    if type(value) is int:
        return value * 1000
    if isinstance(value, str):
        try:
            return to_micros(parse_timestamp(value))
        except ValueError:
            pass
    raise DatastreamEventError(
        f"{_where(uuid, file_name)}: {field} is {value!r}; expected epoch milliseconds, a datetime "
        "or RFC 3339 text"
    )


def event_timestamp(value: Any, field: str, uuid: Any = "?", file_name: str | None = None) -> datetime:
    """An event timestamp as an aware UTC datetime (µs)."""
    if isinstance(value, datetime) and value.tzinfo is timezone.utc:
        return value
    return from_micros(timestamp_micros(value, field, uuid, file_name))


def change_kind(change_type: Any, is_deleted: Any, uuid: Any = "?", file_name: str | None = None) -> str:
    """``upsert`` or ``delete`` from ``change_type`` and ``is_deleted`` (either may be missing)."""
    if change_type is None or change_type == "":
        kind = UPSERT
    else:
        kind = CHANGE_TYPES.get(change_type.upper()) if isinstance(change_type, str) else None
        if kind is None:
            raise DatastreamEventError(
                f"{_where(uuid, file_name)}: source_metadata.change_type is {change_type!r}; expected one "
                f"of {', '.join(CHANGE_TYPES)}"
            )
    if is_deleted is True:
        return DELETE
    return kind


def primary_key(
    metadata: Mapping[str, Any],
    table: str,
    settings: DatastreamSettings,
    uuid: Any = "?",
    file_name: str | None = None,
) -> tuple[str, ...]:
    """The key columns of an event's table: from the event, else the ``primary_keys`` setting."""
    for field in ("primary_keys", "replication_index"):
        columns = metadata.get(field)
        if columns:
            if isinstance(columns, str) or not isinstance(columns, Sequence):
                raise DatastreamEventError(
                    f"{_where(uuid, file_name)}: source_metadata.{field} is {columns!r}; expected a list"
                )
            return tuple(columns)
    configured = settings.primary_keys.get(table)
    if configured:
        return configured
    raise DatastreamEventError(
        f"{_where(uuid, file_name)}: table {table!r} has no primary key (the event carries no "
        "primary_keys or replication_index); declare it in the primary_keys setting"
    )


def key_values(
    payload: Mapping[str, Any] | None,
    metadata: Mapping[str, Any],
    key: Sequence[str],
    kind: str,
    uuid: Any = "?",
    file_name: str | None = None,
) -> dict[str, Any]:
    """The key's values: from the payload, or (a delete without payload) from ``source_metadata``."""
    source: Mapping[str, Any] | None = payload
    if payload is None:
        if kind != DELETE:
            raise DatastreamEventError(f"{_where(uuid, file_name)}: an upsert without a payload")
        source = metadata
    missing = [column for column in key if column not in source]  # type: ignore[operator]
    if missing:
        where = "payload" if payload is not None else "source_metadata (a delete without payload)"
        raise DatastreamEventError(f"{_where(uuid, file_name)}: key column(s) {missing} not in the {where}")
    return {column: source[column] for column in key}  # type: ignore[index]


@dataclass(frozen=True)
class DatastreamEvent:
    """An event's parts: generic metadata, change kind, table, key and row image."""

    uuid: str
    read_timestamp: datetime | None
    source_timestamp: datetime
    object_name: str
    read_method: str
    stream_name: str | None
    schema_key: str | None
    sort_keys: tuple[Any, ...]
    source_metadata: Mapping[str, Any]
    payload: Mapping[str, Any] | None
    kind: str
    table_name: str
    primary_key: tuple[str, ...]
    keys: Mapping[str, Any]

    @property
    def is_delete(self) -> bool:
        """Whether the event deletes its key."""
        return self.kind == DELETE

    @property
    def change_type(self) -> str | None:
        """``source_metadata.change_type`` as the event gives it."""
        return self.source_metadata.get("change_type")


def parse_event(
    record: Mapping[str, Any], settings: DatastreamSettings | None = None, file_name: str | None = None
) -> DatastreamEvent:
    """An event's parts (errors name ``file_name``, the event uuid and the field)."""
    settings = settings or DatastreamSettings()
    if not isinstance(record, Mapping):
        raise DatastreamEventError(f"{_where('?', file_name)}: an event is an object, got {record!r}")
    uuid = record.get("uuid")
    if not isinstance(uuid, str) or not uuid:
        raise DatastreamEventError(f"{_where(uuid, file_name)}: uuid is missing or not text")
    for field in ("object", "read_method"):
        if not isinstance(record.get(field), str) or not record[field]:
            raise DatastreamEventError(f"{_where(uuid, file_name)}: {field} is {record.get(field)!r}")
    metadata = record.get("source_metadata") or {}
    if not isinstance(metadata, Mapping):
        raise DatastreamEventError(f"{_where(uuid, file_name)}: source_metadata is {metadata!r}")
    payload = record.get("payload")
    if payload is not None and not isinstance(payload, Mapping):
        raise DatastreamEventError(f"{_where(uuid, file_name)}: payload is {payload!r}; expected an object")
    source_timestamp = record.get("source_timestamp")
    if source_timestamp is None:
        raise DatastreamEventError(f"{_where(uuid, file_name)}: source_timestamp is missing")
    read_timestamp = record.get("read_timestamp")
    try:
        table = settings.table_name(record["object"])
    except ValueError as exc:
        raise DatastreamEventError(f"{_where(uuid, file_name)}: {exc}") from None
    kind = change_kind(metadata.get("change_type"), metadata.get("is_deleted"), uuid, file_name)
    key = primary_key(metadata, table, settings, uuid, file_name)
    return DatastreamEvent(
        uuid=uuid,
        read_timestamp=(
            None
            if read_timestamp is None
            else event_timestamp(read_timestamp, "read_timestamp", uuid, file_name)
        ),
        source_timestamp=event_timestamp(source_timestamp, "source_timestamp", uuid, file_name),
        object_name=record["object"],
        read_method=record["read_method"],
        stream_name=record.get("stream_name"),
        schema_key=record.get("schema_key"),
        sort_keys=tuple(record.get("sort_keys") or ()),
        source_metadata=metadata,
        payload=payload,
        kind=kind,
        table_name=table,
        primary_key=key,
        keys=key_values(payload, metadata, key, kind, uuid, file_name),
    )
