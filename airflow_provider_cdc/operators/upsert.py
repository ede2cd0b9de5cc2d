"""Moved to :mod:`airflow_provider_cdc.targets.delta.operators`;
this path keeps existing DAGs importing."""

from airflow_provider_cdc.targets.delta.operators import *  # noqa: F403
