"""Compare the fake's BigQuery tables with the ground truth of the workload history that was committed.

The tables are read as a query sees them (``FakeBigQuery.rows``) and encoded like the Delta tables in
:mod:`airflow_provider_cdc.testing.lake_check`; BigQuery reads a NULL array as an empty one, so the
history's NULL arrays are compared as empty arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_cdc.testing.lake_check import TableComparison, compare_lake_to_truth
from airflow_provider_cdc.testing.workload import TABLES_BY_NAME


class FakeDatasetTables:
    """The tables of one dataset of the fake, read once, as the lake comparison reads Delta tables."""

    def __init__(self, fake: Any, project: str, dataset: str, tables: list[str]) -> None:
        import pyarrow as pa

        self.tables = {
            table: pa.Table.from_pylist(fake.rows(project, dataset, table))
            for table in tables
            if (project, dataset, table) in fake.state.tables
        }

    def exists(self, table: str) -> bool:
        return table in self.tables

    def read_table(self, table: str) -> Any:
        return self.tables[table]


def compare_bigquery_to_truth(
    fake: Any, project: str, dataset: str, truth: Mapping[str, list[Mapping[str, Any]]]
) -> list[TableComparison]:
    """Per table of ``truth`` (Spanner-JSON-encoded rows of the workload tables): does the fake's
    table ``{project}.{dataset}.{table}`` hold exactly those rows? A missing table holds none."""
    expected = {}
    for table, rows in truth.items():
        arrays = [c.name for c in TABLES_BY_NAME[table].columns if c.code == "ARRAY"]
        expected[table] = [{**row, **{c: [] for c in arrays if row.get(c) is None}} for row in rows]
    return compare_lake_to_truth(FakeDatasetTables(fake, project, dataset, sorted(truth)), expected)
