"""The staged change row: one row per mod of a source's change, the merge job's input.

Declared once here as (name, type) pairs; :func:`staged_change_schema` gives the Arrow schema the
staging writes and :data:`STAGED_SCHEMA_DDL` the Spark schema the merge job reads with. Every
column is always set. See ARCHITECTURE.md, "Staged change rows", for what each column means.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

#: The staged row's columns in file order, with their logical types.
STAGED_CHANGE_FIELDS: tuple[tuple[str, str], ...] = (
    ("partition_token", "string"),
    ("commit_timestamp", "timestamp"),
    ("server_transaction_id", "string"),
    ("record_sequence", "string"),
    ("mod_index", "int32"),
    ("table_name", "string"),
    ("mod_type", "string"),
    ("keys_json", "string"),
    ("new_values_json", "string"),
    ("old_values_json", "string"),
    ("column_types_json", "string"),
    ("value_capture_type", "string"),
    ("number_of_records_in_transaction", "int64"),
    ("number_of_partitions_in_transaction", "int64"),
    ("is_last_record_in_transaction_in_partition", "bool"),
    ("change_sequence_number", "string"),
)
STAGED_CHANGE_COLUMNS: tuple[str, ...] = tuple(name for name, _ in STAGED_CHANGE_FIELDS)

#: One mod's identity: staging may hold a change twice (a retried read), the merge keeps one.
DEDUPLICATION_KEY: tuple[str, ...] = (
    "table_name",
    "keys_json",
    "server_transaction_id",
    "record_sequence",
    "mod_index",
)

_SPARK_TYPES = {
    "string": "STRING",
    "timestamp": "TIMESTAMP",
    "int32": "INT",
    "int64": "BIGINT",
    "bool": "BOOLEAN",
}

#: The staged row as Spark DDL (timestamps are UTC microseconds).
STAGED_SCHEMA_DDL = ", ".join(f"{name} {_SPARK_TYPES[kind]}" for name, kind in STAGED_CHANGE_FIELDS)


def arrow_type(kind: str) -> pa.DataType:
    """The Arrow type of a logical column type of the contract."""
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "bool": pa.bool_(),
        "string_list": pa.list_(pa.string()),
    }
    return types[kind]


@cache
def staged_change_schema() -> pa.Schema:
    """Arrow schema of a staged change row (no column is nullable)."""
    import pyarrow as pa

    fields = [pa.field(name, arrow_type(kind), nullable=False) for name, kind in STAGED_CHANGE_FIELDS]
    return pa.schema(fields)
