"""Merge one window's staged changes into per-table change sets (a ``spark-submit`` entry point).

::

    spark-submit --master 'local[*]' --py-files cdc_domain.zip merge_job.py \\
        --staging   /data/staging/orders_stream/1700000000000000-1700000060000000 \\
        --changeset /data/changesets/1700000000000000-1700000060000000 \\
        --window-start 2023-11-14T22:13:20Z --window-end 2023-11-14T22:14:20Z

Steps: read the staged Parquet rows; drop rows whose commit timestamp is outside ``[start, end)``;
check that every transaction the source counted is complete (its distinct ``transaction_record``
values across all units number ``transaction_record_count``), failing before anything is written
otherwise; de-duplicate repeated changes (same table, key and ``change_sequence_number``); order
each key's changes by ``change_sequence_number`` and collapse them exactly as
``airflow_provider_cdc.core.collapse`` does; write one Parquet change set per table under
``table={name}/`` and ``_manifest.json`` last. A re-run replaces the previous output.

This module is the command line; the Spark plan is :mod:`.plan`, the per-key collapse the
executors run :mod:`.kernels`, and file access :mod:`.files`. The job imports only
``airflow_provider_cdc.core``, ``airflow_provider_cdc.filesystems`` and those modules; driver and
executors need them, so they are shipped with ``--py-files`` (``SparkMergeWindowOperator`` builds
that zip on the fly). URIs are read and written through Spark's Hadoop filesystems. When Spark has
no filesystem for a scheme (``gs://`` without the GCS connector) and runs in local mode, the job
copies the staging folder to local disk and the change set back in the driver
(``--transfer-through-driver`` forces this) through :func:`airflow_provider_cdc.filesystems.resolve`,
with the storage options of the environment variable ``CDC_STORAGE_OPTIONS`` (none: Application
Default Credentials, or the emulator named by ``STORAGE_EMULATOR_HOST``). Progress (rows read,
rate, tables) is logged to stdout; a window that cannot be merged exits with status 1 and the
reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_provider_cdc.core.contract.change_set import manifest_bytes
from airflow_provider_cdc.core.contract.locations import MANIFEST_NAME
from airflow_provider_cdc.core.contract.staged_rows import ARRIVAL, COMMIT_TIME, WINDOW_BASES
from airflow_provider_cdc.core.timestamps import format_timestamp, parse_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.filesystems import StorageOptionsError, storage_options_from_env
from airflow_provider_cdc.merge.errors import MergeJobError
from airflow_provider_cdc.merge.files import HadoopFiles, download_tree, upload_change_set
from airflow_provider_cdc.merge.input import (
    StagedInputError,
    StagedUnit,
    check_staged_units,
    parse_units,
)
from airflow_provider_cdc.merge.plan import COLLAPSES, KERNEL, log, merge_staging

#: Change-set tables written at once by a task (one open Parquet writer each).
CONCURRENT_TABLE_WRITERS = 16
SUCCESS_MARKER_SETTING = "mapreduce.fileoutputcommitter.marksuccessfuljobs"
#: ``merge_window``'s default storage options: those of ``CDC_STORAGE_OPTIONS`` in the environment.
FROM_ENVIRONMENT = object()


@dataclass(frozen=True)
class MergeArguments:
    """Parsed command line of the merge job."""

    window: Window
    #: the window's staging folder, ``{staging_root}/{stream}/{window_id}``
    staging: str
    #: the window's change-set folder, ``{changeset_root}/{window_id}``
    changeset: str
    master: str | None = None
    transfer_through_driver: bool = False
    #: partition key → the claim whose output the metastore recorded (None: read every staged file)
    partition_claims: dict[str, str] | None = None
    #: every unit of the window as its reader recorded it (checked before anything is written)
    staged_units: list[StagedUnit] | None = None
    #: the opening of the window this merge belongs to (recorded in the manifest)
    epoch: int | None = None
    #: per table, the end (µs) of the last earlier window that changed it, from the pipeline's ledger
    previous_windows: dict[str, Any] | None = None
    #: the name the manifest is written under (another than ``_manifest.json``: published later)
    manifest_name: str = MANIFEST_NAME
    #: which staged rows are the window's: committed in it, or every row staged for it (arrival)
    window_basis: str = COMMIT_TIME
    #: the collapse: the Arrow kernel, or Spark's own operations (``native``, Spark 4)
    collapse: str = KERNEL


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


def _units_argument(text: str) -> list[StagedUnit]:
    try:
        return parse_units(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _epoch_argument(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"an epoch is a positive integer, got {text!r}")
    return int(text)


def _previous_windows_argument(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
        tables = value["tables"]
        recorded_from = value.get("recorded_from_us")
        if not isinstance(tables, dict) or not all(
            isinstance(name, str) and name.isidentifier() and isinstance(end, int)
            for name, end in tables.items()
        ) or not (recorded_from is None or isinstance(recorded_from, int)):
            raise ValueError("tables must map table names to window ends in µs")
    except (ValueError, TypeError, KeyError) as error:
        raise argparse.ArgumentTypeError(
            f'expected {{"tables": {{table: window end µs}}, "recorded_from_us": µs or null}}: {error}'
        ) from None
    return {"tables": dict(sorted(tables.items())), "recorded_from_us": recorded_from}


def _manifest_name_argument(text: str) -> str:
    if not (text.startswith("_") and text.endswith(".json") and "/" not in text):
        raise argparse.ArgumentTypeError(f"a manifest name is _<name>.json, got {text!r}")
    return text


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
                        help="Spark master when not started by spark-submit (default: Spark's own, "
                        "local[*]); under spark-submit, the master it was given")
    parser.add_argument("--transfer-through-driver", action="store_true",
                        help="copy staging in and the change set out with pyarrow filesystems in the "
                        "driver (automatic when Spark has no filesystem for the URI scheme; local mode)")
    parser.add_argument("--partition-claims", type=_claims_argument, default=None,
                        help="JSON object {partition_key: claim_id}: read only the output of each "
                        "partition's recorded claim (partition=<key>/claim=<id>/); other files are ignored")
    parser.add_argument("--staged-units", type=_units_argument, default=None,
                        help="JSON object {partition_key: [claim_id, files, rows]}: every unit of the window "
                        "as its reader recorded it; each claim folder is checked to hold exactly that before "
                        "anything is written, and only those files are read (overrides --partition-claims)")
    parser.add_argument("--epoch", type=_epoch_argument, default=None,
                        help="the opening of the window this merge belongs to; recorded in the manifest")
    parser.add_argument("--previous-windows", type=_previous_windows_argument, default=None,
                        help='JSON {"tables": {table: end_us}, "recorded_from_us": us|null}: per table the '
                        "end of the last earlier window that changed it; the manifest carries it for the "
                        "upsert's check that each table holds it")
    parser.add_argument("--manifest-name", type=_manifest_name_argument, default=MANIFEST_NAME,
                        help=f"write the manifest under this name (default {MANIFEST_NAME}; another name "
                        "leaves the publishing to the caller)")
    parser.add_argument("--window-basis", choices=WINDOW_BASES, default=COMMIT_TIME,
                        help=f"which staged rows are the window's: {COMMIT_TIME} (default) keeps rows "
                        f"committed in [start, end) and drops the others; {ARRIVAL} keeps every row staged "
                        "for the window (a source whose windows are the changes that arrived in them)")
    parser.add_argument("--collapse", choices=COLLAPSES, default=KERNEL,
                        help=f"{KERNEL} (default): the Arrow kernel in Python workers; native: Spark's own "
                        "operations (Spark 4; keys it cannot write as the kernel does go to the kernel)")
    namespace = parser.parse_args(argv)
    if namespace.window_start >= namespace.window_end:
        parser.error(
            f"--window-start {format_timestamp(namespace.window_start)} is not before "
            f"--window-end {format_timestamp(namespace.window_end)}"
        )
    if namespace.staging == namespace.changeset:
        parser.error("--staging and --changeset name the same folder")
    return MergeArguments(
        window=Window(namespace.window_start, namespace.window_end),
        staging=namespace.staging,
        changeset=namespace.changeset,
        master=namespace.master,
        transfer_through_driver=namespace.transfer_through_driver,
        partition_claims=namespace.partition_claims,
        staged_units=namespace.staged_units,
        epoch=namespace.epoch,
        previous_windows=namespace.previous_windows,
        manifest_name=namespace.manifest_name,
        window_basis=namespace.window_basis,
        collapse=namespace.collapse,
    )


def _storage_options() -> dict[str, str] | None:
    try:
        return storage_options_from_env()
    except StorageOptionsError as error:
        raise MergeJobError(str(error)) from None


def merge_window(
    spark: Any, args: MergeArguments, files: Any = None,
    storage_options: Any = FROM_ENVIRONMENT,
) -> dict[str, Any]:
    """Merge the window described by ``args`` and write its change set and manifest.

    :param files: the small file operations around Spark's reads and writes (default
        :class:`HadoopFiles` of ``spark``; a Spark Connect client passes :class:`ArrowFiles`).
    :param storage_options: credentials for copies through the driver (default: from
        ``CDC_STORAGE_OPTIONS`` in the environment).
    """
    files = HadoopFiles(spark) if files is None else files
    options = _storage_options() if storage_options is FROM_ENVIRONMENT else storage_options
    window_id = args.window.window_id
    # the change set is {changeset_root}/{window_id}, or an epoch's folder within it
    changeset_window = args.changeset.rstrip("/").split("/")[-2:]
    if window_id != args.staging.rsplit("/", 1)[-1] and window_id not in changeset_window:
        log(f"warning: neither --staging nor --changeset ends with the window id {window_id}")
    through_driver = args.transfer_through_driver or not (
        files.supports(args.staging) and files.supports(args.changeset)
    )
    details = {"epoch": args.epoch, "previous_windows": args.previous_windows}
    inputs = None
    if args.staged_units is not None:
        try:
            checked = check_staged_units(args.staging, args.window, args.staged_units, options)
        except StagedInputError as error:
            raise MergeJobError(str(error)) from None
        inputs = [path for unit in checked for path in unit.files]
        log(f"window {window_id}: {len(checked)} unit(s) hold the {len(inputs)} file(s) and "
            f"{sum(unit.rows for unit in checked)} row(s) their readers recorded")
    if not through_driver:
        manifest = merge_staging(spark, args.window, args.staging, args.changeset, files,
                                 claims=args.partition_claims, inputs=inputs, details=details,
                                 basis=args.window_basis, collapse=args.collapse)
        files.write_bytes(f"{args.changeset}/{args.manifest_name}", manifest_bytes(manifest))
    else:
        master = str(spark.conf.get("spark.master", "") or "")
        if not master.startswith("local"):
            raise MergeJobError(
                f"Spark has no filesystem for {args.staging} or {args.changeset} and master {master} is "
                "not local: add the filesystem connector (for gs:// the GCS connector jar) to the job"
            )
        storage_options = options
        workdir = tempfile.mkdtemp(prefix="cdc-merge-")
        try:
            local_staging = os.path.join(workdir, "staging")
            local_changeset = os.path.join(workdir, "changeset")
            log(f"copying {args.staging} to {local_staging} through the driver")
            if not download_tree(args.staging, local_staging, storage_options):
                local_staging = os.path.join(workdir, "missing")
            local = None if inputs is None else [
                "file://" + local_staging + path[len(args.staging):] for path in inputs
            ]
            manifest = merge_staging(
                spark, args.window, "file://" + local_staging, "file://" + local_changeset, files,
                claims=args.partition_claims, source=args.staging, inputs=local, details=details,
                basis=args.window_basis, collapse=args.collapse,
            )
            log(f"copying the change set to {args.changeset} through the driver")
            upload_change_set(local_changeset, args.changeset, manifest_bytes(manifest), storage_options,
                              manifest_name=args.manifest_name)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    log(f"wrote {args.changeset}/{args.manifest_name}: {manifest['rows']} row(s) in "
        f"{len(manifest['tables'])} table(s)")
    return manifest


def _spark_session(master: str | None) -> Any:
    """The job's session on the master it was given: ``--master`` when the job was started without
    ``spark-submit``; otherwise the one ``spark-submit`` was given (its ``--master``, or the cluster's
    ``spark-defaults.conf``), never replaced by the job."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("cdc-merge-window")
    if master:
        builder = builder.master(master)
    spark = builder.getOrCreate()
    spark.sparkContext._jsc.hadoopConfiguration().set(SUCCESS_MARKER_SETTING, "false")
    log(f"Spark master {spark.sparkContext.master} (application {spark.sparkContext.applicationId})")
    return configure_session(spark)


def configure_session(spark: Any) -> Any:
    """The session settings the job relies on (UTC, microsecond timestamps, one open writer per
    table, no ``_SUCCESS`` files); a classic session and a Spark Connect one alike."""
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    if spark.conf.get("spark.sql.maxConcurrentOutputFileWriters", "0") == "0":
        # One open writer per table instead of sorting every task's output by table.
        spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", str(CONCURRENT_TABLE_WRITERS))
    # a session setting reaches the Hadoop configuration of the session's writes
    spark.conf.set(SUCCESS_MARKER_SETTING, "false")
    return spark


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code."""
    args = parse_arguments(argv)
    from airflow_provider_cdc import core

    log(f"merging window {args.window.window_id}: {args.staging} -> {args.changeset} "
        f"(airflow_provider_cdc.core from {os.path.dirname(core.__file__)})")
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
