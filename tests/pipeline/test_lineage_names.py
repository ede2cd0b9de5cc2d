"""OpenLineage dataset names of the pipeline's locations, sources and targets (pure)."""

from __future__ import annotations

from airflow_provider_cdc.lineage import (
    DatasetName,
    bigquery_dataset,
    delta_table_dataset,
    location_dataset,
    source_datasets,
    source_table_dataset,
)

SPANNER_KEY = "projects/shop-prod/instances/main/databases/orders/OrdersStream"


def test_locations_are_named_by_bucket_and_path_or_as_local_files() -> None:
    assert location_dataset("gs://lake/cdc/changesets/1-2/") == DatasetName("gs://lake", "cdc/changesets/1-2")
    assert location_dataset("/data/cdc/staging") == DatasetName("file", "/data/cdc/staging")
    assert location_dataset("file:///data/cdc/lake") == DatasetName("file", "/data/cdc/lake")
    assert location_dataset("s3://b/x") == DatasetName("s3://b", "x")
    assert delta_table_dataset("gs://lake/cdc/lake/", "Orders") == DatasetName("gs://lake", "cdc/lake/Orders")
    assert bigquery_dataset("p.sales", "Orders") == DatasetName("bigquery", "p.sales.Orders")


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
