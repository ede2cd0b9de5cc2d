"""Moved to :mod:`airflow_provider_cdc.sources.spanner.change_stream_operators`;
this path keeps existing DAGs importing."""

from airflow_provider_cdc.sources.spanner.change_stream_operators import *  # noqa: F403
