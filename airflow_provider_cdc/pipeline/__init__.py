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

The operators stay public where they are; the specs only choose and wire them. Each source's and target's
spec lives in its folder (``sources/<name>/pipeline.py``, ``targets/<name>/pipeline.py``) and is
exported here too.
"""

from __future__ import annotations

import importlib
from typing import Any

from airflow_provider_cdc.pipeline.factory import DEFAULT_GROUP_ID, cdc_pipeline
from airflow_provider_cdc.specs import Locations, PipelineSpecError, SourceSpec, TargetSpec

#: Each source's and target's spec, by name → the module of its plug-in folder (imported when first asked
#: for: a DAG imports only the plug-ins it names).
_SPECS = {
    "BigQueryCdc": "airflow_provider_cdc.targets.bigquery.pipeline",
    "DatastreamFiles": "airflow_provider_cdc.sources.datastream.pipeline",
    "DeltaLake": "airflow_provider_cdc.targets.delta.pipeline",
    "SpannerChangeStream": "airflow_provider_cdc.sources.spanner.pipeline",
    "SpannerTables": "airflow_provider_cdc.sources.spanner.pipeline",
    "TablestoreStream": "airflow_provider_cdc.sources.tablestore.pipeline",
}

__all__ = [
    "DEFAULT_GROUP_ID",
    "BigQueryCdc",
    "DatastreamFiles",
    "DeltaLake",
    "Locations",
    "PipelineSpecError",
    "SourceSpec",
    "SpannerChangeStream",
    "SpannerTables",
    "TablestoreStream",
    "TargetSpec",
    "cdc_pipeline",
]


def __getattr__(name: str) -> Any:
    module = _SPECS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SPECS))
