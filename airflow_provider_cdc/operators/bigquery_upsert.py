"""Moved to :mod:`airflow_provider_cdc.targets.bigquery.operators`;
this path keeps existing DAGs importing."""

from airflow_provider_cdc.targets.bigquery.operators import *  # noqa: F403
