"""Metastore of partitions, windows and apply watermarks (SQLAlchemy Core on PostgreSQL or SQLite)."""

from __future__ import annotations

from airflow_provider_cdc.metastore.errors import (
    LeaseLostError,
    MetastoreError,
    PartitionNotFoundError,
    PartitionStateError,
    SchemaVersionError,
    UnknownStreamError,
    WindowConflictError,
    WindowNotFoundError,
)
from airflow_provider_cdc.metastore.migrations import CURRENT_VERSION
from airflow_provider_cdc.metastore.model import (
    PartitionRecord,
    PartitionSpec,
    PartitionState,
    WindowPartitionRecord,
    WindowPartitionState,
    WindowRecord,
    WindowState,
)
from airflow_provider_cdc.metastore.pipelines import (
    PipelineRecord,
    WindowOrderError,
    WindowTableRecord,
)
from airflow_provider_cdc.metastore.store import Metastore

__all__ = [
    "CURRENT_VERSION",
    "LeaseLostError",
    "Metastore",
    "MetastoreError",
    "PartitionNotFoundError",
    "PartitionRecord",
    "PartitionSpec",
    "PartitionState",
    "PartitionStateError",
    "PipelineRecord",
    "SchemaVersionError",
    "UnknownStreamError",
    "WindowConflictError",
    "WindowNotFoundError",
    "WindowOrderError",
    "WindowPartitionRecord",
    "WindowPartitionState",
    "WindowRecord",
    "WindowState",
    "WindowTableRecord",
]
