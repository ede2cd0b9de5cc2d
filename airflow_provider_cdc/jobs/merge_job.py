"""Merge one window's staged changes into per-table change sets (a ``spark-submit`` entry point).

::

    spark-submit --master 'local[*]' --py-files cdc_domain.zip merge_job.py \\
        --staging   /data/staging/orders_stream/1700000000000000-1700000060000000 \\
        --changeset /data/changesets/1700000000000000-1700000060000000 \\
        --window-start 2023-11-14T22:13:20Z --window-end 2023-11-14T22:14:20Z

Steps: read the staged Parquet rows; drop rows whose commit timestamp is outside ``[start, end)``;
check that every transaction is complete (its distinct records across all partitions number
``number_of_records_in_transaction``), failing before anything is written otherwise; de-duplicate
repeated mods; order each key's changes by ``change_sequence_number`` and collapse them exactly as
``airflow_provider_cdc.domain.collapse`` does; write one Parquet change set per table under
``table={name}/`` and ``_manifest.json`` last. A re-run replaces the previous output.

The job imports only ``airflow_provider_cdc.domain``; executors need it too, so ship it with
``--py-files`` (``SparkMergeWindowOperator`` builds that zip on the fly). URIs are read and
written through Spark's Hadoop filesystems. When Spark has no filesystem for a scheme (``gs://``
without the GCS connector) and runs in local mode, the job copies the staging folder to local disk
and the change set back through pyarrow's filesystems in the driver (``--transfer-through-driver``
forces this).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_cdc.domain.collapse import (
    DELETE,
    EMPTY_IMAGE,
    MOD_TYPES,
    UPDATE,
    UPSERT,
    CollapseError,
    collapse_key,
)
from airflow_provider_cdc.domain.identifiers import InvalidIdentifierError, validate_identifier
from airflow_provider_cdc.domain.timestamps import format_timestamp, parse_timestamp, to_micros

MANIFEST_NAME = "_manifest.json"
TABLE_PARTITION_COLUMN = "table"
INCOMPLETE_TRANSACTIONS_SHOWN = 5

#: Staged change rows as ARCHITECTURE.md defines them (Spark DDL).
STAGED_SCHEMA_DDL = (
    "partition_token STRING, commit_timestamp TIMESTAMP, server_transaction_id STRING, "
    "record_sequence STRING, mod_index INT, table_name STRING, mod_type STRING, keys_json STRING, "
    "new_values_json STRING, old_values_json STRING, column_types_json STRING, "
    "value_capture_type STRING, number_of_records_in_transaction BIGINT, "
    "number_of_partitions_in_transaction BIGINT, is_last_record_in_transaction_in_partition BOOLEAN, "
    "change_sequence_number STRING"
)

#: Columns the collapse needs, in the order it receives them.
COLLAPSE_INPUT_COLUMNS = (
    "table_name",
    "keys_json",
    "mod_type",
    "new_values_json",
    "column_types_json",
    "change_sequence_number",
    "commit_timestamp",
    "server_transaction_id",
    "record_sequence",
    "mod_index",
)
REQUIRED_COLUMNS = (
    "commit_timestamp",
    "keys_json",
    "mod_type",
    "change_sequence_number",
    "column_types_json",
    "number_of_records_in_transaction",
)

#: What the per-key collapse returns to Spark; ``_present_columns`` is added in Spark afterwards.
COLLAPSED_ARROW_SCHEMA = pa.schema(
    [
        (TABLE_PARTITION_COLUMN, pa.string()),
        ("_keys_json", pa.string()),
        ("_values_json", pa.string()),
        ("_full_image", pa.bool_()),
        ("_CHANGE_TYPE", pa.string()),
        ("_CHANGE_SEQUENCE_NUMBER", pa.string()),
        ("_commit_timestamp", pa.timestamp("us", tz="UTC")),
        ("_column_types_json", pa.string()),
    ]
)
COLLAPSED_SCHEMA_DDL = (
    f"{TABLE_PARTITION_COLUMN} STRING, _keys_json STRING, _values_json STRING, _full_image BOOLEAN, "
    "_CHANGE_TYPE STRING, _CHANGE_SEQUENCE_NUMBER STRING, _commit_timestamp TIMESTAMP, "
    "_column_types_json STRING"
)


class MergeJobError(RuntimeError):
    """The window cannot be merged; nothing was written."""


class IncompleteTransactionError(MergeJobError):
    """Staging lacks records of some transactions committed inside the window."""


def _log(message: str) -> None:
    print(f"[merge_job {time.strftime('%H:%M:%S')}] {message}", flush=True)


# --------------------------------------------------------------------------------------------
# Arguments


@dataclass(frozen=True)
class MergeArguments:
    """Parsed command line of the merge job."""

    staging: str
    changeset: str
    window_start: datetime
    window_end: datetime
    master: str | None = None
    transfer_through_driver: bool = False

    @property
    def start_micros(self) -> int:
        return to_micros(self.window_start)

    @property
    def end_micros(self) -> int:
        return to_micros(self.window_end)

    @property
    def window_id(self) -> str:
        return f"{self.start_micros}-{self.end_micros}"


def _timestamp_argument(text: str) -> datetime:
    try:
        return parse_timestamp(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _uri_argument(text: str) -> str:
    uri = text.strip().rstrip("/")
    if not uri:
        raise argparse.ArgumentTypeError("an empty location")
    return uri


def parse_arguments(argv: Sequence[str] | None = None) -> MergeArguments:
    """Parse and check the command line; exits with a usage message naming the bad argument."""
    parser = argparse.ArgumentParser(
        prog="merge_job.py", description="Merge a window's staged changes into per-table change sets."
    )
    parser.add_argument("--staging", required=True, type=_uri_argument,
                        help="the window's staging folder: {staging_root}/{stream}/{window_id}")
    parser.add_argument("--changeset", required=True, type=_uri_argument,
                        help="the window's change-set folder: {changeset_root}/{window_id}")
    parser.add_argument("--window-start", required=True, type=_timestamp_argument,
                        help="window start, RFC 3339 (inclusive)")
    parser.add_argument("--window-end", required=True, type=_timestamp_argument,
                        help="window end, RFC 3339 (exclusive)")
    parser.add_argument("--master", default=None,
                        help="Spark master when not started by spark-submit (default local[*])")
    parser.add_argument("--transfer-through-driver", action="store_true",
                        help="copy staging in and the change set out with pyarrow filesystems in the "
                        "driver (automatic when Spark has no filesystem for the URI scheme; local mode)")
    namespace = parser.parse_args(argv)
    if namespace.window_start >= namespace.window_end:
        parser.error(
            f"--window-start {format_timestamp(namespace.window_start)} is not before "
            f"--window-end {format_timestamp(namespace.window_end)}"
        )
    if namespace.staging == namespace.changeset:
        parser.error("--staging and --changeset name the same folder")
    return MergeArguments(
        staging=namespace.staging,
        changeset=namespace.changeset,
        window_start=namespace.window_start,
        window_end=namespace.window_end,
        master=namespace.master,
        transfer_through_driver=namespace.transfer_through_driver,
    )


# --------------------------------------------------------------------------------------------
# Per-key collapse over Arrow batches (runs in the Python workers)


def _group_starts(table: pa.Table) -> pa.Array:
    """Boolean per row: true where a new (table_name, keys_json) group begins."""
    names = table.column("table_name").combine_chunks()
    keys = table.column("keys_json").combine_chunks()
    if len(names) <= 1:
        return pa.array([True] * len(names), pa.bool_())
    differs = pc.or_kleene(
        pc.not_equal(names[1:], names[:-1]).fill_null(True),
        pc.not_equal(keys[1:], keys[:-1]).fill_null(True),
    )
    return pa.concat_arrays([pa.array([True]), differs])


def _collapse_singletons(rows: pa.Table) -> pa.Table:
    """Change-set rows for keys with exactly one change (vectorised, same result as ``collapse_key``)."""
    mod_type = rows.column("mod_type")
    known = pc.is_in(mod_type, value_set=pa.array(MOD_TYPES)).fill_null(False)
    if not pc.all(known).as_py():
        bad = rows.filter(pc.invert(known)).slice(0, 1).to_pylist()[0]
        raise CollapseError(
            f"unknown mod_type {bad['mod_type']!r} in table {bad['table_name']!r}, key "
            f"{bad['keys_json']}, change {bad['change_sequence_number']}; expected one of "
            f"{', '.join(MOD_TYPES)}"
        )
    is_delete = pc.equal(mod_type, DELETE)
    return pa.table(
        [
            rows.column("table_name"),
            rows.column("keys_json"),
            pc.if_else(is_delete, pa.scalar(EMPTY_IMAGE), rows.column("new_values_json")),
            pc.not_equal(mod_type, UPDATE),
            pc.if_else(is_delete, pa.scalar(DELETE), pa.scalar(UPSERT)),
            rows.column("change_sequence_number"),
            rows.column("commit_timestamp").cast(pa.timestamp("us", tz="UTC")),
            rows.column("column_types_json"),
        ],
        schema=COLLAPSED_ARROW_SCHEMA,
    )


def _collapse_chains(rows: pa.Table) -> pa.Table:
    """Change-set rows for keys with several changes (sorted, contiguous), through ``collapse_key``."""
    out: list[dict[str, Any]] = []
    group: list[dict[str, Any]] = []
    for change in rows.to_pylist():
        if group and (change["table_name"], change["keys_json"]) != (
            group[0]["table_name"],
            group[0]["keys_json"],
        ):
            out.append(_chain_row(group))
            group = []
        group.append(change)
    if group:
        out.append(_chain_row(group))
    return pa.Table.from_pylist(out, schema=COLLAPSED_ARROW_SCHEMA)


def _chain_row(group: list[dict[str, Any]]) -> dict[str, Any]:
    row = collapse_key(group)
    row[TABLE_PARTITION_COLUMN] = group[0]["table_name"]
    return row


def _collapse_complete_groups(rows: pa.Table) -> Iterator[pa.RecordBatch]:
    if rows.num_rows == 0:
        return
    starts = _group_starts(rows)
    next_starts = pa.concat_arrays([starts[1:], pa.array([True])])
    single = pc.and_(starts, next_starts)
    singles = rows.filter(single)
    if singles.num_rows:
        yield from _collapse_singletons(singles).to_batches()
    if singles.num_rows < rows.num_rows:
        yield from _collapse_chains(rows.filter(pc.invert(single))).to_batches()


def collapse_sorted_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Collapse a stream of staged changes sorted by (table_name, keys_json, change order).

    Keys with one change are handled with Arrow kernels; longer chains (and duplicates) go through
    ``collapse_key``. A key's changes may span batches: the last group of each batch is held back
    until the next batch shows where it ends, so memory stays at one batch plus one key's changes.
    """
    carry: pa.Table | None = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        current = pa.Table.from_batches([batch])
        if carry is not None:
            current = pa.concat_tables([carry, current])
        starts = _group_starts(current)
        last_start = pc.indices_nonzero(starts)[-1].as_py()
        yield from _collapse_complete_groups(current.slice(0, last_start))
        carry = current.slice(last_start).combine_chunks()
    if carry is not None:
        yield from _collapse_complete_groups(carry)


# --------------------------------------------------------------------------------------------
# Filesystems


class _HadoopFiles:
    """Small file operations on any URI Spark can reach, through the JVM's Hadoop FileSystem."""

    def __init__(self, spark: Any) -> None:
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _fs_path(self, uri: str) -> tuple[Any, Any]:
        path = self._jvm.org.apache.hadoop.fs.Path(uri)
        return path.getFileSystem(self._conf), path

    def supports(self, uri: str) -> bool:
        scheme = urlparse(uri).scheme or "file"
        try:
            self._jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, self._conf)
        except Exception:  # py4j wraps UnsupportedFileSystemException
            return False
        return True

    def exists(self, uri: str) -> bool:
        fs, path = self._fs_path(uri)
        return bool(fs.exists(path))

    def delete(self, uri: str) -> None:
        fs, path = self._fs_path(uri)
        if fs.exists(path):
            fs.delete(path, True)

    def make_dirs(self, uri: str) -> None:
        fs, path = self._fs_path(uri)
        fs.mkdirs(path)

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Write via a temporary name and rename, so readers never see a partial file."""
        fs, path = self._fs_path(uri)
        temporary = self._jvm.org.apache.hadoop.fs.Path(uri + ".tmp")
        stream = fs.create(temporary, True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()
        if fs.exists(path):
            fs.delete(path, False)
        if not fs.rename(temporary, path):
            raise MergeJobError(f"could not rename {uri}.tmp to {uri}")


def _arrow_filesystem(uri: str) -> tuple[Any, str]:
    from pyarrow import fs as pafs

    return pafs.FileSystem.from_uri(uri)


def _download_tree(uri: str, local_dir: str) -> bool:
    """Copy a remote folder to ``local_dir`` with pyarrow; False when the folder does not exist."""
    from pyarrow import fs as pafs

    filesystem, root = _arrow_filesystem(uri)
    if filesystem.get_file_info(root).type != pafs.FileType.Directory:
        return False
    pafs.copy_files(root, local_dir, source_filesystem=filesystem,
                    destination_filesystem=pafs.LocalFileSystem())
    return True


def _upload_changeset(local_dir: str, uri: str, manifest: bytes) -> None:
    """Replace the change set at ``uri`` with the files in ``local_dir``; the manifest goes last."""
    from pyarrow import fs as pafs

    filesystem, root = _arrow_filesystem(uri)
    filesystem.create_dir(root, recursive=True)
    filesystem.delete_dir_contents(root, missing_dir_ok=True)
    local = pafs.LocalFileSystem()
    for dirpath, _dirnames, filenames in os.walk(local_dir):
        for name in sorted(filenames):
            if name.startswith((".", "_")):
                continue  # checksums, _SUCCESS markers; the manifest is written below
            relative = os.path.relpath(os.path.join(dirpath, name), local_dir).replace(os.sep, "/")
            target = f"{root}/{relative}"
            filesystem.create_dir(target.rsplit("/", 1)[0], recursive=True)
            pafs.copy_files(os.path.join(dirpath, name), target, source_filesystem=local,
                            destination_filesystem=filesystem)
    with filesystem.open_output_stream(f"{root}/{MANIFEST_NAME}") as stream:
        stream.write(manifest)


# --------------------------------------------------------------------------------------------
# The merge


def _read_staging(spark: Any, uri: str) -> Any:
    return (
        spark.read.schema(STAGED_SCHEMA_DDL)
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", "*.parquet")
        .parquet(uri)
    )


def _record_stats(staged: Any, start_micros: int, end_micros: int) -> Any:
    """One row per (table, transaction, record): staged rows, rows in the window, expectations."""
    from pyspark.sql import functions as F

    micros = F.unix_micros("commit_timestamp")
    in_window = ((micros >= F.lit(start_micros)) & (micros < F.lit(end_micros))).cast("long")
    return staged.groupBy("table_name", "server_transaction_id", "record_sequence").agg(
        F.count(F.lit(1)).alias("rows"),
        F.coalesce(F.sum(in_window), F.lit(0)).alias("rows_in_window"),
        F.min("number_of_records_in_transaction").alias("expected_min"),
        F.max("number_of_records_in_transaction").alias("expected_max"),
        *[F.sum(F.col(column).isNull().cast("long")).alias(f"null_{column}") for column in REQUIRED_COLUMNS],
    )


def _check_tables(table_rows: list[Any]) -> None:
    for row in table_rows:
        try:
            validate_identifier(row["table_name"], "table")
        except InvalidIdentifierError as error:
            raise MergeJobError(f"staging holds {row['staged_rows']} row(s) of an {error}") from None
        missing = [column for column in REQUIRED_COLUMNS if row[f"null_{column}"]]
        if row["null_ids"]:
            missing.insert(0, "server_transaction_id/record_sequence")
        if missing:
            raise MergeJobError(
                f"staged rows of table {row['table_name']!r} lack required values in: {', '.join(missing)}"
            )


def _check_transactions(records: Any, window: str) -> int:
    """Fail naming the incomplete transactions; return the number of transactions in the window."""
    from pyspark.sql import functions as F

    transactions = (
        records.filter(F.col("rows_in_window") > 0)
        .groupBy("server_transaction_id")
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.min("expected_min").alias("expected_min"),
            F.max("expected_max").alias("expected_max"),
        )
    )
    incomplete = (F.col("records") != F.col("expected_max")) | (F.col("expected_min") != F.col("expected_max"))
    summary = transactions.agg(
        F.count(F.lit(1)).alias("transactions"),
        F.coalesce(F.sum(incomplete.cast("long")), F.lit(0)).alias("incomplete"),
    ).first()
    if summary["incomplete"]:
        shown = (
            transactions.filter(incomplete)
            .orderBy("server_transaction_id")
            .limit(INCOMPLETE_TRANSACTIONS_SHOWN)
            .collect()
        )
        listed = ", ".join(
            f"{row['server_transaction_id']} ({row['records']} of {row['expected_max']} records)"
            for row in shown
        )
        more = summary["incomplete"] - len(shown)
        raise IncompleteTransactionError(
            f"window {window}: {summary['incomplete']} incomplete transaction(s) in staging: {listed}"
            + (f" and {more} more" if more > 0 else "")
            + "; read the missing partitions again before merging (nothing was written)"
        )
    return int(summary["transactions"])


def _collapse(staged: Any, start_micros: int, end_micros: int) -> Any:
    from pyspark.sql import functions as F

    micros = F.unix_micros("commit_timestamp")
    changes = staged.filter((micros >= F.lit(start_micros)) & (micros < F.lit(end_micros))).select(
        *COLLAPSE_INPUT_COLUMNS
    )
    ordered = changes.repartition("table_name", "keys_json").sortWithinPartitions(
        "table_name", "keys_json", "change_sequence_number", "server_transaction_id", "record_sequence",
        "mod_index",
    )
    collapsed = ordered.mapInArrow(collapse_sorted_batches, COLLAPSED_SCHEMA_DDL)
    keys = F.array_sort(F.json_object_keys("_values_json"))
    present = (
        F.when(F.col("_CHANGE_TYPE") == DELETE, F.array().cast("array<string>"))
        .when(
            keys.isNull(),
            F.raise_error(
                F.concat(
                    F.lit("_values_json of table "), F.col(TABLE_PARTITION_COLUMN), F.lit(", key "),
                    F.col("_keys_json"), F.lit(" is not a JSON object: "),
                    F.coalesce(F.col("_values_json"), F.lit("null")),
                )
            ).cast("array<string>"),
        )
        .otherwise(keys)
    )
    return collapsed.select(
        TABLE_PARTITION_COLUMN,
        "_keys_json",
        "_values_json",
        present.alias("_present_columns"),
        "_full_image",
        "_CHANGE_TYPE",
        "_CHANGE_SEQUENCE_NUMBER",
        "_commit_timestamp",
        "_column_types_json",
    )


def _manifest(args: MergeArguments, tables: dict[str, dict[str, int]], transactions: int,
              dropped: int) -> dict[str, Any]:
    return {
        "window_id": args.window_id,
        "window_start": format_timestamp(args.window_start),
        "window_end": format_timestamp(args.window_end),
        "staging": args.staging,
        "tables": tables,
        "rows": sum(table["rows"] for table in tables.values()),
        "keys": sum(table["rows"] for table in tables.values()),
        "source_records": sum(table["source_records"] for table in tables.values()),
        "staged_rows": sum(table["staged_rows"] for table in tables.values()),
        "transactions": transactions,
        "dropped_out_of_window": dropped,
    }


def _merge(spark: Any, args: MergeArguments, staging: str, changeset: str, files: _HadoopFiles) -> dict:
    """Merge ``staging`` into ``changeset`` (both reachable by Spark); return the manifest."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    began = time.monotonic()
    window = f"[{format_timestamp(args.window_start)}, {format_timestamp(args.window_end)})"
    files.delete(f"{changeset}/{MANIFEST_NAME}")
    if not files.exists(staging):
        _log(f"window {window}: no staging folder at {staging}; writing an empty change set")
        files.delete(changeset)
        files.make_dirs(changeset)
        return _manifest(args, {}, 0, 0)

    staged = _read_staging(spark, staging)
    records = _record_stats(staged, args.start_micros, args.end_micros).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        table_rows = (
            records.groupBy("table_name")
            .agg(
                F.sum("rows").alias("staged_rows"),
                F.sum("rows_in_window").alias("window_rows"),
                F.count(F.when(F.col("rows_in_window") > 0, True)).alias("records"),
                F.sum(
                    (F.col("server_transaction_id").isNull() | F.col("record_sequence").isNull()).cast("long")
                ).alias("null_ids"),
                *[F.sum(f"null_{column}").alias(f"null_{column}") for column in REQUIRED_COLUMNS],
            )
            .collect()
        )
        read_rows = sum(row["staged_rows"] for row in table_rows)
        dropped = sum(row["staged_rows"] - row["window_rows"] for row in table_rows)
        elapsed = max(time.monotonic() - began, 1e-9)
        _log(
            f"window {window}: read {read_rows} staged row(s) of {len(table_rows)} table(s) in "
            f"{elapsed:.1f}s ({read_rows / elapsed:,.0f} rows/s); {dropped} outside the window"
        )
        _check_tables(table_rows)
        transactions = _check_transactions(records, window)
    finally:
        records.unpersist()

    _collapse(staged, args.start_micros, args.end_micros).write.mode("overwrite").partitionBy(
        TABLE_PARTITION_COLUMN
    ).parquet(changeset)

    written: dict[str, int] = {}
    if any(row["window_rows"] for row in table_rows):
        written = {
            row[TABLE_PARTITION_COLUMN]: row["count"]
            for row in spark.read.parquet(changeset).groupBy(TABLE_PARTITION_COLUMN).count().collect()
        }
    tables = {
        row["table_name"]: {
            "rows": int(written.get(row["table_name"], 0)),
            "source_records": int(row["records"]),
            "staged_rows": int(row["window_rows"]),
        }
        for row in sorted(table_rows, key=lambda row: row["table_name"])
        if row["window_rows"]
    }
    elapsed = max(time.monotonic() - began, 1e-9)
    for name, table in tables.items():
        _log(f"table {name}: {table['staged_rows']} change(s) of {table['source_records']} record(s) "
             f"-> {table['rows']} change-set row(s)")
    _log(f"window {window}: merged {read_rows - dropped} change(s) in {elapsed:.1f}s "
         f"({(read_rows - dropped) / elapsed:,.0f} changes/s)")
    return _manifest(args, tables, transactions, dropped)


def _manifest_bytes(manifest: dict[str, Any]) -> bytes:
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8")


def merge_window(spark: Any, args: MergeArguments) -> dict[str, Any]:
    """Merge the window described by ``args`` and write its change set and manifest."""
    files = _HadoopFiles(spark)
    if args.window_id not in (args.staging.rsplit("/", 1)[-1], args.changeset.rsplit("/", 1)[-1]):
        _log(f"warning: neither --staging nor --changeset ends with the window id {args.window_id}")
    through_driver = args.transfer_through_driver or not (
        files.supports(args.staging) and files.supports(args.changeset)
    )
    if not through_driver:
        manifest = _merge(spark, args, args.staging, args.changeset, files)
        files.write_bytes(f"{args.changeset}/{MANIFEST_NAME}", _manifest_bytes(manifest))
    else:
        master = spark.sparkContext.master
        if not master.startswith("local"):
            raise MergeJobError(
                f"Spark has no filesystem for {args.staging} or {args.changeset} and master {master} is "
                "not local: add the filesystem connector (for gs:// the GCS connector jar) to the job"
            )
        workdir = tempfile.mkdtemp(prefix="cdc-merge-")
        try:
            local_staging = os.path.join(workdir, "staging")
            local_changeset = os.path.join(workdir, "changeset")
            _log(f"copying {args.staging} to {local_staging} through the driver")
            if not _download_tree(args.staging, local_staging):
                local_staging = os.path.join(workdir, "missing")
            manifest = _merge(spark, args, "file://" + local_staging, "file://" + local_changeset, files)
            _log(f"copying the change set to {args.changeset} through the driver")
            _upload_changeset(local_changeset, args.changeset, _manifest_bytes(manifest))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    _log(f"wrote {args.changeset}/{MANIFEST_NAME}: {manifest['rows']} row(s) in "
         f"{len(manifest['tables'])} table(s)")
    return manifest


def _spark_session(master: str | None) -> Any:
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("cdc-merge-window")
    if not SparkConf().contains("spark.master"):
        builder = builder.master(master or "local[*]")
    spark = builder.getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    spark.sparkContext._jsc.hadoopConfiguration().set(
        "mapreduce.fileoutputcommitter.marksuccessfuljobs", "false"
    )
    return spark


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code."""
    args = parse_arguments(argv)
    spark = _spark_session(args.master)
    try:
        merge_window(spark, args)
    except MergeJobError as error:
        print(f"merge_job: error: {error}", file=sys.stderr, flush=True)
        return 1
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
