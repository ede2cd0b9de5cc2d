"""Moved to :mod:`airflow_provider_cdc.placement.dataproc`; ``dataproc.placement`` keeps its old path."""
