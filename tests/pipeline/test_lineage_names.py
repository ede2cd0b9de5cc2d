"""OpenLineage dataset names of the pipeline's locations, sources and targets (pure)."""

from __future__ import annotations

from airflow_provider_cdc.core.contract.target import TableName
from airflow_provider_cdc.lineage import (
    DatasetName,
    location_dataset,
    location_table_dataset,
    source_datasets,
    source_table_dataset,
)
from airflow_provider_cdc.targets.bigquery.names import bigquery_dataset, bigquery_table_name
from airflow_provider_cdc.targets.delta.names import delta_table_dataset, delta_table_name

SPANNER_KEY = "projects/shop-prod/instances/main/databases/orders/OrdersStream"


def test_locations_are_named_by_bucket_and_path_or_as_local_files() -> None:
    assert location_dataset("gs://lake/cdc/changesets/1-2/") == DatasetName("gs://lake", "cdc/changesets/1-2")
    assert location_dataset("/data/cdc/staging") == DatasetName("file", "/data/cdc/staging")
    assert location_dataset("file:///data/cdc/lake") == DatasetName("file", "/data/cdc/lake")
    assert location_dataset("s3://b/x") == DatasetName("s3://b", "x")
    assert delta_table_dataset("gs://lake/cdc/lake/", "Orders") == DatasetName("gs://lake", "cdc/lake/Orders")
    assert bigquery_dataset("p.sales", "Orders") == DatasetName("bigquery", "p.sales.Orders")
    assert location_table_dataset("/data/lake/", "Orders") == DatasetName("file", "/data/lake/Orders")


def test_each_target_names_its_tables_for_assets_and_lineage_alike() -> None:
    assert delta_table_name("gs://lake/cdc/lake", "Orders") == TableName(
        "gs://lake", "cdc/lake/Orders", "gs://lake/cdc/lake/Orders"
    )
    assert bigquery_table_name("p-1.sales", "Orders") == TableName(
        "bigquery", "p-1.sales.Orders", "bigquery://p-1/sales/Orders"
    )


def test_sources_name_their_tables_or_their_files() -> None:
    spanner = "spanner://shop-prod/main"
    assert source_datasets(SPANNER_KEY, ["Orders", "Customers", "Orders"]) == [
        DatasetName(spanner, "orders.Customers"),
        DatasetName(spanner, "orders.Orders"),
    ]
    assert source_datasets(SPANNER_KEY) == [DatasetName(spanner, "orders.OrdersStream")]  # the stream itself
    assert source_table_dataset(SPANNER_KEY, "Orders") == DatasetName(spanner, "orders.Orders")
    assert source_datasets("tablestore/prod-instance/orders") == [
        DatasetName("tablestore://prod-instance", "orders")
    ]
    assert source_table_dataset("tablestore/prod-instance/orders", "other") is None
    datastream = "datastream/gs/landing/mysql/orders_db"
    assert source_datasets(datastream) == [DatasetName("gs://landing", "mysql/orders_db")]
    assert source_table_dataset(datastream, "orders") is None  # files: no table to copy columns from
    assert source_datasets("datastream/local/tmp/ds/src") == [DatasetName("file", "/tmp/ds/src")]
    assert source_datasets("something/else") == []
    assert source_table_dataset("something/else", "Orders") is None


def test_each_source_folder_names_what_it_reads() -> None:
    from airflow_provider_cdc.sources.spanner import lineage as spanner

    assert spanner.KEY_PREFIX == "projects"
    assert source_datasets(SPANNER_KEY, ["Orders"]) == spanner.datasets(SPANNER_KEY, ["Orders"])
