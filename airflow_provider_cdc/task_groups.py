"""The initial snapshot task group, at its old path: it lives with the Spanner source
(:mod:`airflow_provider_cdc.sources.spanner.snapshot_group`)."""

from airflow_provider_cdc.core.window import snapshot_start
from airflow_provider_cdc.sources.spanner.snapshot_group import initial_snapshot

__all__ = ["initial_snapshot", "snapshot_start"]
