"""Moved to :mod:`airflow_provider_cdc.sources.spanner.change_stream_hook`;
this path keeps existing DAGs importing."""

from airflow_provider_cdc.sources.spanner.change_stream_hook import *  # noqa: F403
