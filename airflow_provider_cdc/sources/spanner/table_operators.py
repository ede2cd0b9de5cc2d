"""Operators that open and read a window of Spanner tables: a snapshot, or commit-timestamp tables.

Thin wrappers over :class:`~airflow_provider_cdc.sources.spanner.table_hook.SpannerTableHook`. A **source**
name (a plain identifier) names the staging folder and the metastore key
``projects/{project}/instances/{instance}/databases/{database}/{source}``, which is the merge's
``stream_key``. The connection fields are declared once here (:class:`TableSourceConnection`); this
module imports neither the Google provider nor the Spanner client, so DAG files stay quick to parse.

A pipeline that starts on a database with data takes a snapshot as its first window ``[T - 1µs, T)``
(:func:`snapshot_window_bounds`), merged, applied and committed before the stream's first window
``[T, T + w)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_provider_cdc._compat import AirflowFailException, Context
from airflow_provider_cdc.core.findings import Finding
from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, coerce_timestamp, format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.hooks.connection_fields import (
    ConnectionFields,
    ConnectionFieldsMixin,
    connection_arguments_of,
)
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.hooks.storage import DEFAULT_GCP_CONN_ID
from airflow_provider_cdc.sources.operators import (
    WINDOW_FIELDS,
    OpenWindowOperatorBase,
    ReadWindowOperatorBase,
    SourceWindowOperator,
    json_argument,
    refuse_never_run,
)

if TYPE_CHECKING:
    from airflow_provider_cdc.sources.spanner.table_hook import SpannerTableHook

SNAPSHOT = "snapshot"
COMMIT_TIMESTAMP = "commit_timestamp"


def snapshot_window_bounds(first_window_start: datetime | str) -> dict[str, str]:
    """``window_start``/``window_end`` of the snapshot window ``[T - 1µs, T)`` before the first stream
    window starting at ``T`` (RFC 3339 text, for the operators' arguments)."""
    start = coerce_timestamp(first_window_start)
    return {"window_start": format_timestamp(start - ONE_MICROSECOND), "window_end": format_timestamp(start)}


def tables_argument(tables: Any) -> Any:
    """``tables`` as given, or parsed when a template rendered it as JSON text (``{{ params.tables |
    tojson }}``); blank text is no tables."""
    return json_argument("tables", tables)


@dataclass(frozen=True)
class TableSourceConnection(ConnectionFields):
    """Which database and source a task reads: the arguments :class:`SpannerTableHook` takes.

    :param instance_id: Spanner instance id.
    :param database_id: Spanner database id.
    :param source: the source's name (a plain identifier): its staging folder and metastore key.
    :param project_id: Google Cloud project (default: the connection's project).
    :param gcp_conn_id: the Google Cloud connection (credentials, project).
    :param impersonation_chain: a service account, or a chain of them, to impersonate.
    :param metastore_conn_id: connection of the metastore.
    """

    instance_id: str
    database_id: str
    source: str
    project_id: str | None = None
    gcp_conn_id: str = DEFAULT_GCP_CONN_ID
    impersonation_chain: str | Sequence[str] | None = None
    metastore_conn_id: str = CdcMetastoreHook.default_conn_name

    def to_hook(self) -> SpannerTableHook:
        from airflow_provider_cdc.sources.spanner.table_hook import SpannerTableHook

        return SpannerTableHook(**self.arguments())


TABLE_SOURCE_FIELDS: tuple[str, ...] = TableSourceConnection.field_names()
#: Declares an ``__init__`` of a :class:`TableSourceConnectionMixin` class as taking the fields.
table_source_arguments = connection_arguments_of(TableSourceConnection)


class TableSourceConnectionMixin(ConnectionFieldsMixin):
    """Gives an operator the :class:`TableSourceConnection` fields: keyword arguments, attributes of the
    same names (templated) and :meth:`to_hook`. Put it before the Airflow base class."""

    connection_class = TableSourceConnection
    template_fields: Sequence[str] = TABLE_SOURCE_FIELDS

    instance_id: str
    database_id: str
    source: str
    project_id: str | None
    gcp_conn_id: str
    impersonation_chain: str | Sequence[str] | None
    metastore_conn_id: str

    @table_source_arguments
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)

    if TYPE_CHECKING:

        def to_hook(self) -> SpannerTableHook: ...


class _TableWindowOperator(TableSourceConnectionMixin, SourceWindowOperator):
    """Fields shared by the open and read operators: the connection fields, the window (default the
    run's data interval), the staging root (a ``gs://`` URI or an absolute path) and the pipeline id
    (default the DAG id); all templated."""

    template_fields: Sequence[str] = (*TABLE_SOURCE_FIELDS, *WINDOW_FIELDS)

    @table_source_arguments
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)


class SpannerTableOpenWindowOperator(_TableWindowOperator, OpenWindowOperatorBase):
    """Opens a window of a table source: plans its batches once and records them in the metastore.

    :param mode: ``snapshot`` (``tables``: table names, or ``change_stream``; the window is
        ``[T - 1µs, T)``, see :func:`snapshot_window_bounds`, and becomes the pipeline's first window) or
        ``commit_timestamp`` (``tables``: :class:`~airflow_provider_cdc.sources.spanner.table_rows.
        CommitTimestampTable` fields as dicts, e.g. ``{"table": "DocumentHistory", "timestamp_column":
        "Ts", "entity_key": ["UserId", "DocumentId"], "target_table": "Documents"}``).
    :param change_stream: ``snapshot`` mode: the change stream the pipeline reads after the snapshot.
        Without ``tables`` the snapshot reads every table it watches; of each table it reads the key and
        the columns the stream watches, so the snapshot holds what the stream reports.
    :param tables: a list, or its JSON text (a rendered ``{{ params.tables | tojson }}``).
    :param readers: how many mapped readers read the window (the return value is ``range(readers)``).
    :param first_window_start: ``commit_timestamp`` mode: the pipeline's first window start (default
        this window's start); a snapshot window is always its pipeline's first.
    :param max_partitions: a hint of PartitionQuery batches per table (default: Spanner's choice).
    :param partition_size_bytes: a hint of each batch's size.
    :param page_rows: ``commit_timestamp`` mode: read each table in keyset pages of this many rows,
        ordered by ``(timestamp, key)``, instead of in parallel batches.
    :param on_late_rows: ``fail`` (default, without retries) or ``warn`` when rows were written with a
        commit timestamp in a window already read.
    :param max_wait_seconds: how long to wait for the database's clock to pass the read timestamp.

    Returns the window's handle (pipeline, source key, window, epoch, staging location;
    ``WindowHandle.to_dict()``) for the window's merge, upserts and commit (``window=open.output``), and
    pushes it as the XCom ``window`` with the epoch as the XCom ``epoch``. (It used to return
    ``list(range(readers))``: map readers over a fixed list, ``reader_index=list(range(readers))``.)
    """

    template_fields: Sequence[str] = (
        *_TableWindowOperator.template_fields,
        "mode",
        "tables",
        "change_stream",
        "readers",
        "first_window_start",
        "page_rows",
        "on_late_rows",
    )
    template_fields_renderers = {"tables": "json"}

    def __init__(
        self,
        *,
        mode: str,
        tables: Sequence[str] | Sequence[Mapping[str, Any]] | None = None,
        change_stream: str | None = None,
        max_partitions: int | None = None,
        partition_size_bytes: int | None = None,
        page_rows: int | str | None = None,
        on_late_rows: str = "fail",
        max_wait_seconds: float = 600.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.mode = mode
        self.tables = tables
        self.change_stream = change_stream
        self.max_partitions = max_partitions
        self.partition_size_bytes = partition_size_bytes
        self.page_rows = page_rows
        self.on_late_rows = on_late_rows
        self.max_wait_seconds = max_wait_seconds

    def first_start(self, window: Window) -> datetime:
        """A snapshot window is its pipeline's first; else ``first_window_start`` or this window's start."""
        return window.start if self.mode == SNAPSHOT else super().first_start(window)

    def settings_findings(self) -> list[Finding]:
        """The shared findings, and the mode's, the tables' (JSON text), ``page_rows``' and
        ``on_late_rows``'."""
        from airflow_provider_cdc.sources.spanner.table_hook import ON_LATE_ROWS

        findings = super().settings_findings()
        if self.mode not in (SNAPSHOT, COMMIT_TIMESTAMP):
            problem = f"mode must be {SNAPSHOT!r} or {COMMIT_TIMESTAMP!r}, got {self.mode!r}"
            findings.append(Finding("mode", problem, "give one of them"))
        try:
            tables_argument(self.tables)
        except AirflowFailException as exc:
            findings.append(Finding("tables", str(exc), "give a list, or render a param with '| tojson'"))
        if self.on_late_rows not in ON_LATE_ROWS:
            findings.append(Finding("on_late_rows", f"on_late_rows is {self.on_late_rows!r}",
                                    f"give one of {list(ON_LATE_ROWS)}"))  # fmt: skip
        if self.page_rows not in (None, "") and not str(self.page_rows).strip().isdigit():
            findings.append(Finding("page_rows", f"page_rows is {self.page_rows!r}", "give a number of rows"))
        return findings

    def source_check_options(self) -> dict[str, Any]:
        """The mode, tables and change stream the preflight checks the database for."""
        return {
            "mode": self.mode,
            "tables": tables_argument(self.tables),
            "change_stream": self.change_stream or None,
        }

    def execute(self, context: Context) -> dict[str, Any]:
        self.preflight(context)
        readers = self.reader_count()
        if self.mode not in (SNAPSHOT, COMMIT_TIMESTAMP):
            raise AirflowFailException(
                f"mode must be {SNAPSHOT!r} or {COMMIT_TIMESTAMP!r}, got {self.mode!r}"
            )
        tables = tables_argument(self.tables)
        window, pipeline = self.window(), self.pipeline(context)
        recorded, error = self.record_pipeline(context, window)
        if self.mode == SNAPSHOT and recorded.first_window_start != window.start:
            raise AirflowFailException(
                f"pipeline {pipeline!r} starts at {format_timestamp(recorded.first_window_start)}, not at "
                f"the snapshot window {window}: a snapshot must be the pipeline's first window (open it "
                "before any other window, and give the stream's open operator first_window_start = the "
                "snapshot's start)"
            )
        refuse_never_run(error)
        page_rows = int(self.page_rows) if self.page_rows not in (None, "") else None
        hook = self.to_hook()
        # late rows and invalid tables fail without retries (a retry reads the same)
        summary = hook.open_window(
            pipeline,
            window,
            self.staging_root,
            mode=self.mode,
            tables=tables,
            change_stream=self.change_stream or None,
            max_partitions=self.max_partitions,
            partition_size_bytes=self.partition_size_bytes,
            page_rows=page_rows,
            on_late_rows=self.on_late_rows,
            max_wait_seconds=self.max_wait_seconds,
        )
        handle = hook.window_handle(pipeline, window, self.staging_root, summary.get("epoch"))
        self.push_opened(context, handle)
        self.log.info("Window %s opened: %s; %d reader(s)", window, summary, readers)
        return handle.to_dict()


class SpannerTableReadWindowOperator(_TableWindowOperator, ReadWindowOperatorBase):
    """Reads batches of one window into Parquet staging; several instances share a window.

    Returns a summary for XCom: ``window_id``, ``staging_uri``, ``rows`` (also as ``data_records``
    and ``transactions``: every row is a change of its own), ``batches``, ``tables`` (rows per target
    table), ``retries``, ``seconds``, ``rows_per_second`` and ``reader_index``.
    """

    template_fields: Sequence[str] = (*_TableWindowOperator.template_fields, "reader_index")

    def __init__(
        self,
        *,
        reader_index: int | str = 0,
        lease_seconds: float = 300.0,
        retries_per_batch: int = 5,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            reader_index=reader_index,
            lease_seconds=lease_seconds,
            retries_per_unit=retries_per_batch,
            **kwargs,
        )
        self.retries_per_batch = retries_per_batch
