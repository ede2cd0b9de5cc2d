"""Moved to :mod:`airflow_provider_cdc.placement.dataproc.resources`;
this path keeps existing imports (and patches of it) working: it is that module."""

import sys

import airflow_provider_cdc.placement.dataproc.resources as _moved

sys.modules[__name__] = _moved
