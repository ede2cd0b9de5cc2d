"""Delta Lake target: one commit per window and table through delta-rs, tagged with the window."""

from airflow_provider_cdc.targets.registry import TargetKind

TARGET = TargetKind(
    "delta",
    "Delta",
    "apply watermark",
    "airflow_provider_cdc.targets.delta.target:DeltaLakeTarget",
    watermark_is_window_end=True,
    commit="airflow_provider_cdc.targets.delta.commit:DeltaCommit",
    location_field="lake_root",
)
