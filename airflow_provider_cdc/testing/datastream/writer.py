"""Datastream's Cloud Storage layout: Avro schemas, JSONL lines, file rotation, names and sinks.

Files land at ``[root]/[object]/yyyy/mm/dd/hh/mm/<40 hex>_<read_method>_<signed int>_<task>_<n>.<ext>``
with the minute folder of the events' ``source_timestamp`` (for a backfill: the backfill start). One
file holds events of one object, one read method, one payload schema and one minute folder; a writer
task rotates its file after ``rotation_seconds``, before it would exceed ``rotation_mb`` (bounded by
the largest event the table can produce), on a schema change and on a new minute folder. The file is
created in Cloud Storage (its **arrival**) when it is closed, plus an upload delay.

Avro files follow the real ones: one record schema named after the object with the fields ``uuid``,
``read_timestamp``, ``source_timestamp`` (``timestamp-millis``), ``object``, ``read_method``,
``stream_name``, ``schema_key``, ``sort_keys``, ``source_metadata`` (the database's fields in its order)
and ``payload`` (each column a union with ``null`` first; MySQL fields default to ``null``), the null
codec. JSONL files hold one JSON object per line with the same fields, timestamps as text.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Protocol

from .history import Column, DatastreamEvent

FORMATS = ("avro", "jsonl", "jsonl.gz")
MIN_ROTATION_SECONDS, MAX_ROTATION_SECONDS = 15, 60
_MIB = 1024 * 1024


# --- Avro schemas ----------------------------------------------------------------------------------


def source_metadata_fields(database: str, mysql_gtid: bool = False) -> list[dict[str, Any]]:
    """The ``source_metadata`` record fields of ``database`` in the order its files carry them."""
    strings = {"type": "array", "items": "string"}
    if database == "mysql":
        file_field, position_field = (
            ("binlog_file", "binlog_position") if mysql_gtid else ("log_file", "log_position")
        )
        return [
            {"name": "table", "type": "string"},
            {"name": "database", "type": "string"},
            {"name": "primary_keys", "type": strings},
            {"name": file_field, "type": ["null", "string"]},
            {"name": position_field, "type": ["null", "long"]},
            {"name": "change_type", "type": ["null", "string"]},
            {"name": "is_deleted", "type": ["null", "boolean"]},
        ]
    if database == "oracle":
        return [
            {"name": "schema", "type": "string"},
            {"name": "table", "type": "string"},
            {"name": "database", "type": "string"},
            {"name": "row_id", "type": ["null", "string"]},
            {"name": "scn", "type": ["null", "long"]},
            {"name": "is_deleted", "type": ["null", "boolean"]},
            {"name": "change_type", "type": ["null", "string"]},
            {"name": "ssn", "type": ["null", "long"]},
            {"name": "rs_id", "type": ["null", "string"]},
            {"name": "tx_id", "type": ["null", "string"]},
            {"name": "log_file", "type": ["null", "string"]},
            {"name": "primary_keys", "type": ["null", strings]},
        ]
    if database == "postgresql":
        return [
            {"name": "schema", "type": "string"},
            {"name": "table", "type": "string"},
            {"name": "is_deleted", "type": ["null", "boolean"]},
            {"name": "change_type", "type": ["null", "string"]},
            {"name": "tx_id", "type": ["null", "long"]},
            {"name": "lsn", "type": ["null", "string"]},
            {"name": "primary_keys", "type": ["null", strings]},
        ]
    if database == "sqlserver":
        return [
            {"name": "table", "type": "string"},
            {"name": "database", "type": "string"},
            {"name": "schema", "type": "string"},
            {"name": "is_deleted", "type": ["null", "boolean"]},
            {"name": "lsn", "type": ["null", "string"]},
            {"name": "tx_id", "type": ["null", "string"]},
            {"name": "physical_location", "type": ["null", {"type": "array", "items": "int"}]},
            {"name": "replication_index", "type": ["null", strings]},
            {"name": "change_type", "type": ["null", "string"]},
        ]
    raise ValueError(f"unknown source database {database!r}")


def column_avro_type(database: str, column: Column) -> Any:
    """The Avro type ``database``'s files give ``column`` (without the ``null`` union)."""
    kind = column.kind
    if kind == "int":
        return "long" if database == "oracle" else "int"
    if kind == "long":
        return "long"
    if kind == "varchar":
        # MySQL files carry plain strings; the others the custom logical type with the length
        return (
            "string"
            if database == "mysql"
            else {"type": "string", "logicalType": "varchar", "length": column.length}
        )
    if kind == "decimal":
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": column.precision,
            "scale": column.scale,
        }
    if kind == "bool":
        return {"mysql": "int", "oracle": "long"}.get(database, "boolean")
    if kind == "timestamp":
        return {"type": "long", "logicalType": "timestamp-micros"}
    if kind == "double":
        return "double"
    if kind == "json":
        return {"type": "string", "logicalType": "json"}
    raise ValueError(f"column {column.name!r} has an unknown kind {kind!r}")


def payload_fields(database: str, columns: Sequence[Column]) -> list[dict[str, Any]]:
    fields = []
    for column in columns:
        entry: dict[str, Any] = {"name": column.name, "type": ["null", column_avro_type(database, column)]}
        if database == "mysql":
            entry["default"] = None
        fields.append(entry)
    return fields


def avro_schema(database: str, object_name: str, columns: Sequence[Column], mysql_gtid: bool = False) -> dict:
    """The writer schema of a file of ``object_name`` (record named after the object)."""
    timestamp = {"type": "long", "logicalType": "timestamp-millis"}
    return {
        "type": "record",
        "name": object_name,
        "fields": [
            {"name": "uuid", "type": "string"},
            {"name": "read_timestamp", "type": timestamp},
            {"name": "source_timestamp", "type": timestamp},
            {"name": "object", "type": "string"},
            {"name": "read_method", "type": "string"},
            {"name": "stream_name", "type": "string"},
            {"name": "schema_key", "type": "string"},
            {"name": "sort_keys", "type": {"type": "array", "items": ["string", "long"]}},
            {
                "name": "source_metadata",
                "type": {
                    "type": "record",
                    "name": "source_metadata",
                    "fields": source_metadata_fields(database, mysql_gtid),
                },
            },
            {
                "name": "payload",
                "type": {"type": "record", "name": "payload", "fields": payload_fields(database, columns)},
            },
        ],
    }


def schema_key(database: str, object_name: str, columns: Sequence[Column]) -> str:
    """The 40-hex identifier of an object's unified schema (changes when a column is added)."""
    text = json.dumps([object_name, payload_fields(database, columns)], sort_keys=True)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


# --- planned files ---------------------------------------------------------------------------------


@dataclass
class DatastreamFile:
    """One file a Datastream writer task closes: its events, where it goes and when it arrives."""

    database: str
    object_name: str
    read_method: str
    task: int
    sequence: int
    folder_minute: datetime
    columns: tuple[Column, ...]
    events: list[DatastreamEvent]
    opened: datetime
    closed: datetime
    arrival: datetime
    file_format: str
    stream_name: str
    mysql_gtid: bool = False
    source_timestamps_with_zone: bool = False
    rotation: str = "time"

    @property
    def schema_key(self) -> str:
        return schema_key(self.database, self.object_name, self.columns)

    @property
    def name(self) -> str:
        """``<sha1>_<read_method>_<signed int>_<task>_<n>.<ext>``."""
        identity = f"{self.stream_name}/{self.object_name}/{self.read_method}/{self.task}/{self.sequence}/"
        identity += f"{self.folder_minute.isoformat()}/{self.schema_key}"
        digest = hashlib.sha1(identity.encode("utf-8")).hexdigest()
        signed = _java_hash(f"{self.stream_name}/{self.object_name}")
        return f"{digest}_{self.read_method}_{signed}_{self.task}_{self.sequence}.{self.file_format}"

    @property
    def path(self) -> str:
        """The object path under the stream root."""
        m = self.folder_minute
        folder = f"{m.year:04d}/{m.month:02d}/{m.day:02d}/{m.hour:02d}/{m.minute:02d}"
        return f"{self.object_name}/{folder}/{self.name}"

    def encode(self) -> bytes:
        """The file's bytes in its format."""
        if self.file_format == "avro":
            marker = hashlib.md5(self.name.encode("utf-8")).digest()
            return encode_avro(
                self.database, self.object_name, self.columns, self.events, self.mysql_gtid, marker
            )
        data = encode_jsonl(self.events, self.schema_key, self.source_timestamps_with_zone)
        return gzip.compress(data, mtime=0) if self.file_format == "jsonl.gz" else data


def _java_hash(text: str) -> int:
    """Java's ``String.hashCode`` as a signed 32-bit integer (stable per stream and object)."""
    value = 0
    for char in text:
        value = (31 * value + ord(char)) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def minute_folder(value: datetime) -> datetime:
    return value.astimezone(timezone.utc).replace(second=0, microsecond=0)


def max_event_bytes(stream_name: str, object_name: str, columns: Sequence[Column]) -> int:
    """An upper bound of one event's encoded size (JSON line or Avro record) for size rotation."""
    bound = 1200 + len(stream_name) + 3 * len(object_name)
    for column in columns:
        value = {"varchar": 2 * (column.length or 256) + 2, "json": 600}.get(column.kind, 48)
        bound += len(column.name) + 6 + value
    return bound


def plan_files(
    database: str,
    events: Iterable[DatastreamEvent],
    *,
    file_format: str,
    rotation_seconds: float,
    rotation_mb: float,
    upload_delay: Any,
    mysql_gtid: bool = False,
    source_timestamps_with_zone: bool = False,
) -> list[DatastreamFile]:
    """Group events into files the way Datastream's writer tasks rotate them.

    Events are grouped by (object, read method, task) and taken in read order; a task keeps one open
    file per minute folder, which closes when its rotation interval has passed, before its size would
    exceed ``rotation_mb`` and when the object's schema changes. ``upload_delay(file) -> timedelta``
    gives each file's upload time.
    """
    if file_format not in FORMATS:
        raise ValueError(
            f"unknown Datastream file format {file_format!r}; expected one of {', '.join(FORMATS)}"
        )
    if not MIN_ROTATION_SECONDS <= rotation_seconds <= MAX_ROTATION_SECONDS:
        raise ValueError(
            f"rotation_seconds={rotation_seconds} is outside Datastream's file rotation interval "
            f"({MIN_ROTATION_SECONDS}-{MAX_ROTATION_SECONDS} s)"
        )
    if rotation_mb <= 0:
        raise ValueError(f"rotation_mb={rotation_mb} must be positive")
    lanes: dict[tuple[str, str, int], list[DatastreamEvent]] = {}
    for event in events:
        lanes.setdefault((event.object_name, event.read_method, event.task), []).append(event)
    interval = timedelta(seconds=rotation_seconds)
    limit = rotation_mb * _MIB
    files: list[DatastreamFile] = []
    for (object_name, read_method, task), lane in sorted(lanes.items()):
        lane.sort(key=lambda e: (e.read_timestamp, e.ordinal))
        sequence = 0
        # a task keeps one open file per minute folder and schema
        open_files: dict[tuple[datetime, int], DatastreamFile] = {}
        per_file = {id(event.columns): 1 for event in lane}
        for event in lane:
            read_at = event.read_timestamp
            for slot, current in list(open_files.items()):
                if read_at >= current.opened + interval:
                    reason = "time"
                elif current.columns is not event.columns and current.object_name == event.object_name:
                    reason = "schema" if len(current.columns) < len(event.columns) else None
                else:
                    reason = None
                if reason is not None:
                    current.closed = current.opened + interval if reason == "time" else read_at
                    current.rotation = reason
                    files.append(open_files.pop(slot))
            slot = (minute_folder(event.source_timestamp), id(event.columns))
            current = open_files.get(slot)
            if current is not None and len(current.events) >= per_file[id(event.columns)]:
                current.closed, current.rotation = current.events[-1].read_timestamp, "size"
                files.append(open_files.pop(slot))
                current = None
            if current is None:
                per_file[id(event.columns)] = max(
                    1, int(limit // max_event_bytes(event.stream_name, object_name, event.columns))
                )
                current = DatastreamFile(
                    database, object_name, read_method, task, sequence, slot[0], event.columns, [],
                    read_at, read_at, read_at, file_format, event.stream_name, mysql_gtid,
                    source_timestamps_with_zone,
                )  # fmt: skip
                open_files[slot] = current
                sequence += 1
            current.events.append(event)
        for current in open_files.values():
            current.closed = current.opened + interval
            files.append(current)
    for planned in files:
        planned.arrival = _floor_ms(planned.closed + upload_delay(planned))
    files.sort(key=lambda f: (f.arrival, f.path))
    return files


def _floor_ms(value: datetime) -> datetime:
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


# --- encoding --------------------------------------------------------------------------------------


def _record(event: DatastreamEvent, schema_key_value: str) -> dict[str, Any]:
    return {
        "uuid": event.uuid,
        "read_timestamp": event.read_timestamp,
        "source_timestamp": event.source_timestamp,
        "object": event.object_name,
        "read_method": event.read_method,
        "stream_name": event.stream_name,
        "schema_key": schema_key_value,
        "sort_keys": list(event.sort_keys),
        "source_metadata": event.source_metadata,
        "payload": event.payload,
    }


def encode_avro(
    database: str,
    object_name: str,
    columns: Sequence[Column],
    events: Sequence[DatastreamEvent],
    mysql_gtid: bool = False,
    sync_marker: bytes | None = None,
) -> bytes:
    """An uncompressed Avro object container file of ``events`` with the object's writer schema
    (``sync_marker``: 16 bytes that make the file reproducible; random when not given)."""
    import fastavro

    schema = fastavro.parse_schema(avro_schema(database, object_name, columns, mysql_gtid))
    key = schema_key(database, object_name, columns)
    buffer = io.BytesIO()
    records = (_record(event, key) for event in events)
    fastavro.writer(buffer, schema, records, codec="null", sync_marker=sync_marker or os.urandom(16))
    return buffer.getvalue()


def read_timestamp_text(value: datetime) -> str:
    """``2019-11-07T07:37:16.808Z``."""
    return f"{value:%Y-%m-%dT%H:%M:%S}.{value.microsecond // 1000:03d}Z"


def source_timestamp_text(value: datetime, with_zone: bool) -> str:
    """``2019-11-07T02:15:39`` (no zone; milliseconds only when not zero) or ``…39.000Z``."""
    if with_zone:
        return read_timestamp_text(value)
    millis = value.microsecond // 1000
    return f"{value:%Y-%m-%dT%H:%M:%S}" + (f".{millis:03d}" if millis else "")


def payload_value_text(value: Any, with_zone: bool) -> str:
    """A payload value as JSON text: decimals as JSON numbers, timestamps as text."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, datetime):
        text = f"{value.astimezone(timezone.utc):%Y-%m-%dT%H:%M:%S}.{value.microsecond:06d}"
        return json.dumps(text + ("Z" if with_zone else ""))
    return json.dumps(value, ensure_ascii=False)


def jsonl_line(event: DatastreamEvent, schema_key_value: str, with_zone: bool) -> str:
    """One event as a JSON object on one line, fields in the order of the Avro files."""
    head = {
        "uuid": event.uuid,
        "read_timestamp": read_timestamp_text(event.read_timestamp),
        "source_timestamp": source_timestamp_text(event.source_timestamp, with_zone),
        "object": event.object_name,
        "read_method": event.read_method,
        "stream_name": event.stream_name,
        "schema_key": schema_key_value,
        "sort_keys": list(event.sort_keys),
        "source_metadata": event.source_metadata,
    }
    payload = ",".join(
        f"{json.dumps(name)}:{payload_value_text(value, with_zone)}" for name, value in event.payload.items()
    )
    return json.dumps(head, ensure_ascii=False, separators=(",", ":"))[:-1] + f',"payload":{{{payload}}}}}'


def encode_jsonl(events: Sequence[DatastreamEvent], schema_key_value: str, with_zone: bool = False) -> bytes:
    """Newline-terminated JSON lines of ``events`` (UTF-8)."""
    return "".join(jsonl_line(event, schema_key_value, with_zone) + "\n" for event in events).encode("utf-8")


# --- sinks -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WrittenFile:
    """A file as written: its object path under the stream root, arrival time, size and event count."""

    path: str
    location: str
    arrival: datetime
    size: int
    events: int
    uuids: tuple[str, ...] = field(default=(), repr=False)


class Sink(Protocol):
    def write(self, path: str, data: bytes, arrival: datetime) -> tuple[str, datetime]:
        """Store ``data`` at ``path`` under the stream root; return its location and arrival time."""


class LocalFolderSink:
    """Writes files under a local folder and sets each file's modification time to its arrival."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = os.fspath(folder)

    def write(self, path: str, data: bytes, arrival: datetime) -> tuple[str, datetime]:
        target = os.path.join(self.folder, *path.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as out:
            out.write(data)
        stamp_ns = (arrival - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1) * 1000
        os.utime(target, ns=(stamp_ns, stamp_ns))
        return target, arrival


class GcsSink:
    """Uploads files with ``google-cloud-storage``; the arrival is the blob's real ``time_created``."""

    def __init__(self, client: Any, bucket: str, prefix: str = "") -> None:
        self.bucket = client.bucket(bucket)
        self.bucket_name = bucket
        self.prefix = prefix.strip("/")

    def write(self, path: str, data: bytes, arrival: datetime) -> tuple[str, datetime]:
        name = f"{self.prefix}/{path}" if self.prefix else path
        blob = self.bucket.blob(name)
        content_type = "application/avro" if name.endswith(".avro") else "application/jsonl"
        blob.upload_from_string(data, content_type=content_type)
        if blob.time_created is None:
            blob.reload()
        return f"gs://{self.bucket_name}/{name}", blob.time_created


def write_file(planned: DatastreamFile, sink: Sink) -> WrittenFile:
    """Encode ``planned`` and store it through ``sink``."""
    data = planned.encode()
    location, arrival = sink.write(planned.path, data, planned.arrival)
    return WrittenFile(
        planned.path, location, arrival, len(data), len(planned.events), tuple(e.uuid for e in planned.events)
    )
