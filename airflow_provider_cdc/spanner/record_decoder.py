"""Decoding change-stream rows straight from protobuf into staged change rows (the read hot path).

The client is asked for undecoded rows (``execute_sql(..., lazy_decode=True)``, a public option of
``google-cloud-spanner``); data change records, nearly all of a busy stream, are turned into staged
rows here in one pass without building intermediate Python objects. Anything that does not have the
expected shape, and every heartbeat or child-partitions record, goes through the client's own decoder
and :func:`airflow_provider_cdc.domain.records.parse_change_record_row`, which also produces the
precise error for a malformed record. Tests check both paths stage identical rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_provider_cdc.domain.change_row import STAGED_CHANGE_COLUMNS
from airflow_provider_cdc.domain.records import (
    ChangeStreamRecord,
    ModType,
    ValueCaptureType,
    parse_change_record_row,
)
from airflow_provider_cdc.domain.sequence_number import fingerprint64
from airflow_provider_cdc.domain.timestamps import parse_timestamp, to_micros

_MOD_TYPES = frozenset(m.value for m in ModType)
_CAPTURE_TYPES = frozenset(v.value for v in ValueCaptureType)
_dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode
_loads = json.loads
assert STAGED_CHANGE_COLUMNS[:5] == ("partition_token", "commit_timestamp", "server_transaction_id",
                                     "record_sequence", "mod_index")  # fmt: skip


class _NotFast(Exception):
    """The row is not a well-formed data change record: decode it the general way."""


@dataclass(frozen=True, slots=True)
class DataRecordRows:
    """A data change record decoded into staged rows (tuples in ``STAGED_CHANGE_COLUMNS`` order)."""

    commit_timestamp: datetime
    server_transaction_id: str
    record_sequence: str
    is_last_record_in_transaction_in_partition: bool
    number_of_partitions_in_transaction: int
    rows: list[tuple]


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
            token = self.partition_token
            rows = []
            for index, mod in enumerate(mods):
                parts = mod.list_value.values
                if len(parts) != 3:
                    raise _NotFast
                keys = _loads(parts[0].string_value)
                if type(keys) is not dict or not keys:
                    raise _NotFast
                rows.append((
                    token, commit_timestamp, transaction, sequence, index, table, mod_type,
                    _dumps(keys), _object_text(parts[1]), _object_text(parts[2]), column_types_json, capture,
                    records_in_transaction, partitions_in_transaction, is_last, f"{prefix}{index:016X}",
                ))  # fmt: skip
            return DataRecordRows(
                commit_timestamp, transaction, sequence, is_last, partitions_in_transaction, rows
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
                columns.append(
                    {
                        "name": name.string_value,
                        "type": type_json,
                        "is_primary_key": is_key.bool_value,
                        "ordinal_position": int(ordinal.string_value),
                    }
                )
            if not columns:
                raise _NotFast
            cached = self._column_types[key] = _dumps(columns)
        return cached


def _object_text(value: Any) -> str:
    """Canonical JSON text of a JSON-object column that may be NULL (then ``{}``)."""
    if value.WhichOneof("kind") == "null_value":
        return "{}"
    parsed = _loads(value.string_value)
    if parsed is None:
        return "{}"
    if type(parsed) is not dict:
        raise _NotFast
    return _dumps(parsed)
