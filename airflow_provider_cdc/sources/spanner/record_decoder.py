"""Decoding change-stream rows straight from protobuf into staged change rows (the read hot path).

The client is asked for undecoded rows (``execute_sql(..., lazy_decode=True)``, a public option of
``google-cloud-spanner``); data change records, nearly all of a busy stream, are turned into staged
rows here in one pass, column-wise, without building intermediate Python objects. The mods' JSON
texts are staged in canonical form: a record whose texts already are canonical (what Spanner sends)
is recognised with one ``msgspec`` round trip of its texts (``msgspec`` comes with Airflow), where
``msgspec``'s sorted compact encoding is byte for byte the standard ``json`` module's (ASCII, no
floats), and its texts are staged as sent; any other record's texts are parsed and re-encoded with
the C scanner and encoder of the standard ``json`` module, called directly. Anything that does not
have the expected shape, and every heartbeat or child-partitions record, goes through the client's
own decoder and
:func:`airflow_provider_cdc.sources.spanner.record_parser.parse_change_record_row`, which also
produces the precise error for a malformed record. Tests check both paths stage identical rows.

A record's column types carry no nullability; given a ``nullability`` lookup (table → ``{column: is
nullable}``, e.g. :meth:`~airflow_provider_cdc.sources.spanner.table_schema.ColumnNullability.of`), both
paths add each column's ``is_nullable`` from it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from json.decoder import JSONDecoder
from typing import Any, NamedTuple

from airflow_provider_cdc.core.columns import ColumnType
from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS
from airflow_provider_cdc.core.sequence_number import fingerprint64
from airflow_provider_cdc.core.timestamps import parse_timestamp, to_micros
from airflow_provider_cdc.sources.spanner.change_row import source_metadata_json
from airflow_provider_cdc.sources.spanner.record_parser import parse_change_record_row
from airflow_provider_cdc.sources.spanner.records import (
    ChangeStreamRecord,
    DataChangeRecord,
    ModType,
    ValueCaptureType,
)

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


_MAX_SEQUENCE = (1 << 64) - 1  # a record sequence is an unsigned 64-bit number
_new_tuple = tuple.__new__  # a NamedTuple made without its Python-level __new__
_MOD_INDEXES = [f"{index:016X}" for index in range(256)]  # the last section of a sequence number


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
            column_types_json = self._column_types_json(f[5], table)
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

    def _column_types_json(self, value: Any, table: str) -> str:
        key = (table, value.SerializeToString())
        cached = self._column_types.get(key)
        if cached is None:
            known = self.nullability(table) if self.nullability is not None else {}
            columns = []
            for item in value.list_value.values:
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
            cached = self._column_types[key] = _dumps(columns)
        return cached


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
    texts = keys
    for images in (new_values, old_values):
        if images.count("{}") != len(images):  # an INSERT's old or a DELETE's new images are all {}
            texts = texts + images
    joined = "".join(texts)
    if not joined.isascii() or "\x7f" in joined or max(map(len, texts)) >= 4000:
        return False
    decode, encode = _ROUND_TRIP
    try:
        values = list(map(decode, texts))
    except ValueError:
        return False
    # Each text holds one JSON object, which ends where its encoding ends: equal concatenations
    # mean equal texts.
    return (
        set(map(type, values)) == {dict}
        and all(values[: len(keys)])
        and b"".join(map(encode, values)) == joined.encode("ascii")
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
