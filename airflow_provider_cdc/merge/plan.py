"""The merge job's Spark plan: one window's staging in, its change set and manifest out.

Spark jobs: per-table counts and newest column types (one hash aggregation), transaction
completeness (one shuffle of hashes by transaction; of the ids themselves only when some
transaction looks incomplete), then the collapse: one shuffle by key hash into partitions of a
bounded number of changes, sorted within them and streamed as Arrow batches through
:func:`~airflow_provider_cdc.merge.kernels.collapse_sorted_batches` (which also lists each image's
columns), whose write also counts the rows per table; or (``collapse=NATIVE``, Spark 4) in Spark's
own operations (:mod:`.native`: the same shuffle and sort, a window function and one aggregation
per key), with the Arrow kernel writing the window again when it marks a key it cannot write as the
reference does. Nothing is written before every check has passed. PySpark is imported where it
is used, so the module imports without it.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_cdc.core.contract.change_set import (
    CHANGE_SET_COLUMNS,
    COLUMN_TYPES_JSON,
    manifest,
)
from airflow_provider_cdc.core.contract.locations import MANIFEST_NAME, claim_folder
from airflow_provider_cdc.core.contract.staged_rows import ARRIVAL, COMMIT_TIME, STAGED_SCHEMA_DDL
from airflow_provider_cdc.core.identifiers import InvalidIdentifierError, validate_identifier
from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.core.values import LogicalTypeError, column_types_json, union_column_types
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.merge.errors import MergeJobError
from airflow_provider_cdc.merge.kernels import (
    COLLAPSE_INPUT_COLUMNS,
    COLLAPSED_ARROW_SCHEMA,
    SORT_COLUMNS,
    TABLE_PARTITION_COLUMN,
    collapse_sorted_batches,
)
from airflow_provider_cdc.merge.native import NEEDS_KERNEL, collapse_in_spark, plain_column_names

if TYPE_CHECKING:  # pragma: no cover
    from airflow_provider_cdc.merge.files import HadoopFiles

INCOMPLETE_TRANSACTIONS_SHOWN = 5
#: Most columns (over the window's tables) the native collapse aggregates; more go to the kernel.
NATIVE_COLUMN_LIMIT = 256
#: The collapses: the Arrow kernel in Python workers (the default), or Spark's own operations.
KERNEL, NATIVE = "kernel", "native"
COLLAPSES = (KERNEL, NATIVE)
#: The column the collapse shuffles and sorts by first: a hash of the table and key.
KEY_HASH = "_key_hash"
#: Changes per collapse task: bounds each task's sort (about 50 MB of rows) whatever the window size.
CHANGES_PER_COLLAPSE_TASK = 200_000

#: Checked for NULLs before anything is written (``keys_json`` is checked by the collapse, and
#: the column types of each table's newest change by their lookup); the transaction columns only
#: where the source counted the transaction's records (``transaction_record_count`` is set).
REQUIRED_COLUMNS = (
    "transaction_id",
    "transaction_record",
    "commit_timestamp",
    "operation",
    "change_sequence_number",
)
_TRANSACTION_COLUMNS = frozenset({"transaction_id", "transaction_record"})
_RECORD_COUNT = "transaction_record_count"

_SPARK_TYPES = {
    pa.string(): "STRING",
    pa.list_(pa.string()): "ARRAY<STRING>",
    pa.bool_(): "BOOLEAN",
    pa.timestamp("us", tz="UTC"): "TIMESTAMP",
}
#: :data:`~airflow_provider_cdc.merge.kernels.COLLAPSED_ARROW_SCHEMA` as Spark DDL.
COLLAPSED_SCHEMA_DDL = ", ".join(f"{f.name} {_SPARK_TYPES[f.type]}" for f in COLLAPSED_ARROW_SCHEMA)


class IncompleteTransactionError(MergeJobError):
    """Staging lacks records of some transactions committed inside the window."""


def log(message: str) -> None:
    """A progress line on stdout."""
    print(f"[merge_job {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _read_staging(
    spark: Any, uri: str, files: HadoopFiles, claims: Mapping[str, str] | None,
    inputs: Sequence[str] | None = None,
) -> Any:
    """The staged rows: every Parquet file under ``uri``; with ``claims`` only the output of each
    partition's recorded claim (a reader that lost its lease wrote elsewhere, unrecorded); with
    ``inputs`` exactly those files (the recorded files of every unit, checked before)."""
    reader = spark.read.schema(STAGED_SCHEMA_DDL).option("recursiveFileLookup", "true").option(
        "pathGlobFilter", "*.parquet"
    )
    if inputs is not None:
        log(f"reading the {len(inputs)} recorded file(s) of the window's units")
        return reader.parquet(*inputs) if inputs else spark.createDataFrame([], STAGED_SCHEMA_DDL)
    if claims is None:
        return reader.parquet(uri)
    paths = [
        path
        for key, claim in sorted(claims.items())
        if files.exists(path := claim_folder(uri, key, claim))
    ]
    log(f"reading the recorded output of {len(paths)} of {len(claims)} partition(s) "
        "(the others staged no rows)")
    return reader.parquet(*paths) if paths else spark.createDataFrame([], STAGED_SCHEMA_DDL)


def _in_window(window: Window, basis: str = COMMIT_TIME) -> Any:
    """Whether a staged row belongs to the window: committed in it, or (``ARRIVAL``) any row."""
    from pyspark.sql import functions as F

    if basis == ARRIVAL:
        return F.lit(True)
    micros = F.unix_micros("commit_timestamp")
    return (micros >= F.lit(window.start_micros)) & (micros < F.lit(window.end_micros))


def _table_index(tables: Sequence[str], column: str = "table_name") -> Any:
    """The position of ``column``'s table in ``tables`` (NULL for others): one map lookup per
    row, so per-table aggregates compare integers."""
    from pyspark.sql import functions as F

    pairs = [F.lit(value) for number, name in enumerate(tables) for value in (name, number)]
    return F.element_at(F.create_map(*pairs), F.col(column))


@dataclass
class TableStats:
    """What one pass over the staging tells of a table (see :func:`_table_stats`)."""

    table_name: str
    staged_rows: int = 0
    window_rows: int = 0
    missing: set[str] = field(default_factory=set)  # required columns some of its rows lack
    #: Each distinct column types text of the window's changes, with its newest commit timestamp.
    type_texts: dict[str | None, int] = field(default_factory=dict)

    def add(self, group: Any) -> None:
        """Fold in one (table, column types) group of the aggregation."""
        self.staged_rows += int(group["staged_rows"])
        self.window_rows += int(group["window_rows"])
        self.missing.update(column for column in REQUIRED_COLUMNS if group[f"null_{column}"])
        if group["newest_micros"] is not None:
            self.type_texts[group["column_types_json"]] = int(group["newest_micros"])

    @property
    def types_tied(self) -> bool:
        """Whether several column types texts share the newest commit timestamp (then only the
        whole sequence number says which is newest)."""
        newest = max(self.type_texts.values(), default=None)
        return sum(1 for micros in self.type_texts.values() if micros == newest) > 1

    def column_types(self, newest_text: str | None = None) -> str:
        """The union of the column types of all the table's changes in the window (the newest
        description of each column wins; ``newest_text`` breaks a tie of commit timestamps)."""
        if None in self.type_texts:
            raise MergeJobError(f"staged rows of table {self.table_name!r} lack column_types_json")
        ordered = sorted(self.type_texts, key=lambda text: (self.type_texts[text], text == newest_text))
        try:
            return column_types_json(union_column_types(ordered))
        except LogicalTypeError as error:
            raise MergeJobError(
                f"table {self.table_name!r}: bad column_types_json in staging: {error}"
            ) from None


def _table_stats(staged: Any, window: Window, basis: str) -> list[TableStats]:
    """Per table: staged rows, rows inside the window, rows lacking required values, and the
    distinct column types of its changes in the window, all from one pass.

    Grouped by (table, column types), with counts and the newest commit timestamp in the window
    only, so Spark aggregates in a hash table without sorting the rows; the groups are few
    (column types change with the schema and, in UPDATE records, with the columns changed). A
    table's column types are the union of its groups' (:meth:`TableStats.column_types`), newer
    descriptions winning; only when two groups share the newest commit timestamp does
    :func:`_table_column_types` find the newest by the whole sequence number.
    """
    from pyspark.sql import functions as F

    in_window = _in_window(window, basis)
    groups = (
        staged.groupBy("table_name", "column_types_json")
        .agg(
            F.count(F.lit(1)).alias("staged_rows"),
            F.count_if(in_window).alias("window_rows"),
            *[F.count_if(_lacks(column)).alias(f"null_{column}") for column in REQUIRED_COLUMNS],
            F.max(F.when(in_window, F.unix_micros("commit_timestamp"))).alias("newest_micros"),
        )
        .collect()
    )
    tables: dict[str, TableStats] = {}
    for group in groups:
        name = group["table_name"]
        tables.setdefault(name, TableStats(name)).add(group)
    return [tables[name] for name in sorted(tables, key=lambda name: (name is None, name or ""))]


def _lacks(column: str) -> Any:
    """True where a row lacks a required value of ``column``."""
    from pyspark.sql import functions as F

    if column in _TRANSACTION_COLUMNS:
        return F.col(_RECORD_COUNT).isNotNull() & F.col(column).isNull()
    return F.col(column).isNull()


def _table_column_types(
    staged: Any, tables: Sequence[str], window: Window, basis: str
) -> dict[str, str | None]:
    """The column types text of each table's newest change in the window, by sequence number.

    One ungrouped aggregation with a ``max_by`` per table: a grouped ``max_by`` of strings
    would sort every staged row by table first.
    """
    from pyspark.sql import functions as F

    if not tables:
        return {}
    in_window = _in_window(window, basis)
    index = _table_index(tables)
    sequence = F.col("change_sequence_number")
    newest = staged.agg(
        *[
            F.max_by("column_types_json", F.when(in_window & (index == number), sequence))
            .alias(f"types_{number}")
            for number in range(len(tables))
        ]
    ).first()
    return {name: newest[f"types_{number}"] for number, name in enumerate(tables)}


def _check_tables(tables: list[TableStats]) -> None:
    for table in tables:
        try:
            validate_identifier(table.table_name, "table")
        except InvalidIdentifierError as error:
            raise MergeJobError(f"staging holds {table.staged_rows} row(s) of an {error}") from None
        if table.missing:
            raise MergeJobError(
                f"staged rows of table {table.table_name!r} lack required values in: "
                f"{', '.join(column for column in REQUIRED_COLUMNS if column in table.missing)}"
            )


def _transactions(
    staged: Any, window: Window, basis: str, identity: Sequence[Any], record: Any, partitions: int
) -> Any:
    """Per transaction (``identity``, columns) committed in the window whose source counted its
    records: its distinct ``record`` values and the least and most record count it states.

    One shuffle by transaction into ``partitions``; records, then transactions, are counted with
    hash aggregations.
    """
    from pyspark.sql import functions as F

    keys = [column.alias(f"_transaction_{number}") for number, column in enumerate(identity)]
    names = [f"_transaction_{number}" for number in range(len(keys))]
    records = (
        staged.filter(_in_window(window, basis) & F.col(_RECORD_COUNT).isNotNull())
        .select(*keys, record.alias("_record"), _RECORD_COUNT)
        .repartition(partitions, names[0])
        .groupBy(*names, "_record")
        .agg(F.min(_RECORD_COUNT).alias("expected_min"), F.max(_RECORD_COUNT).alias("expected_max"))
    )
    return records.groupBy(*names).agg(
        F.count(F.lit(1)).alias("records"),
        F.min("expected_min").alias("expected_min"),
        F.max("expected_max").alias("expected_max"),
    )


def _incomplete() -> Any:
    """True for a transaction of :func:`_transactions` whose records do not number its count."""
    from pyspark.sql import functions as F

    return (F.col("records") != F.col("expected_max")) | (F.col("expected_min") != F.col("expected_max"))


def _transaction_summary(transactions: Any) -> Any:
    """The row of totals of :func:`_transactions`: transactions, records, incomplete transactions."""
    from pyspark.sql import functions as F

    return transactions.agg(
        F.count(F.lit(1)).alias("transactions"),
        F.coalesce(F.sum("records"), F.lit(0)).alias("records"),
        F.count_if(_incomplete()).alias("incomplete"),
    ).first()


def _check_transactions(staged: Any, window: Window, basis: str, partitions: int) -> tuple[int, int]:
    """Fail naming incomplete transactions; return (transactions, records) inside the window.

    A transaction is complete when the distinct ``transaction_record`` values staged for it (over
    all units and tables) number its ``transaction_record_count``. Only changes whose source
    counted their transaction's records are checked (and counted).

    Transactions and records are first told apart by hashes (two 64-bit hashes of the
    transaction id, one of the record), which shuffle and aggregate faster than the text. Records
    whose hashes collide count once, so a collision makes a complete transaction look incomplete,
    not the reverse (save for odds of about 2**-64 per pair of a transaction's records, or 2**-128
    per pair of transactions); only when some transaction looks incomplete is the check repeated
    with the ids themselves, to name them (or to clear the collision).
    """
    from pyspark.sql import functions as F

    transaction = F.col("transaction_id")
    hashed = _transactions(
        staged, window, basis, [F.xxhash64(transaction), F.xxhash64(F.lit(1), transaction)],
        F.xxhash64("transaction_record"), partitions,
    )
    summary = _transaction_summary(hashed)
    if not summary["incomplete"]:
        return int(summary["transactions"]), int(summary["records"])
    transactions = _transactions(
        staged, window, basis, [transaction], F.col("transaction_record"), partitions
    )
    summary = _transaction_summary(transactions)
    if summary["incomplete"]:
        shown = (
            transactions.filter(_incomplete())
            .orderBy("_transaction_0")
            .limit(INCOMPLETE_TRANSACTIONS_SHOWN)
            .collect()
        )
        listed = ", ".join(
            f"{row['_transaction_0']} ({row['records']} of {row['expected_max']} records)" for row in shown
        )
        more = summary["incomplete"] - len(shown)
        raise IncompleteTransactionError(
            f"window {window}: {summary['incomplete']} incomplete transaction(s) in staging: {listed}"
            + (f" and {more} more" if more > 0 else "")
            + "; read the missing partitions again before merging (nothing was written)"
        )
    return int(summary["transactions"]), int(summary["records"])


def default_parallelism(spark: Any) -> int:
    """The session's default parallelism, for a classic session and a Spark Connect one alike
    (which has no ``sparkContext``): the setting when made, else the cores of a local master."""
    context = getattr(spark, "_sc", None)
    if context is not None:
        return int(context.defaultParallelism)
    configured = spark.conf.get("spark.default.parallelism", None)
    if configured:
        return int(configured)
    master = str(spark.conf.get("spark.master", "") or "")
    cores = master[len("local["):-1] if master.startswith("local[") and master.endswith("]") else ""
    if cores.split(",")[0].isdigit():
        return int(cores.split(",")[0])
    return os.cpu_count() or 1


def collapse_partitions(changes: int, parallelism: int) -> int:
    """Shuffle partitions for the collapse (and the transaction check): at most
    ``CHANGES_PER_COLLAPSE_TASK`` changes each, as few as that allows in whole waves of one task
    per core (not Spark's fixed default, far too many for a small window; and not a last wave
    that leaves cores idle)."""
    cores = max(1, parallelism)
    tasks = max(1, -(-changes // CHANGES_PER_COLLAPSE_TASK))
    return cores * -(-tasks // cores)


def native_collapse(spark: Any) -> bool:
    """Whether the session's Spark collapses in its own operations (:mod:`.native` needs the
    VARIANT functions of Spark 4); otherwise the Arrow kernel does."""
    major = str(spark.version).split(".", 1)[0]
    return major.isdigit() and int(major) >= 4


def _ordered_changes(staged: Any, window: Window, basis: str, partitions: int) -> Any:
    """The window's changes with their key hash, shuffled by it and sorted by key and sequence number."""
    from pyspark.sql import functions as F

    # Hash first: a well-spread 8-byte prefix makes the sort fast, and equal (table, key) pairs
    # still end up contiguous, ordered by their sequence numbers.
    key_hash = F.xxhash64("table_name", "keys_json").alias(KEY_HASH)
    changes = staged.filter(_in_window(window, basis)).select(key_hash, *COLLAPSE_INPUT_COLUMNS)
    return changes.repartition(partitions, KEY_HASH).sortWithinPartitions(KEY_HASH, *SORT_COLUMNS)


def _with_column_types(collapsed: Any, column_types: dict[str, str], *extra: str) -> Any:
    """``collapsed`` with each table's column types, in the change set's column order."""
    from pyspark.sql import functions as F

    # A literal map, not a joined DataFrame: building one from Python rows would start Python
    # workers for a handful of values. Every table with changes has its types (checked before).
    table_types = (
        F.create_map(*[F.lit(text) for item in sorted(column_types.items()) for text in item])
        if column_types
        else F.create_map().cast("map<string,string>")
    )
    computed = {COLUMN_TYPES_JSON: F.element_at(table_types, F.col(TABLE_PARTITION_COLUMN))}
    return collapsed.select(
        TABLE_PARTITION_COLUMN,
        *[computed.get(name, F.col(name)).alias(name) for name in CHANGE_SET_COLUMNS],
        *extra,
    )


def _collapse(
    staged: Any, window: Window, basis: str, column_types: dict[str, str], partitions: int
) -> Any:
    """The change set as a DataFrame collapsed by the Arrow kernel in Python workers: one row per
    key, its columns, and the ``table`` partition column."""
    ordered = _ordered_changes(staged, window, basis, partitions).drop(KEY_HASH)
    collapsed = ordered.mapInArrow(collapse_sorted_batches, COLLAPSED_SCHEMA_DDL)
    return _with_column_types(collapsed, column_types)


def _collapse_natively(
    staged: Any, window: Window, basis: str, column_types: dict[str, str], partitions: int
) -> Any:
    """The change set as :func:`_collapse` gives it, collapsed in Spark's own operations, with
    :data:`~airflow_provider_cdc.merge.native.NEEDS_KERNEL` beside each row."""
    collapsed = collapse_in_spark(
        _ordered_changes(staged, window, basis, partitions), KEY_HASH, image_columns(column_types)
    )
    return _with_column_types(collapsed, column_types, NEEDS_KERNEL)


def image_columns(column_types: Mapping[str, str]) -> list[str]:
    """The names of every column of the tables' column types (what their images may carry)."""
    return sorted({column["name"] for text in column_types.values() for column in json.loads(text)})


def _counted_by_table(collapsed: Any, tables: Sequence[str], flagged: bool = False) -> tuple[Any, Any]:
    """``collapsed`` observed so that writing it also counts its rows per table (no read-back),
    and with ``flagged`` the rows :data:`~airflow_provider_cdc.merge.native.NEEDS_KERNEL` marks
    (the column is dropped)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    if not tables and not flagged:
        return collapsed, None
    # a name of its own: merges of other windows may run at once in a shared Spark Connect session
    observation = Observation(f"change set rows {uuid.uuid4().hex}")
    index = _table_index(tables, TABLE_PARTITION_COLUMN)
    counts = [F.count_if(index == F.lit(number)).alias(f"rows_{number}") for number in range(len(tables))]
    if flagged:
        counts.append(F.count_if(F.col(NEEDS_KERNEL)).alias(NEEDS_KERNEL))
        return collapsed.observe(observation, *counts).drop(NEEDS_KERNEL), observation
    return collapsed.observe(observation, *counts), observation


def _written_rows(observation: Any, tables: Sequence[str]) -> dict[str, int]:
    """Rows written per table, from the observation of the change-set write."""
    if observation is None:
        return {}
    counts = observation.get
    return {name: int(counts[f"rows_{number}"]) for number, name in enumerate(tables)}


def _write_change_set(
    spark: Any, staged: Any, window: Window, basis: str, column_types: dict[str, str], partitions: int,
    changeset: str, tables: Sequence[str], collapse: str = KERNEL,
) -> dict[str, int]:
    """Collapse and write the change set; return the rows written per table.

    With ``collapse`` :data:`NATIVE`, Spark collapses in its own operations where it can
    (:mod:`.native`: Spark 4, at most :data:`NATIVE_COLUMN_LIMIT` column names that need no
    escaping); when it marks keys whose rows it cannot write exactly as the reference collapse
    does (or that the reference refuses), the window is collapsed and written again by the Arrow
    kernel, which writes those rows or fails naming the problem.
    """
    columns = image_columns(column_types)
    native = (collapse == NATIVE and native_collapse(spark) and len(columns) <= NATIVE_COLUMN_LIMIT
              and plain_column_names(columns))
    if native:
        collapsed = _collapse_natively(staged, window, basis, column_types, partitions)
        collapsed, observation = _counted_by_table(collapsed, tables, flagged=True)
        collapsed.write.mode("overwrite").partitionBy(TABLE_PARTITION_COLUMN).parquet(changeset)
        flagged = int(observation.get[NEEDS_KERNEL])
        if not flagged:
            return _written_rows(observation, tables)
        log(f"window {window}: {flagged} key(s) need the Arrow kernel (an image Spark's JSON writes "
            "otherwise, or changes the collapse refuses); collapsing the window with it")
    collapsed = _collapse(staged, window, basis, column_types, partitions)
    collapsed, observation = _counted_by_table(collapsed, tables)
    collapsed.write.mode("overwrite").partitionBy(TABLE_PARTITION_COLUMN).parquet(changeset)
    return _written_rows(observation, tables)


def change_set_manifest(
    window: Window, staging: str, tables: Mapping[str, Mapping[str, int]], transactions: int,
    records: int, dropped: int, **details: Any,
) -> dict[str, Any]:
    """The manifest of a window's change set: each table's ``rows`` and ``source_changes``, the
    totals, and what the staging held (records, complete transactions, rows outside the window);
    ``details`` (the epoch, the previous windows of the tables) are recorded as given."""
    rows = sum(int(table["rows"]) for table in tables.values())
    return manifest(
        window.window_id,
        tables,
        window_start=format_timestamp(window.start),
        window_end=format_timestamp(window.end),
        staging=staging,
        keys=rows,
        source_records=records,
        source_changes=sum(int(table["source_changes"]) for table in tables.values()),
        transactions=transactions,
        dropped_out_of_window=dropped,
        **{name: value for name, value in details.items() if value is not None},
    )


def merge_staging(
    spark: Any, window: Window, staging: str, changeset: str, files: HadoopFiles, *,
    claims: Mapping[str, str] | None = None, source: str | None = None,
    inputs: Sequence[str] | None = None, details: Mapping[str, Any] | None = None,
    basis: str = COMMIT_TIME, collapse: str = KERNEL,
) -> dict[str, Any]:
    """Merge ``staging`` into ``changeset`` (both reachable by Spark); return the manifest, unwritten.

    :param claims: partition key → the claim whose output to read (None: every staged file).
    :param source: the staging location the manifest names (default ``staging``; another when
        ``staging`` is a local copy).
    :param inputs: the exact files to read (the recorded files of every unit, checked against the
        readers' records); overrides ``claims``.
    :param details: further manifest entries (the epoch, the previous windows of the tables).
    :param basis: which staged rows are the window's (``COMMIT_TIME`` or ``ARRIVAL``; see
        :mod:`airflow_provider_cdc.core.contract.staged_rows`).
    :param collapse: :data:`KERNEL` or :data:`NATIVE` (see :func:`_write_change_set`).
    """
    began = time.monotonic()
    source = staging if source is None else source
    details = dict(details or {})
    empty = not inputs if inputs is not None else not files.exists(staging)
    if empty:
        log(f"window {window}: nothing staged at {staging}; writing an empty change set")
        files.delete(changeset)
        files.make_dirs(changeset)
        return change_set_manifest(window, source, {}, 0, 0, 0, **details)

    staged = _read_staging(spark, staging, files, claims, inputs)
    stats = _table_stats(staged, window, basis)
    read_rows = sum(table.staged_rows for table in stats)
    dropped = sum(table.staged_rows - table.window_rows for table in stats)
    elapsed = max(time.monotonic() - began, 1e-9)
    log(
        f"window {window}: read {read_rows} staged row(s) of {len(stats)} table(s) in "
        f"{elapsed:.1f}s ({read_rows / elapsed:,.0f} rows/s); {dropped} outside the window"
    )
    _check_tables(stats)
    partitions = collapse_partitions(read_rows - dropped, default_parallelism(spark))
    transactions, records = _check_transactions(staged, window, basis, partitions)
    log(f"window {window}: {transactions} complete transaction(s) with {records} record(s)")

    files.delete(f"{changeset}/{MANIFEST_NAME}")
    changed = [table.table_name for table in stats if table.window_rows]
    tied = [table.table_name for table in stats if table.window_rows and table.types_tied]
    newest_texts = _table_column_types(staged, tied, window, basis)
    column_types = {
        table.table_name: table.column_types(newest_texts.get(table.table_name))
        for table in stats
        if table.window_rows
    }
    written = _write_change_set(spark, staged, window, basis, column_types, partitions, changeset, changed,
                                collapse)
    tables = {
        table.table_name: {"rows": int(written.get(table.table_name, 0)), "source_changes": table.window_rows}
        for table in stats
        if table.window_rows
    }
    elapsed = max(time.monotonic() - began, 1e-9)
    merged = read_rows - dropped
    for name, table in tables.items():
        log(f"table {name}: {table['source_changes']} staged change(s) -> {table['rows']} change-set row(s)")
    log(f"window {window}: merged {merged} staged change(s) in {elapsed:.1f}s ({merged / elapsed:,.0f}/s)")
    return change_set_manifest(window, source, tables, transactions, records, dropped, **details)
