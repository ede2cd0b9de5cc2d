"""The Delta target's repair, now in its folder: :mod:`airflow_provider_cdc.targets.delta.repair`."""

from airflow_provider_cdc.targets.delta.repair import TableRepair, repair_pipeline

__all__ = ["TableRepair", "repair_pipeline"]
