"""spark-submit entry point: apply one window's change set to the Delta Lake target.

    spark-submit upsert_job.py --changeset gs://bucket/changesets/1700000000000000-1700000060000000 \\
        --lake-root gs://bucket/lake --pipeline-id orders --window-version 1700000060000000

Object-store credentials come from the environment variable ``CDC_STORAGE_OPTIONS`` (a JSON
object of delta-rs storage options), never from the command line. The change set must have its
``_manifest.json`` (written last by the merge); each listed table is applied as one Delta commit
tagged with the window, so a re-run skips the tables already applied. With ``--expected-versions``
(what the metastore says each table holds) every table is checked before anything is applied: a
table restored, rolled back or written by someone else stops the job, naming table, expected and
found versions and the ``repair`` command. The work happens in the driver with delta-rs; no
SparkSession is started. The last line on stdout is a JSON summary.

Without the metastore the job still refuses a window whose predecessor a table has not applied: the
merge records in the manifest, per table, the end of the last earlier window that changed it
(``previous_windows``, from the pipeline's ledger), and each table of the change set must hold
exactly that window (its Delta app-transaction version) or this one already. With ``--epoch`` (the
opening of the window the run belongs to) a change set merged in another epoch is refused. With
``--tombstone-horizon-seconds`` each DELETE leaves a tombstone that keeps older upserts of its key,
arriving in later windows, from inserting the row again (``targets.delta.tombstones``); tables that
have tombstones keep them without the flag. With ``--apply-mode deferred`` (or ``auto``, the
default, for windows whose keys are spread over a table's files) a table's change set is appended to
its pending changes and folded into it every ``--compact-every`` windows or before its staleness
exceeds ``--max-staleness-seconds`` (``targets.delta.compaction``). A lake
that cannot be reached (a bad path, credentials or host) fails with :class:`ApplyError` naming the
window and the table.

This module imports no Airflow.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from deltalake.exceptions import DeltaError

from airflow_provider_cdc.changesets.reader import (
    READ_ERRORS,
    ChangeSetError,
    ChangeSetReader,
    ChangeSetTable,
    describe_read_error,
)
from airflow_provider_cdc.core.apply_order import TableVersions, previous_window_problem, version_problem
from airflow_provider_cdc.filesystems import (
    storage_options_from_env,
)
from airflow_provider_cdc.targets.delta.compaction import APPLY_MODES, DEFAULT_COMPACT_EVERY
from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget, LakeError, app_id_for

log = logging.getLogger("airflow_provider_cdc.targets.delta.upsert_job")


class UpsertJobError(RuntimeError):
    """Bad arguments or environment for the upsert job."""


class EpochMismatchError(UpsertJobError):
    """The change set was merged in another opening of the window than the run's; nothing was applied."""


class LakeAgreementError(LakeError):
    """Target tables do not hold what the metastore says they hold; nothing was applied."""


class PredecessorNotAppliedError(LakeAgreementError):
    """A table of the change set lacks a window before this one; nothing was applied."""


class ApplyError(LakeError):
    """A table of the window could not be applied: an unreadable change-set file or a failed Delta write.

    The message names the window, the table and the file; the original error is the cause.
    """


def apply_error(
    exc: BaseException,
    reader: ChangeSetReader,
    table: ChangeSetTable,
    target: DeltaLakeTarget,
    pipeline_id: str,
    version: int,
    applied: Sequence[str],
) -> ApplyError:
    """The :class:`ApplyError` for ``exc`` raised while applying ``table``: a change-set file that cannot
    be read is named as the cause, else the Delta table that was being written."""
    found = table.unreadable_file()
    if found is not None:
        what, cause = f"change-set file {found[0]!r} cannot be read", found[1]
    else:
        what, cause = f"writing Delta table {target.table_uri(table.name)!r} failed", exc
    done = (
        f"tables applied before it in this run: {', '.join(applied)} (kept; a re-run skips them and applies "
        "the rest)"
        if applied
        else "no table was applied in this run"
    )
    return ApplyError(
        f"window {reader.window_id} (version {version}) of pipeline {pipeline_id!r}: table {table.name!r}: "
        f"{what} ({describe_read_error(cause)}); {done}"
    )


def repair_command(pipeline_id: str, lake_root: str, changeset: str) -> str:
    """The command that re-applies a pipeline's missing windows from their change sets."""
    changeset_root = changeset.rstrip("/").rsplit("/", 1)[0]
    return (
        f"python -m airflow_provider_cdc repair --pipeline {pipeline_id} --lake-root {lake_root} "
        f"--changeset-root {changeset_root}"
    )


def held_windows(
    target: DeltaLakeTarget, reader: ChangeSetReader, tables: Sequence[str], pipeline_id: str, version: int
) -> dict[str, int | None]:
    """Each table's last applied window version (its Delta app transaction); a lake that cannot be
    read (a bad path, credentials or host) is an :class:`ApplyError` naming the window and table."""
    held: dict[str, int | None] = {}
    for table in tables:
        try:
            held[table] = target.applied_window_version(table, pipeline_id)
        except (*READ_ERRORS, DeltaError, ValueError) as exc:
            raise ApplyError(
                f"window {reader.window_id} (version {version}) of pipeline {pipeline_id!r}: "
                f"table {table!r}: reading Delta table {target.table_uri(table)!r} failed "
                f"({describe_read_error(exc)}); no table was applied in this run"
            ) from exc
    return held


def check_previous_windows(
    held: Mapping[str, int | None], pipeline_id: str, version: int, previous: Any, repair: str
) -> None:
    """Refuse (before any apply) when a table of the change set does not hold the last earlier window
    that changed it, as the manifest's ``previous_windows`` records it (absent: nothing to check)."""
    if not isinstance(previous, Mapping) or not isinstance(previous.get("tables"), Mapping):
        if previous is not None:
            raise UpsertJobError(f"window version {version}: the manifest's previous_windows is not valid")
        log.info("The change set records no previous windows: only the metastore checks the tables' order")
        return
    recorded_from = previous.get("recorded_from_us")
    problems = [
        problem
        for table, found in held.items()
        if (
            problem := previous_window_problem(
                pipeline_id,
                table,
                found,
                version,
                previous["tables"].get(table),
                recorded_from if isinstance(recorded_from, int) else None,
            )
        )
        is not None
    ]
    if problems:
        raise PredecessorNotAppliedError(
            f"window version {version}: "
            + "; ".join(problems)
            + ". Nothing was applied. Apply the windows before it first (or re-apply what the tables lack "
            + "with: "
            + repair
            + ")"
        )


def check_agreement(
    target: DeltaLakeTarget,
    tables: Sequence[str],
    pipeline_id: str,
    version: int,
    expected: TableVersions,
    repair: str,
    held: Mapping[str, int | None] | None = None,
) -> None:
    """Refuse (before any apply) when a table's last applied window is not the one the metastore recorded."""
    problems = [
        problem
        for table in tables
        if (
            problem := version_problem(
                pipeline_id,
                table,
                held[table]
                if held is not None and table in held
                else target.applied_window_version(table, pipeline_id),
                version,
                expected,
            )
        )
        is not None
    ]
    if problems:
        raise LakeAgreementError(
            f"window version {version}: "
            + "; ".join(problems)
            + ". Nothing was applied. Re-apply the windows the tables lack from their change sets with: "
            + repair
        )


def _window_version(arg: str | None, reader: ChangeSetReader) -> int:
    bounds = reader.window_bounds()
    if arg is None:
        if bounds is None:
            raise UpsertJobError(
                f"--window-version is required: change set {reader.uri!r} is not named {{start}}-{{end}}"
            )
        return bounds[1]
    try:
        version = int(arg)
    except ValueError:
        raise UpsertJobError(f"--window-version must be an integer (window end in µs), got {arg!r}") from None
    if bounds is not None and bounds[1] != version:
        raise UpsertJobError(
            f"--window-version {version} does not match change set {reader.window_id!r}, "
            f"whose window ends at {bounds[1]}"
        )
    return version


def run(
    changeset: str,
    lake_root: str,
    pipeline_id: str,
    window_version: str | int | None,
    storage_options: Mapping[str, str] | None = None,
    expected: TableVersions | None = None,
    epoch: int | None = None,
    tombstone_horizon: timedelta | None = None,
    apply_mode: str = "auto",
    max_staleness: timedelta | None = None,
    compact_every: int | None = DEFAULT_COMPACT_EVERY,
) -> dict[str, Any]:
    """Apply every table of the change set; return the summary.

    ``epoch``: the opening of the window the run belongs to; a change set whose manifest records
    another is refused. ``tombstone_horizon``: keep tombstones of deleted keys this long;
    ``apply_mode``, ``max_staleness``, ``compact_every``: deferred apply (see :class:`DeltaLakeTarget`).
    """
    app_id_for(pipeline_id)  # validates the pipeline id before any I/O
    reader = ChangeSetReader(changeset, storage_options)
    version = _window_version(None if window_version is None else str(window_version), reader)
    target = DeltaLakeTarget(
        lake_root,
        storage_options,
        tombstone_horizon=tombstone_horizon,
        apply_mode=apply_mode,
        max_staleness=max_staleness,
        compact_every=compact_every,
    )
    tables = reader.tables()  # refuses a change set without manifest, or one that disagrees with it
    manifest = reader.manifest()
    merged = manifest.get("epoch")
    if epoch is not None and isinstance(merged, int) and merged != epoch:
        raise EpochMismatchError(
            f"window version {version}: change set {reader.uri!r} was merged in epoch {merged} of the "
            f"window, not in this run's epoch {epoch}; nothing was applied"
        )
    repair = repair_command(pipeline_id, lake_root, reader.uri)
    held = held_windows(target, reader, [t.name for t in tables], pipeline_id, version)
    check_previous_windows(held, pipeline_id, version, manifest.get("previous_windows"), repair)
    if expected is not None:
        check_agreement(target, [t.name for t in tables], pipeline_id, version, expected, repair, held)
    results: list[dict[str, Any]] = []
    for table in tables:
        try:
            result = target.apply_change_set(
                table.name, table.dataset, table.column_types(), pipeline_id, version
            )
        except (*READ_ERRORS, DeltaError) as exc:
            applied_here = [r["table"] for r in results if r["status"] == "applied"]
            raise apply_error(exc, reader, table, target, pipeline_id, version, applied_here) from exc
        results.append(result.to_dict())
    applied = [r for r in results if r["status"] == "applied"]
    return {
        "changeset": reader.uri,
        "pipeline_id": pipeline_id,
        "window_version": version,
        "tables": results,
        "rows_upserted": sum(r["rows_inserted"] + r["rows_updated"] for r in results),
        "rows_deleted": sum(r["rows_deleted"] for r in results),
        "rows_tombstoned": sum(r["rows_tombstoned"] for r in results),
        "tables_applied": [r["table"] for r in applied],
        "skipped_as_applied": [r["table"] for r in results if r["status"] == "already_applied"],
        "deferred_tables": [r["table"] for r in applied if r["deferred"]],
        "compacted_tables": [r["table"] for r in results if r["compacted_windows"]],
        "storage_option_names": sorted(storage_options or {}),
        "epoch": merged if isinstance(merged, int) else None,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="upsert_job", description="Apply a window's change set to Delta Lake tables."
    )
    parser.add_argument("--changeset", required=True, help="change set URI {changeset_root}/{window_id}")
    parser.add_argument("--lake-root", required=True, help="root of the Delta tables (path or gs:// URI)")
    parser.add_argument("--pipeline-id", required=True, help="pipeline id (names the Delta app transaction)")
    parser.add_argument(
        "--window-version",
        default=None,
        help="window end in µs since the epoch (default: the end of the change set's window id)",
    )
    parser.add_argument(
        "--expected-versions",
        default=None,
        help="JSON: the window version each table last received, as the metastore recorded it "
        '({"tables": {"Orders": 1700000000000000}, "recorded_from_us": null}); checked before applying',
    )
    parser.add_argument(
        "--epoch",
        type=int,
        default=None,
        help="the opening of the window this run belongs to; a change set merged in another is refused",
    )
    parser.add_argument(
        "--tombstone-horizon-seconds",
        type=_horizon_seconds,
        default=None,
        help="keep a tombstone per deleted key this many seconds (more than 0) after the end of the "
        "window that applied the delete, so that older upserts of the key arriving in later windows do "
        "not insert the row again; leave it out to keep no tombstones",
    )
    parser.add_argument(
        "--apply-mode",
        choices=APPLY_MODES,
        default="auto",
        help="immediate: merge each window into the tables; deferred: append it to their pending changes "
        "and compact them; auto (default): defer windows whose keys are spread over a table's files",
    )
    parser.add_argument(
        "--max-staleness-seconds",
        type=_horizon_seconds,
        default=None,
        help="deferred apply: compact before a table's apply watermark lags the window end by more",
    )
    parser.add_argument(
        "--compact-every",
        type=_windows,
        default=DEFAULT_COMPACT_EVERY,
        help=f"deferred apply: compact when this many windows are pending (default {DEFAULT_COMPACT_EVERY}; "
        "0: only by --max-staleness-seconds)",
    )
    return parser


def _windows(text: str) -> int | None:
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"must be a number of windows (0: none), got {text!r}")
    return count or None


def _horizon_seconds(text: str) -> timedelta:
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(
            f"must be a positive number of seconds, got {text!r} (leave the option out instead of 0)"
        )
    return timedelta(seconds=seconds)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        expected = None if args.expected_versions is None else TableVersions.from_json(args.expected_versions)
        summary = run(
            args.changeset,
            args.lake_root,
            args.pipeline_id,
            args.window_version,
            storage_options_from_env(),
            expected,
            args.epoch,
            args.tombstone_horizon_seconds,
            args.apply_mode,
            args.max_staleness_seconds,
            args.compact_every,
        )
    except (UpsertJobError, ChangeSetError, LakeError, ValueError) as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), file=sys.stderr, flush=True)
        return 2
    print(json.dumps(summary, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    exit_code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    # Leave without interpreter finalisation: Arrow worker threads still releasing buffers of a
    # Python-backed file system (object-store reads) can abort the process during it, turning
    # a committed apply into a failed task.
    os._exit(exit_code)
