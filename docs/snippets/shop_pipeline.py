"""The shop database's changes into Delta tables, one 10-minute window per run."""

import os
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG
from airflow.timetables.interval import DeltaDataIntervalTimetable

from airflow_provider_cdc.pipeline import DeltaLake, Locations, SpannerChangeStream, cdc_pipeline

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
HOME = os.path.join(os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "shop")

with DAG("shop", start_date=START, schedule=DeltaDataIntervalTimetable(timedelta(minutes=10)),
         catchup=True, max_active_runs=1):
    cdc_pipeline(
        source=SpannerChangeStream(project_id="test-project", instance_id="test-instance",
                                   database_id="shop", stream="ShopChanges"),
        targets=[DeltaLake()],
        locations=Locations(staging_root=f"{HOME}/staging", changeset_root=f"{HOME}/changesets",
                            lake_root=f"{HOME}/lake"),
        initial_snapshot=True,
        first_window_start=START,
    )
