"""Staging of change rows between the sources' readers and the merge job (Parquet).

:mod:`.parquet` writes staged rows (:class:`StagingWriter`), :mod:`.reading` lists and reads them
back; both open a staging root with an explicit filesystem or with ``storage_options``.
"""

from __future__ import annotations

from airflow_provider_cdc.staging.parquet import (
    STAGED_CHANGE_SCHEMA,
    StagedFile,
    StagingWriter,
    partition_key,
    window_location,
)
from airflow_provider_cdc.staging.reading import (
    discard_other_claims,
    iter_staged_batches,
    read_staged_changes,
    staged_files,
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
