"""JSONL Datastream files read columnar: pyarrow's JSON reader with an explicit schema, staged rows
built as Arrow arrays.

The schema is fixed before a line is parsed, never inferred by the reader: the generic fields are text
(:data:`GENERIC_TYPES`); ``source_metadata`` holds every field :data:`~.files.SOURCE_FIELDS` lists and
the key lists, each typed as the first event gives it, else as Datastream documents it for the source
database (:data:`METADATA_TYPES`); ``payload`` holds the first event's columns in its order, each typed
by the column's declared type or the kind of its value (the rules of :mod:`.files`).

A file is read in chunks of at least :data:`~.files.BATCH_ROWS` events (whole lines, read a block at
a time), so memory is bounded by the chunk; while one chunk is converted and staged, a thread reads
and parses the next. The first chunk is the head the event path types undeclared columns from; it is
parsed refusing any field the schema does not hold (its ``sort_keys``, whose values mix text and
numbers, taken out first), and a head the explicit schema does not read (a payload column the first
event lacks, another kind of value in a column, a column null throughout a head that is not the whole
file, an object value, a number that only the event path tells from others) sends the whole file to
the event path. A later chunk that the reader refuses or that the column path does not take (a key
value missing, a payload missing, two shapes or schemas, a value its type refuses) is converted by the
event path, which gives the same rows and names the file, line, event and field of a problem. Every
row equals the event path's (``tests/sources/datastream/test_datastream_jsonl_columnar.py``).
"""

from __future__ import annotations

import io
import json
from array import array
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS
from airflow_provider_cdc.core.sequence_number import MAX_SECTION_VALUE
from airflow_provider_cdc.core.types import LogicalType
from airflow_provider_cdc.sources.datastream import files
from airflow_provider_cdc.sources.datastream.events import (
    CHANGE_TYPES,
    DELETE,
    primary_key,
    timestamp_micros,
)
from airflow_provider_cdc.sources.datastream.json_text import canonical_json, json_texts
from airflow_provider_cdc.sources.datastream.read_methods import (
    MYSQL,
    ORACLE,
    POSTGRESQL,
    SQLSERVER,
    database_of,
)
from airflow_provider_cdc.sources.datastream.sequence_numbers import (
    DELETE_BIT,
    UPSERT_BIT,
    _binlog_index,
    is_mysql_backfill,
)
from airflow_provider_cdc.sources.datastream.types import (
    inferred_value_converter,
    json_value_converter,
    utc_text_of,
)
from airflow_provider_cdc.staging.batches import STAGED_CHANGE_SCHEMA, memory_pool, record_batch

#: The generic fields of an event and their Arrow types (all text in Datastream's JSON).
GENERIC_TYPES: dict[str, pa.DataType] = {
    name: pa.string()
    for name in (
        "uuid",
        "read_timestamp",
        "source_timestamp",
        "object",
        "read_method",
        "stream_name",
        "schema_key",
    )
}
_TEXT, _LONG, _BOOL, _DOUBLE = pa.string(), pa.int64(), pa.bool_(), pa.float64()
_TEXTS, _LONGS = pa.list_(pa.string()), pa.list_(pa.int64())
#: ``source_metadata`` fields by source database, typed as Datastream documents them.
METADATA_TYPES: dict[str, dict[str, pa.DataType]] = {
    MYSQL: {
        "log_file": _TEXT,
        "log_position": _LONG,
        "binlog_file": _TEXT,
        "binlog_position": _LONG,
        "primary_keys": _TEXTS,
        "is_deleted": _BOOL,
        "database": _TEXT,
        "table": _TEXT,
        "change_type": _TEXT,
    },
    ORACLE: {
        "log_file": _TEXT,
        "scn": _LONG,
        "row_id": _TEXT,
        "is_deleted": _BOOL,
        "database": _TEXT,
        "schema": _TEXT,
        "table": _TEXT,
        "change_type": _TEXT,
        "tx_id": _TEXT,
        "rs_id": _TEXT,
        "ssn": _LONG,
        "primary_keys": _TEXTS,
    },
    POSTGRESQL: {
        "schema": _TEXT,
        "table": _TEXT,
        "is_deleted": _BOOL,
        "change_type": _TEXT,
        "tx_id": _TEXT,
        "lsn": _TEXT,
        "primary_keys": _TEXTS,
    },
    SQLSERVER: {
        "table": _TEXT,
        "database": _TEXT,
        "schema": _TEXT,
        "is_deleted": _BOOL,
        "lsn": _TEXT,
        "tx_id": _TEXT,
        "physical_location": _LONGS,
        "replication_index": _TEXTS,
        "change_type": _TEXT,
    },
}
#: A field no database documents: the type other databases give it, else text.
_ANY_DATABASE: dict[str, pa.DataType] = {
    name: type_ for fields in METADATA_TYPES.values() for name, type_ in fields.items()
}
_KEY_FIELDS = ("primary_keys", "replication_index")
_ORDERING_FIELDS = (
    "log_file",
    "binlog_file",
    "log_position",
    "binlog_position",
    "scn",
    "rs_id",
    "ssn",
    "lsn",
)
# Text a JSON string is written as is between quotes: printable ASCII without quote or backslash.
_PLAIN_TEXT = r"^[ !#-\[\]-~]*$"
_EXACT_INTEGERS = 2**53
_BLOCK_BYTES = 1 << 20
_SORT_KEYS = b'"sort_keys":['
_SCALARS: dict[str | None, pa.Scalar] = {}


def _texts_of(values: Sequence[str | None]) -> pa.Array:
    """A string array of Python texts (built without ``pa.array``, which imports pandas)."""
    builder = pa.lib.StringBuilder(memory_pool())
    builder.append_values(values)
    return builder.finish()


def _text(value: str | None) -> pa.Scalar:
    """A string scalar (``pa.scalar`` imports pandas)."""
    found = _SCALARS.get(value)
    if found is None:
        found = _SCALARS[value] = _texts_of([value])[0]
    return found


def _longs(values: Sequence[int]) -> pa.Array:
    return pa.Array.from_buffers(_LONG, len(values), [None, pa.py_buffer(array("q", values))])


def _bools(values: Sequence[bool]) -> pa.Array:
    bits = bytearray((len(values) + 7) // 8)
    for index, value in enumerate(values):
        if value:
            bits[index >> 3] |= 1 << (index & 7)
    return pa.Array.from_buffers(_BOOL, len(values), [None, pa.py_buffer(bits)])


_QUOTE, _EMPTY, _NULL_TEXT, _NULL = _text('"'), _text(""), _text("null"), _text(None)
_FALSE = _bools([False])[0]


class _FileFallback(Exception):
    """The file is read by the event path (its head is not one the explicit schema reads)."""


class _ChunkFallback(Exception):
    """A chunk the column path does not take: the event path converts it."""


def _value_type(value: Any) -> pa.DataType | None:
    """The Arrow type of a JSON value's kind (``None``: no type holds it exactly)."""
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, int):
        return _LONG
    if isinstance(value, str):
        return _TEXT
    if isinstance(value, list) and value and all(type(v) is str for v in value):
        return _TEXTS
    if isinstance(value, list) and value and all(type(v) is int for v in value):
        return _LONGS
    return None


def _metadata_types(database: str, first: dict[str, Any]) -> dict[str, pa.DataType]:
    documented = METADATA_TYPES[database]
    fields: dict[str, pa.DataType] = {}
    for name in (*files.SOURCE_FIELDS, *_KEY_FIELDS):
        value = first.get(name)
        kind = None if value is None or value == [] else _value_type(value)
        if value is not None and value != [] and kind is None:
            raise _FileFallback
        fields[name] = kind or documented.get(name) or _ANY_DATABASE.get(name, _TEXT)
    return fields


def _payload_type(value: Any, declared: LogicalType | None) -> pa.DataType:
    """The Arrow type of a payload column from its first value and its declared type."""
    if value is None:
        return _TEXT  # a column null in the first event: text until a value says otherwise
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, int):
        return _LONG
    if isinstance(value, float):
        if declared is not None and declared.code == "BIGNUMERIC":
            raise _FileFallback  # 1 and 1.0 are different BIGNUMERIC texts
        if declared is not None and declared.code in ("INT64",):
            raise _FileFallback
        return pa.float64()
    if isinstance(value, str):
        return _TEXT
    raise _FileFallback  # an object or a list


class _Chunks:
    """A stream's lines in chunks of whole lines: read a block at a time, each chunk holding at least
    ``events`` non-blank lines (or the rest of the stream)."""

    def __init__(self, stream: Any, events: int) -> None:
        self.stream = stream
        self.events = events
        self.rest = b""
        self.ended = False

    def next(self) -> tuple[bytes, int, int]:
        """The next chunk (ending in a newline), its lines and its non-blank lines; ``b""`` at the end."""
        buffer = self.rest
        lines = buffer.count(b"\n")
        wanted = self.events
        while True:
            blocks = [buffer]
            while lines < wanted and not self.ended:
                block = self.stream.read(_BLOCK_BYTES)
                if not block:
                    self.ended = True
                    break
                blocks.append(block)
                lines += block.count(b"\n")
            buffer = b"".join(blocks)
            if self.ended:
                data, rest = buffer, b""
                if data and not data.endswith(b"\n"):
                    data += b"\n"
            else:
                cut = buffer.rindex(b"\n") + 1
                data, rest = buffer[:cut], buffer[cut:]
            count = data.count(b"\n")
            if data.count(b"\n{") + data.startswith(b"{") - data.endswith(b"\n{") == count:
                events = count  # every line opens an object: none is blank
            else:
                events = sum(1 for line in data.split(b"\n")[:-1] if line.strip())
            if events >= self.events or self.ended:
                self.rest = rest
                return data, count, events
            wanted = count + self.events - events  # blank lines: read on to as many events


class _ColumnarFile:
    """One JSONL file's columnar conversion (see the module)."""

    def __init__(self, encoder: Any, first: dict[str, Any]) -> None:
        self.encoder = encoder
        object_name, read_method = first.get("object"), first.get("read_method")
        metadata, payload = first.get("source_metadata"), first.get("payload")
        if not (isinstance(object_name, str) and isinstance(read_method, str)):
            raise _FileFallback
        if not isinstance(metadata, dict) or not isinstance(payload, dict) or not payload:
            raise _FileFallback
        try:
            database = database_of(read_method, encoder.settings.source_database)
            self.table = encoder.table(object_name, first.get("uuid"))
        except ValueError:
            raise _FileFallback from None
        self.database = database
        try:
            key = primary_key(metadata, self.table, encoder.settings)
        except ValueError:
            raise _FileFallback from None
        if not set(key) <= payload.keys():
            raise _FileFallback  # the event path names the event and the column
        declared = encoder.settings.declared_types(self.table)
        self.metadata_types = _metadata_types(database, metadata)
        if "sort_keys" in payload or "sort_keys" in metadata:
            raise _FileFallback  # the top-level field is taken out of the lines by its name
        for name, value in metadata.items():  # fields no database documents, as the event types them
            if name not in self.metadata_types:
                kind = _value_type(value) if value is not None and value != [] else _TEXT
                if kind is None:
                    raise _FileFallback
                self.metadata_types[name] = kind
        self.payload_types = {name: _payload_type(v, declared.get(name)) for name, v in payload.items()}
        self.declared = declared
        self.schema_key = first.get("schema_key")
        self.codes: dict[str, str] = {}
        self.schema = pa.schema(
            [
                *GENERIC_TYPES.items(),
                ("source_metadata", pa.struct(list(self.metadata_types.items()))),
                ("payload", pa.struct(list(self.payload_types.items()))),
            ]
        )
        # In the head a field the schema does not hold (a payload column the first event lacks) is
        # refused: the event path then types the file's columns from all of the head. After the
        # head the event path too takes only the head's columns, and other fields are left out.
        self.head_options = pj.ParseOptions(explicit_schema=self.schema, unexpected_field_behavior="error")
        self.options = pj.ParseOptions(explicit_schema=self.schema, unexpected_field_behavior="ignore")
        # One block per chunk, parsed in this thread (the reader's own threads contend with the
        # conversion and the next chunk's reading for the cores).
        self.read_options = pj.ReadOptions(use_threads=False, block_size=1 << 30)
        self.plain = False

    def parse(self, data: bytes, events: int, head: bool = False) -> tuple[pa.Table, bool]:
        """A chunk's table, and whether all of its strings are plain (see :func:`_string_texts`)."""
        if head:
            stripped = _without_sort_keys(data, events)
            if stripped is None:
                raise _ChunkFallback
        try:
            table = pj.read_json(
                io.BytesIO(stripped if head else data),
                read_options=self.read_options,
                parse_options=self.head_options if head else self.options,
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise _ChunkFallback from exc
        if table.num_rows != events:
            raise _ChunkFallback  # two values on a line, or a line that is no object
        # The reader refuses control characters in text; without a backslash, DEL or a byte beyond
        # ASCII every string of the chunk is its JSON text between quotes.
        return table, data.isascii() and b"\\" not in data and b"\x7f" not in data

    def type_columns(self, head: pa.Table, whole_file: bool) -> None:
        """The file's payload columns from the head, as the event path types them."""
        payload = head.column("payload").combine_chunks()
        columns = []
        for position, (name, type_) in enumerate(self.payload_types.items(), start=1):
            if name in self.declared:
                logical = self.declared[name]
                columns.append(files._Column(name, logical, position, json_value_converter(logical, name)))
                continue
            values = payload.field(name)
            if values.null_count == len(values):
                if not whole_file:
                    raise _FileFallback  # the event path looks for its kind in the rest of the file
                logical = LogicalType("STRING")
            else:
                logical = LogicalType(
                    {_BOOL: "BOOL", _LONG: "INT64", pa.float64(): "FLOAT64", _TEXT: "STRING"}[type_]
                )
            columns.append(files._Column(name, logical, position, inferred_value_converter(logical, name)))
        self.encoder.columns = files._validated(columns, self.encoder)
        self.codes = {column.name: column.logical_type.code for column in columns}

    # -- one chunk ------------------------------------------------------------------------------

    def batch(self, table: pa.Table) -> pa.RecordBatch:
        """The staged rows of a parsed chunk."""
        try:
            return self._batch(table.combine_chunks().to_batches()[0] if table.num_rows else None)
        except (_ChunkFallback, KeyError, TypeError, ValueError, ArithmeticError, pa.ArrowException) as exc:
            raise _ChunkFallback from exc

    def _batch(self, chunk: pa.RecordBatch | None) -> pa.RecordBatch:
        if chunk is None:
            raise _ChunkFallback
        count = chunk.num_rows
        encoder = self.encoder
        objects, methods = chunk.column("object"), chunk.column("read_method")
        if objects.null_count or methods.null_count:
            raise _ChunkFallback
        object_values, method_values = pc.unique(objects), pc.unique(methods)
        if len(object_values) != 1 or len(method_values) != 1:
            raise _ChunkFallback
        object_name, read_method = object_values[0].as_py(), method_values[0].as_py()
        uuids = chunk.column("uuid")
        schema_keys = pc.unique(chunk.column("schema_key")).to_pylist()
        if schema_keys != [self.schema_key]:
            raise _ChunkFallback  # events of another schema: their columns may differ
        table = encoder.table(object_name, uuids[0].as_py())
        sections, backfill, mysql = encoder.method(read_method, uuids[0].as_py())
        metadata: pa.StructArray = chunk.column("source_metadata")
        payload: pa.StructArray = chunk.column("payload")
        if metadata.null_count or payload.null_count:
            raise _ChunkFallback
        first_metadata = _first_row(metadata)
        shape = encoder.shape(table, first_metadata, uuids[0].as_py())
        key_of = [pc.binary_join(metadata.field(name), _text("\x00")) for name in _KEY_FIELDS]
        for joined in key_of:
            if len(pc.unique(joined)) != 1:
                raise _ChunkFallback  # events of other keys: the event path
        upserts = self._upserts(metadata)
        commits, millis = self._commit_times(chunk.column("source_timestamp"))
        keys_json = _object_texts(
            [(name, self._texts(payload.field(name), name, convert, True)) for name, convert in shape.keys]
        )
        if shape.values:
            after = _object_texts(
                [
                    (name, self._texts(payload.field(name), name, convert, False))
                    for name, convert in shape.values
                ]
            )
        else:
            after = _texts_of(["{}"] * count)
        after_json = pc.if_else(upserts, after, _text("{}"))
        csns = self._sequence_numbers(
            metadata, backfill, mysql, sections, upserts, millis, object_name, uuids
        )
        transactions = self._transactions(metadata)
        source = self._source_texts(chunk, metadata, object_name, read_method)
        nulls = pa.nulls(count, _TEXT)
        arrays = [
            _repeat(encoder.unit, count),
            commits,
            transactions,
            nulls,
            pa.nulls(count, pa.int64()),
            _repeat(table, count),
            pc.if_else(upserts, _text(files.INSERT_OPERATION), _text(files.DELETE_OPERATION)),
            keys_json,
            after_json,
            nulls,
            _repeat(shape.types_json, count),
            source,
            csns,
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=STAGED_CHANGE_SCHEMA)

    def _upserts(self, metadata: pa.StructArray) -> pa.Array:
        """Whether each event upserts its row (``change_type`` and ``is_deleted`` as the event path)."""
        change_types = metadata.field("change_type")
        kinds = []
        distinct = pc.unique(change_types)
        for change_type in distinct.to_pylist():
            if change_type is None or change_type == "":
                kinds.append(True)
                continue
            kind = CHANGE_TYPES.get(change_type) or CHANGE_TYPES.get(str(change_type).upper())
            if kind is None:
                raise _ChunkFallback  # the event path names the event and the value
            kinds.append(kind != DELETE)
        upsert = pc.take(_bools(kinds), pc.index_in(change_types, distinct, skip_nulls=False))
        deleted = pc.fill_null(metadata.field("is_deleted"), _FALSE)
        return pc.and_(upsert, pc.invert(deleted))

    def _commit_times(self, stamps: pa.Array) -> tuple[pa.Array, list[int]]:
        if stamps.null_count:
            raise _ChunkFallback
        distinct = pc.unique(stamps)
        micros = []
        for stamp in distinct.to_pylist():
            value = timestamp_micros(stamp, "source_timestamp", "?", self.encoder.file.path)
            if not 0 <= value // 1000 <= MAX_SECTION_VALUE:
                raise _ChunkFallback
            micros.append(value)
        at = pc.index_in(stamps, distinct)
        commits = pc.take(_longs(micros), at)
        millis = [m // 1000 for m in micros]
        return commits.cast(pa.timestamp("us", tz="UTC")), [millis[i] for i in at.to_pylist()]

    def _texts(self, values: pa.Array, name: str, convert: Any, required: bool) -> pa.Array:
        """The JSON texts of a payload column's values in their logical type's encoding."""
        if required and values.null_count:
            raise _ChunkFallback  # a key column missing or null: the event path decides
        type_, code = values.type, self.codes[name]
        if type_ == _DOUBLE and values.null_count < len(values):
            largest = pc.max(pc.abs(values)).as_py()
            if largest >= _EXACT_INTEGERS:
                raise _ChunkFallback  # an integer beyond a double's: its JSON text decides
        if convert is None or (code == "JSON" and type_ == _TEXT) or code in ("STRING", "BOOL"):
            # the value is its JSON value (an inferred column's kind is its Arrow type)
            if type_ == _TEXT:
                return _string_texts(values, self.plain, joined=True)
            if type_ == _BOOL:
                return _bool_texts(values)
            if type_ == _LONG and convert is None:
                return pc.fill_null(values.cast(_TEXT), _NULL_TEXT)
        if code == "INT64" and type_ == _LONG:
            return _quoted(values.cast(_TEXT))
        if code == "NUMERIC" and type_ in (_LONG, _DOUBLE) and (texts := _numeric_texts(values)) is not None:
            return _quoted(texts)
        if code == "TIMESTAMP" and type_ == _TEXT and (utc := _utc_texts(values)) is not None:
            return _quoted(utc)
        python = values.to_pylist()
        convert_column = getattr(convert, "column", None)
        if convert_column is not None:
            python = convert_column(python)
        elif convert is not None:
            python = [value if value is None else convert(value) for value in python]
        return _texts_of(json_texts(python))

    def _sequence_numbers(
        self,
        metadata: pa.StructArray,
        backfill: bool,
        mysql: bool,
        sections: Callable[..., tuple[int, int, int, int]],
        upserts: pa.Array,
        millis: list[int],
        object_name: str,
        uuids: pa.Array,
    ) -> pa.Array:
        kinds = [UPSERT_BIT if upsert else DELETE_BIT for upsert in upserts.to_pylist()]
        if mysql:
            texts = _mysql_texts(metadata, backfill, kinds, millis)
            if texts is not None:
                return _texts_of(texts)
        names = [name for name in _ORDERING_FIELDS if name in self.metadata_types]
        rows = pa.StructArray.from_arrays([metadata.field(name) for name in names], names).to_pylist()
        backfills: Sequence[bool]
        if mysql and not backfill:
            backfills = [is_mysql_backfill(row) for row in rows]
        else:
            backfills = [backfill] * len(rows)
        try:
            texts = [
                "%016X/%016X/%016X/%016X"  # noqa: UP031
                % sections(row, back, kind == UPSERT_BIT, ms, object_name, uuid)
                for row, back, kind, ms, uuid in zip(
                    rows, backfills, kinds, millis, uuids.to_pylist(), strict=True
                )
            ]
        except ValueError as exc:
            raise _ChunkFallback from exc
        return _texts_of(texts)

    def _transactions(self, metadata: pa.StructArray) -> pa.Array:
        tx_ids = metadata.field("tx_id")
        if tx_ids.null_count == len(tx_ids):
            return pa.nulls(len(tx_ids), _TEXT)
        if tx_ids.type not in (_TEXT, _LONG):
            raise _ChunkFallback  # ``str`` of other values is not their Arrow text
        texts = tx_ids.cast(_TEXT)
        return pc.if_else(pc.equal(texts, _EMPTY), _NULL, texts)

    def _source_texts(
        self, chunk: pa.RecordBatch, metadata: pa.StructArray, object_name: str, read_method: str
    ) -> pa.Array:
        """``source_metadata_json``: the event's generic fields and its metadata's ordering fields."""
        pieces: dict[str, Any] = {
            "file": canonical_json(self.encoder.file.name),
            "object": canonical_json(object_name),
            "read_method": canonical_json(read_method),
            "read_timestamp": self._read_texts(chunk.column("read_timestamp")),
            "uuid": _string_texts(chunk.column("uuid"), self.plain, joined=True),
        }
        for name in ("schema_key", "stream_name"):
            column = chunk.column(name)
            if len(column) and column.null_count == 0 and len(pc.unique(column)) == 1:
                pieces[name] = canonical_json(column[0].as_py())  # one text in every row
            else:
                pieces[name] = _string_texts(column, self.plain, joined=True)
        for name in files.SOURCE_FIELDS:
            values = metadata.field(name)
            if values.null_count < len(values):
                pieces[name] = _value_texts(values, self.plain)
        return _join_object(pieces)

    def _read_texts(self, reads: pa.Array) -> pa.Array:
        distinct = pc.unique(reads)
        if distinct.null_count == 0 and (utc := _utc_texts(distinct)) is not None:
            return pc.take(_quoted(utc), pc.index_in(reads, distinct))
        texts = []
        for value in distinct.to_pylist():
            utc = utc_text_of(value) if type(value) is str else None
            if utc is not None:
                texts.append('"' + utc + '"')
            else:
                texts.append(canonical_json(self.encoder.read_timestamp_text(value, "?")))
        return pc.take(_texts_of(texts), pc.index_in(reads, distinct, skip_nulls=False))


_UTC_PARTS = (
    r"^(?P<day>[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01]))[Tt ]"
    r"(?P<clock>(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9])(?:\.(?P<fraction>[0-9]{1,9}))?[Zz]?$"
)


def _numeric_texts(values: pa.Array) -> pa.Array | None:
    """NUMERIC's text of numbers (``str`` of the decimal of the shortest text of each; NULL kept), or
    ``None`` where the value by value rule decides: a value below 1e-6 (written with an exponent,
    zero as ``0E-9``), more than 9 fractional or 38 digits."""
    if values.null_count == len(values) or pc.min(pc.abs(values)).as_py() < 1e-6:
        return None
    try:
        return values.cast(_TEXT).cast(pa.decimal128(38, 9)).cast(_TEXT)
    except pa.ArrowInvalid:
        return None


def _utc_texts(values: pa.Array) -> pa.Array | None:
    """:func:`~.types.utc_text_of` of each text (NULL kept), or ``None`` when a text is not RFC 3339
    text in UTC of a day and time that exist (the value by value rule then decides)."""
    parts = pc.extract_regex(values, _UTC_PARTS)
    if parts.null_count != values.null_count:
        return None
    day = parts.field("day")
    present = pc.filter(day, parts.is_valid())
    if len(present) and pc.any(pc.starts_with(present, "0000")).as_py():
        return None  # year 0 does not exist
    try:
        present.cast(pa.date32())  # the day exists
    except pa.ArrowInvalid:
        return None
    fraction = pc.utf8_rpad(pc.utf8_slice_codeunits(parts.field("fraction"), 0, 6), 6, "0")
    texts = pc.binary_join_element_wise(
        day, _text("T"), parts.field("clock"), _text("."), fraction, _text("Z"), _EMPTY
    )
    return pc.if_else(parts.is_valid(), texts, _NULL)


def _without_sort_keys(data: bytes, events: int) -> bytes | None:
    """The lines without their ``sort_keys`` field (its values mix text and numbers, which no Arrow
    type holds; nothing is staged from it), or ``None`` unless every event has it once, written
    compact as Datastream writes it, an array of scalars followed by another field.
    ``"sort_keys":[`` is a key wherever it occurs: within a JSON string its quotes would be escaped."""
    parts = data.split(_SORT_KEYS)
    if len(parts) != events + 1:
        return None
    kept = [parts[0]]
    for part in parts[1:]:
        values, found, rest = part.partition(b"],")
        if not found or b"[" in values:
            return None
        kept.append(rest)
    return b"".join(kept)


def _first_row(metadata: pa.StructArray) -> dict[str, Any]:
    row = metadata.slice(0, 1).to_pylist()[0]
    return {name: value for name, value in row.items() if value is not None}


def _repeat(text: str, count: int) -> pa.Array:
    return pa.repeat(_text(text), count)


def _quoted(texts: pa.Array) -> pa.Array:
    return pc.fill_null(pc.binary_join_element_wise(_QUOTE, texts, _QUOTE, _EMPTY), _NULL_TEXT)


class _Quoted:
    """Strings without NULL whose JSON texts are the strings between quotes: the quotes are joined in
    with the text around them (:func:`_join_object`) instead of into a column of their own."""

    __slots__ = ("values",)
    null_count = 0

    def __init__(self, values: pa.Array) -> None:
        self.values = values

    def texts(self) -> pa.Array:
        return pc.binary_join_element_wise(_QUOTE, self.values, _QUOTE, _EMPTY)


def _string_texts(values: pa.Array, plain: bool = False, joined: bool = False) -> Any:
    """JSON texts of strings as ``canonical_json`` writes them (escaped, ASCII); ``plain``: every
    string is printable ASCII without quote or backslash; ``joined``: the texts are joined into
    objects, so plain strings may stay :class:`_Quoted`."""
    if values.null_count == len(values):
        return _texts_of(["null"] * len(values))
    if plain or pc.all(pc.match_substring_regex(values, _PLAIN_TEXT)).as_py() is not False:
        return _Quoted(values) if joined and not values.null_count else _quoted(values)
    return _texts_of(json_texts(values.to_pylist()))


def _bool_texts(values: pa.Array) -> pa.Array:
    return pc.fill_null(pc.if_else(values, _text("true"), _text("false")), _NULL_TEXT)


def _value_texts(values: pa.Array, plain: bool) -> Any:
    """JSON texts of a metadata field (``None`` where the event leaves it out or null)."""
    type_ = values.type
    if type_ == _TEXT:
        if not values.null_count:
            return _string_texts(values, plain, joined=True)
        texts = _string_texts(values, plain)
    elif type_ == _BOOL:
        texts = _bool_texts(values)
    elif type_ == _LONG:
        return values.cast(_TEXT)
    else:
        return _texts_of([None if v is None else canonical_json(v) for v in values.to_pylist()])
    return pc.if_else(values.is_null(), _NULL, texts)


def _join_object(pieces: dict[str, Any]) -> pa.Array:
    """Canonical JSON objects of named JSON texts (names sorted): a text, the same in every row, an
    array of texts per row (NULL where the row leaves the name out), or :class:`_Quoted` strings."""
    if any(not isinstance(text, str) and text.null_count for text in pieces.values()):
        return _join_skipping(pieces)
    parts: list[Any] = []
    literal = "{"
    for index, name in enumerate(sorted(pieces)):
        text = pieces[name]
        literal += ("," if index else "") + canonical_json(name) + ":"
        if isinstance(text, str):
            literal += text
        elif isinstance(text, _Quoted):
            parts.extend([_text(literal + '"'), text.values])
            literal = '"'
        else:
            parts.extend([_text(literal), text])
            literal = ""
    parts.append(_text(literal + "}"))
    return pc.binary_join_element_wise(*parts, _EMPTY)


def _join_skipping(pieces: dict[str, Any]) -> pa.Array:
    parts = []
    for name in sorted(pieces):
        text = pieces[name]
        label = canonical_json(name) + ":"
        if isinstance(text, str):
            parts.append(_text(label + text))
        else:  # NULL where the row leaves the name out: skipped with its comma
            texts = text.texts() if isinstance(text, _Quoted) else text
            parts.append(pc.binary_join_element_wise(_text(label), texts, _EMPTY))
    joined = pc.binary_join_element_wise(*parts, _text(","), null_handling="skip")
    return pc.binary_join_element_wise(_text("{"), joined, _text("}"), _EMPTY)


def _object_texts(columns: list[tuple[str, Any]]) -> pa.Array:
    """The canonical JSON object of named columns of JSON texts (names sorted)."""
    return _join_object(dict(columns))


def _mysql_texts(
    metadata: pa.StructArray, backfill: bool, kinds: list[int], millis: list[int]
) -> list[str] | None:
    """MySQL sequence numbers a column at a time (``None``: the per-event rule decides)."""
    if backfill:
        backfill_format = "0000000000000000/%016X/0000000000000000/%016X"
        return [backfill_format % pair for pair in zip(millis, kinds, strict=True)]
    log_files = metadata.field("log_file")
    positions = metadata.field("log_position")
    if log_files.null_count or positions.null_count or log_files.type != _TEXT or positions.type != _LONG:
        return None
    prefixes = {}
    for name in pc.unique(log_files).to_pylist():
        index = _binlog_index(name) if name else None
        if index is None:
            return None
        prefixes[name] = "0000000000000001/%016X/" % index  # noqa: UP031
    bounds = pc.min_max(positions)
    if bounds["min"].as_py() < 0 or bounds["max"].as_py() > MAX_SECTION_VALUE:
        return None
    return [
        "%s%016X/%016X" % row  # noqa: UP031
        for row in zip(
            map(prefixes.__getitem__, log_files.to_pylist()), positions.to_pylist(), kinds, strict=True
        )
    ]


def jsonl_batches(stream: BinaryIO, encoder: Any) -> Iterator[pa.RecordBatch]:
    """Record batches of staged rows of a JSONL file read from ``stream`` (see the module). While a
    chunk is converted and staged, a thread reads and parses the next one (the reader and the
    decompressor release the interpreter lock)."""
    start = stream.tell() if _seekable(stream) else None
    chunks = _Chunks(stream, files.BATCH_ROWS)
    data, lines, events = chunks.next()
    if not data:
        return
    try:
        columnar = _ColumnarFile(encoder, _first_event(data))
        table, plain = columnar.parse(data, events, head=True)
        columnar.type_columns(table, chunks.ended and not chunks.rest)
    except (_FileFallback, _ChunkFallback, ValueError):
        yield from _event_path(stream, encoder, data + chunks.rest, start)
        return
    parsed: tuple[pa.Table, bool] | None = (table, plain)
    first_line = 1
    with ThreadPoolExecutor(1, thread_name_prefix="jsonl-parse") as ahead:
        following = ahead.submit(_next_parsed, chunks, columnar)
        while data:
            batch = None
            if parsed is not None and events:
                columnar.plain = parsed[1]
                try:
                    batch = columnar.batch(parsed[0])
                except _ChunkFallback:
                    batch = None
            if batch is not None:
                yield batch
            elif events:
                yield from _event_batches(data, encoder, first_line)
            first_line += lines
            data, lines, events, parsed = following.result()
            if data:
                following = ahead.submit(_next_parsed, chunks, columnar)


def _next_parsed(
    chunks: _Chunks, columnar: _ColumnarFile
) -> tuple[bytes, int, int, tuple[pa.Table, bool] | None]:
    """The next chunk, its lines and events, and its parsed table (``None``: the event path's)."""
    data, lines, events = chunks.next()
    if not events:
        return data, lines, events, None
    try:
        return data, lines, events, columnar.parse(data, events)
    except _ChunkFallback:
        return data, lines, events, None


def _first_event(data: bytes) -> dict[str, Any]:
    for line in data.split(b"\n", 64):
        if line.strip():
            try:
                event = json.loads(line)
            except ValueError:
                raise _FileFallback from None
            if not isinstance(event, dict):
                raise _FileFallback
            return event
    raise _FileFallback


def _seekable(stream: Any) -> bool:
    try:
        return bool(stream.seekable())
    except (AttributeError, ValueError, OSError):
        return False


def _as_batches(columns_batches: Iterator[files.ChangeColumns]) -> Iterator[pa.RecordBatch]:
    for columns in columns_batches:
        yield record_batch(dict(zip(STAGED_CHANGE_COLUMNS, columns, strict=True)))


def _event_batches(data: bytes, encoder: Any, first_line: int) -> Iterator[pa.RecordBatch]:
    """A chunk converted by the event path (the file's columns as the column path typed them)."""
    events = files._jsonl_events(io.BytesIO(data), encoder, first_line)
    return _as_batches(files._batches(events, encoder))


def _event_path(stream: Any, encoder: Any, head: bytes, start: int | None) -> Iterator[pa.RecordBatch]:
    """The whole file by the event path, from its start (``head``: what was read of it)."""
    if start is not None:
        stream.seek(start)
        source: Any = stream
    else:
        source = chain(io.BytesIO(head), stream)
    return _as_batches(files._jsonl_batches(source, encoder))
