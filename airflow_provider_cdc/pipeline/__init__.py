"""A pipeline declared once: :func:`cdc_pipeline` builds a window's tasks from a source spec and target
specs, with every rule the window steps rely on wired.

    from airflow_provider_cdc.pipeline import DeltaLake, Locations, SpannerChangeStream, cdc_pipeline

    with DAG("orders", schedule=DeltaDataIntervalTimetable(timedelta(minutes=10)), start_date=START,
             catchup=True, max_active_runs=1):
        cdc_pipeline(
            source=SpannerChangeStream(instance_id="prod", database_id="shop", stream="Orders"),
            targets=[DeltaLake()],
            locations=Locations(staging_root="gs://b/staging", changeset_root="gs://b/changesets",
                                lake_root="gs://b/lake"),
            initial_snapshot=True,
            first_window_start=START,
        )

The operators stay public where they are; the specs only choose and wire them.
"""

from airflow_provider_cdc.pipeline.factory import DEFAULT_GROUP_ID, cdc_pipeline
from airflow_provider_cdc.pipeline.specs import (
    DatastreamFiles,
    Locations,
    PipelineSpecError,
    SpannerChangeStream,
    SpannerTables,
    TablestoreStream,
)
from airflow_provider_cdc.targets.bigquery.pipeline import BigQueryCdc
from airflow_provider_cdc.targets.delta.pipeline import DeltaLake

__all__ = [
    "DEFAULT_GROUP_ID",
    "BigQueryCdc",
    "DatastreamFiles",
    "DeltaLake",
    "Locations",
    "PipelineSpecError",
    "SpannerChangeStream",
    "SpannerTables",
    "TablestoreStream",
    "cdc_pipeline",
]
