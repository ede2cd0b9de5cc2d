"""The staged change row: one row per mod of a data change record.

Every source maps its changes into these rows; staging writes them to Parquet and the merge job
reads them back. The columns are those of ARCHITECTURE.md, "Staged change rows".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from airflow_provider_cdc.core.timestamps import to_micros
from airflow_provider_cdc.sources.spanner.records import DataChangeRecord


def canonical_json(value: Any) -> str:
    """Compact JSON text with sorted keys: equal values always give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def change_rows(record: DataChangeRecord, partition_token: str) -> Iterator[dict[str, Any]]:
    """One staged change row per mod of ``record``, read from the partition ``partition_token``."""
    if not isinstance(record, DataChangeRecord):
        raise TypeError(f"change rows come from data change records, got {type(record).__name__}")
    if not isinstance(partition_token, str) or not partition_token:
        raise ValueError(f"partition token must be a non-empty string, got {partition_token!r}")
    return _rows(record, partition_token)


def _rows(record: DataChangeRecord, partition_token: str) -> Iterator[dict[str, Any]]:
    from airflow_provider_cdc.core.sequence_number import spanner_change_sequence_number

    commit_micros = to_micros(record.commit_timestamp)
    column_types_json = canonical_json([column.to_json_dict() for column in record.column_types])
    for mod_index, mod in enumerate(record.mods):
        yield {
            "partition_token": partition_token,
            "commit_timestamp": record.commit_timestamp,
            "server_transaction_id": record.server_transaction_id,
            "record_sequence": record.record_sequence,
            "mod_index": mod_index,
            "table_name": record.table_name,
            "mod_type": record.mod_type.value,
            "keys_json": canonical_json(mod.keys),
            "new_values_json": canonical_json(mod.new_values),
            "old_values_json": canonical_json(mod.old_values),
            "column_types_json": column_types_json,
            "value_capture_type": record.value_capture_type,
            "number_of_records_in_transaction": record.number_of_records_in_transaction,
            "number_of_partitions_in_transaction": record.number_of_partitions_in_transaction,
            "is_last_record_in_transaction_in_partition": record.is_last_record_in_transaction_in_partition,
            "change_sequence_number": spanner_change_sequence_number(
                commit_micros, record.server_transaction_id, record.record_sequence, mod_index
            ),
        }
