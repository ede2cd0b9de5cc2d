"""Moved to :mod:`airflow_provider_cdc.sources.spanner.table_operators`;
this path keeps existing DAGs importing."""

from airflow_provider_cdc.sources.spanner.table_operators import *  # noqa: F403
