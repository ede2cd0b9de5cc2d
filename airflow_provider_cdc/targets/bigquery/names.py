"""What names a BigQuery table outside the provider (pure): ``bigquery://{project}/{dataset}/{table}``
as an Airflow asset (the google provider's convention) and ``bigquery`` / ``{project}.{dataset}.{table}``
as an OpenLineage dataset."""

from __future__ import annotations

import re

from airflow_provider_cdc.assets import AssetNameError, bounded_uri, table_identifier
from airflow_provider_cdc.core.contract.target import TableName
from airflow_provider_cdc.lineage import DatasetName

__all__ = ["bigquery_dataset", "bigquery_table_name", "bigquery_table_uri", "split_bigquery_dataset"]

# A Google Cloud project id, optionally domain-scoped (``example.com:my-project``).
_PROJECT = re.compile(r"^(?:[a-z0-9][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{0,61}[a-z0-9]$")
# A BigQuery dataset id: letters, digits and underscores, at most 1024.
_DATASET = re.compile(r"^[A-Za-z0-9_]{1,1024}$")


def split_bigquery_dataset(dataset: str) -> tuple[str, str]:
    """``(project, dataset)`` of ``project.dataset`` (the project may be domain-scoped)."""
    project, dot, name = str(dataset).strip().rpartition(".")
    if not dot or not _PROJECT.match(project) or not _DATASET.match(name):
        raise AssetNameError(
            f"BigQuery dataset {dataset!r}: expected project.dataset (a Google Cloud project id, then "
            "letters, digits or underscores)"
        )
    return project, name


def bigquery_table_uri(dataset: str, table: str) -> str:
    """The asset URI of the table ``table`` of ``dataset`` (``project.dataset``):
    ``bigquery://{project}/{dataset}/{table}``."""
    project, name = split_bigquery_dataset(dataset)
    return bounded_uri(f"bigquery://{project}/{name}/{table_identifier(table, 'BigQuery')}")


def bigquery_dataset(project_dataset: str, table: str) -> DatasetName:
    """The OpenLineage dataset of a BigQuery table of ``project.dataset``."""
    return DatasetName("bigquery", f"{project_dataset}.{table}")


def bigquery_table_name(dataset: str, table: str) -> TableName:
    """The table ``table`` of ``project.dataset``: its asset URI and OpenLineage dataset."""
    return TableName("bigquery", f"{dataset}.{table}", bigquery_table_uri(dataset, table))
