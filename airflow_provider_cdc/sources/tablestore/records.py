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

``commit_timestamp`` is the record's write time (``sequence.timestamp_us``) held inside the window:
a window is cut by stream position (the first record at or after its end), so a record read by the
window is the window's even when a clock step put its time slightly outside it. The record's own time,
epoch, row index and shard are in ``source_metadata_json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_cdc.core.columns import ColumnType, column_types_json
from airflow_provider_cdc.core.contract.staged_rows import DELETE, INSERT, UPDATE
from airflow_provider_cdc.core.timestamps import from_micros
from airflow_provider_cdc.core.types import LogicalType, encode_value
from airflow_provider_cdc.sources.tablestore.client import StreamRecord
from airflow_provider_cdc.sources.tablestore.sequence_numbers import record_sequence_number
from airflow_provider_cdc.sources.tablestore.types import logical_type_of, value_type

__all__ = ["ShardWindowRows", "StagedRecordError", "canonical_json"]

_OPERATIONS = {"PUT_ROW": INSERT, "UPDATE_ROW": UPDATE, "DELETE_ROW": DELETE}


class StagedRecordError(ValueError):
    """A record that cannot be staged; the message names the table, shard, window and position."""


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys (the staged rows' canonical form)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


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

    def where(self, position: int) -> str:
        return (
            f"table {self.table!r}, shard {self.shard_id!r}, window starting at µs {self.window_start_us}, "
            f"record {position}"
        )

    def row(self, record: StreamRecord) -> tuple[Any, ...]:
        """The staged row of the next record (in ``STAGED_CHANGE_COLUMNS`` order)."""
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
            columns.append(ColumnType(name, kind, True, ordinal))
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
                columns.append(ColumnType(cell.name, kind, False, attribute_ordinal))
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
            columns.append(ColumnType(column, kind, False, ordinal))
