"""Spanner data change records as staged change rows: one row per mod.

Every source maps its changes into these rows (``core/contract/staged_rows.py``); staging writes
them to Parquet and the merge job reads them back. A Spanner mod maps as:

| staged column | from the data change record |
| --- | --- |
| ``unit`` | the partition token read |
| ``transaction_id`` | ``server_transaction_id`` |
| ``transaction_record`` | ``record_sequence`` |
| ``transaction_record_count`` | ``number_of_records_in_transaction`` |
| ``operation`` | ``mod_type`` |
| ``after_json`` / ``before_json`` | the mod's ``new_values`` / ``old_values`` |
| ``column_types_json`` | ``column_types`` (Spanner's type JSON is the logical types' JSON form) |
| ``source_metadata_json`` | ``value_capture_type``, ``number_of_partitions_in_transaction`` and |
| | ``is_last_record_in_transaction_in_partition`` |
| ``change_sequence_number`` | ``commit µs / fingerprint64(transaction) / record_sequence / mod index`` |
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from airflow_provider_cdc.core.timestamps import to_micros
from airflow_provider_cdc.sources.spanner.records import DataChangeRecord


def canonical_json(value: Any) -> str:
    """Compact JSON text with sorted keys: equal values always give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@lru_cache(maxsize=64)
def source_metadata_json(
    value_capture_type: str,
    number_of_partitions_in_transaction: int,
    is_last_record_in_transaction_in_partition: bool,
) -> str:
    """A Spanner change's ``source_metadata_json``: what its record tells beyond the staged columns
    (canonical JSON; the few distinct values are cached)."""
    return canonical_json(
        {
            "value_capture_type": value_capture_type,
            "number_of_partitions_in_transaction": number_of_partitions_in_transaction,
            "is_last_record_in_transaction_in_partition": is_last_record_in_transaction_in_partition,
        }
    )


@dataclass(frozen=True, slots=True)
class StagedDataChange:
    """A data change record as the staging writer takes it
    (:class:`~airflow_provider_cdc.core.contract.staged_rows.StagedChanges`): one row per mod."""

    record: DataChangeRecord

    def staged_rows(self, unit: str) -> Iterator[dict[str, Any]]:
        """The record's rows, read from the partition ``unit``."""
        return change_rows(self.record, unit)


def change_rows(record: DataChangeRecord, partition_token: str) -> Iterator[dict[str, Any]]:
    """One staged change row per mod of ``record``, read from the partition ``partition_token``."""
    if not isinstance(record, DataChangeRecord):
        raise TypeError(f"change rows come from data change records, got {type(record).__name__}")
    if not isinstance(partition_token, str) or not partition_token:
        raise ValueError(f"partition token must be a non-empty string, got {partition_token!r}")
    return _rows(record, partition_token)


def _rows(record: DataChangeRecord, partition_token: str) -> Iterator[dict[str, Any]]:
    from airflow_provider_cdc.sources.spanner.sequence_numbers import spanner_change_sequence_number

    commit_micros = to_micros(record.commit_timestamp)
    column_types_json = canonical_json([column.to_json_dict() for column in record.column_types])
    metadata = source_metadata_json(
        record.value_capture_type,
        record.number_of_partitions_in_transaction,
        record.is_last_record_in_transaction_in_partition,
    )
    for mod_index, mod in enumerate(record.mods):
        yield {
            "unit": partition_token,
            "commit_timestamp": record.commit_timestamp,
            "transaction_id": record.server_transaction_id,
            "transaction_record": record.record_sequence,
            "transaction_record_count": record.number_of_records_in_transaction,
            "table_name": record.table_name,
            "operation": record.mod_type.value,
            "keys_json": canonical_json(mod.keys),
            "after_json": canonical_json(mod.new_values),
            "before_json": canonical_json(mod.old_values),
            "column_types_json": column_types_json,
            "source_metadata_json": metadata,
            "change_sequence_number": spanner_change_sequence_number(
                commit_micros, record.server_transaction_id, record.record_sequence, mod_index
            ),
        }
