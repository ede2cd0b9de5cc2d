"""Hook that reads bounded windows of a Google Cloud Spanner change stream into staging."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.google.common.hooks.base_google import GoogleBaseHook

from airflow_provider_cdc._compat import AirflowNotFoundException, BaseHook
from airflow_provider_cdc._errors import (
    ChangeStreamConfigError,
    ChangeStreamError,
    RetentionExpiredError,
    metastore_errors,
)
from airflow_provider_cdc.core.identifiers import InvalidIdentifierError, validate_identifier
from airflow_provider_cdc.core.timestamps import coerce_timestamp, ensure_utc, format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.filesystems import is_local
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.metastore import Metastore, MetastoreError, PartitionRecord
from airflow_provider_cdc.sources.spanner.connection import (
    DEFAULT_GCP_CONN_ID,
    DEFAULT_HEARTBEAT_MS,
    RetentionValue,
    parse_retention,
)
from airflow_provider_cdc.sources.spanner.durations import format_duration

if TYPE_CHECKING:  # imported where used: a DAG file that only names this hook stays quick to parse
    from airflow_provider_cdc.sources.spanner.change_stream_query import ChangeStreamQuery
    from airflow_provider_cdc.sources.spanner.window_reader import ReadSummary, WindowReader

__all__ = ["LaggingPartition", "Retention", "SpannerChangeStreamHook", "describe_lagging", "parse_retention"]

EMULATOR_ENV = "SPANNER_EMULATOR_HOST"
_SPANNER_ID_HINT = "lowercase letters, digits, hyphens and underscores"

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


def _validate_resource_id(value: str, kind: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[a-z][a-z0-9_\-]{1,62}[a-z0-9]", value):
        raise ChangeStreamConfigError(f"invalid Spanner {kind} id {value!r}: expected {_SPANNER_ID_HINT}")
    return value


@dataclass(frozen=True)
class LaggingPartition:
    """A partition that holds back a drain check: how far its watermark is behind the target."""

    token: str
    watermark: datetime
    behind_seconds: float
    reason: str


def describe_lagging(lagging: list[LaggingPartition], limit: int = 10) -> str:
    """``N partition(s) hold it back: <token> (<reason>, <s>s behind); …`` for a drain check's log."""
    shown = "; ".join(f"{p.token} ({p.reason}, {p.behind_seconds:.1f}s behind)" for p in lagging[:limit])
    more = f"; and {len(lagging) - limit} more" if len(lagging) > limit else ""
    return f"{len(lagging)} partition(s) hold it back: {shown}{more}"


#: A held partition whose reader has reported nothing for this many heartbeat intervals is stalled.
STALLED_AFTER_HEARTBEATS = 3


def _stall_detail(partition: PartitionRecord | None) -> str:
    """Why a stalled partition waits (empty for a partition that is not stalled)."""
    if partition is None:
        return ""
    expiry = partition.lease_expires_at
    return (
        f"; its reader {partition.lease_owner} has reported no progress for {STALLED_AFTER_HEARTBEATS} "
        f"heartbeat intervals of {partition.heartbeat_ms} ms and may have died"
        + (f" (another reader takes it over when the lease expires at {format_timestamp(expiry)})"
           if expiry is not None else "")
    )


@contextmanager
def _window_errors(window: Window, what: str) -> Iterator[None]:
    """Re-raise the reader's and the metastore's errors of a window step as :class:`ChangeStreamError`
    (an unreachable metastore as ``MetastoreUnavailableError`` naming ``what``)."""
    from airflow_provider_cdc.sources.spanner.window_reader import ChangeStreamReadError

    try:
        with metastore_errors(what):
            yield
    except ChangeStreamReadError as exc:
        raise ChangeStreamError(str(exc)) from exc
    except MetastoreError as exc:
        raise ChangeStreamError(f"window {window}: {exc}") from exc


class SpannerChangeStreamHook(GoogleBaseHook):
    """Reads ``[start, end)`` windows of a Spanner change stream, partition lineage in the metastore.

    Uses the same Google Cloud connection as ``SpannerHook`` (credentials, project, impersonation);
    with ``SPANNER_EMULATOR_HOST`` set it talks to that emulator with anonymous credentials.

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

    conn_name_attr = "gcp_conn_id"
    default_conn_name = DEFAULT_GCP_CONN_ID
    conn_type = "gcpspanner"
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
        try:
            super().__init__(gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain, **kwargs)
        except AirflowNotFoundException:
            if not os.environ.get(EMULATOR_ENV):
                raise
            # Against the emulator no Google Cloud connection is needed: credentials are anonymous.
            BaseHook.__init__(self, **kwargs)
            self.gcp_conn_id, self.impersonation_chain, self.quota_project_id = (
                gcp_conn_id,
                impersonation_chain,
                None,
            )
            self.extras, self._cached_credentials, self._cached_project_id = {}, None, None
        try:
            self.stream = validate_identifier(stream, "change stream")
        except InvalidIdentifierError as exc:
            raise ChangeStreamConfigError(str(exc)) from exc
        self.instance_id = _validate_resource_id(instance_id, "instance")
        self.database_id = _validate_resource_id(database_id, "database")
        self._project_id = project_id
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

    # ----- connections ----------------------------------------------------------------------------
    @property
    def emulator_host(self) -> str | None:
        return os.environ.get(EMULATOR_ENV) or None

    @cached_property
    def resolved_project_id(self) -> str:
        if self._project_id:
            return self._project_id
        if self.emulator_host:
            return "emulator-project"
        project = self.project_id
        if not project:
            raise ChangeStreamConfigError(
                f"no Google Cloud project: set project_id or the connection {self.gcp_conn_id!r}'s project"
            )
        return project

    @cached_property
    def client(self) -> Any:
        from google.cloud.spanner_v1 import Client

        if self.emulator_host:
            from google.auth.credentials import AnonymousCredentials

            return Client(project=self.resolved_project_id, credentials=AnonymousCredentials())
        from airflow.providers.google.common.consts import CLIENT_INFO

        return Client(
            project=self.resolved_project_id,
            credentials=self.get_credentials(),
            client_info=CLIENT_INFO,
            client_options=self.get_client_options(),
        )

    def get_conn(self) -> Any:
        """The ``google.cloud.spanner_v1.database.Database`` the stream belongs to."""
        return self.database

    @cached_property
    def database(self) -> Any:
        return self.client.instance(self.instance_id).database(self.database_id)

    @property
    def database_path(self) -> str:
        return (
            f"projects/{self.resolved_project_id}/instances/{self.instance_id}/databases/{self.database_id}"
        )

    @property
    def stream_key(self) -> str:
        """The stream's name in the metastore: ``projects/…/databases/<db>/<stream>``."""
        return f"{self.database_path}/{self.stream}"

    @cached_property
    def _metastore_hook(self) -> CdcMetastoreHook:
        return CdcMetastoreHook(self.metastore_conn_id)

    @property
    def metastore(self) -> Metastore:
        """The metastore, on one engine for the life of this hook (see :meth:`close`)."""
        return self._metastore_hook.metastore

    def close(self) -> None:
        """Dispose the metastore engine (a later use opens a new one)."""
        if "_metastore_hook" in self.__dict__:
            self._metastore_hook.close()

    def change_stream_query(self) -> ChangeStreamQuery:
        from airflow_provider_cdc.sources.spanner.change_stream_query import ChangeStreamQuery

        return ChangeStreamQuery(self.database, self.stream, self.heartbeat_ms)

    # ----- windows --------------------------------------------------------------------------------
    def window_reader(self, staging_root: str, owner: str, **kwargs: Any) -> WindowReader:
        from airflow_provider_cdc.sources.spanner.window_reader import WindowReader

        kwargs.setdefault("log", self.log)
        if "storage_options" not in kwargs and not is_local(staging_root):
            # Staging is written with the same identity as the change sets and the lake.
            from airflow_provider_cdc.hooks.storage import storage_options

            kwargs["storage_options"] = storage_options(self.gcp_conn_id)
        return WindowReader(
            self.change_stream_query(), self.metastore, self.stream_key, staging_root, owner=owner, **kwargs
        )

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

    def database_now(self) -> datetime:
        """The database's current time (``CURRENT_TIMESTAMP()``), which retention is measured against."""
        from google.api_core import exceptions as gexc

        try:
            with self.database.snapshot() as snapshot:
                rows = list(snapshot.execute_sql("SELECT CURRENT_TIMESTAMP()"))
        except gexc.GoogleAPICallError as exc:
            raise ChangeStreamError(f"cannot read the current time of {self.database_path}: {exc}") from exc
        return coerce_timestamp(rows[0][0])

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
        self, pipeline: str, window: Window, staging_root: str, owner: str
    ) -> tuple[int, list[str]]:
        """:meth:`open_window`, also returning the opening's epoch.

        Every opening is an epoch of the window (its ``attempt``): a window recorded before, in any
        state, is re-opened with the next one, which fences every step of the runs of earlier
        openings out. Staged files are never deleted here: each claim writes a folder of its own,
        a run of an earlier opening may still be merging its claims, and the merge reads recorded
        claims only.
        """
        self.check_retention(window)
        with _window_errors(window, f"window {window} of pipeline {pipeline!r}: opening the window"):
            store = self.metastore
            # A window recorded before (a retry, clear, backfill, or a second run) opens again.
            record = store.open_window(
                pipeline, self.stream_key, window.start, window.end, staging_uri=staging_root, reopen=True
            )
            store.reset_window_partitions(self.stream_key, window.start, window.end)
            return record.attempt, self.window_reader(staging_root, owner).prepare(window)

    def read_window(self, window: Window, staging_root: str, owner: str, **kwargs: Any) -> ReadSummary:
        """Read partitions of the window (sharing the work with other readers) into staging."""
        self.check_retention(window)
        with _window_errors(window, f"window {window}: reading it (reader {owner})"):
            return self.window_reader(staging_root, owner, **kwargs).read(window)

    def lagging_partitions(self, timestamp: datetime, window: Window | None = None) -> list[LaggingPartition]:
        """Partitions alive at ``timestamp`` not drained to it, and unread partitions of ``window``."""
        timestamp = ensure_utc(timestamp)
        what = f"window {window}" if window is not None else f"change stream {self.stream}"
        at = format_timestamp(timestamp)
        with metastore_errors(f"{what}: checking which partitions are drained to {at}"):
            return self._lagging_partitions(timestamp, window)

    def _lagging_partitions(self, timestamp: datetime, window: Window | None) -> list[LaggingPartition]:
        store = self.metastore
        if not store.is_known_stream(self.stream_key):
            if window is not None:
                return [LaggingPartition("<initial query>", timestamp, 0.0, "the window has not been opened")]
            return []
        behind = store.lagging_partitions(self.stream_key, timestamp)
        stalled = {}
        if behind:
            found = store.stalled_partitions(self.stream_key, missed_heartbeats=STALLED_AFTER_HEARTBEATS)
            stalled = {p.token: p for p in found}
        lagging = [
            LaggingPartition(
                p.token,
                p.watermark,
                (timestamp - p.watermark).total_seconds(),
                f"drained to {format_timestamp(p.watermark)}" + _stall_detail(stalled.get(p.token)),
            )
            for p in behind
        ]
        if window is not None:
            items = store.window_partitions(self.stream_key, window.start, window.end)
            if not items:
                lagging.append(LaggingPartition("<window>", timestamp, 0.0, "the window has not been opened"))
            for item in items:
                if item.state != "done":
                    lagging.append(
                        LaggingPartition(
                            item.token,
                            window.start,
                            (window.end - window.start).total_seconds(),
                            f"not yet read for window {window} "
                            f"(state {item.state}, reader {item.lease_owner})",
                        )
                    )
        return lagging
