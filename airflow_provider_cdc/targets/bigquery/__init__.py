"""BigQuery CDC target: change sets written through the Storage Write API default stream."""

from airflow_provider_cdc.plugins import TargetKind

TARGET = TargetKind(
    "bigquery",
    "BigQuery",
    "upsert_stream_apply_watermark",
    "airflow_provider_cdc.targets.bigquery.target:BigQueryCdcTarget",
    commit="airflow_provider_cdc.targets.bigquery.commit:BigQueryCdcCommit",
    reported="airflow_provider_cdc.targets.bigquery.commit:from_reported",
    catch_up="a BigQuery table catches up when BigQuery applies its appended changes",
)
