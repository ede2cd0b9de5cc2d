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

Spark jobs: per-table counts and newest column types (one hash aggregation), transaction
completeness (one shuffle by transaction), then the collapse:
one shuffle by key hash into partitions of a bounded number of changes, sorted within them and
streamed as Arrow batches through Python, whose write also counts the rows per table.

The job imports only ``airflow_provider_cdc.domain``; executors need it too, so ship it with
``--py-files`` (``SparkMergeWindowOperator`` builds that zip on the fly). URIs are read and
written through Spark's Hadoop filesystems. When Spark has no filesystem for a scheme (``gs://``
without the GCS connector) and runs in local mode, the job copies the staging folder to local disk
and the change set back through pyarrow's filesystems in the driver (``--transfer-through-driver``
forces this; ``gs://`` then uses Application Default Credentials, or the emulator named by
``STORAGE_EMULATOR_HOST``). Progress (rows read, rate, tables) is logged to stdout; a window that
cannot be merged exits with status 1 and the reason on stderr.
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
from dataclasses import dataclass, field
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
    collapse_chain,
)
from airflow_provider_cdc.domain.identifiers import InvalidIdentifierError, validate_identifier
from airflow_provider_cdc.domain.layout import MANIFEST_NAME, claim_folder
from airflow_provider_cdc.domain.spanner_types import SpannerTypeError, column_types_json, union_column_types
from airflow_provider_cdc.domain.timestamps import format_timestamp, parse_timestamp, to_micros

TABLE_PARTITION_COLUMN = "table"

INCOMPLETE_TRANSACTIONS_SHOWN = 5
CONCURRENT_TABLE_WRITERS = 16
#: Changes per collapse task: bounds each task's sort (about 50 MB of rows) whatever the window size.
CHANGES_PER_COLLAPSE_TASK = 200_000

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
    "change_sequence_number",
    "commit_timestamp",
    "server_transaction_id",
    "record_sequence",
    "mod_index",
)
#: Checked for NULLs before anything is written (``keys_json`` is checked by the collapse, and
#: the column types of each table's newest change by their lookup).
REQUIRED_COLUMNS = (
    "server_transaction_id",
    "record_sequence",
    "commit_timestamp",
    "mod_type",
    "change_sequence_number",
    "number_of_records_in_transaction",
)

#: What the per-key collapse returns to Spark; ``_present_columns`` and the table's
#: ``_column_types_json`` are added in Spark afterwards.
COLLAPSED_ARROW_SCHEMA = pa.schema(
    [
        (TABLE_PARTITION_COLUMN, pa.string()),
        ("_keys_json", pa.string()),
        ("_values_json", pa.string()),
        ("_full_image", pa.bool_()),
        ("_CHANGE_TYPE", pa.string()),
        ("_CHANGE_SEQUENCE_NUMBER", pa.string()),
        ("_commit_timestamp", pa.timestamp("us", tz="UTC")),
    ]
)
COLLAPSED_SCHEMA_DDL = (
    f"{TABLE_PARTITION_COLUMN} STRING, _keys_json STRING, _values_json STRING, _full_image BOOLEAN, "
    "_CHANGE_TYPE STRING, _CHANGE_SEQUENCE_NUMBER STRING, _commit_timestamp TIMESTAMP"
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
    #: partition key → the claim whose output the metastore recorded (None: read every staged file)
    partition_claims: dict[str, str] | None = None

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


def _claims_argument(text: str) -> dict[str, str]:
    try:
        value = json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not JSON: {error}") from None
    if not isinstance(value, dict) or not all(
        isinstance(key, str) and key.isalnum() and isinstance(claim, str) and claim.isalnum()
        for key, claim in value.items()
    ):
        raise argparse.ArgumentTypeError("expected a JSON object of partition keys to claim ids")
    return value


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
    parser.add_argument("--partition-claims", type=_claims_argument, default=None,
                        help="JSON object {partition_key: claim_id}: read only the output of each "
                        "partition's recorded claim (partition=<key>/claim=<id>/); other files are ignored")
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
        partition_claims=namespace.partition_claims,
    )


# --------------------------------------------------------------------------------------------
# Per-key collapse over Arrow batches (runs in the Python workers)


def _differs_from_previous(rows: pa.Table, columns: Sequence[str]) -> pa.Array:
    """Boolean per row: true where any of ``columns`` differs from the previous row (first row: true)."""
    if rows.num_rows <= 1:
        return pa.array([True] * rows.num_rows, pa.bool_())
    differs = None
    for name in columns:
        column = rows.column(name).combine_chunks()
        changed = pc.not_equal(column[1:], column[:-1])
        # Nulls only appear in bad input; treat a null as a change so nothing is merged across it.
        changed = pc.if_else(pc.is_null(changed), True, changed)
        differs = changed if differs is None else pc.or_(differs, changed)
    return pa.concat_arrays([pa.array([True]), differs])


def _check_changes(rows: pa.Table) -> None:
    """Refuse changes without a key or with an unknown mod type, naming the first one."""
    if rows.column("keys_json").null_count:
        bad = rows.filter(pc.is_null(rows.column("keys_json"))).slice(0, 1).to_pylist()[0]
        raise CollapseError(
            f"table {bad['table_name']!r}: change {bad['change_sequence_number']} has no keys_json"
        )
    known = pc.is_in(rows.column("mod_type"), value_set=pa.array(MOD_TYPES)).fill_null(False)
    if not pc.all(known).as_py():
        bad = rows.filter(pc.invert(known)).slice(0, 1).to_pylist()[0]
        raise CollapseError(
            f"table {bad['table_name']!r}, key {bad['keys_json']}: change {bad['change_sequence_number']} "
            f"has unknown mod_type {bad['mod_type']!r}; expected one of {', '.join(MOD_TYPES)}"
        )


def _collapse_singletons(rows: pa.Table) -> pa.Table:
    """Rows of keys with exactly one change: same result as ``collapse_key``, with Arrow kernels."""
    mod_type = rows.column("mod_type")
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
        ],
        schema=COLLAPSED_ARROW_SCHEMA,
    )


def _collapse_chains(rows: pa.Table, starts: pa.Array) -> pa.Table:
    """Rows of keys with several changes (contiguous, ordered): folded by ``collapse_chain``."""
    mod_types = rows.column("mod_type").to_pylist()
    new_values = rows.column("new_values_json").to_pylist()
    identities = list(zip(
        rows.column("server_transaction_id").to_pylist(),
        rows.column("record_sequence").to_pylist(),
        rows.column("mod_index").to_pylist(),
        strict=True,
    ))
    bounds = pc.indices_nonzero(starts).to_pylist() + [rows.num_rows]
    newest: list[int] = []
    change_types: list[str] = []
    images: list[str] = []
    full_images: list[bool] = []
    for begin, end in zip(bounds[:-1], bounds[1:], strict=True):
        kept: Sequence[int] = range(begin, end)
        # Adjacent repeats are gone already; with three or more changes a repeat could remain.
        if end - begin > 2 and len(set(identities[begin:end])) < end - begin:
            seen: set[tuple[str, str, int]] = set()
            kept = [i for i in kept if identities[i] not in seen and not seen.add(identities[i])]
        if isinstance(kept, range):
            chain_types, chain_values = mod_types[begin:end], new_values[begin:end]
        else:
            chain_types, chain_values = [mod_types[i] for i in kept], [new_values[i] for i in kept]
        try:
            change_type, image, full_image = collapse_chain(chain_types, chain_values)
        except CollapseError as error:
            raise CollapseError(
                f"table {rows.column('table_name')[begin].as_py()!r}, key "
                f"{rows.column('keys_json')[begin].as_py()}: {error}"
            ) from None
        newest.append(kept[-1])
        change_types.append(change_type)
        images.append(image)
        full_images.append(full_image)
    last = rows.take(pa.array(newest, pa.int64()))
    return pa.table(
        [
            last.column("table_name"),
            last.column("keys_json"),
            pa.array(images, pa.string()),
            pa.array(full_images, pa.bool_()),
            pa.array(change_types, pa.string()),
            last.column("change_sequence_number"),
            last.column("commit_timestamp").cast(pa.timestamp("us", tz="UTC")),
        ],
        schema=COLLAPSED_ARROW_SCHEMA,
    )


_KEY_COLUMNS = ("table_name", "keys_json")
#: One mod: a change's identity (a retried read repeats it; the mod index tells apart several
#: mods of one row in one record, which a source may send).
_IDENTITY_COLUMNS = ("table_name", "keys_json", "server_transaction_id", "record_sequence", "mod_index")


def _collapse_complete_groups(rows: pa.Table) -> Iterator[pa.RecordBatch]:
    if rows.num_rows == 0:
        return
    _check_changes(rows)
    first_of_mod = _differs_from_previous(rows, _IDENTITY_COLUMNS)
    if not pc.all(first_of_mod).as_py():
        rows = rows.filter(first_of_mod)  # adjacent repeats of one mod (retried reads)
    starts = _differs_from_previous(rows, _KEY_COLUMNS)
    single = pc.and_(starts, pa.concat_arrays([starts[1:], pa.array([True])]))
    singles = rows.filter(single)
    if singles.num_rows:
        yield from _collapse_singletons(singles).to_batches()
    if singles.num_rows < rows.num_rows:
        chained = pc.invert(single)
        yield from _collapse_chains(rows.filter(chained), starts.filter(chained)).to_batches()


def collapse_sorted_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Collapse a stream of staged changes sorted by (table_name, keys_json, change order).

    Keys with one change are handled with Arrow kernels; longer chains go through
    ``collapse_chain``. A key's changes may span batches: the last key of each batch is held back
    until the next batch shows where it ends, so memory stays at one batch plus one key's changes.
    """
    carry: pa.Table | None = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        current = pa.Table.from_batches([batch])
        if carry is not None:
            current = pa.concat_tables([carry, current])
        starts = _differs_from_previous(current, _KEY_COLUMNS)
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
    """pyarrow filesystem and path of ``uri``; ``gs://`` honours ``STORAGE_EMULATOR_HOST`` as the
    Cloud Storage client libraries do (anonymous access to an emulator)."""
    from pyarrow import fs as pafs

    parsed = urlparse(uri)
    emulator = os.environ.get("STORAGE_EMULATOR_HOST", "").strip()
    if parsed.scheme == "gs" and emulator:
        endpoint = urlparse(emulator if "://" in emulator else f"http://{emulator}")
        filesystem = pafs.GcsFileSystem(
            anonymous=True, endpoint_override=endpoint.netloc, scheme=endpoint.scheme or "http"
        )
        return filesystem, f"{parsed.netloc}{parsed.path}".rstrip("/")
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


def _read_staging(spark: Any, uri: str, files: _HadoopFiles, claims: dict[str, str] | None) -> Any:
    """The staged rows: every Parquet file under ``uri``, or with ``claims`` only the output of
    each partition's recorded claim (a reader that lost its lease wrote elsewhere, unrecorded)."""
    reader = spark.read.schema(STAGED_SCHEMA_DDL).option("recursiveFileLookup", "true").option(
        "pathGlobFilter", "*.parquet"
    )
    if claims is None:
        return reader.parquet(uri)
    paths = [
        path
        for key, claim in sorted(claims.items())
        if files.exists(path := claim_folder(uri, key, claim))
    ]
    _log(f"reading the recorded output of {len(paths)} of {len(claims)} partition(s) "
         "(the others staged no rows)")
    return reader.parquet(*paths) if paths else spark.createDataFrame([], STAGED_SCHEMA_DDL)


def _in_window(start_micros: int, end_micros: int) -> Any:
    from pyspark.sql import functions as F

    micros = F.unix_micros("commit_timestamp")
    return (micros >= F.lit(start_micros)) & (micros < F.lit(end_micros))


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
        except SpannerTypeError as error:
            raise MergeJobError(
                f"table {self.table_name!r}: bad column_types_json in staging: {error}"
            ) from None


def _table_stats(staged: Any, start_micros: int, end_micros: int) -> list[TableStats]:
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

    in_window = _in_window(start_micros, end_micros)
    groups = (
        staged.groupBy("table_name", "column_types_json")
        .agg(
            F.count(F.lit(1)).alias("staged_rows"),
            F.count_if(in_window).alias("window_rows"),
            *[F.count_if(F.col(column).isNull()).alias(f"null_{column}") for column in REQUIRED_COLUMNS],
            F.max(F.when(in_window, F.unix_micros("commit_timestamp"))).alias("newest_micros"),
        )
        .collect()
    )
    tables: dict[str, TableStats] = {}
    for group in groups:
        name = group["table_name"]
        tables.setdefault(name, TableStats(name)).add(group)
    return [tables[name] for name in sorted(tables, key=lambda name: (name is None, name or ""))]


def _table_column_types(
    staged: Any, tables: Sequence[str], start_micros: int, end_micros: int
) -> dict[str, str | None]:
    """The column types text of each table's newest change in the window, by sequence number.

    One ungrouped aggregation with a ``max_by`` per table: a grouped ``max_by`` of strings
    would sort every staged row by table first.
    """
    from pyspark.sql import functions as F

    if not tables:
        return {}
    in_window = _in_window(start_micros, end_micros)
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


def _check_transactions(staged: Any, start_micros: int, end_micros: int, window: str) -> tuple[int, int]:
    """Fail naming incomplete transactions; return (transactions, records) inside the window.

    A transaction is complete when the distinct records staged for it (over all partitions and
    tables) number its ``number_of_records_in_transaction``. One shuffle by transaction, then
    records and transactions are counted with hash aggregations (no sets of records).
    """
    from pyspark.sql import functions as F

    expected = "number_of_records_in_transaction"
    records = (
        staged.filter(_in_window(start_micros, end_micros))
        .select("server_transaction_id", "record_sequence", expected)
        .repartition("server_transaction_id")
        .groupBy("server_transaction_id", "record_sequence")
        .agg(F.min(expected).alias("expected_min"), F.max(expected).alias("expected_max"))
    )
    transactions = records.groupBy("server_transaction_id").agg(
        F.count(F.lit(1)).alias("records"),
        F.min("expected_min").alias("expected_min"),
        F.max("expected_max").alias("expected_max"),
    )
    incomplete = (F.col("records") != F.col("expected_max")) | (
        F.col("expected_min") != F.col("expected_max")
    )
    summary = transactions.agg(
        F.count(F.lit(1)).alias("transactions"),
        F.coalesce(F.sum("records"), F.lit(0)).alias("records"),
        F.count_if(incomplete).alias("incomplete"),
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
    return int(summary["transactions"]), int(summary["records"])


def _collapse_partitions(changes: int, parallelism: int) -> int:
    """Shuffle partitions for the collapse: one per ``CHANGES_PER_COLLAPSE_TASK`` changes, and at
    least one per core (not Spark's fixed default, which is far too many for a small window)."""
    return max(1, parallelism, -(-changes // CHANGES_PER_COLLAPSE_TASK))


def _collapse(
    staged: Any, start_micros: int, end_micros: int, column_types: dict[str, str | None], partitions: int
) -> Any:
    """The change set as a DataFrame: one row per key, with the ``table`` partition column."""
    from pyspark.sql import functions as F

    # Hash first: a well-spread 8-byte prefix makes the sort fast, and equal (table, key) pairs
    # still end up contiguous, ordered by their sequence numbers.
    key_hash = F.xxhash64("table_name", "keys_json").alias("_key_hash")
    changes = staged.filter(_in_window(start_micros, end_micros)).select(key_hash, *COLLAPSE_INPUT_COLUMNS)
    ordered = (
        changes.repartition(partitions, "_key_hash")
        .sortWithinPartitions(
            "_key_hash", "table_name", "keys_json", "change_sequence_number", "server_transaction_id",
            "record_sequence", "mod_index",
        )
        .drop("_key_hash")
    )
    collapsed = ordered.mapInArrow(collapse_sorted_batches, COLLAPSED_SCHEMA_DDL).withColumn(
        "_image_columns", F.sort_array(F.json_object_keys("_values_json"))
    )
    present = (
        F.when(F.col("_CHANGE_TYPE") == DELETE, F.array().cast("array<string>"))
        .when(
            F.col("_image_columns").isNull(),
            F.raise_error(
                F.concat(
                    F.lit("_values_json of table "), F.col(TABLE_PARTITION_COLUMN), F.lit(", key "),
                    F.col("_keys_json"), F.lit(" is not a JSON object: "),
                    F.coalesce(F.col("_values_json"), F.lit("null")),
                )
            ).cast("array<string>"),
        )
        .otherwise(F.col("_image_columns"))
    )
    # A literal map, not a joined DataFrame: building one from Python rows would start Python
    # workers for a handful of values. Every table with changes has its types (checked before).
    table_types = (
        F.create_map(*[F.lit(text) for item in sorted(column_types.items()) for text in item])
        if column_types
        else F.create_map().cast("map<string,string>")
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
        F.element_at(table_types, F.col(TABLE_PARTITION_COLUMN)).alias("_column_types_json"),
    )


def _counted_by_table(collapsed: Any, tables: Sequence[str]) -> tuple[Any, Any]:
    """``collapsed`` observed so that writing it also counts its rows per table (no read-back)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    if not tables:
        return collapsed, None
    observation = Observation("change set rows")
    index = _table_index(tables, TABLE_PARTITION_COLUMN)
    counts = [F.count_if(index == F.lit(number)).alias(f"rows_{number}") for number in range(len(tables))]
    return collapsed.observe(observation, *counts), observation


def _written_rows(observation: Any, tables: Sequence[str]) -> dict[str, int]:
    """Rows written per table, from the observation of the change-set write."""
    if observation is None:
        return {}
    counts = observation.get
    return {name: int(counts[f"rows_{number}"]) for number, name in enumerate(tables)}


def _manifest(args: MergeArguments, tables: dict[str, dict[str, int]], transactions: int, records: int,
              dropped: int) -> dict[str, Any]:
    rows = sum(table["rows"] for table in tables.values())
    return {
        "window_id": args.window_id,
        "window_start": format_timestamp(args.window_start),
        "window_end": format_timestamp(args.window_end),
        "staging": args.staging,
        "tables": tables,
        "rows": rows,
        "keys": rows,
        "source_records": records,
        "source_changes": sum(table["source_changes"] for table in tables.values()),
        "transactions": transactions,
        "dropped_out_of_window": dropped,
    }


def _merge(spark: Any, args: MergeArguments, staging: str, changeset: str, files: _HadoopFiles) -> dict:
    """Merge ``staging`` into ``changeset`` (both reachable by Spark); return the manifest."""
    began = time.monotonic()
    window = f"[{format_timestamp(args.window_start)}, {format_timestamp(args.window_end)})"
    if not files.exists(staging):
        _log(f"window {window}: no staging folder at {staging}; writing an empty change set")
        files.delete(changeset)
        files.make_dirs(changeset)
        return _manifest(args, {}, 0, 0, 0)

    staged = _read_staging(spark, staging, files, args.partition_claims)
    stats = _table_stats(staged, args.start_micros, args.end_micros)
    read_rows = sum(table.staged_rows for table in stats)
    dropped = sum(table.staged_rows - table.window_rows for table in stats)
    elapsed = max(time.monotonic() - began, 1e-9)
    _log(
        f"window {window}: read {read_rows} staged row(s) of {len(stats)} table(s) in "
        f"{elapsed:.1f}s ({read_rows / elapsed:,.0f} rows/s); {dropped} outside the window"
    )
    _check_tables(stats)
    transactions, records = _check_transactions(staged, args.start_micros, args.end_micros, window)
    _log(f"window {window}: {transactions} complete transaction(s) with {records} record(s)")

    files.delete(f"{changeset}/{MANIFEST_NAME}")
    changed = [table.table_name for table in stats if table.window_rows]
    tied = [table.table_name for table in stats if table.window_rows and table.types_tied]
    newest_texts = _table_column_types(staged, tied, args.start_micros, args.end_micros)
    column_types = {
        table.table_name: table.column_types(newest_texts.get(table.table_name))
        for table in stats
        if table.window_rows
    }
    collapsed, observation = _counted_by_table(
        _collapse(staged, args.start_micros, args.end_micros, column_types,
                  _collapse_partitions(read_rows - dropped, spark.sparkContext.defaultParallelism)),
        changed,
    )
    collapsed.write.mode("overwrite").partitionBy(TABLE_PARTITION_COLUMN).parquet(changeset)
    written = _written_rows(observation, changed)
    tables = {
        table.table_name: {"rows": int(written.get(table.table_name, 0)), "source_changes": table.window_rows}
        for table in stats
        if table.window_rows
    }
    elapsed = max(time.monotonic() - began, 1e-9)
    merged = read_rows - dropped
    for name, table in tables.items():
        _log(f"table {name}: {table['source_changes']} staged change(s) -> {table['rows']} change-set row(s)")
    _log(f"window {window}: merged {merged} staged change(s) in {elapsed:.1f}s ({merged / elapsed:,.0f}/s)")
    return _manifest(args, tables, transactions, records, dropped)


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
    if spark.conf.get("spark.sql.maxConcurrentOutputFileWriters", "0") == "0":
        # One open writer per table instead of sorting every task's output by table.
        spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", str(CONCURRENT_TABLE_WRITERS))
    spark.sparkContext._jsc.hadoopConfiguration().set(
        "mapreduce.fileoutputcommitter.marksuccessfuljobs", "false"
    )
    return spark


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code."""
    args = parse_arguments(argv)
    from airflow_provider_cdc import domain

    _log(f"merging window {args.window_id}: {args.staging} -> {args.changeset} "
         f"(airflow_provider_cdc.domain from {os.path.dirname(domain.__file__)})")
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
