"""Staging of change rows between the change-stream readers and the merge job (Parquet)."""

from __future__ import annotations

from airflow_provider_cdc.staging.parquet import (
    STAGED_CHANGE_SCHEMA,
    StagedFile,
    StagingWriter,
    discard_other_claims,
    iter_staged_batches,
    partition_key,
    read_staged_changes,
    staged_files,
    window_location,
)

__all__ = [
    "STAGED_CHANGE_SCHEMA",
    "StagedFile",
    "StagingWriter",
    "discard_other_claims",
    "iter_staged_batches",
    "partition_key",
    "read_staged_changes",
    "staged_files",
    "window_location",
]
