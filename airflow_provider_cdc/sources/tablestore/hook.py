"""The Table Store source's hook: windows of a table's stream, by record time, read shard by shard.

A window ``[start, end)`` holds the records written (``sequence.timestamp_us``) in it, cut per shard by
stream position: a shard's part of the window ends at its first record at or after ``end`` (see
:mod:`~airflow_provider_cdc.sources.tablestore.reader`). A window is readable once the clock is past
``end`` plus a settling margin (default 5 minutes: clock steps between the service's machines) and
while its start is inside the stream's retention (``expiration_time`` hours) less a safety margin
(default 10 minutes): :meth:`TablestoreStreamHook.check_readable`.

Opening a window takes a ``DescribeStream`` (after ``end``), records every shard as a partition of the
source with its lineage (parent, and merge sibling, as parents) and the shards the window reads (all
but those drained at its start) as the window's units
(:mod:`~airflow_provider_cdc.sources.tablestore.shards`).
Recorded shards the listing no longer holds, or that are not read, end at the window's start, so no
child waits for them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from functools import cached_property
from typing import Any

from airflow_provider_cdc._compat import AirflowFailException
from airflow_provider_cdc.core.findings import OK, Finding, did_you_mean
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.timestamps import format_timestamp, to_micros
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.metastore.model import PartitionSpec, PartitionState, is_stream_path_segment
from airflow_provider_cdc.sources.hook import SourceError, WindowSourceHook
from airflow_provider_cdc.sources.tablestore.checkpoints import ShardCheckpoints
from airflow_provider_cdc.sources.tablestore.client import (
    StreamDescription,
    TablestoreError,
    TablestoreStreamClient,
)
from airflow_provider_cdc.sources.tablestore.connection import TablestoreHook
from airflow_provider_cdc.sources.tablestore.reader import DEFAULT_BATCH_LIMIT, TablestoreWindowReader
from airflow_provider_cdc.sources.tablestore.shards import window_shards
from airflow_provider_cdc.sources.tablestore.types import declared_types

__all__ = [
    "DEFAULT_RETENTION_MARGIN",
    "DEFAULT_SETTLE_MARGIN",
    "TablestoreSourceError",
    "TablestoreStreamHook",
    "WindowNotSettledError",
    "WindowTrimmedError",
]

#: How long after a window's end it is read (DataX's ``AFTER_OFFSET``: clock steps between machines).
DEFAULT_SETTLE_MARGIN = timedelta(minutes=5)
#: How far inside the retention a window's start must be (DataX's ``BEFORE_OFFSET``).
DEFAULT_RETENTION_MARGIN = timedelta(minutes=10)


class TablestoreSourceError(SourceError):
    """A Table Store window step failed; the message names the window, the stream and the shard."""


class WindowNotSettledError(TablestoreSourceError):
    """A window whose end is too recent: records written before it may not all be readable yet."""


class WindowTrimmedError(TablestoreSourceError, AirflowFailException):
    """A window that starts outside the stream's retention: its records may already be trimmed."""

    permanent = True


class TablestoreStreamHook(WindowSourceHook):
    """Windows of the stream of one Table Store table, read into staging.

    :param table: the table (its stream must be enabled).
    :param tablestore_conn_id: the ``tablestore`` connection (endpoint, instance, access key).
    :param metastore_conn_id: connection of the metastore.
    :param column_types: declared Table Store types (``INTEGER``, ``DOUBLE``, ``BOOLEAN``, ``STRING``,
        ``BINARY``) of columns, by name: a column an update deletes has no value to tell its type.
    :param settle_margin: how long after its end a window is read (default 5 minutes).
    :param retention_margin: how far inside the retention a window must start (default 10 minutes).
    :param batch_limit: records per ``GetStreamRecord`` call.
    :param client: a stream client to use instead of the connection's.
    :param clock: the current UTC time (a test drives it).
    """

    def __init__(
        self,
        table: str,
        *,
        tablestore_conn_id: str = TablestoreHook.default_conn_name,
        metastore_conn_id: str = CdcMetastoreHook.default_conn_name,
        column_types: Mapping[str, str] | None = None,
        settle_margin: timedelta = DEFAULT_SETTLE_MARGIN,
        retention_margin: timedelta = DEFAULT_RETENTION_MARGIN,
        batch_limit: int = DEFAULT_BATCH_LIMIT,
        client: TablestoreStreamClient | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        super().__init__()
        self.table = validate_identifier(table, "Table Store table")
        self.tablestore_conn_id = tablestore_conn_id
        self.metastore_conn_id = metastore_conn_id
        self.declared_types = declared_types(column_types, self.table)
        self.settle_margin = settle_margin
        self.retention_margin = retention_margin
        self.batch_limit = batch_limit
        self._client = client
        self._clock = clock or (lambda: datetime.now(timezone.utc))

    source_error = TablestoreSourceError

    # ----- the stream -----------------------------------------------------------------------------
    @property
    def client(self) -> TablestoreStreamClient:
        if self._client is None:
            self._client = TablestoreHook(self.tablestore_conn_id).get_conn()
        return self._client

    @cached_property
    def stream_id(self) -> str:
        """The table's stream (``ListStream``; the newest when the stream was re-enabled)."""
        streams = self.client.list_streams(self.table)
        if not streams:
            raise TablestoreSourceError(
                f"table {self.table!r} of instance {self.client.instance!r} has no stream: enable it "
                "(StreamSpecification enable_stream) before reading its changes"
            )
        return max(streams, key=lambda s: s.creation_time_us).stream_id

    def describe(self) -> StreamDescription:
        """The stream's retention, status and shards now."""
        return self.client.describe_stream(self.stream_id)

    @property
    def source_key(self) -> str:
        instance = self.client.instance
        segment = instance if is_stream_path_segment(instance) else "instance"
        return f"tablestore/{segment}/{self.table}"

    @cached_property
    def checkpoints(self) -> ShardCheckpoints:
        return ShardCheckpoints(self.metastore, self.source_key)

    # ----- the source's part ----------------------------------------------------------------------
    def check_source(self, **options: Any) -> list[Finding]:
        """The instance answers with the connection's key and the table has a stream; else the tables
        that have one."""
        with_streams: list[str] = []
        try:
            with_streams = sorted({info.table_name for info in self.client.list_streams()})
            if self.table in with_streams:
                return [Finding("table", f"table {self.table!r} has a stream", level=OK)]
            self.client.list_streams(self.table)  # OTSObjectNotExist: no such table
        except TablestoreError as exc:
            if exc.code == "OTSObjectNotExist":
                return [Finding(
                    "table",
                    f"table {self.table!r} does not exist in Table Store instance {self.client.instance!r}",
                    did_you_mean(self.table, with_streams, "table with a stream"),
                )]
            if exc.code == "OTSAuthFailed":
                return [Finding(
                    "tablestore_conn_id",
                    f"Table Store instance {self.client.instance!r} refused the key of connection "
                    f"{self.tablestore_conn_id!r}: {exc.detail}",
                    "fix the connection's access key id (login) and secret (password)",
                )]
            return [Finding(
                "tablestore_conn_id", f"Table Store instance {self.client.instance!r}: {exc}",
                "check the connection's endpoint and instance", transient=not exc.permanent,
            )]
        return [Finding(
            "table",
            f"table {self.table!r} of Table Store instance {self.client.instance!r} has no stream",
            "enable its stream (StreamSpecification enable_stream) before reading its changes",
        )]

    def check_readable(self, window: Window) -> None:
        """Fail while the window's end is within the settling margin, or when its start is outside
        the stream's retention less the margin; both errors name the window."""
        now = self._clock()
        if now < window.end + self.settle_margin:
            raise WindowNotSettledError(
                f"window {window} of table {self.table!r}: readable from "
                f"{format_timestamp(window.end + self.settle_margin)} (end + settle margin "
                f"{self.settle_margin}), it is {format_timestamp(now)}"
            )
        hours = self.describe().expiration_hours
        oldest = now - timedelta(hours=hours) + self.retention_margin
        if window.start < oldest:
            raise WindowTrimmedError(
                f"window {window} of table {self.table!r}: its start is outside the stream's retention "
                f"of {hours} h (records before {format_timestamp(oldest)} may be trimmed, margin "
                f"{self.retention_margin}); re-snapshot the table to continue"
            )

    def plan_units(self, window: Window, staging_root: str, owner: str, **options: Any) -> list[str]:
        """Record the stream's shards (with lineage) and the window's shards as its units."""
        description = self.describe()
        start_us = to_micros(window.start)
        at_start = self.checkpoints.at(start_us)
        listed = [shard.shard_id for shard in description.shards]
        units = window_shards(listed, at_start)
        lost = sorted(
            shard for shard, checkpoint in at_start.items() if not checkpoint.drained and shard not in listed
        )
        if lost:
            raise WindowTrimmedError(
                f"window {window} of table {self.table!r}: shard(s) {', '.join(lost)} of stream "
                f"{self.stream_id!r} were not read to their end and are no longer listed (trimmed)"
            )
        store = self.metastore
        store.add_partitions(
            self.source_key,
            [PartitionSpec(shard.shard_id, window.start, shard.parents) for shard in description.shards],
        )
        unit_set = set(units)
        stale = [
            record.token
            for record in store.list_partitions(self.source_key)
            if record.state != PartitionState.FINISHED
            and record.token not in unit_set
            and record.start_timestamp <= window.start
        ]
        if stale:
            store.end_partitions(self.source_key, stale, window.start)
        if not units:
            raise TablestoreSourceError(
                f"window {window} of table {self.table!r}: stream {self.stream_id!r} lists no shard to read"
            )
        store.add_window_partitions(self.source_key, window.start, window.end, units)
        self.log.info(
            "Window %s of table %s: %d shard(s) of %d listed (stream %s)",
            window,
            self.table,
            len(units),
            len(listed),
            self.stream_id,
        )
        return units

    def window_reader(self, staging_root: str, owner: str, **options: Any) -> TablestoreWindowReader:
        return TablestoreWindowReader(
            self.client,
            self.stream_id,
            self.table,
            self.checkpoints,
            self.metastore,
            self.source_key,
            self.staging_folder,
            staging_root,
            owner=owner,
            declared_types=self.declared_types,
            batch_limit=self.batch_limit,
            **self.reader_options(staging_root, options),
        )
