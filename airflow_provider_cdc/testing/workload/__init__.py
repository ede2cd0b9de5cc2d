"""Seeded change workloads that write through ``google-cloud-spanner`` and keep their own ground truth.

:class:`Workload` writes a reproducible mix of multi-table, multi-row transactions (inserts, partial
updates, insert-or-update, replace, deletes and re-inserts of deleted keys) to the tables of
:data:`WORKLOAD_TABLES`. With a :class:`~airflow_provider_cdc.testing.spanner_emulator.SpannerEmulator`
it also moves the emulator's clock between commits, so the history spans many windows, and splits and
merges change-stream partitions at chosen points. It records, per committed transaction, the commit
timestamp and the mods a change stream watching everything must report (``OLD_AND_NEW_VALUES``), and
the final state of every table.

:class:`BulkWorkload` writes many rows per commit to :data:`BULK_TABLE` for benchmarks; its ground
truth is compact (one revision number per row), so it reaches millions of changes.

Python values in the ground truth: INT64 ``int``, FLOAT64 ``float``, BOOL ``bool``, STRING ``str``,
NUMERIC ``Decimal``, DATE ``date``, TIMESTAMP aware UTC ``datetime``, BYTES ``bytes``, JSON a plain
``dict``, ARRAY ``list``. :meth:`WorkloadTable.decode_values` turns a mod's JSON-encoded values (as a
change stream returns them) into the same Python values, so both sides compare exactly.

The workload writes every column on an insert and only values that differ from the current ones on
an update. By default it writes each key at most once per transaction; with ``max_writes_per_row=n``
(n > 1) a transaction may write a row up to n times (insert then update, two updates, an update that
sets a column back to its value before the transaction, delete then insert again, replace,
insert-or-update, insert then delete), its rows' mutations interleaved. The expected mods are what
Spanner reports: one mod per row per transaction, in the order a change stream lists them (tables in
the order the transaction first wrote them, each table's rows in key order). A row that did not exist
before the transaction and does not after it has no mod; one that exists after it and did not before,
or was deleted or replaced on the way, is an INSERT of its final row; one deleted is a DELETE with its
values from before the transaction; any other is an UPDATE of every column the writes set, changed or
not, old values from before the transaction. A transaction whose writes leave no mod is committed but
not recorded in the history.

``value_profile`` chooses the values: ``"full"`` (the default) or ``"google-emulator"``, only values
Google's Cloud Spanner emulator reports faithfully (see :data:`VALUE_PROFILES`), for runs against it
(``emulator=None``: the real clock, no partition control).

Modules: :mod:`.schema` (tables, DDL, change streams), :mod:`.encoding` (Spanner's JSON encoding of
values), :mod:`.values` (seeded random values and value profiles), :mod:`.truth` (expected mods,
committed transactions, states), :mod:`.planner` (the rows and mutations of one transaction),
:mod:`.scripted` (:class:`Workload`) and :mod:`.bulk` (:class:`BulkWorkload`).
"""

from .bulk import BulkCommit, BulkWorkload
from .encoding import decode_json_value, encode_json_value
from .schema import (
    ALL_CHANGES_STREAM,
    BULK_TABLE,
    ORDER_STATUS_COLUMNS,
    ORDER_STATUS_STREAM,
    TABLES_BY_NAME,
    WORKLOAD_TABLES,
    WorkloadColumn,
    WorkloadTable,
    schema_ddl,
)
from .scripted import Workload
from .truth import (
    DELETE,
    INSERT,
    UPDATE,
    CommittedTransaction,
    EmulatorControl,
    ExpectedMod,
    PartitionEvent,
    State,
    WorkloadSummary,
    apply_mod,
)
from .truth import _History as _History  # the history index, for tests of its own
from .values import FULL_PROFILE, GOOGLE_EMULATOR_PROFILE, VALUE_PROFILES
from .values import _random_value as _random_value  # for tests of the value profiles

__all__ = [
    "ALL_CHANGES_STREAM",
    "BULK_TABLE",
    "DELETE",
    "FULL_PROFILE",
    "GOOGLE_EMULATOR_PROFILE",
    "INSERT",
    "ORDER_STATUS_COLUMNS",
    "ORDER_STATUS_STREAM",
    "TABLES_BY_NAME",
    "UPDATE",
    "VALUE_PROFILES",
    "WORKLOAD_TABLES",
    "BulkCommit",
    "BulkWorkload",
    "CommittedTransaction",
    "EmulatorControl",
    "ExpectedMod",
    "PartitionEvent",
    "State",
    "Workload",
    "WorkloadColumn",
    "WorkloadSummary",
    "WorkloadTable",
    "apply_mod",
    "decode_json_value",
    "encode_json_value",
    "schema_ddl",
]
