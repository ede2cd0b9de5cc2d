"""Decoding change-stream rows straight from protobuf into staged change rows (the read hot path).

The client is asked for undecoded rows (``execute_sql(..., lazy_decode=True)``, a public option of
``google-cloud-spanner``); data change records, nearly all of a busy stream, are turned into staged
rows here in one pass, column-wise, without building intermediate Python objects; JSON texts are
parsed and re-encoded canonically with the C scanner and encoder of the standard ``json`` module,
called directly. Anything that does not have the expected shape, and every heartbeat or
child-partitions record, goes through the client's own decoder and
:func:`airflow_provider_cdc.sources.spanner.record_parser.parse_change_record_row`, which also produces the
precise error for a malformed record. Tests check both paths stage identical rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from json.decoder import JSONDecoder
from typing import Any

from airflow_provider_cdc.core.columns import ColumnType
from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS
from airflow_provider_cdc.core.sequence_number import fingerprint64
from airflow_provider_cdc.core.timestamps import parse_timestamp, to_micros
from airflow_provider_cdc.sources.spanner.change_row import source_metadata_json
from airflow_provider_cdc.sources.spanner.record_parser import parse_change_record_row
from airflow_provider_cdc.sources.spanner.records import ChangeStreamRecord, ModType, ValueCaptureType

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


class _NotFast(Exception):
    """The row is not a well-formed data change record: decode it the general way."""


@dataclass(frozen=True, slots=True)
class DataRecordRows:
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


class ChangeRecordDecoder:
    """Decodes rows of one partition's query; caches what repeats (timestamps, schemas, fingerprints)."""

    def __init__(self, partition_token: str) -> None:
        self.partition_token = partition_token
        self._timestamp_text = ""
        self._timestamp: tuple[datetime, int] | None = None
        self._column_types: dict[bytes, str] = {}
        self._fingerprints: dict[str, int] = {}

    def decode(
        self, row: list[Any], decode_row: Callable[[list[Any]], list[Any]]
    ) -> DataRecordRows | list[ChangeStreamRecord]:
        """A data change record's staged rows, or the general records of the row."""
        try:
            return self._data_record(row)
        except _NotFast:
            return parse_change_record_row(decode_row(row))

    def _data_record(self, row: list[Any]) -> DataRecordRows:
        try:
            if len(row) != 1:
                raise _NotFast
            elements = row[0].list_value.values
            if len(elements) != 1:
                raise _NotFast
            arrays = elements[0].list_value.values
            data = arrays[0].list_value.values
            if len(data) != 1:
                raise _NotFast
            f = data[0].list_value.values
            if len(f) < 11:
                raise _NotFast
            timestamp_text = f[0].string_value
            sequence = f[1].string_value
            transaction = f[2].string_value
            table = f[4].string_value
            mod_type = f[7].string_value
            capture = f[8].string_value
            records_in_transaction = int(f[9].string_value)
            partitions_in_transaction = int(f[10].string_value)
            if (
                f[3].WhichOneof("kind") != "bool_value"
                or not (sequence.isascii() and sequence.isdigit())
                or not transaction
                or not table
                or mod_type not in _MOD_TYPES
                or capture not in _CAPTURE_TYPES
                or records_in_transaction < 1
                or partitions_in_transaction < 1
            ):
                raise _NotFast
            commit_timestamp, micros = self._commit_timestamp(timestamp_text)
            column_types_json = self._column_types_json(f[5])
            mods = f[6].list_value.values
            if not mods:
                raise _NotFast
            fingerprint = self._fingerprints.get(transaction)
            if fingerprint is None:
                if len(self._fingerprints) > 4096:
                    self._fingerprints.clear()
                fingerprint = self._fingerprints[transaction] = fingerprint64(transaction)
            prefix = f"{micros:016X}/{fingerprint:016X}/{int(sequence):016X}/"
            is_last = f[3].bool_value
            keys_json: list[str] = []
            new_values_json: list[str] = []
            old_values_json: list[str] = []
            for mod in mods:
                parts = mod.list_value.values
                if len(parts) != 3:
                    raise _NotFast
                keys = _parse(parts[0].string_value)
                if type(keys) is not dict or not keys:
                    raise _NotFast
                keys_json.append(_dumps(keys))
                new_values_json.append(_object_text(parts[1]))
                old_values_json.append(_object_text(parts[2]))
            count = len(keys_json)
            metadata = source_metadata_json(capture, partitions_in_transaction, is_last)
            columns = [
                [self.partition_token] * count, [commit_timestamp] * count, [transaction] * count,
                [sequence] * count, [records_in_transaction] * count, [table] * count, [mod_type] * count,
                keys_json, new_values_json, old_values_json, [column_types_json] * count,
                [metadata] * count, [f"{prefix}{index:016X}" for index in range(count)],
            ]  # fmt: skip
            return DataRecordRows(
                commit_timestamp, transaction, sequence, is_last, partitions_in_transaction, columns
            )
        except (ValueError, IndexError, AttributeError, TypeError) as exc:
            raise _NotFast from exc

    def _commit_timestamp(self, text: str) -> tuple[datetime, int]:
        if text != self._timestamp_text or self._timestamp is None:
            value = parse_timestamp(text)
            self._timestamp_text, self._timestamp = text, (value, to_micros(value))
        return self._timestamp

    def _column_types_json(self, value: Any) -> str:
        key = value.SerializeToString()
        cached = self._column_types.get(key)
        if cached is None:
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
                column = ColumnType(name.string_value, type_json, is_key.bool_value, position)
                columns.append(column.to_json_dict())
            if not columns:
                raise _NotFast
            cached = self._column_types[key] = _dumps(columns)
        return cached


def _object_text(value: Any) -> str:
    """Canonical JSON text of a JSON-object column that may be NULL (then ``{}``)."""
    if value.WhichOneof("kind") == "null_value":
        return "{}"
    text = value.string_value
    if text == "{}":
        return text
    parsed = _parse(text)
    if parsed is None:
        return "{}"
    if type(parsed) is not dict:
        raise _NotFast
    return _dumps(parsed)
