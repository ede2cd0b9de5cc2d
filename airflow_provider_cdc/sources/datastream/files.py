"""One Datastream file's events as staged change rows, streamed in batches.

Avro files are read with each file's own writer schema (a schema change rotates the file, so two
files of one object may differ); the null and deflate codecs are read (snappy and the others
fastavro reads when their package, e.g. ``cramjam``, is installed). JSONL files may be gzip-compressed.
Each event becomes one staged change (``core.contract.staged_rows``):

| staged column | from the event |
| --- | --- |
| ``unit`` | the unit read (the file's token) |
| ``commit_timestamp`` | ``source_timestamp`` |
| ``transaction_id`` | ``source_metadata.tx_id`` as text, else NULL |
| ``transaction_record``, ``transaction_record_count`` | NULL (Datastream does not count) |
| ``table_name`` | the object's target table |
| ``operation`` | ``INSERT`` (an upsert of the full row) or ``DELETE`` |
| ``keys_json`` / ``after_json`` | the key columns / the other columns of ``payload`` (``{}`` for DELETE) |
| ``before_json`` | NULL (Datastream has no before image) |
| ``column_types_json`` | the payload's columns (schema order) with logical types and key flags |
| ``source_metadata_json`` | uuid, read method/timestamp, stream, schema key, object, file, ordering fields |
| ``change_sequence_number`` | :mod:`.sequence_numbers`, sortable form |

Per-file work (column order, types, encoders, key columns, table names) is done once per file
and shape. Events are converted :data:`CHUNK_EVENTS` at a time, a column at a time: each column's
values become JSON texts in one encoder call, each distinct timestamp is converted once, the
metadata fields a chunk's events share are written into its ``source_metadata_json`` format, and
keys, images and metadata are each one ``%`` format per row. A chunk that is not uniform (events of
several shapes, metadata of several layouts, a field the column path does not take) is converted
event by event, which gives the same rows and names the event and field of a problem.

A task stages :func:`.file_batches.read_file_change_batches`: the same rows as Arrow record batches,
JSONL files parsed columnar by :mod:`.jsonl_arrow` (pyarrow's JSON reader with an explicit schema),
which hands what it does not take to the conversion here.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from itertools import islice, repeat
from operator import itemgetter
from typing import Any, BinaryIO

from airflow_provider_cdc.core.columns import ColumnType, column_types_json
from airflow_provider_cdc.core.sequence_number import MAX_SECTION_VALUE
from airflow_provider_cdc.core.timestamps import EPOCH, format_timestamp, from_micros
from airflow_provider_cdc.core.types import LogicalType
from airflow_provider_cdc.sources.datastream.events import (
    CHANGE_TYPES,
    DELETE,
    DatastreamEventError,
    key_values,
    primary_key,
    timestamp_micros,
)
from airflow_provider_cdc.sources.datastream.json_text import (
    canonical_json,
    json_texts,
    object_format,
)
from airflow_provider_cdc.sources.datastream.names import AVRO, DatastreamFile
from airflow_provider_cdc.sources.datastream.read_methods import MYSQL, database_of, is_backfill
from airflow_provider_cdc.sources.datastream.sequence_columns import mysql_sequence_texts
from airflow_provider_cdc.sources.datastream.sequence_numbers import SECTIONS, is_mysql_backfill
from airflow_provider_cdc.sources.datastream.settings import DatastreamSettings
from airflow_provider_cdc.sources.datastream.types import (
    Converter,
    DatastreamTypeError,
    _is_array_record,
    _unwrap_null,
    avro_logical_type,
    inferred_value_converter,
    json_value_converter,
    json_value_type,
    utc_text_of,
    utc_timestamp_text,
    value_converter,
    widen,
)

#: Rows per batch handed to the staging writer.
BATCH_ROWS = 10_000
#: Events converted together (column-wise).
CHUNK_EVENTS = 250
#: ``source_metadata`` fields copied into ``source_metadata_json`` (each database's ordering fields).
SOURCE_FIELDS: tuple[str, ...] = (
    "database",
    "schema",
    "table",
    "change_type",
    "is_deleted",
    "log_file",
    "log_position",
    "binlog_file",
    "binlog_position",
    "scn",
    "rs_id",
    "ssn",
    "row_id",
    "lsn",
    "tx_id",
    "physical_location",
)
#: Staged change rows column-wise: one list per ``STAGED_CHANGE_COLUMNS`` entry, all of one length.
ChangeColumns = list[list[Any]]
INSERT_OPERATION = "INSERT"
DELETE_OPERATION = "DELETE"
_EMPTY: Mapping[str, Any] = {}
_SOURCE_FIELD_SET = frozenset(SOURCE_FIELDS)
_SCANNER = json.JSONDecoder()
_JSON_WHITESPACE = " \t\n\r"
_ONE_MICROSECOND = timedelta(microseconds=1)
#: An event's generic fields, in the order :meth:`_FileEncoder.rows` takes them.
_GENERIC_FIELDS = (
    "uuid",
    "read_timestamp",
    "source_timestamp",
    "object",
    "read_method",
    "stream_name",
    "schema_key",
    "source_metadata",
    "payload",
)
_generic_fields = itemgetter(*_GENERIC_FIELDS)
#: ``source_metadata_json`` keys taken as the event gives them, by their column in ``_GENERIC_FIELDS``.
_SOURCE_COLUMNS = {"object": 3, "read_method": 4, "schema_key": 6, "stream_name": 5}


class _Column:
    """A payload column: name, logical type, position and converter."""

    __slots__ = ("convert", "logical_type", "name", "position")

    def __init__(
        self, name: str, logical_type: LogicalType, position: int, convert: Converter | None
    ) -> None:
        self.name, self.logical_type, self.position, self.convert = name, logical_type, position, convert


class _Shape:
    """One table's columns with one key: the staged text formats of its events."""

    __slots__ = ("key", "key_format", "keys", "table", "types_json", "value_format", "values")

    def __init__(self, table: str, columns: Sequence[_Column], key: tuple[str, ...], where: str) -> None:
        names = {c.name for c in columns}
        missing = [k for k in key if k not in names]
        if missing:
            raise DatastreamEventError(
                f"{where}: key column(s) {missing} of table {table!r} not in the payload"
            )
        self.table = table
        self.key = key
        ordered = sorted(columns, key=lambda c: c.name)
        self.keys = [(c.name, c.convert) for c in ordered if c.name in key]
        self.values = [(c.name, c.convert) for c in ordered if c.name not in key]
        self.key_format = object_format([name for name, _ in self.keys])
        self.value_format = object_format([name for name, _ in self.values])
        self.types_json = column_types_json(
            ColumnType(c.name, c.logical_type.to_json(), c.name in key, c.position) for c in columns
        )


class _FileEncoder:
    """Turns one file's events into staged rows; caches per-file work."""

    def __init__(self, file: DatastreamFile, unit: str, settings: DatastreamSettings) -> None:
        self.file = file
        self.unit = unit
        self.settings = settings
        self.columns: list[_Column] = []
        self._tables: dict[str, str] = {}
        self._shapes: dict[tuple[str, Any], _Shape] = {}
        self._methods: dict[str, tuple[Callable[..., tuple[int, int, int, int]], bool, bool]] = {}
        self._read_text: tuple[Any, str | None] = (object(), None)

    def where(self, uuid: Any) -> str:
        return f"file {self.file.path!r}, event {uuid!r}"

    def table(self, object_name: Any, uuid: Any) -> str:
        table = self._tables.get(object_name)
        if table is None:
            try:
                table = self.settings.table_name(object_name)
            except ValueError as exc:
                raise DatastreamEventError(f"{self.where(uuid)}: {exc}") from None
            self._tables[object_name] = table
        return table

    def method(
        self, read_method: Any, uuid: Any
    ) -> tuple[Callable[..., tuple[int, int, int, int]], bool, bool]:
        found = self._methods.get(read_method)
        if found is None:
            try:
                database = database_of(read_method, self.settings.source_database)
            except ValueError as exc:
                raise DatastreamEventError(f"{self.where(uuid)}: {exc}") from None
            found = (SECTIONS[database], is_backfill(read_method), database == MYSQL)
            self._methods[read_method] = found
        return found

    def shape(self, table: str, metadata: Mapping[str, Any], uuid: Any) -> _Shape:
        event_key = metadata.get("primary_keys") or metadata.get("replication_index")
        cache_key = (table, tuple(event_key) if isinstance(event_key, list) else event_key)
        shape = self._shapes.get(cache_key)
        if shape is None:
            key = primary_key(metadata, table, self.settings, uuid, self.file.path)
            shape = _Shape(table, self._typed_columns(table), key, self.where(uuid))
            self._shapes[cache_key] = shape
        return shape

    def _typed_columns(self, table: str) -> list[_Column]:
        """The file's columns with the table's declared types applied (Avro)."""
        declared = self.settings.declared_types(table)
        if not declared or self.file.format != AVRO:
            return self.columns
        return [
            _Column(c.name, declared[c.name], c.position, value_converter(declared[c.name], c.name))
            if c.name in declared
            else c
            for c in self.columns
        ]

    def read_timestamp_text(self, value: Any, uuid: Any) -> str | None:
        last, text = self._read_text
        if value is last or value == last:
            return text
        if value is None:
            text = None
        elif isinstance(value, datetime):
            text = format_timestamp(value)
        else:
            text = format_timestamp(
                from_micros(timestamp_micros(value, "read_timestamp", uuid, self.file.path))
            )
        self._read_text = (value, text)
        return text

    def row(self, event: Mapping[str, Any]) -> tuple[Any, ...]:
        """The staged row of one event."""
        uuid = event.get("uuid")
        try:
            return self._row(event, uuid)
        except DatastreamEventError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            detail = f"field {exc.args[0]!r} is missing" if isinstance(exc, KeyError) else str(exc)
            raise DatastreamEventError(f"{self.where(uuid)}: {detail}") from exc

    def change_columns(self, events: list[Mapping[str, Any]]) -> ChangeColumns:
        """The staged rows of a batch of events, column-wise: built a column at a time, or event by
        event (:meth:`row`, which names the event and field of a problem) when the batch is not
        uniform."""
        try:
            return self._uniform_columns(events)
        except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError, _NotUniform):
            rows = [self.row(event) for event in events]
            return [list(column) for column in zip(*rows, strict=True)]

    def _uniform_columns(self, events: list[Mapping[str, Any]]) -> ChangeColumns:
        count = len(events)
        try:
            columns = list(zip(*map(_generic_fields, events), strict=True))
        except KeyError:
            columns = list(
                zip(
                    *[tuple(e[f] if f in _REQUIRED else e.get(f) for f in _GENERIC_FIELDS) for e in events],
                    strict=True,
                )
            )
        uuids, reads, stamps, objects, methods, _, _, metas, payloads = columns
        if {*map(type, objects), *map(type, methods)} != {str} or len(set(objects)) + len(set(methods)) != 2:
            raise _NotUniform  # one object and read method (a file's), as text
        object_name, read_method = objects[0], methods[0]
        table = self._tables.get(object_name) or self.table(object_name, uuids[0])
        sections, backfill, mysql = self._methods.get(read_method) or self.method(read_method, uuids[0])
        if None in metas:
            metas = tuple(m or _EMPTY for m in metas)
        metadata = metas[0]
        event_keys = [m.get("primary_keys") or m.get("replication_index") for m in metas]
        if event_keys.count(event_keys[0]) != count:
            raise _NotUniform
        shape = self.shape(table, metadata, uuids[0])
        upserts = _upserts(metas)
        commits, millis = self._commit_times(stamps)
        if None in payloads:
            raise _NotUniform
        keys_json = _objects(shape.key_format, shape.keys, payloads, count, True)
        if all(upserts):
            after_json = _objects(shape.value_format, shape.values, payloads, count, False)
        else:
            upserted = [p for p, upsert in zip(payloads, upserts, strict=True) if upsert]
            texts = iter(_objects(shape.value_format, shape.values, upserted, len(upserted), False))
            after_json = [next(texts) if upsert else "{}" for upsert in upserts]
        csns = mysql_sequence_texts(metas, backfill, upserts, millis) if mysql else None
        if csns is None:
            if mysql and not backfill:
                backfills: Sequence[bool] = [is_mysql_backfill(m) for m in metas]
            else:
                backfills = repeat(backfill, count)  # type: ignore[assignment]
            csns = [
                "%016X/%016X/%016X/%016X"  # noqa: UP031
                % sections(m, back, upsert, ms, object_name, uuid)
                for m, back, upsert, ms, uuid in zip(metas, backfills, upserts, millis, uuids, strict=False)
            ]
        transactions = [m.get("tx_id") for m in metas]
        if transactions.count(None) != count:
            transactions = [None if t is None or t == "" else str(t) for t in transactions]
        operations = [INSERT_OPERATION if upsert else DELETE_OPERATION for upsert in upserts]
        sources = self._source_texts(columns, metas, count)
        return [  # every column its own list: a batch extends them
            [self.unit] * count,
            commits,
            transactions,
            [None] * count,
            [None] * count,
            [table] * count,
            operations,
            keys_json,
            after_json,
            [None] * count,
            [shape.types_json] * count,
            sources,
            csns,
        ]

    def _commit_times(self, stamps: Sequence[Any]) -> tuple[list[datetime], list[int]]:
        """Each ``source_timestamp`` as a UTC datetime and epoch milliseconds (each distinct one
        converted once)."""
        if len(set(map(type, stamps))) != 1:
            raise _NotUniform
        converted = {}
        for stamp in set(stamps):
            if isinstance(stamp, datetime) and stamp.tzinfo is timezone.utc:
                commit = stamp
                micros = (stamp - EPOCH) // _ONE_MICROSECOND
            else:
                micros = timestamp_micros(stamp, "source_timestamp", "?", self.file.path)
                commit = from_micros(micros)
            ms = micros // 1000
            if not 0 <= ms <= MAX_SECTION_VALUE:
                raise _NotUniform
            converted[stamp] = (commit, ms)
        pairs = [converted[stamp] for stamp in stamps]
        return [pair[0] for pair in pairs], [pair[1] for pair in pairs]

    def _source_texts(
        self, columns: list[tuple[Any, ...]], metas: Sequence[Mapping[str, Any]], count: int
    ) -> list[str]:
        """``source_metadata_json`` of each event: one format per batch, the fields that are the same
        in every event of the batch written into it."""
        layouts = set(map(tuple, metas))
        if len(layouts) != 1:
            raise _NotUniform  # events with other metadata fields (or in another order)
        fields = [name for name in next(iter(layouts)) if name in _SOURCE_FIELD_SET]
        columns_of: dict[str, Sequence[Any]] = {}
        if len(fields) > 1:
            picked = list(zip(*map(itemgetter(*fields), metas), strict=True))
            columns_of = dict(zip(fields, picked, strict=True))
        elif fields:
            columns_of = {fields[0]: [m[fields[0]] for m in metas]}
        columns_of.update((name, columns[at]) for name, at in _SOURCE_COLUMNS.items())
        constants = {"file": canonical_json(self.file.name)}
        varying: dict[str, list[str]] = {}
        for name, column in columns_of.items():
            nulls = column.count(None)
            if nulls == count and name in _SOURCE_FIELD_SET:
                continue  # absent from every event's metadata
            if nulls and name in _SOURCE_FIELD_SET:
                raise _NotUniform
            if column.count(column[0]) == count and len(set(map(type, column))) == 1:
                constants[name] = canonical_json(column[0])
            else:
                varying[name] = json_texts(column)
        varying["uuid"] = json_texts(columns[0])
        reads = self._read_texts(columns[1])
        if reads.count(reads[0]) == count:
            constants["read_timestamp"] = reads[0]
        else:
            varying["read_timestamp"] = reads
        template = object_format(list(varying), constants)
        ordered = [varying[name] for name in sorted(varying)]
        if len(ordered) == 1:
            return [template % text for text in ordered[0]]
        return [template % row for row in zip(*ordered, strict=True)]

    def _read_texts(self, reads: Sequence[Any]) -> list[str]:
        """``read_timestamp`` of each event as the JSON text of its RFC 3339 form."""
        if len(set(map(type, reads))) != 1:
            raise _NotUniform
        text = {}
        for value in set(reads):
            if type(value) is datetime and value.tzinfo is timezone.utc:
                text[value] = '"' + utc_timestamp_text(value) + '"'
            elif type(value) is str and (utc := utc_text_of(value)) is not None:
                text[value] = '"' + utc + '"'
            else:
                text[value] = canonical_json(self.read_timestamp_text(value, "?"))
        return [text[value] for value in reads]

    def _row(self, event: Mapping[str, Any], uuid: Any) -> tuple[Any, ...]:
        metadata = event.get("source_metadata") or _EMPTY
        object_name = event["object"]
        read_method = event["read_method"]
        table = self._tables.get(object_name) or self.table(object_name, uuid)
        sections, backfill, mysql = self._methods.get(read_method) or self.method(read_method, uuid)
        change_type = metadata.get("change_type")
        if metadata.get("is_deleted") is True:
            upsert = False
        elif change_type is None or change_type == "":
            upsert = True
        else:
            kind = CHANGE_TYPES.get(change_type) or CHANGE_TYPES.get(str(change_type).upper())
            if kind is None:
                raise DatastreamEventError(
                    f"{self.where(uuid)}: source_metadata.change_type is {change_type!r}; expected one of "
                    f"{', '.join(CHANGE_TYPES)}"
                )
            upsert = kind != DELETE
        stamp = event["source_timestamp"]
        if isinstance(stamp, datetime) and stamp.tzinfo is timezone.utc:
            commit = stamp
            micros = (stamp - EPOCH) // _ONE_MICROSECOND
        else:
            micros = timestamp_micros(stamp, "source_timestamp", uuid, self.file.path)
            commit = from_micros(micros)
        shape = self.shape(table, metadata, uuid)
        payload = event.get("payload")
        if payload is None:
            keys = key_values(
                payload, metadata, shape.key, DELETE if not upsert else "upsert", uuid, self.file.path
            )
            payload = keys
        try:
            keys_json = canonical_json(
                {
                    name: v if (v := payload[name]) is None or convert is None else convert(v)
                    for name, convert in shape.keys
                }
            )
            if upsert:
                after_json = canonical_json(
                    {
                        name: v if (v := payload.get(name)) is None or convert is None else convert(v)
                        for name, convert in shape.values
                    }
                )
            else:
                after_json = "{}"
        except KeyError as exc:
            raise DatastreamEventError(
                f"{self.where(uuid)}: key column {exc.args[0]!r} not in the payload"
            ) from None
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise DatastreamEventError(
                f"{self.where(uuid)}: a payload value does not match its type: {exc}"
            ) from None
        ms = micros // 1000
        if not 0 <= ms <= MAX_SECTION_VALUE:
            raise DatastreamEventError(f"{self.where(uuid)}: source_timestamp {stamp!r} is before 1970")
        try:
            csn = "%016X/%016X/%016X/%016X" % sections(  # noqa: UP031
                metadata, backfill or (mysql and is_mysql_backfill(metadata)), upsert, ms, object_name, uuid
            )
        except ValueError as exc:
            raise DatastreamEventError(f"file {self.file.path!r}: {exc}") from None
        tx_id = metadata.get("tx_id")
        source = {
            "file": self.file.name,
            "object": object_name,
            "read_method": read_method,
            "read_timestamp": self.read_timestamp_text(event.get("read_timestamp"), uuid),
            "schema_key": event.get("schema_key"),
            "stream_name": event.get("stream_name"),
            "uuid": uuid,
        }
        source.update({k: v for k, v in metadata.items() if k in _SOURCE_FIELD_SET and v is not None})
        return (
            self.unit,
            commit,
            None if tx_id is None or tx_id == "" else str(tx_id),
            None,
            None,
            table,
            INSERT_OPERATION if upsert else DELETE_OPERATION,
            keys_json,
            after_json,
            None,
            shape.types_json,
            canonical_json(source),
            csn,
        )


class _NotUniform(Exception):
    """A batch whose events the column-wise path does not take (they are converted one by one)."""


_REQUIRED = frozenset(("object", "read_method", "source_timestamp"))


def _upserts(metas: Sequence[Mapping[str, Any]]) -> list[bool]:
    """Whether each event upserts its row (else it deletes the key)."""
    change_types = [m.get("change_type") for m in metas]
    deleted = [m.get("is_deleted") is True for m in metas]
    kinds = {}
    for change_type in set(change_types):
        if change_type is None or change_type == "":
            kinds[change_type] = True
            continue
        kind = CHANGE_TYPES.get(change_type) or CHANGE_TYPES.get(str(change_type).upper())
        if kind is None:
            raise _NotUniform
        kinds[change_type] = kind != DELETE
    return [not gone and kinds[change_type] for change_type, gone in zip(change_types, deleted, strict=True)]


def _objects(
    template: str,
    columns: Sequence[tuple[str, Converter | None]],
    payloads: Sequence[Mapping[str, Any]],
    count: int,
    required: bool,
) -> list[str]:
    """The JSON object text of ``columns`` of each payload (``required``: a missing column fails)."""
    if not columns:
        return [template] * count
    texts = []
    for name, convert in columns:
        values = [p[name] for p in payloads] if required else [p.get(name) for p in payloads]
        convert_column = getattr(convert, "column", None)
        if convert_column is not None:
            values = convert_column(values)
        elif convert is not None:
            if None in values:
                values = [value if value is None else convert(value) for value in values]
            else:
                values = list(map(convert, values))
        texts.append(json_texts(values))
    if len(texts) == 1:
        return [template % text for text in texts[0]]
    return [template % row for row in zip(*texts, strict=True)]


def read_file_changes(
    stream: BinaryIO, file: DatastreamFile, unit: str, settings: DatastreamSettings
) -> Iterator[list[tuple[Any, ...]]]:
    """Batches (≤ :data:`BATCH_ROWS` rows) of staged change rows, as tuples in
    ``STAGED_CHANGE_COLUMNS`` order, of the events of ``file`` read from ``stream``."""
    for columns in read_file_change_columns(stream, file, unit, settings):
        yield list(zip(*columns, strict=True))


def read_file_change_columns(
    stream: BinaryIO, file: DatastreamFile, unit: str, settings: DatastreamSettings
) -> Iterator[ChangeColumns]:
    """:func:`read_file_changes` column-wise: each batch is one list per ``STAGED_CHANGE_COLUMNS``
    entry, all of one length (what ``StagingWriter.write_columns`` takes)."""
    encoder = _FileEncoder(file, unit, settings)
    if file.format == AVRO:
        return _avro_batches(stream, encoder)
    return _jsonl_batches(gzip.GzipFile(fileobj=stream, mode="rb") if file.compressed else stream, encoder)


def _batches(events: Iterator[Mapping[str, Any]], encoder: _FileEncoder) -> Iterator[ChangeColumns]:
    """Batches of up to :data:`BATCH_ROWS` rows, converted :data:`CHUNK_EVENTS` events at a time
    (decoded events are dropped soon, so few of them live long enough to cost garbage collections)."""
    batch: ChangeColumns = []
    while chunk := list(islice(events, CHUNK_EVENTS)):
        columns = encoder.change_columns(chunk)
        if not batch:
            batch = columns
        else:
            for values, more in zip(batch, columns, strict=True):
                values.extend(more)
        if len(batch[0]) >= BATCH_ROWS:
            yield batch
            batch = []
    if batch:
        yield batch


# --------------------------------------------------------------------------- Avro


def avro_payload_columns(schema: Mapping[str, Any], object_name: str) -> list[_Column]:
    """The payload columns of a file's writer schema, in schema order, with types and converters."""
    fields = {f.get("name"): f.get("type") for f in schema.get("fields", ())}
    payload = _unwrap_null(fields.get("payload"))
    if not isinstance(payload, Mapping) or payload.get("type") != "record":
        raise DatastreamTypeError(f"object {object_name!r}: the file's schema has no payload record")
    named: dict[str, Any] = {}
    columns = []
    for position, field in enumerate(payload.get("fields", ()), start=1):
        name = field["name"]
        logical = avro_logical_type(field["type"], name, object_name, named)
        avro_type = _unwrap_null(field["type"])
        if isinstance(avro_type, Mapping) and avro_type.get("type") == "array":
            avro_type = _unwrap_null(avro_type.get("items"))
            if isinstance(avro_type, str):
                avro_type = named.get(avro_type, avro_type)
        columns.append(
            _Column(name, logical, position, value_converter(logical, name, _is_array_record(avro_type)))
        )
    return columns


def _avro_batches(stream: BinaryIO, encoder: _FileEncoder) -> Iterator[ChangeColumns]:
    import fastavro

    try:
        reader = fastavro.reader(stream)
        encoder.columns = _validated(
            avro_payload_columns(reader.writer_schema, encoder.file.object_name), encoder
        )
    except (ValueError, TypeError, KeyError) as exc:
        if isinstance(exc, DatastreamEventError):
            raise
        raise DatastreamEventError(
            f"file {encoder.file.path!r}: not a readable Datastream Avro file: {exc}"
        ) from exc
    yield from _batches(iter(reader), encoder)


def _validated(columns: list[_Column], encoder: _FileEncoder) -> list[_Column]:
    from airflow_provider_cdc.core.identifiers import validate_identifier

    for column in columns:
        try:
            validate_identifier(column.name, "column")
        except ValueError as exc:
            raise DatastreamEventError(f"file {encoder.file.path!r}: {exc}") from None
    return columns


# --------------------------------------------------------------------------- JSONL


def _jsonl_events(stream: Any, encoder: _FileEncoder, first_line: int = 1) -> Iterator[Mapping[str, Any]]:
    """The events of JSONL lines (blank lines skipped). A UTF-8 line holding one JSON value is
    decoded by the C scanner alone; anything else goes through ``json.loads``, whose errors name the
    line."""
    loads = json.loads
    scan = _SCANNER.scan_once
    number = first_line - 1
    for line in stream:
        number += 1
        try:
            text = line.decode()
            event, end = scan(text, 0)
            if end != len(text) and text[end:].strip(_JSON_WHITESPACE):
                raise ValueError("more than one value")
        except (ValueError, StopIteration):
            if not line.strip():
                continue
            try:
                event = loads(line)
            except ValueError as exc:
                raise DatastreamEventError(
                    f"file {encoder.file.path!r}, line {number}: not JSON: {exc}"
                ) from None
        yield event


def _jsonl_batches(stream: Any, encoder: _FileEncoder) -> Iterator[ChangeColumns]:
    events = _jsonl_events(stream, encoder)
    head: list[Mapping[str, Any]] = []
    for event in events:
        head.append(event)
        if len(head) >= BATCH_ROWS:
            break
    if not head:
        return
    more = len(head) >= BATCH_ROWS
    encoder.columns = _validated(_jsonl_columns(head, stream if more else None, encoder), encoder)
    yield from _batches(iter(head), encoder)
    if more:
        yield from _batches(events, encoder)


def _jsonl_columns(head: list[Mapping[str, Any]], rest: Any, encoder: _FileEncoder) -> list[_Column]:
    """The payload columns of a JSONL file: declared types first, else the kind of their values
    in the file (``rest``: the stream after ``head``, scanned only for columns null in ``head``)."""
    object_name = head[0].get("object") if isinstance(head[0], Mapping) else None
    table = encoder.table(object_name, head[0].get("uuid")) if isinstance(object_name, str) else None
    declared = encoder.settings.declared_types(table) if table else {}
    order: dict[str, None] = {}
    # each column's kinds of values: the Python type of each and its first value
    kinds: dict[str, dict[type, Any]] = {}

    def scan(events: Iterator[Mapping[str, Any]] | list[Mapping[str, Any]], only: set[str] | None) -> None:
        for event in events:
            payload = event.get("payload") if isinstance(event, Mapping) else None
            if not isinstance(payload, Mapping):
                continue
            for name, value in payload.items():
                if only is not None and name not in only:
                    continue
                if name not in order:
                    if only is not None:
                        continue
                    order[name] = None
                    kinds[name] = {}
                if value is not None and name not in declared:
                    kinds[name].setdefault(type(value), value)

    scan(head, None)
    unknown = {name for name, seen in kinds.items() if not seen and name not in declared}
    if unknown and rest is not None and hasattr(rest, "seekable") and rest.seekable():
        position = rest.tell()
        scan(_jsonl_events(rest, encoder, len(head) + 1), unknown)
        rest.seek(position)
    inferred: dict[str, LogicalType | None] = {}
    for name, seen in kinds.items():
        logical = None
        for value in seen.values():
            logical = widen(logical, json_value_type(value))
            if logical is None:
                _refuse_mixed_kinds(head, rest, encoder, declared)
        inferred[name] = logical
    columns = []
    for position, name in enumerate(order, start=1):
        if name in declared:
            columns.append(
                _Column(name, declared[name], position, json_value_converter(declared[name], name))
            )
        else:
            logical = inferred[name] or LogicalType("STRING")
            columns.append(_Column(name, logical, position, inferred_value_converter(logical, name)))
    return columns


def _refuse_mixed_kinds(
    head: list[Mapping[str, Any]], rest: Any, encoder: _FileEncoder, declared: Mapping[str, Any]
) -> None:
    """Raise for the first column, in the file's order, whose values are of different kinds (with the
    first value of another kind than the column's earlier ones)."""
    inferred: dict[str, LogicalType | None] = {}
    conflicts: dict[str, Any] = {}

    def scan(events: Iterator[Mapping[str, Any]] | list[Mapping[str, Any]], only: set[str] | None) -> None:
        for event in events:
            payload = event.get("payload") if isinstance(event, Mapping) else None
            if not isinstance(payload, Mapping):
                continue
            for name, value in payload.items():
                if only is not None and name not in only:
                    continue
                if name not in inferred:
                    if only is not None:
                        continue
                    inferred[name] = None
                if name in declared or value is None:
                    continue
                widened = widen(inferred[name], json_value_type(value))
                if widened is None:
                    conflicts.setdefault(name, value)
                else:
                    inferred[name] = widened

    scan(head, None)
    unknown = {name for name, t in inferred.items() if t is None and name not in declared}
    if unknown and rest is not None and hasattr(rest, "seekable") and rest.seekable():
        position = rest.tell()
        scan(_jsonl_events(rest, encoder, len(head) + 1), unknown)
        rest.seek(position)
    name, value = next(iter(conflicts.items()))
    raise DatastreamEventError(
        f"file {encoder.file.path!r}: column {name!r} holds values of different kinds "
        f"(e.g. {value!r}); declare its type in column_types"
    )
