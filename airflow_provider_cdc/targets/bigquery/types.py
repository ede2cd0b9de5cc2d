"""The BigQuery type of each logical type (:mod:`airflow_provider_cdc.core.types`), declared once.

| Logical type | BigQuery |
| --- | --- |
| BOOL | BOOL |
| INT64 | INT64 |
| FLOAT32, FLOAT64 | FLOAT64 |
| NUMERIC | NUMERIC |
| BIGNUMERIC | BIGNUMERIC |
| STRING, UUID | STRING |
| BYTES | BYTES |
| JSON | JSON |
| DATE | DATE |
| TIME | TIME |
| DATETIME | DATETIME |
| TIMESTAMP | TIMESTAMP |
| ARRAY<T> | T, mode REPEATED |
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from airflow_provider_cdc.core.types import LogicalType

__all__ = ["BIGQUERY_TYPES", "bigquery_type"]

#: Logical scalar type code → BigQuery standard SQL type.
BIGQUERY_TYPES: Mapping[str, str] = MappingProxyType(
    {
        "BOOL": "BOOL",
        "INT64": "INT64",
        "FLOAT32": "FLOAT64",
        "FLOAT64": "FLOAT64",
        "NUMERIC": "NUMERIC",
        "BIGNUMERIC": "BIGNUMERIC",
        "STRING": "STRING",
        "JSON": "JSON",
        "BYTES": "BYTES",
        "DATE": "DATE",
        "TIME": "TIME",
        "DATETIME": "DATETIME",
        "TIMESTAMP": "TIMESTAMP",
        "UUID": "STRING",
    }
)


def bigquery_type(logical_type: LogicalType) -> tuple[str, str]:
    """The BigQuery column type and mode of a logical type: ``("INT64", "NULLABLE")``,
    ``("STRING", "REPEATED")``."""
    scalar = logical_type.element if logical_type.element is not None else logical_type
    return BIGQUERY_TYPES[scalar.code], "REPEATED" if logical_type.element is not None else "NULLABLE"
