"""The metastore: partitions, windows and apply watermarks in SQLite or PostgreSQL (SQLAlchemy Core).

:class:`Metastore` is the one object callers use; it composes the data-access parts, one per
concept: ``partitions`` (lineage, leases, queries), ``windows``, ``window_partitions``,
``watermarks``, the ``pipelines`` ledger, the read-only ``overview`` (pages for people) and
``diagnosis`` (where a pipeline stands, for the command line), over the engine of ``engine``. Rows
become records in ``mappers``.

Every public operation is one transaction. Every state change is a compare-and-set ``UPDATE …
WHERE <expected state>`` whose row count decides success, so concurrent readers on one or many
hosts never both win. Leases and timings use the database clock. Runs unchanged on SQLAlchemy 1.4
and 2.x.
"""

from __future__ import annotations

from airflow_provider_cdc.metastore.diagnosis import DiagnosisAccess
from airflow_provider_cdc.metastore.engine import SUPPORTED_BACKENDS
from airflow_provider_cdc.metastore.overview import OverviewAccess
from airflow_provider_cdc.metastore.partitions import PartitionAccess
from airflow_provider_cdc.metastore.pipelines import PipelineLedger
from airflow_provider_cdc.metastore.unit_checkpoints import UnitCheckpointAccess
from airflow_provider_cdc.metastore.watermarks import WatermarkAccess
from airflow_provider_cdc.metastore.window_partitions import WindowPartitionAccess
from airflow_provider_cdc.metastore.windows import WindowAccess

__all__ = ["SUPPORTED_BACKENDS", "Metastore"]


class Metastore(
    PartitionAccess,
    WatermarkAccess,
    WindowAccess,
    WindowPartitionAccess,
    PipelineLedger,
    UnitCheckpointAccess,
    OverviewAccess,
    DiagnosisAccess,
):
    """Partition lineage, leases and watermarks, window states and per-table apply watermarks.

    ``url`` is a SQLAlchemy URL of a PostgreSQL or SQLite database (``sqlite:////path/cdc.db``;
    SQLite must be a file for several processes to share it). ``engine_kwargs`` go to
    ``sqlalchemy.create_engine``. Call ``create_schema()`` once per deployment (it is idempotent),
    or ``ensure_schema()``, which does so at most once per process and database.
    """
