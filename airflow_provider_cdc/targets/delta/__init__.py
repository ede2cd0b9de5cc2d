"""Delta Lake target: one commit per window and table through delta-rs, tagged with the window."""

from airflow_provider_cdc.plugins import TargetKind

#: The root of the pipeline's locations that holds the Delta tables, ``{lake_root}/{table}``.
LAKE_ROOT = "lake_root"

TARGET = TargetKind(
    "delta",
    "Delta",
    "apply watermark",
    "airflow_provider_cdc.targets.delta.target:DeltaLakeTarget",
    watermark_is_window_end=True,
    commit="airflow_provider_cdc.targets.delta.commit:DeltaCommit",
    location_field=LAKE_ROOT,
    keeps_rows=True,
    cli="airflow_provider_cdc.targets.delta.cli",
    spark_job="airflow_provider_cdc.targets.delta.upsert_job",
    catch_up="a deferred-apply Delta table catches up when its pending windows are compacted "
    "(python -m airflow_provider_cdc compact …)",
)
