"""Stream records → staged change rows (pure).

| action | staged | after image |
| --- | --- | --- |
| ``PUT_ROW`` | ``INSERT`` | the row's full image: every cell the record writes |
| ``UPDATE_ROW`` | ``UPDATE`` | changed columns only: ``PUT`` → its value, ``DELETE_ALL_VERSION`` → ``null`` |
| ``DELETE_ROW`` | ``DELETE`` | ``{}`` |

``DELETE_ONE_VERSION`` deletes one version (``timestamp_ms``) of a column. A row-oriented target holds
one value per column, the newest version, so the rule is: the column becomes ``null`` when the deleted
version is the version of the column's value the same shard last wrote for that key in this window
(a single-version table's usual case: deleting the value just written); otherwise the column is left
as it is (the target's value is the newest version, and an older version's deletion does not change
it). Either way the deleted versions are listed in ``source_metadata_json`` (``deleted_versions``).
An ``INCREMENT`` cell carries the column's new value and is staged like ``PUT``.

Column types carry nullability: primary-key columns are never NULL in Table Store, attribute columns
may be absent from any row (``is_nullable`` true).

``commit_timestamp`` is the record's write time (``sequence.timestamp_us``) held inside the window:
a window is cut by stream position (the first record at or after its end), so a record read by the
window is the window's even when a clock step put its time slightly outside it. The record's own time,
epoch, row index and shard are in ``source_metadata_json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_cdc.core.columns import ColumnType, column_types_json
from airflow_provider_cdc.core.contract.staged_rows import DELETE, INSERT, UPDATE
from airflow_provider_cdc.core.timestamps import from_micros
from airflow_provider_cdc.core.types import SCALAR_TYPES, LogicalType, encode_value
from airflow_provider_cdc.sources.tablestore.client import StreamRecord
from airflow_provider_cdc.sources.tablestore.sequence_numbers import record_sequence_number
from airflow_provider_cdc.sources.tablestore.types import logical_type_of, value_type

try:  # the C escaper json.dumps uses (ensure_ascii)
    from _json import encode_basestring_ascii as _json_string
except ImportError:  # pragma: no cover - the pure-Python one
    from json.encoder import encode_basestring_ascii as _json_string

__all__ = ["ShardWindowRows", "StagedRecordError", "canonical_json"]

_OPERATIONS = {"PUT_ROW": INSERT, "UPDATE_ROW": UPDATE, "DELETE_ROW": DELETE}


class StagedRecordError(ValueError):
    """A record that cannot be staged; the message names the table, shard, window and position."""


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys (the staged rows' canonical form)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _json_scalar(value: Any) -> str:
    """``canonical_json`` of one encoded cell value (string, integer, boolean, finite float, null)."""
    kind = type(value)
    if kind is str:
        return _json_string(value)
    if kind is int:
        return int.__repr__(value)
    if kind is float:
        return float.__repr__(value)  # finite: the encoder spells NaN and infinities as strings
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    return canonical_json(value)


def _json_object(items: dict[str, str]) -> str:
    """Compact JSON object with sorted keys from names and their values' JSON texts."""
    return "{" + ",".join([f"{_name_json(name)}:{items[name]}" for name in sorted(items)]) + "}"


_NAMES: dict[str, str] = {}


def _name_json(name: str) -> str:
    text = _NAMES.get(name)
    if text is None:
        text = _NAMES[name] = _json_string(name)
    return text


#: A cell's type, its value encoder and its ``column_types`` entry's JSON text.
_CellType = tuple[LogicalType, Callable[[Any], Any], str]
_ACTION_JSON = {action: _json_string(action) for action in _OPERATIONS}


@dataclass
class ShardWindowRows:
    """Stages the records one shard gives one window, in stream order (see the module).

    :param table: the source table.
    :param shard_id: the shard (the staged ``unit``).
    :param window_start_us: the window's start (µs); ``window_end_us`` its end.
    :param stage: the shard's lineage stage in the window (:mod:`.sequence_numbers`).
    :param declared: declared column types (a deleted column's type when no change carries it).
    """

    table: str
    shard_id: str
    window_start_us: int
    window_end_us: int
    stage: int
    declared: Mapping[str, LogicalType] = field(default_factory=dict)
    #: key text → column → the version (ms) of the value this shard last wrote in the window.
    _versions: dict[str, dict[str, int | None]] = field(default_factory=dict, repr=False)
    position: int = 0
    _cell_types: dict[tuple[str, type, bool, int], _CellType] = field(default_factory=dict, repr=False)
    _declared_entries: dict[tuple[str, int], str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._shard_json = _json_string(self.shard_id)
        # every record's sequence number shares its first sections (record_sequence_number's form)
        self._sequence_prefix = record_sequence_number(self.window_start_us, self.stage, 0)[:-16]

    def where(self, position: int) -> str:
        return (
            f"table {self.table!r}, shard {self.shard_id!r}, window starting at µs {self.window_start_us}, "
            f"record {position}"
        )

    def row(self, record: StreamRecord) -> tuple[Any, ...]:
        """The staged row of the next record (in ``STAGED_CHANGE_COLUMNS`` order).

        Builds the same texts as :meth:`_row_reference` (canonical JSON: compact, sorted keys) from
        cached pieces: a column's type, encoder and ``column_types`` entry are found once per
        (column, value type, key flag, ordinal), and the JSON objects are joined from their parts.
        """
        texts = self._texts(record)
        if texts is None:
            return self._row_reference(record)  # raises the error naming the record
        commit_us, operation, key_text, after_text, types_text, metadata_text, sequence_number = texts
        return (
            self.shard_id,
            from_micros(commit_us),
            None,
            None,
            None,
            self.table,
            operation,
            key_text,
            after_text,
            None,
            types_text,
            metadata_text,
            sequence_number,
        )

    def batch(self, records: Sequence[StreamRecord]) -> Any:
        """The staged rows of the next records as an Arrow record batch of the staged schema (the
        rows :meth:`row` gives, built column-wise without a datetime per row)."""
        from airflow_provider_cdc.staging.batches import text_batch

        texts = []
        for record in records:
            found = self._texts(record)
            if found is None:
                self._row_reference(record)  # raises the error naming the record
                raise AssertionError("a record the reference stages is staged by _texts")  # pragma: no cover
            texts.append(found)
        commits, operations, keys, afters, types, metadata, sequence_numbers = (
            (list(column) for column in zip(*texts, strict=True)) if texts else ([], [], [], [], [], [], [])
        )
        return text_batch(
            self.shard_id, commits, self.table, operations, keys, afters, types, metadata, sequence_numbers
        )

    def _texts(self, record: StreamRecord) -> tuple[int, str, str, str, str, str, str] | None:
        """The next record's commit time (µs), operation and texts; ``None`` for a record only
        :meth:`_row_reference` stages (which refuses it, naming it)."""
        position = self.position
        operation = _OPERATIONS.get(record.action)
        sequence = record.sequence
        if operation is None or sequence is None:
            return None
        self.position += 1
        cache = self._cell_types
        entries: list[str] = []
        keys: dict[str, str] = {}
        ordinal = 0
        for name, value in record.key:
            ordinal += 1
            found = cache.get((name, type(value), True, ordinal))
            if found is None:
                found = self._cell_type(name, value, True, ordinal, position)
            keys[name] = _json_scalar(found[1](value))
            entries.append(found[2])
        key_text = _json_object(keys)
        attribute_ordinal = ordinal + 1
        after: dict[str, str] = {}
        deleted_versions: dict[str, list[int]] = {}
        versions = self._versions.setdefault(key_text, {})
        if operation != UPDATE:
            versions.clear()
        for cell in record.cells if operation != DELETE else ():
            op = cell.op
            name = cell.name
            if op == "PUT" or op == "INCREMENT":
                value = cell.value
                found = cache.get((name, type(value), False, attribute_ordinal))
                if found is None:
                    found = self._cell_type(name, value, False, attribute_ordinal, position)
                after[name] = _json_scalar(found[1](value))
                versions[name] = cell.timestamp_ms
                entries.append(found[2])
            elif op == "DELETE_ALL_VERSION":
                after[name] = "null"
                versions.pop(name, None)
                self._declared_entry(name, entries, attribute_ordinal)
            elif op == "DELETE_ONE_VERSION":
                deleted_versions.setdefault(name, []).append(cell.timestamp_ms)
                if name in versions and versions[name] == cell.timestamp_ms:
                    after[name] = "null"
                    versions.pop(name)
                    self._declared_entry(name, entries, attribute_ordinal)
            else:
                raise StagedRecordError(
                    f"{self.where(position)}: column {name!r} has the unknown operation {op!r}"
                )
        timestamp_us, epoch, row_index = sequence.timestamp_us, sequence.epoch, sequence.row_index
        if deleted_versions or not (type(timestamp_us) is type(epoch) is type(row_index) is int):
            metadata: dict[str, Any] = {
                "shard_id": self.shard_id,
                "action": record.action,
                "timestamp_us": timestamp_us,
                "epoch": epoch,
                "row_index": row_index,
            }
            if deleted_versions:
                metadata["deleted_versions"] = deleted_versions
            metadata_text = canonical_json(metadata)
        else:  # sorted keys: action, epoch, row_index, shard_id, timestamp_us
            metadata_text = (
                f'{{"action":{_ACTION_JSON[record.action]},"epoch":{epoch},"row_index":{row_index},'
                f'"shard_id":{self._shard_json},"timestamp_us":{timestamp_us}}}'
            )
        commit_us = min(max(timestamp_us, self.window_start_us), self.window_end_us - 1)
        return (
            commit_us,
            operation,
            key_text,
            _json_object(after) if after else "{}",
            "[" + ",".join(entries) + "]",
            metadata_text,
            self._sequence_prefix + "%016X" % position,  # noqa: UP031
        )

    def _cell_type(self, name: str, value: Any, key: bool, ordinal: int, position: int) -> _CellType:
        """Find (and cache) a cell's type, encoder and ``column_types`` entry text."""
        kind = self._type(name, value, self.where(position))
        encode = (
            SCALAR_TYPES[kind.code].encode
            if kind.element is None
            else (lambda item, kind=kind, name=name: encode_value(kind, item, name))
        )
        entry = column_types_json([ColumnType(name, kind, key, ordinal, is_nullable=not key)])[1:-1]
        found = self._cell_types[(name, type(value), key, ordinal)] = (kind, encode, entry)
        return found

    def _declared_entry(self, column: str, entries: list[str], ordinal: int) -> None:
        """:meth:`_declared_column` as an entry's JSON text."""
        kind = self.declared.get(column)
        if kind is not None:
            cached = self._declared_entries.get((column, ordinal))
            if cached is None:
                cached = column_types_json([ColumnType(column, kind, False, ordinal, is_nullable=True)])[1:-1]
                self._declared_entries[(column, ordinal)] = cached
            entries.append(cached)

    def _row_reference(self, record: StreamRecord) -> tuple[Any, ...]:
        """The staged row of the next record, built value by value (the reference :meth:`row`
        matches; also where a record that cannot be staged is refused)."""
        position = self.position
        self.position += 1
        where = self.where(position)
        operation = _OPERATIONS.get(record.action)
        if operation is None:
            raise StagedRecordError(f"{where}: unknown action {record.action!r}")
        sequence = record.sequence
        if sequence is None:
            raise StagedRecordError(f"{where}: the record has no sequence information")
        columns: list[ColumnType] = []
        keys: dict[str, Any] = {}
        for ordinal, (name, value) in enumerate(record.key, start=1):
            kind = self._type(name, value, where)
            keys[name] = encode_value(kind, value, name)
            columns.append(ColumnType(name, kind, True, ordinal, is_nullable=False))
        key_text = canonical_json(keys)
        attribute_ordinal = len(record.key) + 1
        after: dict[str, Any] = {}
        deleted_versions: dict[str, list[int]] = {}
        versions = self._versions.setdefault(key_text, {})
        if operation in (INSERT, DELETE):
            versions.clear()
        for cell in record.cells if operation != DELETE else ():
            if cell.op in ("PUT", "INCREMENT"):
                kind = self._type(cell.name, cell.value, where)
                after[cell.name] = encode_value(kind, cell.value, cell.name)
                versions[cell.name] = cell.timestamp_ms
                columns.append(ColumnType(cell.name, kind, False, attribute_ordinal, is_nullable=True))
            elif cell.op == "DELETE_ALL_VERSION":
                after[cell.name] = None
                versions.pop(cell.name, None)
                self._declared_column(cell.name, columns, attribute_ordinal)
            elif cell.op == "DELETE_ONE_VERSION":
                deleted_versions.setdefault(cell.name, []).append(cell.timestamp_ms)
                if cell.name in versions and versions[cell.name] == cell.timestamp_ms:
                    after[cell.name] = None
                    versions.pop(cell.name)
                    self._declared_column(cell.name, columns, attribute_ordinal)
            else:
                raise StagedRecordError(
                    f"{where}: column {cell.name!r} has the unknown operation {cell.op!r}"
                )
        metadata: dict[str, Any] = {
            "shard_id": self.shard_id,
            "action": record.action,
            "timestamp_us": sequence.timestamp_us,
            "epoch": sequence.epoch,
            "row_index": sequence.row_index,
        }
        if deleted_versions:
            metadata["deleted_versions"] = deleted_versions
        commit_us = min(max(sequence.timestamp_us, self.window_start_us), self.window_end_us - 1)
        return (
            self.shard_id,
            from_micros(commit_us),
            None,
            None,
            None,
            self.table,
            operation,
            key_text,
            canonical_json(after),
            None,
            column_types_json(columns),
            canonical_json(metadata),
            record_sequence_number(self.window_start_us, self.stage, position),
        )

    def _type(self, column: str, value: Any, where: str) -> LogicalType:
        try:
            return logical_type_of(value_type(value, self.table, column), self.table, column)
        except ValueError as exc:
            raise StagedRecordError(f"{where}: {exc}") from None

    def _declared_column(self, column: str, columns: list[ColumnType], ordinal: int) -> None:
        """A cleared column's type, when declared (else other changes of the window carry it)."""
        kind = self.declared.get(column)
        if kind is not None:
            columns.append(ColumnType(column, kind, False, ordinal, is_nullable=True))
