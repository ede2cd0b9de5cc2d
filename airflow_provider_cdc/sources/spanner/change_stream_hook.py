"""Hook that reads bounded windows of a Google Cloud Spanner change stream into staging."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_provider_cdc._errors import metastore_errors
from airflow_provider_cdc.core.findings import Finding, errors_of
from airflow_provider_cdc.core.identifiers import InvalidIdentifierError, validate_identifier
from airflow_provider_cdc.core.timestamps import ensure_utc, format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.hooks.storage import DEFAULT_GCP_CONN_ID
from airflow_provider_cdc.metastore.completion import (
    STALLED_AFTER_HEARTBEATS,
    LaggingPartition,
    describe_lagging,
    lagging_units,
)
from airflow_provider_cdc.sources.hook import WindowSourceHook
from airflow_provider_cdc.sources.spanner.database import EMULATOR_ENV, SpannerDatabase
from airflow_provider_cdc.sources.spanner.durations import (
    DEFAULT_HEARTBEAT_MS,
    RetentionValue,
    format_duration,
    parse_retention,
)
from airflow_provider_cdc.sources.spanner.errors import (
    ChangeStreamConfigError,
    ChangeStreamError,
    RetentionExpiredError,
)

if TYPE_CHECKING:  # imported where used: a DAG file that only names this hook stays quick to parse
    from airflow_provider_cdc.sources.spanner.change_stream_query import ChangeStreamQuery
    from airflow_provider_cdc.sources.spanner.window_reader import ReadSummary, WindowReader

__all__ = ["LaggingPartition", "Retention", "SpannerChangeStreamHook", "describe_lagging", "parse_retention"]

__all__ += ["EMULATOR_ENV", "STALLED_AFTER_HEARTBEATS"]

#: Spanner keeps a change stream's records this long when the stream sets no ``retention_period``.
SPANNER_DEFAULT_RETENTION = timedelta(days=1)
#: Windows older than this share of the retention period log a warning.
RETENTION_WARNING_SHARE = 0.8
RETENTION_QUERY = (
    "SELECT option_value FROM INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS "
    "WHERE change_stream_name = @name AND option_name = 'retention_period'"
)


@dataclass(frozen=True)
class Retention:
    """A change stream's retention period and where it came from (``argument``, ``stream`` or ``default``)."""

    period: timedelta
    source: str
    option_value: str | None = None

    def describe(self) -> str:
        """``7d (the stream's retention_period option, …)``: the period and its source, for messages."""
        where = {
            "argument": "given by the retention argument",
            "stream": f"the stream's retention_period option {self.option_value!r} in "
            "INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS",
            "default": "Spanner's default; the stream sets no retention_period",
        }[self.source]
        return f"{format_duration(self.period)} ({where})"


class SpannerChangeStreamHook(SpannerDatabase, WindowSourceHook):
    """Reads ``[start, end)`` windows of a Spanner change stream, partition lineage in the metastore.

    Uses the same Google Cloud connection as ``SpannerHook`` (credentials, project, impersonation);
    with ``SPANNER_EMULATOR_HOST`` set it talks to that emulator with anonymous credentials, and needs
    no Google Cloud connection (:class:`~airflow_provider_cdc.sources.spanner.database.SpannerDatabase`).

    :param instance_id: Spanner instance id.
    :param database_id: Spanner database id.
    :param stream: change stream name (read through ``READ_<stream>``).
    :param project_id: Google Cloud project (defaults to the connection's project).
    :param gcp_conn_id: the Google Cloud connection.
    :param impersonation_chain: a service account, or a chain of them, to impersonate.
    :param metastore_conn_id: connection of the partition/window metastore.
    :param heartbeat_ms: heartbeat interval asked of each partition query (1000–300000).
    :param retention: the stream's retention period (``timedelta``, seconds, or Spanner duration text
        such as ``'7d'``). Default: the stream's ``retention_period`` from
        ``INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS``, else Spanner's default of one day. A window that
        starts longer ago than that (by the database's clock) fails; one older than 80% of it logs a
        warning.

    The Spanner client, the metastore and the retention are built or looked up once per hook. Invalid
    arguments raise :class:`ChangeStreamConfigError`, a window past the retention
    :class:`RetentionExpiredError`, and a step Spanner or the metastore refuses :class:`ChangeStreamError`.
    """

    source_error = ChangeStreamError
    hook_name = "Google Cloud Spanner Change Stream"

    def __init__(
        self,
        *,
        instance_id: str,
        database_id: str,
        stream: str,
        project_id: str | None = None,
        gcp_conn_id: str = DEFAULT_GCP_CONN_ID,
        impersonation_chain: str | Sequence[str] | None = None,
        metastore_conn_id: str = CdcMetastoreHook.default_conn_name,
        heartbeat_ms: int = DEFAULT_HEARTBEAT_MS,
        retention: RetentionValue | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            instance_id=instance_id,
            database_id=database_id,
            project_id=project_id,
            gcp_conn_id=gcp_conn_id,
            impersonation_chain=impersonation_chain,
            **kwargs,
        )
        try:
            self.stream = validate_identifier(stream, "change stream")
        except InvalidIdentifierError as exc:
            raise ChangeStreamConfigError(str(exc)) from exc
        self.metastore_conn_id = metastore_conn_id
        try:  # a templated value arrives as text
            self.heartbeat_ms = int(heartbeat_ms)
        except (TypeError, ValueError) as exc:
            raise ChangeStreamConfigError(
                f"change stream {self.stream}: heartbeat_ms {heartbeat_ms!r} is not a number of milliseconds"
            ) from exc
        try:
            self.retention_argument = None if retention in (None, "") else parse_retention(retention)
        except ValueError as exc:
            raise ChangeStreamConfigError(f"change stream {self.stream}: {exc}") from exc

    @property
    def stream_key(self) -> str:
        """The stream's name in the metastore: ``projects/…/databases/<db>/<stream>``."""
        return f"{self.database_path}/{self.stream}"

    @property
    def source_key(self) -> str:
        return self.stream_key

    def change_stream_query(self) -> ChangeStreamQuery:
        from airflow_provider_cdc.sources.spanner.change_stream_query import ChangeStreamQuery

        return ChangeStreamQuery(self.database, self.stream, self.heartbeat_ms)

    # ----- windows --------------------------------------------------------------------------------
    def window_reader(self, staging_root: str, owner: str, **kwargs: Any) -> WindowReader:
        from airflow_provider_cdc.sources.spanner.window_reader import WindowReader

        return WindowReader(
            self.change_stream_query(),
            self.metastore,
            self.stream_key,
            staging_root,
            owner=owner,
            **self.reader_options(staging_root, kwargs),
        )

    def plan_units(self, window: Window, staging_root: str, owner: str, **options: Any) -> list[str]:
        """Extend the lineage to cover the window and record the partitions it must read (more may
        appear as partitions split or merge)."""
        return self.window_reader(staging_root, owner, **options).prepare(window)

    def check_readable(self, window: Window) -> None:
        """Fail for a window outside the stream's retention (see :meth:`check_retention`)."""
        self.check_retention(window)

    def check_source(self, **options: Any) -> list[Finding]:
        """The database answers (:meth:`check_database`) and has the change stream (else suggestions
        from its streams)."""
        findings = self.check_database()
        if errors_of(findings):
            return findings
        return [*findings, *self.check_change_stream(self.stream, "stream")]

    @cached_property
    def retention(self) -> Retention:
        """The stream's retention: the ``retention`` argument, else the stream's ``retention_period``
        option, else Spanner's default (looked up once per hook)."""
        if self.retention_argument is not None:
            return Retention(self.retention_argument, "argument")
        from google.api_core import exceptions as gexc
        from google.cloud.spanner_v1 import param_types

        try:
            with self.database.snapshot() as snapshot:
                found = snapshot.execute_sql(
                    RETENTION_QUERY, params={"name": self.stream}, param_types={"name": param_types.STRING}
                )
                rows = list(found)
        except gexc.GoogleAPICallError as exc:
            raise ChangeStreamError(
                f"change stream {self.stream}: cannot read its retention_period from "
                f"INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS of {self.database_path} ({exc}); "
                "pass retention= to give it"
            ) from exc
        if not rows or rows[0][0] in (None, ""):
            return Retention(SPANNER_DEFAULT_RETENTION, "default")
        text = str(rows[0][0])
        try:
            return Retention(parse_retention(text), "stream", text)
        except ValueError as exc:
            raise ChangeStreamConfigError(
                f"change stream {self.stream}: its retention_period option {text!r} is not a duration this "
                "hook reads; pass retention= to give it"
            ) from exc

    def check_retention(self, window: Window | datetime, now: datetime | None = None) -> Retention:
        """Fail if ``window`` (or a timestamp) starts outside the stream's retention period; warn when it
        is close to it.

        Ages are measured against ``now``, by default the database's clock. Returns the retention used.
        """
        now = ensure_utc(now) if now is not None else self.database_now()
        retention = self.retention
        if isinstance(window, Window):
            start, what = window.start, f"window {window} starts"
        else:
            start = ensure_utc(window)
            what = f"timestamp {format_timestamp(start)} is"
        age = now - start
        shown_age = str(timedelta(seconds=int(age.total_seconds())))
        if age > retention.period:
            raise RetentionExpiredError(
                f"{what} {shown_age} before {format_timestamp(now)}, outside change stream "
                f"{self.stream}'s retention period of {retention.describe()}: its changes can no longer be "
                "read"
            )
        if age > retention.period * RETENTION_WARNING_SHARE:
            self.log.warning(
                "%s %s before %s; change stream %s keeps changes for %s only",
                what[0].upper() + what[1:],
                shown_age,
                format_timestamp(now),
                self.stream,
                retention.describe(),
            )
        return retention

    def open_window(self, pipeline: str, window: Window, staging_root: str, owner: str) -> list[str]:
        """Start (or restart) reading a window: record it, extend the lineage, reset its partitions.

        Returns the tokens the window must read (more may appear as partitions split or merge).
        """
        return self.open_window_epoch(pipeline, window, staging_root, owner)[1]

    def open_window_epoch(
        self, pipeline: str, window: Window, staging_root: str, owner: str, **options: Any
    ) -> tuple[int, list[str]]:
        """:meth:`open_window`, also returning the opening's epoch.

        Every opening is an epoch of the window (its ``attempt``): a window recorded before, in any
        state, is re-opened with the next one, which fences every step of the runs of earlier
        openings out (:meth:`~airflow_provider_cdc.sources.hook.WindowSourceHook.reopen_window`).
        """
        return super().open_window_epoch(pipeline, window, staging_root, owner, **options)

    def read_window(self, window: Window, staging_root: str, owner: str, **kwargs: Any) -> ReadSummary:
        """Read partitions of the window (sharing the work with other readers) into staging."""
        return super().read_window(window, staging_root, owner, **kwargs)  # type: ignore[return-value]

    def lagging_partitions(self, timestamp: datetime, window: Window | None = None) -> list[LaggingPartition]:
        """Partitions alive at ``timestamp`` not drained to it, and unread partitions of ``window``."""
        timestamp = ensure_utc(timestamp)
        what = f"window {window}" if window is not None else f"change stream {self.stream}"
        at = format_timestamp(timestamp)
        with metastore_errors(f"{what}: checking which partitions are drained to {at}"):
            return lagging_units(self.metastore, self.stream_key, timestamp, window)
