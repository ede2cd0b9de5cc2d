"""Each logical type's BigQuery type, declared by the BigQuery target."""

from __future__ import annotations

import pytest

from airflow_provider_cdc.core.types import SCALAR_TYPE_CODES, LogicalType, parse_logical_type
from airflow_provider_cdc.targets.bigquery.types import BIGQUERY_TYPES, bigquery_type

EXPECTED = {
    "BOOL": "BOOL",
    "INT64": "INT64",
    "FLOAT32": "FLOAT64",
    "FLOAT64": "FLOAT64",
    "NUMERIC": "NUMERIC",
    "BIGNUMERIC": "BIGNUMERIC",
    "STRING": "STRING",
    "BYTES": "BYTES",
    "JSON": "JSON",
    "DATE": "DATE",
    "TIME": "TIME",
    "DATETIME": "DATETIME",
    "TIMESTAMP": "TIMESTAMP",
    "UUID": "STRING",
}


def test_every_logical_type_has_a_bigquery_type() -> None:
    assert set(BIGQUERY_TYPES) == SCALAR_TYPE_CODES == set(EXPECTED)


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_a_scalar_is_nullable_and_an_array_repeated(code: str) -> None:
    scalar = parse_logical_type({"code": code})
    assert bigquery_type(scalar) == (EXPECTED[code], "NULLABLE")
    assert bigquery_type(LogicalType("ARRAY", scalar)) == (EXPECTED[code], "REPEATED")
