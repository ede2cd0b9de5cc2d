"""Hook that reads windows of Spanner tables into staging: a snapshot, or commit-timestamp tables.

A **table source** has a name (``source``, a plain identifier) that names its staging folder
(``{staging_root}/{source}/{window_id}``) and its key in the metastore
(``projects/…/databases/<db>/<source>``, the ``stream_key`` the merge takes). Opening a window plans
its batches once (:mod:`airflow_provider_cdc.sources.spanner.table_batches`) and records them as the
window's partitions; readers claim and stage them (:mod:`airflow_provider_cdc.sources.spanner.table_reader`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_provider_cdc._compat import AirflowFailException
from airflow_provider_cdc._errors import CdcError
from airflow_provider_cdc.core.findings import Finding, did_you_mean, errors_of
from airflow_provider_cdc.core.identifiers import InvalidIdentifierError, validate_identifier
from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.hooks.storage import DEFAULT_GCP_CONN_ID
from airflow_provider_cdc.metastore import PartitionSpec, WindowNotFoundError
from airflow_provider_cdc.sources.hook import WindowSourceHook
from airflow_provider_cdc.sources.spanner.database import SpannerDatabase
from airflow_provider_cdc.sources.spanner.errors import RetentionExpiredError
from airflow_provider_cdc.sources.spanner.table_rows import CommitTimestampTable, TableRowError

if TYPE_CHECKING:
    from airflow_provider_cdc.sources.spanner.snapshot import VersionRetention
    from airflow_provider_cdc.sources.spanner.table_batches import BatchPlan, PlannedTable
    from airflow_provider_cdc.sources.spanner.table_reader import TableReadSummary, TableWindowReader

__all__ = ["LateRowsError", "SpannerTableError", "SpannerTableHook", "TableSourceConfigError"]

SNAPSHOT = "snapshot"
COMMIT_TIMESTAMP = "commit_timestamp"
ON_LATE_ROWS = ("fail", "warn")


class SpannerTableError(CdcError):
    """Spanner or the metastore refused a step of reading a table source; the cause is kept."""


class TableSourceConfigError(SpannerTableError, AirflowFailException):
    """A table source's settings are invalid: its name, mode, tables or window."""

    permanent = True


class LateRowsError(SpannerTableError, AirflowFailException):
    """Rows were written with a commit timestamp that falls into a window already read."""

    permanent = True


class SpannerTableHook(SpannerDatabase, WindowSourceHook):
    """Reads ``[start, end)`` windows of Spanner tables: a snapshot, or tables by commit timestamp.

    The connection (credentials, project, impersonation, the emulator through
    ``SPANNER_EMULATOR_HOST``) is that of every Spanner source
    (:class:`~airflow_provider_cdc.sources.spanner.database.SpannerDatabase`), the metastore that of
    every source (:class:`~airflow_provider_cdc.sources.hook.WindowSourceHook`).

    :param instance_id: Spanner instance id.
    :param database_id: Spanner database id.
    :param source: the source's name: its staging folder and the last segment of its metastore key.
    :param project_id: Google Cloud project (defaults to the connection's project).
    :param gcp_conn_id: the Google Cloud connection.
    :param impersonation_chain: a service account, or a chain of them, to impersonate.
    :param metastore_conn_id: connection of the metastore.
    """

    source_error = SpannerTableError
    hook_name = "Google Cloud Spanner Table Reads"

    def __init__(
        self,
        *,
        instance_id: str,
        database_id: str,
        source: str,
        project_id: str | None = None,
        gcp_conn_id: str = DEFAULT_GCP_CONN_ID,
        impersonation_chain: str | Sequence[str] | None = None,
        metastore_conn_id: str = CdcMetastoreHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        try:
            self._source = validate_identifier(source, "table source")
        except InvalidIdentifierError as exc:
            raise TableSourceConfigError(str(exc)) from exc
        super().__init__(
            instance_id=instance_id,
            database_id=database_id,
            project_id=project_id,
            gcp_conn_id=gcp_conn_id,
            impersonation_chain=impersonation_chain,
            **kwargs,
        )
        self.metastore_conn_id = metastore_conn_id

    @property
    def source(self) -> str:
        return self._source

    @property
    def source_key(self) -> str:
        """The source's name in the metastore: ``projects/…/databases/<db>/<source>``."""
        return f"{self.database_path}/{self.source}"

    @property
    def stream(self) -> str:
        """The source's name (as the merge's ``stream_key`` ends with it)."""
        return self.source

    @property
    def stream_key(self) -> str:
        """The source's metastore key under the name the merge takes it by."""
        return self.source_key

    @contextmanager
    def step_errors(self, window: Window, what: str) -> Iterator[None]:
        """The shared step errors (as :class:`SpannerTableError`), and the plan's, the schema's and
        Spanner's errors of a step."""
        from google.api_core import exceptions as gexc

        from airflow_provider_cdc.sources.spanner.table_batches import BatchPlanError
        from airflow_provider_cdc.sources.spanner.table_schema import TableSchemaError

        try:
            with super().step_errors(window, what):
                yield
        except BatchPlanError as exc:
            raise SpannerTableError(str(exc)) from exc
        except (TableSchemaError, TableRowError) as exc:
            raise TableSourceConfigError(f"window {window}: {exc}") from exc
        except gexc.GoogleAPICallError as exc:
            raise SpannerTableError(f"{what}: {exc}") from exc

    def check_readable(self, window: Window) -> None:
        """Nothing to check before a read: the window's plan fixed its read timestamp when it was
        opened (checked against the version retention then), and a read whose timestamp has left the
        retention since fails naming it."""

    def check_source(
        self,
        *,
        mode: str = SNAPSHOT,
        tables: Sequence[str | CommitTimestampTable | Mapping[str, Any]] | None = None,
        change_stream: str | None = None,
        window: Window | None = None,
        **options: Any,
    ) -> list[Finding]:
        """The database answers (:meth:`check_database`) and has the tables the open step names (and
        of each commit-timestamp table its timestamp column) and the snapshot's ``change_stream``;
        else suggestions from what it has."""
        findings = self.check_database()
        if errors_of(findings):
            return findings
        if mode not in (SNAPSHOT, COMMIT_TIMESTAMP):
            fix = f"use {SNAPSHOT!r} or {COMMIT_TIMESTAMP!r}"
            return [*findings, Finding("mode", f"mode is {mode!r}", fix)]
        where = window or Window(datetime.fromtimestamp(0, timezone.utc), datetime.now(timezone.utc))
        try:
            configs = self._configs(mode, tables, where, required=not (mode == SNAPSHOT and change_stream))
        except TableSourceConfigError as exc:
            return [*findings, Finding("tables", str(exc), "give the tables as the operator documents them")]
        if change_stream:
            findings += self.check_change_stream(change_stream, "change_stream")
        names = [c if isinstance(c, str) else c.table for c in configs]
        findings += self.check_tables(names, "tables")
        if mode == COMMIT_TIMESTAMP and not errors_of(findings):
            findings += self._check_timestamp_columns(configs)
        return findings

    def _check_timestamp_columns(self, configs: Sequence[CommitTimestampTable]) -> list[Finding]:
        from airflow_provider_cdc.sources.spanner.table_schema import COLUMNS_QUERY

        findings = []
        for config in configs:
            columns = [str(row[0]) for row in self.query_rows(COLUMNS_QUERY, table=config.table)]
            if config.timestamp_column not in columns:
                findings.append(Finding(
                    "tables",
                    f"table {config.table!r} has no column {config.timestamp_column!r} (timestamp_column)",
                    did_you_mean(config.timestamp_column, columns, "column"),
                ))
        return findings

    # ----- the database's clock and retention -----------------------------------------------------
    @cached_property
    def version_retention(self) -> VersionRetention:
        """The database's ``version_retention_period`` (looked up once per hook)."""
        from google.api_core import exceptions as gexc

        from airflow_provider_cdc.sources.spanner.snapshot import (
            DEFAULT_VERSION_RETENTION,
            VersionRetention,
            version_retention,
        )

        try:
            with self.database.snapshot() as snapshot:
                return version_retention(snapshot)
        except (gexc.InvalidArgument, gexc.NotFound, gexc.PermissionDenied) as exc:
            self.log.warning(
                "Cannot read the version_retention_period of %s from INFORMATION_SCHEMA.DATABASE_OPTIONS "
                "(%s); taking Spanner's default",
                self.database_path,
                str(exc).splitlines()[0],
            )
            return VersionRetention(DEFAULT_VERSION_RETENTION)

    def wait_for_clock(self, timestamp: datetime, max_wait_seconds: float = 600.0) -> datetime:
        """Wait until the database's clock is past ``timestamp``; returns the database's time."""
        deadline = time.monotonic() + max_wait_seconds
        while True:
            now = self.database_now()
            if now > timestamp:
                return now
            if time.monotonic() > deadline:
                raise SpannerTableError(
                    f"the database's clock ({format_timestamp(now)}) did not pass "
                    f"{format_timestamp(timestamp)} within {max_wait_seconds:g}s"
                )
            wait = min((timestamp - now).total_seconds() + 0.01, max(deadline - time.monotonic(), 0.01))
            self.log.info(
                "Waiting %.1fs for the database's clock to pass %s", wait, format_timestamp(timestamp)
            )
            time.sleep(max(wait, 0.01))

    # ----- opening a window -----------------------------------------------------------------------
    def open_window(  # type: ignore[override]
        self,
        pipeline: str,
        window: Window,
        staging_root: str,
        *,
        mode: str,
        tables: Sequence[str | CommitTimestampTable | Mapping[str, Any]] | None = None,
        change_stream: str | None = None,
        max_partitions: int | None = None,
        partition_size_bytes: int | None = None,
        page_rows: int | None = None,
        on_late_rows: str = "fail",
        max_wait_seconds: float = 600.0,
    ) -> dict[str, Any]:
        """Plan the window's batches once and record them as its partitions; returns a summary.

        ``mode`` ``snapshot``: the window is ``[T - 1µs, T)``, read at its start; ``tables`` are table
        names, and ``change_stream`` names the stream the pipeline reads next: without ``tables`` every
        table it watches is read, and of each table only its key and the columns the stream watches
        (``INFORMATION_SCHEMA.CHANGE_STREAM_TABLES``/``_COLUMNS``). ``commit_timestamp``: ``tables`` are
        :class:`CommitTimestampTable` configurations
        (or mappings of their fields), read at the window end once the database's clock is past it;
        rows written since the previous window with a timestamp before this one fail the window
        (``on_late_rows='fail'``) or are logged (``'warn'``). ``page_rows`` reads commit-timestamp
        tables in keyset pages of that many rows instead of in parallel partitions.
        """
        if mode not in (SNAPSHOT, COMMIT_TIMESTAMP):
            raise TableSourceConfigError(f"mode must be {SNAPSHOT!r} or {COMMIT_TIMESTAMP!r}, got {mode!r}")
        if on_late_rows not in ON_LATE_ROWS:
            raise TableSourceConfigError(f"on_late_rows must be one of {ON_LATE_ROWS}, got {on_late_rows!r}")
        if mode == SNAPSHOT and change_stream is not None:
            try:
                validate_identifier(change_stream, "change stream")
            except InvalidIdentifierError as exc:
                raise TableSourceConfigError(f"window {window}: {exc}") from exc
        elif mode == COMMIT_TIMESTAMP and change_stream is not None:
            raise TableSourceConfigError(f"window {window}: change_stream applies to snapshots only")
        configs = self._configs(mode, tables, window, required=not (mode == SNAPSHOT and change_stream))
        with self.step_errors(window, f"window {window} of pipeline {pipeline!r}: opening it"):
            if mode == SNAPSHOT:
                read_at, now = self._snapshot_read_timestamp(pipeline, window, max_wait_seconds)
                if read_at is None:
                    return {
                        "window_id": window.window_id,
                        "epoch": self.metastore.get_window(pipeline, window.start, window.end).attempt,
                        "mode": mode,
                        "already_applied": True,
                        "batches": 0,
                    }
            else:
                read_at, now = self._window_read_timestamp(window, max_wait_seconds)
            planned = self._planned_tables(mode, configs, read_at, page_rows, change_stream)
            if mode == COMMIT_TIMESTAMP:
                self._check_late_rows(pipeline, window, planned, read_at, now, on_late_rows)
            return self._record_plan(
                pipeline,
                window,
                staging_root,
                mode,
                planned,
                read_at,
                max_partitions=max_partitions,
                partition_size_bytes=partition_size_bytes,
            )

    def _snapshot_read_timestamp(
        self, pipeline: str, window: Window, max_wait_seconds: float
    ) -> tuple[datetime | None, datetime]:
        """The snapshot's read timestamp (the window start) and the database's time; ``None`` for an
        applied snapshot whose timestamp left the version retention (a re-run that changes nothing)."""
        from airflow_provider_cdc.sources.spanner.snapshot import (
            is_snapshot_window,
            retention_message,
            within_retention,
        )

        if not is_snapshot_window(window):
            raise TableSourceConfigError(
                f"a snapshot window is [T - 1µs, T) for the first stream window's start T, got {window}"
            )
        now = self.wait_for_clock(window.start, max_wait_seconds)
        if within_retention(window.start, now, self.version_retention):
            return window.start, now
        if self._applied(pipeline, window):
            self.log.warning(
                "Window %s of pipeline %s is applied and its snapshot timestamp is outside the version "
                "retention period of %s: it is left as it is",
                window,
                pipeline,
                self.version_retention.describe(),
            )
            return None, now
        raise RetentionExpiredError(
            retention_message(
                f"window {window}: snapshot timestamp",
                window.start,
                now,
                self.version_retention,
                self.database_id,
            )
        )

    def _window_read_timestamp(self, window: Window, max_wait_seconds: float) -> tuple[datetime, datetime]:
        """A commit-timestamp window's read timestamp, its end (the current time when the end has left
        the version retention), and the database's time."""
        from airflow_provider_cdc.sources.spanner.snapshot import retention_message, within_retention

        now = self.wait_for_clock(window.end, max_wait_seconds)
        if within_retention(window.end, now, self.version_retention):
            return window.end, now
        self.log.warning(
            "%s; reading the window at the current time instead: rows changed since the window ended are "
            "read by the windows of their new commit timestamps",
            retention_message(
                f"window {window}: read timestamp", window.end, now, self.version_retention, self.database_id
            ),
        )
        return now, now

    @staticmethod
    def _configs(mode: str, tables: Any, window: Window, required: bool = True) -> list[Any]:
        if not required and not tables:
            return []
        if isinstance(tables, (str, Mapping)) or not tables:
            raise TableSourceConfigError(f"window {window}: tables must be a non-empty list, got {tables!r}")
        try:
            if mode == SNAPSHOT:
                names = [validate_identifier(t, "table") for t in tables]
                if len(set(names)) != len(names):
                    raise ValueError(f"a table is named twice in {names}")
                return names
            configs = [CommitTimestampTable.of(t) for t in tables]
        except (TypeError, ValueError) as exc:
            raise TableSourceConfigError(f"window {window}: {exc}") from exc
        if len({c.table for c in configs}) != len(configs):
            raise TableSourceConfigError(f"window {window}: a table is configured twice")
        return configs

    def _planned_tables(
        self,
        mode: str,
        configs: Sequence[Any],
        read_at: datetime,
        page_rows: int | None,
        change_stream: str | None = None,
    ) -> list[PlannedTable]:
        from airflow_provider_cdc.sources.spanner.commit_timestamp import commit_timestamp_table
        from airflow_provider_cdc.sources.spanner.snapshot import snapshot_table
        from airflow_provider_cdc.sources.spanner.stream_scope import stream_scope
        from airflow_provider_cdc.sources.spanner.table_schema import table_schema

        planned = []
        # The schema as of the read timestamp: the columns the read at that timestamp can select.
        with self.database.snapshot(read_timestamp=read_at, multi_use=True) as snapshot:
            scope = stream_scope(snapshot, change_stream) if change_stream else None
            if mode == SNAPSHOT and scope is not None and not configs:
                configs = sorted(scope.tables)
                if not configs:
                    raise TableSourceConfigError(f"change stream {change_stream!r} watches no table")
            for config in configs:
                if mode == SNAPSHOT:
                    schema = table_schema(snapshot, config)
                    planned.append(snapshot_table(scope.restrict(schema) if scope else schema))
                else:
                    schema = table_schema(snapshot, config.table)
                    planned.append(commit_timestamp_table(schema, config, page_rows))
        return planned

    def _check_late_rows(
        self,
        pipeline: str,
        window: Window,
        planned: Sequence[PlannedTable],
        read_at: datetime,
        now: datetime,
        on_late_rows: str,
    ) -> None:
        from airflow_provider_cdc.sources.spanner.commit_timestamp import check_late_rows
        from airflow_provider_cdc.sources.spanner.snapshot import within_retention

        recorded = self.metastore.get_pipeline(pipeline)
        first = recorded.first_window_start if recorded is not None else window.start
        if first >= window.start:
            return  # the first window: nothing was read before it
        if not within_retention(window.start, now, self.version_retention):
            self.log.warning(
                "Window %s: the previous window's read timestamp is outside the version retention period of "
                "%s; rows written late into earlier windows cannot be checked",
                window,
                self.version_retention.describe(),
            )
            return
        problems = []
        for table in planned:
            check = check_late_rows(self.database, table, first, window, read_at)
            if check.deleted:
                self.log.warning(
                    "Table %s: %d row(s) with commit timestamps before window %s were deleted (%s); deletes "
                    "are invisible to a commit-timestamp source (mark them with a soft-delete column)",
                    table.table,
                    check.deleted,
                    window,
                    check.describe_deleted(),
                )
            if check.late or check.unexplained:
                problems.append(check.describe())
        if not problems:
            return
        message = f"window {window} of pipeline {pipeline!r}: " + " ".join(problems)
        if on_late_rows == "fail":
            raise LateRowsError(message)
        self.log.warning("%s", message)

    def _applied(self, pipeline: str, window: Window) -> bool:
        from airflow_provider_cdc.metastore import WindowNotFoundError

        try:
            return self.metastore.get_window(pipeline, window.start, window.end).state.value == "applied"
        except WindowNotFoundError:
            return False

    def _record_plan(
        self,
        pipeline: str,
        window: Window,
        staging_root: str,
        mode: str,
        planned: Sequence[PlannedTable],
        read_at: datetime,
        **options: Any,
    ) -> dict[str, Any]:
        from airflow_provider_cdc.sources.spanner.table_batches import clear_batches

        store = self.metastore
        try:
            applied_before = store.get_window(pipeline, window.start, window.end).state.value == "applied"
        except WindowNotFoundError:
            applied_before = False
        # Every opening is an epoch: a window recorded before (a retry, clear, backfill, or a second
        # run while the first is still at it) opens again, fencing the earlier opening's steps out.
        record = self.reopen_window(pipeline, window, staging_root)
        options_of_root = self._storage_options(staging_root)
        if applied_before:
            # The window was applied: no run of an earlier opening can still commit it.
            removed = clear_batches(staging_root, self.source, window, storage_options=options_of_root)
            if removed:
                self.log.info("Window %s: removed %d file(s) earlier openings staged", window, removed)
        elif record.attempt > 1:
            # A run of an earlier opening may be merging its batches (each plan stages under batch
            # tokens of its own): they stay; it is refused when it publishes or commits.
            self.log.info(
                "Window %s opened again (epoch %d) before it was applied: the batches earlier openings "
                "staged are kept until it is",
                window,
                record.attempt,
            )
        plan, path = self._plan(window, staging_root, mode, planned, read_at, **options)
        tokens = plan.tokens
        batches: dict[str, int] = {}
        for batch in plan.batches:
            batches[batch.table] = batches.get(batch.table, 0) + 1
        self.log.info(
            "Window %s of %s: %s read at %s in %d batch(es) (%s); plan %s at %s",
            window,
            self.source,
            mode,
            format_timestamp(read_at),
            len(tokens),
            ", ".join(f"{t}: {n}" for t, n in batches.items()),
            plan.plan_id,
            path,
        )
        return {
            "window_id": window.window_id,
            "epoch": record.attempt,
            "plan_id": plan.plan_id,
            "mode": mode,
            "read_timestamp": format_timestamp(read_at),
            "batches": len(tokens),
            "tables": batches,
        }

    def plan_units(self, window: Window, staging_root: str, owner: str, **options: Any) -> list[str]:
        """Plan the opened window's batches and record them as its partitions: ``options`` are
        ``mode``, ``planned`` (the tables), ``read_at`` (the read timestamp) and the batch hints
        ``max_partitions``/``partition_size_bytes``."""
        mode, planned, read_at = options.pop("mode"), options.pop("planned"), options.pop("read_at")
        return self._plan(window, staging_root, mode, planned, read_at, **options)[0].tokens

    def _plan(
        self,
        window: Window,
        staging_root: str,
        mode: str,
        planned: Sequence[PlannedTable],
        read_at: datetime,
        **options: Any,
    ) -> tuple[BatchPlan, str]:
        """Plan the window's batches once, write the plan next to the staging and record its batches
        as the window's partitions; returns the plan and where it was written."""
        from airflow_provider_cdc.sources.spanner.table_batches import plan_batches, write_plan

        store = self.metastore
        plan = plan_batches(self.database, self.source, mode, window, read_at, planned, **options)
        path = write_plan(plan, staging_root, storage_options=self._storage_options(staging_root))
        tokens = plan.tokens
        store.add_partitions(self.source_key, [PartitionSpec(token, window.start) for token in tokens])
        store.end_partitions(self.source_key, tokens, window.end)
        store.add_window_partitions(self.source_key, window.start, window.end, tokens)
        return plan, path

    def _storage_options(self, staging_root: str) -> dict[str, str] | None:
        return self.staging_storage_options(staging_root)

    # ----- reading a window -----------------------------------------------------------------------
    def table_reader(self, staging_root: str, owner: str, **kwargs: Any) -> TableWindowReader:
        from airflow_provider_cdc.sources.spanner.table_reader import TableWindowReader

        return TableWindowReader(
            self.database,
            self.metastore,
            self.source_key,
            self.staging_folder,
            staging_root,
            owner=owner,
            **self.reader_options(staging_root, kwargs),
        )

    def window_reader(self, staging_root: str, owner: str, **options: Any) -> TableWindowReader:
        return self.table_reader(staging_root, owner, **options)

    def read_window(  # type: ignore[override]
        self, window: Window, staging_root: str, owner: str, **kwargs: Any
    ) -> TableReadSummary:
        """Read batches of the window (sharing the work with other readers) into staging."""
        return super().read_window(window, staging_root, owner, **kwargs)  # type: ignore[return-value]
