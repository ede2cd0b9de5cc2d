"""The staged change row: one row per change of one key, a source's output and the merge job's input.

Declared once here as (name, type, nullable) triples; :func:`staged_change_schema` gives the Arrow
schema the staging writes and :data:`STAGED_SCHEMA_DDL` the Spark schema the merge job reads with.
See ARCHITECTURE.md, "Staged change rows", for what each column means. The row is the same for
every source: what only one source knows (e.g. a change stream's value capture type) is in
``source_metadata_json``, which the merge job never reads.

- ``unit``: the unit of the source read (e.g. a change stream partition; a table read: its batch).
- ``transaction_id``, ``transaction_record``, ``transaction_record_count``: the change's
  transaction, the record of it the change came from, and how many records the transaction has.
  A source that knows the count sets all three and the merge job checks that every record of each
  transaction committed in the window was staged; a source without counts leaves them NULL.
- ``operation``: ``INSERT`` (the after image is the row's full image), ``UPDATE`` (the after image
  holds the changed columns only) or ``DELETE`` (no after image: ``{}``). A source's upsert of a
  full row is an ``INSERT``.
- ``after_json`` / ``before_json``: the row's images as JSON objects of column → value; the
  columns an image carries are its keys (a column set to NULL is present with ``null``), so a
  partial image needs no separate list. ``before_json`` is NULL when the source has none.
- ``column_types_json``: the table's columns with logical types (:mod:`airflow_provider_cdc.core.types`).
- ``change_sequence_number``: the change's position in the CDC format of change sequence
  numbers (``_CHANGE_SEQUENCE_NUMBER``; sortable form,
  :mod:`airflow_provider_cdc.core.sequence_number`): the one order of every step, unique per change
  of a key, so (table, key, sequence number) identifies a change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

#: The staged row's columns in file order: name, logical column type, nullable.
STAGED_CHANGE_FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("unit", "string", False),
    ("commit_timestamp", "timestamp", False),
    ("transaction_id", "string", True),
    ("transaction_record", "string", True),
    ("transaction_record_count", "int64", True),
    ("table_name", "string", False),
    ("operation", "string", False),
    ("keys_json", "string", False),
    ("after_json", "string", False),
    ("before_json", "string", True),
    ("column_types_json", "string", False),
    ("source_metadata_json", "string", False),
    ("change_sequence_number", "string", False),
)
STAGED_CHANGE_COLUMNS: tuple[str, ...] = tuple(name for name, _, _ in STAGED_CHANGE_FIELDS)
#: Columns a source may leave NULL.
NULLABLE_COLUMNS: frozenset[str] = frozenset(name for name, _, nullable in STAGED_CHANGE_FIELDS if nullable)

#: The operations of a staged change.
INSERT = "INSERT"
UPDATE = "UPDATE"
DELETE = "DELETE"
OPERATIONS: tuple[str, ...] = (INSERT, UPDATE, DELETE)

#: One change's identity: staging may hold a change twice (a retried read), the merge keeps one.
DEDUPLICATION_KEY: tuple[str, ...] = ("table_name", "keys_json", "change_sequence_number")

#: Which staged rows belong to a window (the merge's ``--window-basis``): by default those committed in
#: ``[start, end)`` (change streams and tables read by commit time: a row outside is dropped and
#: counted), or, for a source whose windows are the changes that *arrived* in them (change files
#: read by arrival), every row staged for the window, whatever its commit timestamp.
COMMIT_TIME = "commit_time"
ARRIVAL = "arrival"
WINDOW_BASES: tuple[str, ...] = (COMMIT_TIME, ARRIVAL)

_SPARK_TYPES = {
    "string": "STRING",
    "timestamp": "TIMESTAMP",
    "int32": "INT",
    "int64": "BIGINT",
    "bool": "BOOLEAN",
}

#: The staged row as Spark DDL (timestamps are UTC microseconds).
STAGED_SCHEMA_DDL = ", ".join(f"{name} {_SPARK_TYPES[kind]}" for name, kind, _ in STAGED_CHANGE_FIELDS)


def arrow_type(kind: str) -> pa.DataType:
    """The Arrow type of a logical column type of the contract."""
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "bool": pa.bool_(),
        "string_list": pa.list_(pa.string()),
    }
    return types[kind]


@cache
def staged_change_schema() -> pa.Schema:
    """Arrow schema of a staged change row (only :data:`NULLABLE_COLUMNS` may be null)."""
    import pyarrow as pa

    fields = [pa.field(name, arrow_type(kind), nullable) for name, kind, nullable in STAGED_CHANGE_FIELDS]
    return pa.schema(fields)


class StagedChanges(Protocol):
    """A source's record of changes, as the staging writer takes it: the record gives its staged
    change rows (one per change of one key, as mappings of :data:`STAGED_CHANGE_COLUMNS`) for the unit
    it was read from. Each source converts its own records in its folder."""

    def staged_rows(self, unit: str) -> Iterable[Mapping[str, Any]]:
        """The record's staged change rows, read from ``unit``."""
        ...
