"""The workload schema: tables, columns, their DDL and the change streams over them."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_cdc.core.identifiers import validate_identifier

from .encoding import decode_json_value, encode_json_value

ALL_CHANGES_STREAM = "WorkloadChanges"
ORDER_STATUS_STREAM = "OrderStatusChanges"
ORDER_STATUS_COLUMNS = ("Status", "Amount")


@dataclass(frozen=True)
class WorkloadColumn:
    """One column: DDL type text (``INT64``, ``STRING(MAX)``, ``ARRAY<STRING(MAX)>``) and flags.

    A key column is ``NOT NULL`` unless ``nullable_key``: Spanner then allows NULL in it (the workload
    writes none), and ``INFORMATION_SCHEMA.COLUMNS.IS_NULLABLE`` says ``YES``.
    """

    name: str
    ddl_type: str
    primary_key: bool = False
    commit_timestamp: bool = False  # OPTIONS (allow_commit_timestamp=true), written as COMMIT_TIMESTAMP
    nullable_key: bool = False

    def __post_init__(self) -> None:
        validate_identifier(self.name, "column")

    @property
    def code(self) -> str:
        """Spanner type code (``ARRAY`` for arrays)."""
        return _type_code(self.ddl_type)

    @property
    def type_json(self) -> dict[str, Any]:
        """The column's type as the Spanner API (and a change stream's ``column_types``) writes it."""
        return _type_json(self.ddl_type)

    def ddl(self) -> str:
        text = f"{self.name} {self.ddl_type}"
        if self.primary_key and not self.nullable_key:
            text += " NOT NULL"
        if self.commit_timestamp:
            text += " OPTIONS (allow_commit_timestamp=true)"
        return text


def _type_code(ddl_type: str) -> str:
    text = ddl_type.strip().upper()
    if text.startswith("ARRAY<"):
        return "ARRAY"
    return text.split("(", 1)[0].strip()


def _type_json(ddl_type: str) -> dict[str, Any]:
    text = ddl_type.strip()
    if text.upper().startswith("ARRAY<") and text.endswith(">"):
        return {"code": "ARRAY", "array_element_type": _type_json(text[6:-1])}
    return {"code": _type_code(text)}


@dataclass(frozen=True)
class WorkloadTable:
    """A table of the workload schema."""

    name: str
    columns: tuple[WorkloadColumn, ...]

    def __post_init__(self) -> None:
        validate_identifier(self.name, "table")
        if not any(column.primary_key for column in self.columns):
            raise ValueError(f"table {self.name} needs at least one primary-key column")

    @property
    def key_columns(self) -> tuple[WorkloadColumn, ...]:
        return tuple(column for column in self.columns if column.primary_key)

    @property
    def value_columns(self) -> tuple[WorkloadColumn, ...]:
        return tuple(column for column in self.columns if not column.primary_key)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    def column(self, name: str) -> WorkloadColumn:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(f"table {self.name} has no column {name!r}")

    def ddl(self) -> str:
        body = ",\n  ".join(column.ddl() for column in self.columns)
        keys = ", ".join(column.name for column in self.key_columns)
        return f"CREATE TABLE {self.name} (\n  {body}\n) PRIMARY KEY ({keys})"

    def column_types(self) -> list[dict[str, Any]]:
        """``column_types`` of a data change record for this table (stream watching all columns)."""
        return [
            {
                "name": column.name,
                "type": column.type_json,
                "is_primary_key": column.primary_key,
                "ordinal_position": position,
            }
            for position, column in enumerate(self.columns, start=1)
        ]

    def key_of(self, keys: Mapping[str, Any]) -> tuple[Any, ...]:
        """Primary-key tuple (in key order) of a ``{column: value}`` mapping."""
        return tuple(keys[column.name] for column in self.key_columns)

    def decode_values(self, encoded: Mapping[str, Any]) -> dict[str, Any]:
        """Python values of a mod's ``keys``/``new_values``/``old_values`` (Spanner JSON encoding)."""
        result: dict[str, Any] = {}
        for name, value in encoded.items():
            try:
                column = self.column(name)
            except KeyError:
                raise ValueError(f"table {self.name} has no column {name!r} (value {value!r})") from None
            result[name] = decode_json_value(value, column.type_json, f"{self.name}.{name}")
        return result

    def encode_values(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Spanner JSON encoding of ``{column: Python value}``."""
        return {name: encode_json_value(value, self.column(name).type_json) for name, value in values.items()}


WORKLOAD_TABLES: tuple[WorkloadTable, ...] = (
    WorkloadTable(
        "Customers",
        (
            WorkloadColumn("Region", "STRING(8)", primary_key=True),
            WorkloadColumn("CustomerId", "INT64", primary_key=True),
            WorkloadColumn("Name", "STRING(MAX)"),
            WorkloadColumn("Active", "BOOL"),
            WorkloadColumn("Score", "FLOAT64"),
            WorkloadColumn("Balance", "NUMERIC"),
            WorkloadColumn("SignupDate", "DATE"),
            WorkloadColumn("Avatar", "BYTES(MAX)"),
            WorkloadColumn("Profile", "JSON"),
            WorkloadColumn("Tags", "ARRAY<STRING(MAX)>"),
            WorkloadColumn("UpdatedAt", "TIMESTAMP", commit_timestamp=True),
        ),
    ),
    WorkloadTable(
        "Orders",
        (
            WorkloadColumn("CustomerId", "INT64", primary_key=True),
            WorkloadColumn("OrderId", "STRING(36)", primary_key=True),
            WorkloadColumn("Status", "STRING(16)"),
            WorkloadColumn("Amount", "NUMERIC"),
            WorkloadColumn("Quantity", "INT64"),
            WorkloadColumn("Discount", "FLOAT64"),
            WorkloadColumn("Paid", "BOOL"),
            WorkloadColumn("PlacedAt", "TIMESTAMP"),
            WorkloadColumn("Notes", "JSON"),
        ),
    ),
    WorkloadTable(
        "Readings",
        (
            WorkloadColumn("SensorId", "STRING(16)", primary_key=True),
            WorkloadColumn("Day", "DATE", primary_key=True, nullable_key=True),
            WorkloadColumn("Seq", "INT64", primary_key=True),
            WorkloadColumn("Value", "FLOAT64"),
            WorkloadColumn("Valid", "BOOL"),
            WorkloadColumn("Raw", "BYTES(256)"),
            WorkloadColumn("Labels", "ARRAY<STRING(32)>"),
            WorkloadColumn("RecordedAt", "TIMESTAMP"),
        ),
    ),
)

BULK_TABLE = WorkloadTable(
    "Ledger",
    (
        WorkloadColumn("Shard", "INT64", primary_key=True),
        WorkloadColumn("EntryId", "INT64", primary_key=True),
        WorkloadColumn("Amount", "NUMERIC"),
        WorkloadColumn("Kind", "STRING(16)"),
        WorkloadColumn("Revision", "INT64"),
        WorkloadColumn("Memo", "STRING(MAX)"),
    ),
)

TABLES_BY_NAME: dict[str, WorkloadTable] = {table.name: table for table in (*WORKLOAD_TABLES, BULK_TABLE)}


def schema_ddl(
    *, streams: bool = True, retention: str = "7d", tables: Sequence[WorkloadTable] | None = None
) -> list[str]:
    """DDL of the workload tables (and the bulk table) plus, with ``streams``, the two change streams.

    :data:`ALL_CHANGES_STREAM` watches everything; :data:`ORDER_STATUS_STREAM` watches
    ``Orders(Status, Amount)`` only.
    """
    if not re.fullmatch(r"[1-9][0-9]*[smhd]", retention):
        raise ValueError(f"invalid retention period {retention!r}: expected a duration such as '7d' or '36h'")
    chosen = list(tables) if tables is not None else [*WORKLOAD_TABLES, BULK_TABLE]
    statements = [table.ddl() for table in chosen]
    if streams:
        options = f"OPTIONS (retention_period = '{retention}')"
        statements.append(f"CREATE CHANGE STREAM {ALL_CHANGES_STREAM} FOR ALL {options}")
        if any(table.name == "Orders" for table in chosen):
            columns = ", ".join(ORDER_STATUS_COLUMNS)
            statements.append(f"CREATE CHANGE STREAM {ORDER_STATUS_STREAM} FOR Orders({columns}) {options}")
    return statements
