"""Moved to :mod:`airflow_provider_cdc.sources.spanner.sensors`; this path keeps existing DAGs importing."""

from airflow_provider_cdc.sources.spanner.sensors import SpannerChangeStreamPartitionsDrainedSensor

__all__ = ["SpannerChangeStreamPartitionsDrainedSensor"]
