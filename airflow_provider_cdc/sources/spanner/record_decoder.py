"""Decoding change-stream rows straight from protobuf into staged change rows (the read hot path).

The client is asked for undecoded rows (``execute_sql(..., lazy_decode=True)``, a public option of
``google-cloud-spanner``), a ``PartialResultSet`` at a time (:mod:`.result_batches`).
:meth:`ChangeRecordDecoder.decode_batch` reads a batch's data change records, nearly all of a busy
stream, without touching their values one by one in Python: the batch's bytes are parsed with the
merging views of :mod:`.merged_values`, which hand every record's fields, and every mod's texts, out
as one list per kind, built in C; the lists are checked as a whole (shapes, counts, mod and capture
types, record sequences, counts of records and partitions) and turned into staged columns with list
operations, one :class:`DataRecordRun` per run of consecutive data change records. The mods' JSON
texts are staged in canonical form: texts that already are canonical (what Spanner sends) are
recognised with one ``msgspec`` round trip (``msgspec`` comes with Airflow), where ``msgspec``'s
sorted compact encoding is byte for byte the standard ``json`` module's (ASCII, no floats), and are
staged as sent; otherwise the texts are parsed and re-encoded with the C scanner and encoder of the
standard ``json`` module, called directly. A run that does not pass the checks, and every heartbeat
or child-partitions record, is decoded record by record (:meth:`ChangeRecordDecoder.decode`: the
same in Python over the protobuf values, and for anything without the expected shape the client's
own decoder and
:func:`airflow_provider_cdc.sources.spanner.record_parser.parse_change_record_row`, which also
produces the precise error for a malformed record). Tests check every path stages identical rows.

A record's column types carry no nullability; given a ``nullability`` lookup (table → ``{column: is
nullable}``, e.g. :meth:`~airflow_provider_cdc.sources.spanner.table_schema.ColumnNullability.of`), all
paths add each column's ``is_nullable`` from it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from itertools import accumulate, chain, compress, repeat
from json.decoder import JSONDecoder
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

from google.cloud.spanner_v1 import TypeCode
from google.protobuf.message import DecodeError
from google.protobuf.struct_pb2 import ListValue, Value

from airflow_provider_cdc.core.columns import ColumnType
from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS
from airflow_provider_cdc.core.sequence_number import fingerprint64
from airflow_provider_cdc.core.timestamps import parse_timestamp, to_micros
from airflow_provider_cdc.sources.spanner.change_row import source_metadata_json
from airflow_provider_cdc.sources.spanner.merged_values import (
    EMPTY_ARRAY,
    NULL,
    CountView,
    KindsView,
    ModsView,
    RecordsView,
    change_record_value,
    unexpected,
)
from airflow_provider_cdc.sources.spanner.record_parser import parse_change_record_row
from airflow_provider_cdc.sources.spanner.records import (
    ChangeStreamRecord,
    DataChangeRecord,
    ModType,
    ValueCaptureType,
)
from airflow_provider_cdc.sources.spanner.result_batches import RowBatch

try:
    import msgspec
except ImportError:  # pragma: no cover - msgspec comes with Airflow
    msgspec = None  # type: ignore[assignment]

_MOD_TYPES = frozenset(m.value for m in ModType)
_CAPTURE_TYPES = frozenset(v.value for v in ValueCaptureType)
_loads = json.loads
_scan_once = JSONDecoder().scan_once  # the C scanner where available: no per-call Python layers
assert STAGED_CHANGE_COLUMNS == (
    "unit", "commit_timestamp", "transaction_id", "transaction_record", "transaction_record_count",
    "table_name", "operation", "keys_json", "after_json", "before_json", "column_types_json",
    "source_metadata_json", "change_sequence_number",
)  # fmt: skip


def _make_dumps() -> Callable[[Any], str]:
    """``json.dumps(value, sort_keys=True, separators=(",", ":"))``, calling the C encoder directly.

    ``JSONEncoder.encode`` builds a new C encoder on every call; values parsed from JSON text hold no
    reference cycles, so one encoder without a cycle check serves every call.
    """
    encoder = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
    make_encoder = getattr(json.encoder, "c_make_encoder", None)
    if make_encoder is None:  # pragma: no cover - Python without the C accelerator
        return encoder.encode
    encode = make_encoder(
        None, encoder.default, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, True
    )
    join = "".join

    def dumps(value: Any) -> str:
        return join(encode(value, 0))

    return dumps


_dumps = _make_dumps()


def _parse(text: str) -> Any:
    """The JSON value of ``text`` (no surrounding whitespace allowed: that goes the general way)."""
    try:
        value, end = _scan_once(text, 0)
    except StopIteration as exc:
        raise _NotFast from exc
    if end != len(text):
        raise _NotFast
    return value


def _no_floats(text: str) -> Any:
    """``msgspec``'s float hook: floats are written differently by ``msgspec`` and ``json``."""
    raise ValueError(text)


def _make_round_trip() -> tuple[Callable[[str], Any], Callable[[Any], bytes]] | None:
    """``msgspec``'s JSON decoder (refusing floats) and sorted compact encoder, if ``msgspec`` is
    installed and escapes ASCII as ``json`` does (see :func:`_all_canonical`)."""
    if msgspec is None:  # pragma: no cover - msgspec comes with Airflow
        return None
    encode = msgspec.json.Encoder(order="sorted").encode
    if any(encode(chr(code)) != json.dumps(chr(code)).encode() for code in range(127)):
        return None  # pragma: no cover - a msgspec that escapes differently
    return msgspec.json.Decoder(float_hook=_no_floats).decode, encode


_ROUND_TRIP = _make_round_trip()
_NOT_EMPTY = "{}".__ne__


def _keys_text(text: str) -> str:
    """Canonical JSON text of a mod's keys (a non-empty JSON object)."""
    value = _parse(text)
    if type(value) is not dict or not value:
        raise _NotFast
    return _dumps(value)


class _NotFast(Exception):
    """The row is not a well-formed data change record: decode it the general way."""


class DataRecordRows(NamedTuple):
    """A data change record decoded into staged rows, held column-wise: one list per
    ``STAGED_CHANGE_COLUMNS`` entry, one value per mod (what :meth:`StagingWriter.write_columns` takes).
    """

    commit_timestamp: datetime
    server_transaction_id: str
    record_sequence: str
    is_last_record_in_transaction_in_partition: bool
    number_of_partitions_in_transaction: int
    columns: list[list[Any]]

    @property
    def rows(self) -> list[tuple]:
        """The staged rows as tuples in ``STAGED_CHANGE_COLUMNS`` order."""
        return list(zip(*self.columns, strict=True))


class DataRecordRun(NamedTuple):
    """Consecutive data change records of one partition decoded together: their staged rows held
    column-wise in ``columns`` (as :class:`DataRecordRows`), and per record (in order) what the read
    loop needs: commit timestamp, transaction, record sequence, whether it is the transaction's last
    record in the partition, the transaction's partition count, and how many staged rows it has."""

    commit_timestamps: list[datetime]
    server_transaction_ids: list[str]
    record_sequences: list[str]
    is_last_record_in_transaction_in_partition: list[bool]
    number_of_partitions_in_transaction: list[int]
    counts: list[int]
    columns: list[Sequence[Any]]

    @classmethod
    def of(cls, record: DataRecordRows) -> DataRecordRun:
        """A run of one record."""
        return cls(
            [record.commit_timestamp],
            [record.server_transaction_id],
            [record.record_sequence],
            [record.is_last_record_in_transaction_in_partition],
            [record.number_of_partitions_in_transaction],
            [len(record.columns[0])],
            record.columns,
        )

    @property
    def rows(self) -> list[tuple]:
        """The staged rows as tuples in ``STAGED_CHANGE_COLUMNS`` order."""
        return list(zip(*self.columns, strict=True))

    def select(self, keep: list[bool]) -> DataRecordRun:
        """The run of the records whose ``keep`` flag is set."""
        if all(keep):
            return self
        ends = list(accumulate(self.counts))
        spans = [(end - count, end) for end, count in compress(zip(ends, self.counts, strict=True), keep)]
        return DataRecordRun(
            *(list(compress(values, keep)) for values in self[:6]),
            [[value for start, end in spans for value in column[start:end]] for column in self.columns],
        )


_MAX_SEQUENCE = (1 << 64) - 1  # a record sequence is an unsigned 64-bit number
_new_tuple = tuple.__new__  # a NamedTuple made without its Python-level __new__
_MOD_INDEXES = [f"{index:016X}" for index in range(256)]  # the last section of a sequence number


_DATA_FIELDS = (
    ("commit_timestamp", TypeCode.TIMESTAMP),
    ("record_sequence", TypeCode.STRING),
    ("server_transaction_id", TypeCode.STRING),
    ("is_last_record_in_transaction_in_partition", TypeCode.BOOL),
    ("table_name", TypeCode.STRING),
    ("column_types", TypeCode.ARRAY),
    ("mods", TypeCode.ARRAY),
    ("mod_type", TypeCode.STRING),
    ("value_capture_type", TypeCode.STRING),
    ("number_of_records_in_transaction", TypeCode.INT64),
    ("number_of_partitions_in_transaction", TypeCode.INT64),
    ("transaction_tag", TypeCode.STRING),
    ("is_system_transaction", TypeCode.BOOL),
)
_REQUIRED_FIELDS = 11  # servers before transaction tags send the first eleven fields only
_KINDS = ("data_change_record", "heartbeat_record", "child_partitions_record")
_MOD_FIELDS = (("keys", TypeCode.JSON), ("new_values", TypeCode.JSON), ("old_values", TypeCode.JSON))
# how a value of each type travels: a string, a bool or a list; numbers (FLOAT) may be either
_BOOLS = frozenset({TypeCode.BOOL})
_LISTS = frozenset({TypeCode.ARRAY, TypeCode.STRUCT})
_NUMBERS = frozenset({TypeCode.FLOAT32, TypeCode.FLOAT64})


class _Layout(NamedTuple):
    """Where a data change record's fields land when its values merge (:mod:`.merged_values`):
    how many strings, bools and lists a record has, and each field's place among them."""

    strings: int
    bools: int
    lists: int
    places: dict[str, int]


def _struct_fields(type_: Any) -> list[tuple[str, int]] | None:
    """The fields of an ``ARRAY<STRUCT>`` type, or ``None`` for another type."""
    if type_.code != TypeCode.ARRAY or type_.array_element_type.code != TypeCode.STRUCT:
        return None
    return [(field.name, field.type_.code) for field in type_.array_element_type.struct_type.fields]


def _record_layout(metadata: Any) -> _Layout | None:
    """The layout of the data change records of a change-stream query's rows, from the result set's
    metadata; ``None`` when the rows are not what this decoder reads in batches."""
    if metadata is None or len(metadata.row_type.fields) != 1:
        return None
    column = metadata.row_type.fields[0].type_
    if _struct_fields(column) is None:
        return None
    kinds = column.array_element_type.struct_type.fields
    if [kind.name for kind in kinds] != list(_KINDS) or any(_struct_fields(k.type_) is None for k in kinds):
        return None
    record = kinds[0].type_.array_element_type.struct_type.fields
    fields = [(field.name, field.type_.code) for field in record]
    known = min(len(fields), len(_DATA_FIELDS))
    if known < _REQUIRED_FIELDS or fields[:known] != list(_DATA_FIELDS[:known]):
        return None
    types = {field.name: field.type_ for field in record}
    if _struct_fields(types["mods"]) != list(_MOD_FIELDS) or _struct_fields(types["column_types"]) is None:
        return None
    counts = {"strings": 0, "bools": 0, "lists": 0}
    places: dict[str, int] = {}
    for name, code in fields:
        if code in _NUMBERS:
            return None
        bucket = "bools" if code in _BOOLS else "lists" if code in _LISTS else "strings"
        places[name] = counts[bucket]
        counts[bucket] += 1
    return _Layout(counts["strings"], counts["bools"], counts["lists"], places)


_values = attrgetter("values")
_count_view = CountView.FromString
_format_prefix = "{}{:016X}/".format
_ABSENT = (EMPTY_ARRAY, NULL)
_SMALLEST_SPLIT = 8  # runs of at most this many records that fail the checks go record by record


#: A table's columns' nullability: ``{column: is nullable}`` (a column not named is unknown).
NullabilityLookup = Callable[[str], Mapping[str, bool]]


class ChangeRecordDecoder:
    """Decodes rows of one partition's query; caches what repeats (timestamps, schemas, fingerprints).

    ``nullability``: where the columns' nullability comes from (none: staged without it).
    """

    def __init__(self, partition_token: str, nullability: NullabilityLookup | None = None) -> None:
        self.partition_token = partition_token
        self.nullability = nullability
        self._timestamp_text = ""
        self._timestamp: tuple[datetime, int] | None = None
        self._column_types: dict[tuple[str, bytes], str] = {}
        # per transaction: its commit timestamp (µs) and the first two sections of its sequence numbers
        self._heads: dict[str, tuple[int, str]] = {}
        # batches: commit timestamps by text, and the layout of the query's records (by metadata)
        self._timestamps: dict[str, tuple[datetime, int]] = {}
        self._layout: tuple[Any, _Layout | None] = (None, None)

    # ----- batches ---------------------------------------------------------------------------------
    def decode_batch(self, batch: RowBatch) -> list[DataRecordRun | ChangeStreamRecord]:
        """The records of a batch of rows, in order: consecutive data change records as one
        :class:`DataRecordRun`, any other record as the general parser gives it.

        The batch's bytes are parsed a few times with the views of :mod:`.merged_values`, which read
        every record's fields, and every mod's texts, into one list per kind in C; the lists are
        checked as a whole and turned into staged columns by list operations. Whatever does not
        pass the checks is decoded record by record (:meth:`decode`), which also raises the
        precise error for a malformed record.
        """
        layout = self._layout_of(batch.metadata)
        kinds = None if layout is None else _record_kinds(batch.serialized)
        if kinds is None:
            return self._rows(batch.rows, batch.decode_row)
        data, beats, children = kinds[0::3], kinds[1::3], kinds[2::3]
        count = len(data)
        items: list[DataRecordRun | ChangeStreamRecord] = []
        if (
            beats.count(EMPTY_ARRAY) + beats.count(NULL) == count
            and children.count(EMPTY_ARRAY) + children.count(NULL) == count
            and EMPTY_ARRAY not in data
            and NULL not in data
        ):
            self._add_run(items, kinds, 0, count, layout, batch.decode_row)
            return items
        start = None
        for index in range(count):
            if data[index] not in _ABSENT and beats[index] in _ABSENT and children[index] in _ABSENT:
                if start is None:
                    start = index
                continue
            if start is not None:
                self._add_run(items, kinds, start, index, layout, batch.decode_row)
                start = None
            items.extend(self._element(kinds, index, batch.decode_row))
        if start is not None:
            self._add_run(items, kinds, start, count, layout, batch.decode_row)
        return items

    def _layout_of(self, metadata: Any) -> _Layout | None:
        if metadata is None:
            return None
        if self._layout[0] is not metadata:
            self._layout = (metadata, _record_layout(metadata))
        return self._layout[1]

    def _rows(
        self, rows: list[list[Any]], decode_row: Callable[[list[Any]], list[Any]]
    ) -> list[DataRecordRun | ChangeStreamRecord]:
        items: list[DataRecordRun | ChangeStreamRecord] = []
        for row in rows:
            decoded = self.decode(row, decode_row)
            if type(decoded) is DataRecordRows:
                items.append(DataRecordRun.of(decoded))
            else:
                items.extend(decoded)  # type: ignore[arg-type]
        return items

    def _element(
        self, kinds: list[bytes], index: int, decode_row: Callable[[list[Any]], list[Any]]
    ) -> list[DataRecordRun | ChangeStreamRecord]:
        """The records of one ``ChangeRecord`` element, decoded on its own."""
        value = Value.FromString(change_record_value(tuple(kinds[3 * index : 3 * index + 3])))
        return self._rows([[value]], decode_row)

    def _add_run(
        self,
        items: list[DataRecordRun | ChangeStreamRecord],
        kinds: list[bytes],
        start: int,
        stop: int,
        layout: _Layout,
        decode_row: Callable[[list[Any]], list[Any]],
    ) -> None:
        """Data change records ``start`` to ``stop`` as a run; a run that does not pass the checks
        is halved until the records that do not are decoded on their own."""
        try:
            items.append(self._run(kinds[3 * start : 3 * stop : 3], layout))
        except _NotFast:
            if stop - start > _SMALLEST_SPLIT:
                middle = (start + stop) // 2
                self._add_run(items, kinds, start, middle, layout, decode_row)
                self._add_run(items, kinds, middle, stop, layout, decode_row)
                return
            for index in range(start, stop):
                items.extend(self._element(kinds, index, decode_row))

    def _run(self, arrays: list[bytes], layout: _Layout) -> DataRecordRun:
        """Data change records (each its one-element ARRAY's bytes) as one run."""
        try:
            return self._checked_run(arrays, layout)
        except (ValueError, IndexError, TypeError, OverflowError, DecodeError) as exc:
            raise _NotFast from exc

    def _checked_run(self, arrays: list[bytes], layout: _Layout) -> DataRecordRun:
        records = len(arrays)
        view = RecordsView.FromString(b"".join(arrays))
        structs = view.list_value.values
        leaf = structs.list_value.values
        if unexpected(view) or unexpected(structs) or leaf.null_value or leaf.number_value:
            raise _NotFast
        if leaf.struct_value:
            raise _NotFast
        strings, bools, lists = list(leaf.string_value), list(leaf.bool_value), list(leaf.list_value)
        if (
            len(strings) != records * layout.strings
            or len(bools) != records * layout.bools
            or len(lists) != records * layout.lists
        ):
            raise _NotFast  # a NULL field, or a record array of several records
        step, places = layout.strings, layout.places
        timestamp_texts = strings[places["commit_timestamp"] :: step]
        sequences = strings[places["record_sequence"] :: step]
        transactions = strings[places["server_transaction_id"] :: step]
        tables = strings[places["table_name"] :: step]
        mod_types = strings[places["mod_type"] :: step]
        captures = strings[places["value_capture_type"] :: step]
        records_in_transaction = list(map(int, strings[places["number_of_records_in_transaction"] :: step]))
        partitions = list(map(int, strings[places["number_of_partitions_in_transaction"] :: step]))
        lasts = bools[places["is_last_record_in_transaction_in_partition"] :: layout.bools]
        column_types = lists[places["column_types"] :: layout.lists]
        mods = lists[places["mods"] :: layout.lists]
        digits = "".join(sequences)
        if (
            "" in transactions
            or "" in tables
            or "" in sequences
            or not _MOD_TYPES.issuperset(mod_types)
            or not _CAPTURE_TYPES.issuperset(captures)
            or min(records_in_transaction) < 1
            or min(partitions) < 1
            or not (digits.isascii() and digits.isdigit())
        ):
            raise _NotFast
        record_numbers = list(map(int, sequences))
        if max(record_numbers) > _MAX_SEQUENCE:
            raise _NotFast
        counts = list(map(len, map(_values, map(_count_view, mods))))
        if 0 in counts:
            raise _NotFast
        total = sum(counts)
        texts = _mod_texts(mods, total)
        keys, new_values, old_values = texts[0::3], texts[1::3], texts[2::3]
        if "" in new_values or "" in old_values:
            raise _NotFast  # a NULL image (the record path stages {}) or an empty text
        if not _all_canonical(keys, new_values, old_values):
            keys = [_keys_text(text) for text in keys]
            new_values = [_object_text(text) for text in new_values]
            old_values = [_object_text(text) for text in old_values]

        timestamps = self._timestamps
        if len(timestamps) > 4096:
            timestamps.clear()
        for text in dict.fromkeys(timestamp_texts):
            if text not in timestamps:
                value = parse_timestamp(text)
                timestamps[text] = (value, to_micros(value))
        commit_timestamps = [timestamps[text][0] for text in timestamp_texts]
        heads = self._heads
        if len(heads) > 4096:
            heads.clear()
        for transaction, text in dict.fromkeys(zip(transactions, timestamp_texts, strict=True)):
            micros = timestamps[text][1]
            head = heads.get(transaction)
            if head is None or head[0] != micros:
                heads[transaction] = (micros, f"{micros:016X}/{fingerprint64(transaction):016X}/")
        prefixes = list(map(_format_prefix, [heads[t][1] for t in transactions], record_numbers))
        cached = self._column_types
        column_types_json = list(map(cached.get, zip(tables, column_types, strict=True)))
        if None in column_types_json:
            found = {
                (table, items): self._column_types_json(items, table)
                for table, items in dict.fromkeys(zip(tables, column_types, strict=True))
            }
            column_types_json = list(map(found.__getitem__, zip(tables, column_types, strict=True)))
        metadata = list(map(source_metadata_json, captures, partitions, lasts))

        if total == records:
            per_mod: Callable[[list[Any]], Any] = list
            indexes = [_MOD_INDEXES[0]] * total
        else:
            # each record's values repeated for its mods: one C call per column
            per_mod = itemgetter(*chain.from_iterable(map(repeat, range(records), counts)))
            if max(counts) <= len(_MOD_INDEXES):
                indexes = list(chain.from_iterable(map(_MOD_INDEXES.__getitem__, map(slice, counts))))
            else:
                indexes = [f"{index:016X}" for count in counts for index in range(count)]
        columns = [
            [self.partition_token] * total, per_mod(commit_timestamps), per_mod(transactions),
            per_mod(sequences), per_mod(records_in_transaction), per_mod(tables), per_mod(mod_types),
            keys, new_values, old_values, per_mod(column_types_json), per_mod(metadata),
            list(map(str.__add__, per_mod(prefixes), indexes)),
        ]  # fmt: skip
        return DataRecordRun(commit_timestamps, transactions, sequences, lasts, partitions, counts, columns)

    # ----- one row at a time -----------------------------------------------------------------------

    def decode(
        self, row: list[Any], decode_row: Callable[[list[Any]], list[Any]]
    ) -> DataRecordRows | list[ChangeStreamRecord]:
        """A data change record's staged rows, or the general records of the row."""
        try:
            return self._data_record(row)
        except _NotFast:
            records = parse_change_record_row(decode_row(row))
            if self.nullability is None:
                return records
            return [self._with_nullability(r) if isinstance(r, DataChangeRecord) else r for r in records]

    def _with_nullability(self, record: DataChangeRecord) -> DataChangeRecord:
        assert self.nullability is not None
        known = self.nullability(record.table_name)
        columns = tuple(
            replace(c, is_nullable=known[c.name]) if c.is_nullable is None and c.name in known else c
            for c in record.column_types
        )
        return replace(record, column_types=columns)

    def _data_record(self, row: list[Any]) -> DataRecordRows:
        try:
            if len(row) != 1:
                raise _NotFast
            elements = row[0].list_value.values
            if len(elements) != 1:
                raise _NotFast
            data = elements[0].list_value.values[0].list_value.values
            if len(data) != 1:
                raise _NotFast
            f = data[0].list_value.values
            if len(f) < 11:
                raise _NotFast
            sequence = f[1].string_value
            transaction = f[2].string_value
            last = f[3]
            table = f[4].string_value
            mod_type = f[7].string_value
            capture = f[8].string_value
            records_in_transaction = int(f[9].string_value)
            partitions_in_transaction = int(f[10].string_value)
            if (
                not transaction
                or not table
                or mod_type not in _MOD_TYPES
                or capture not in _CAPTURE_TYPES
                or records_in_transaction < 1
                or partitions_in_transaction < 1
                or not (sequence.isascii() and sequence.isdigit())
                or last.WhichOneof("kind") != "bool_value"
            ):
                raise _NotFast
            timestamp_text = f[0].string_value
            if timestamp_text == self._timestamp_text:
                commit_timestamp, micros = self._timestamp  # type: ignore[misc]
            else:
                commit_timestamp, micros = self._commit_timestamp(timestamp_text)
            column_types_json = self._column_types_json(f[5].list_value.SerializeToString(), table)
            mods = f[6].list_value.values
            count = len(mods)
            if not count:
                raise _NotFast
            head = self._heads.get(transaction)
            if head is None or head[0] != micros:
                if len(self._heads) > 4096:
                    self._heads.clear()
                head = self._heads[transaction] = (
                    micros,
                    f"{micros:016X}/{fingerprint64(transaction):016X}/",
                )
            record = int(sequence)
            if record > _MAX_SEQUENCE:
                raise _NotFast
            prefix = f"{head[1]}{record:016X}/"
            is_last = last.bool_value
            keys_texts: list[str] = []
            new_texts: list[str] = []
            old_texts: list[str] = []
            for index in range(count):
                parts = mods[index].list_value.values
                if len(parts) != 3:
                    raise _NotFast
                keys_texts.append(parts[0].string_value)
                new_texts.append(parts[1].string_value or _null_object(parts[1]))
                old_texts.append(parts[2].string_value or _null_object(parts[2]))
            if not _all_canonical(keys_texts, new_texts, old_texts):
                keys_texts = [_keys_text(text) for text in keys_texts]
                new_texts = [_object_text(text) for text in new_texts]
                old_texts = [_object_text(text) for text in old_texts]
            metadata = source_metadata_json(capture, partitions_in_transaction, is_last)
            if count == 1:
                columns = [
                    [self.partition_token], [commit_timestamp], [transaction], [sequence],
                    [records_in_transaction], [table], [mod_type], keys_texts, new_texts,
                    old_texts, [column_types_json], [metadata], [f"{prefix}{0:016X}"],
                ]  # fmt: skip
            else:
                columns = [
                    [self.partition_token] * count, [commit_timestamp] * count, [transaction] * count,
                    [sequence] * count, [records_in_transaction] * count, [table] * count,
                    [mod_type] * count, keys_texts, new_texts, old_texts,
                    [column_types_json] * count, [metadata] * count,
                    list(map(prefix.__add__, _MOD_INDEXES[:count]))
                    if count <= len(_MOD_INDEXES)
                    else [f"{prefix}{index:016X}" for index in range(count)],
                ]  # fmt: skip
            return _new_tuple(
                DataRecordRows,
                (commit_timestamp, transaction, sequence, is_last, partitions_in_transaction, columns),
            )
        except (ValueError, IndexError, AttributeError, TypeError) as exc:
            raise _NotFast from exc

    def _commit_timestamp(self, text: str) -> tuple[datetime, int]:
        if text != self._timestamp_text or self._timestamp is None:
            value = parse_timestamp(text)
            self._timestamp_text, self._timestamp = text, (value, to_micros(value))
        return self._timestamp

    def _column_types_json(self, items: bytes, table: str) -> str:
        """The staged column types of a record of ``table`` whose ``column_types`` list is
        ``items`` (its serialized ``ListValue``)."""
        key = (table, items)
        cached = self._column_types.get(key)
        if cached is None:
            known = self.nullability(table) if self.nullability is not None else {}
            columns = []
            for item in ListValue.FromString(items).values:
                name, type_, is_key, ordinal = item.list_value.values
                type_json = _loads(type_.string_value)
                if (
                    not name.string_value
                    or type(type_json) is not dict
                    or not isinstance(type_json.get("code"), str)
                ):
                    raise _NotFast
                position = int(ordinal.string_value)
                column = ColumnType(
                    name.string_value, type_json, is_key.bool_value, position, known.get(name.string_value)
                )
                columns.append(column.to_json_dict())
            if not columns:
                raise _NotFast
            if len(self._column_types) > 4096:
                self._column_types.clear()
            cached = self._column_types[key] = _dumps(columns)
        return cached


def _record_kinds(serialized: bytes) -> list[bytes] | None:
    """Each ``ChangeRecord`` element's three record arrays (serialized ``Value``s, in order) of a
    batch's rows; ``None`` when a row or element is not a list (the rows go one by one)."""
    try:
        view = KindsView.FromString(serialized)
    except DecodeError:
        return None
    rows = view.values
    elements = rows.list_value.values
    if unexpected(rows) or unexpected(elements):
        return None
    kinds = list(elements.list_value.values)
    return None if len(kinds) % 3 else kinds


def _mod_texts(mods: list[bytes], total: int) -> list[str]:
    """The JSON texts (keys, new values, old values) of ``total`` mods in records' ``mods`` lists."""
    view = ModsView.FromString(b"".join(mods)).values
    leaf = view.list_value.values
    if (
        unexpected(view)
        or leaf.null_value
        or leaf.number_value
        or leaf.bool_value
        or leaf.struct_value
        or leaf.list_value
    ):
        raise _NotFast
    texts = list(leaf.string_value)
    if len(texts) != 3 * total:
        raise _NotFast
    return texts


def _null_object(value: Any) -> str:
    """The text of a JSON-object column whose string is empty: ``{}`` for a NULL; anything else is
    not JSON text."""
    if value.WhichOneof("kind") == "null_value":
        return "{}"
    raise _NotFast


def _all_canonical(keys: list[str], new_values: list[str], old_values: list[str]) -> bool:
    """Whether a record's mods' JSON texts are all canonical JSON objects already (keys non-empty),
    as nearly all are; checked together, without building canonical texts.

    ``msgspec``'s sorted compact encoding is ``json.dumps(value, sort_keys=True, separators=(",",
    ":"))`` for values without floats whose strings are ASCII except DEL (which ``json`` escapes): a
    text that is ASCII without DEL and comes back unchanged from a ``msgspec`` round trip holds no
    other values, so it is canonical. Texts of 4,000 characters or more (where ``json`` refuses huge
    integers), and anything ``msgspec`` does not read, are left to ``json``.
    """
    if _ROUND_TRIP is None:  # pragma: no cover - msgspec comes with Airflow
        return False
    texts = keys + [*filter(_NOT_EMPTY, new_values), *filter(_NOT_EMPTY, old_values)]  # {} is canonical
    joined = ",".join(texts)
    if not joined.isascii() or "\x7f" in joined or max(map(len, texts)) >= 4000:
        return False
    decode, encode = _ROUND_TRIP
    try:
        values = list(map(decode, texts))
    except ValueError:
        return False
    # Each text holds one JSON value (a text with surrounding whitespace differs from its encoding),
    # which ends where its encoding ends: equal comma-joined lists mean equal texts.
    return (
        set(map(type, values)) == {dict}
        and all(values[: len(keys)])
        and encode(values) == f"[{joined}]".encode("ascii")
    )


def _object_text(text: str) -> str:
    """Canonical JSON text of a JSON-object column that may hold JSON ``null`` (then ``{}``)."""
    if text == "{}":
        return text
    parsed = _parse(text)
    if parsed is None:
        return "{}"
    if type(parsed) is not dict:
        raise _NotFast
    return _dumps(parsed)
