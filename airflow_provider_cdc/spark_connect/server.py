"""Moved to :mod:`airflow_provider_cdc.placement.connect.server`;
this path keeps existing imports (and patches of it) working: it is that module."""

from airflow_provider_cdc._moved import alias

alias(__name__, "airflow_provider_cdc.placement.connect.server")
