"""Moved to :mod:`airflow_provider_cdc.placement.connect`; its modules keep their old import paths."""
