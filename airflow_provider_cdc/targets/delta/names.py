"""What names a Delta table outside the provider (pure): its location ``{lake_root}/{table}``, as an
Airflow asset URI (``file:///abs/lake/Orders``, ``gs://bucket/lake/Orders``) and as an OpenLineage
dataset; a downstream DAG schedules on :func:`delta_table_uri`."""

from __future__ import annotations

from airflow_provider_cdc.assets import location_table_uri
from airflow_provider_cdc.core.contract.target import TableName
from airflow_provider_cdc.lineage import DatasetName, location_table_dataset

__all__ = ["delta_table_dataset", "delta_table_name", "delta_table_uri"]


def delta_table_uri(lake_root: str, table: str) -> str:
    """The asset URI of the Delta table ``table`` under ``lake_root``: ``{lake_root as URI}/{table}``."""
    return location_table_uri(lake_root, table, "Delta")


def delta_table_dataset(lake_root: str, table: str) -> DatasetName:
    """The OpenLineage dataset of the Delta table: its location."""
    return location_table_dataset(lake_root, table)


def delta_table_name(lake_root: str, table: str) -> TableName:
    """The Delta table ``{lake_root}/{table}``: its location as asset URI and dataset."""
    dataset = delta_table_dataset(lake_root, table)
    return TableName(dataset.namespace, dataset.name, delta_table_uri(lake_root, table))
