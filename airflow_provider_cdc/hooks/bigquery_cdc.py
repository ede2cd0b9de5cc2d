"""Moved to :mod:`airflow_provider_cdc.targets.bigquery.hook`;
this path keeps existing DAGs importing."""

from airflow_provider_cdc.targets.bigquery.hook import *  # noqa: F403
