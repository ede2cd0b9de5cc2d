"""The Spanner sources as pipeline plug-ins: :class:`SpannerChangeStream` (with the initial snapshot)
and :class:`SpannerTables` (commit-timestamp tables), the specs :func:`~airflow_provider_cdc.pipeline.
cdc_pipeline` builds a window's source tasks from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

from airflow_provider_cdc.core.identifiers import InvalidIdentifierError, validate_identifier
from airflow_provider_cdc.specs import (
    PipelineSpecError,
    SnapshotWindow,
    SourceSpec,
    SourceTasks,
    SourceWindow,
    is_template,
    spec_error,
    spec_identifier,
    spec_text,
)

__all__ = ["SpannerChangeStream", "SpannerTables"]


@dataclass(frozen=True, kw_only=True)
class SpannerChangeStream(SourceSpec):
    """A Spanner change stream, read one window of partitions at a time.

    :param instance_id: the Spanner instance.
    :param database_id: the database.
    :param stream: the change stream (a plain identifier).
    :param project_id: the Google Cloud project (default: the connection's).
    :param snapshot_tables: the tables the initial snapshot reads (default: every table the stream
        watches, with the columns it watches).
    :param snapshot_source: the snapshot's name (a plain identifier): its staging folder and metastore
        key (default ``{pipeline_id}_snapshot``).
    :param retention: overrides the stream's ``retention_period`` (``timedelta``, seconds or ``'7d'``).
    :param gcp_conn_id: the Google Cloud connection (default ``google_cloud_default``).
    :param drain_timeout: seconds the drain sensors wait for the stream's partitions.
    """

    kind: ClassVar[str] = "Spanner change stream"
    takes_snapshot: ClassVar[bool] = True
    # An UPDATE record lists only the columns it changed.
    sends_partial_images: ClassVar[bool] = True

    instance_id: str
    database_id: str
    stream: str
    project_id: str | None = None
    snapshot_tables: Sequence[str] | None = None
    snapshot_source: str | None = None
    retention: timedelta | float | str | None = None
    gcp_conn_id: str | None = None
    drain_timeout: float = 3600

    def validate(self) -> None:
        spec_text(self, "instance_id")
        spec_text(self, "database_id")
        spec_identifier(self, "stream", "change stream")
        spec_identifier(self, "snapshot_source", "snapshot source")

    def connection(self) -> dict[str, Any]:
        """The change-stream operators' and sensors' connection arguments."""
        arguments: dict[str, Any] = {
            "instance_id": self.instance_id, "database_id": self.database_id, "stream": self.stream,
        }  # fmt: skip
        for name in ("project_id", "retention", "gcp_conn_id"):
            if getattr(self, name) is not None:
                arguments[name] = getattr(self, name)
        return arguments

    def window_tasks(self, window: SourceWindow) -> SourceTasks:
        """wait_parents ─► open_window ─► read (mapped) ─► drained: the parents of the window's
        partitions drained to its start (and the window before it applied), then every partition of
        the window read to its end."""
        from airflow_provider_cdc.sources.spanner.change_stream_operators import (
            SpannerChangeStreamOpenWindowOperator,
            SpannerChangeStreamReadWindowOperator,
        )
        from airflow_provider_cdc.sources.spanner.sensors import SpannerChangeStreamPartitionsDrainedSensor

        stream, arguments, metastore = self.connection(), window.window_arguments(), dict(window.metastore)
        wait_parents = SpannerChangeStreamPartitionsDrainedSensor(
            task_id="wait_parents",
            timestamp="{{ data_interval_start }}",
            # The window before this one must be applied: a window run out of order, or after a window
            # that failed for good, fails here at once naming the window it waits for.
            pipeline_id=window.predecessor_pipeline or window.pipeline,
            poke_interval=5, timeout=self.drain_timeout, **stream, **metastore,
        )  # fmt: skip
        open_window = SpannerChangeStreamOpenWindowOperator(
            task_id="open_window", readers=window.readers, first_window_start=window.first_window_start,
            snapshot_task_ids=list(window.snapshot_task_ids), **stream, **arguments,
        )  # fmt: skip
        read = SpannerChangeStreamReadWindowOperator.partial(task_id="read", **stream, **arguments).expand(
            reader_index=window.reader_indices()
        )
        drained = SpannerChangeStreamPartitionsDrainedSensor(
            task_id="drained",
            timestamp="{{ data_interval_end }}",
            window_start="{{ data_interval_start }}",
            window_end="{{ data_interval_end }}",
            poke_interval=window.poke_interval, timeout=self.drain_timeout, **stream, **metastore,
        )  # fmt: skip
        return SourceTasks(before=wait_parents, open_window=open_window, read=read, complete=drained)

    def snapshot_tasks(self, snapshot: SnapshotWindow) -> Any:
        """The snapshot window ``[T - 1µs, T)`` of the tables the stream watches: the task group
        ``initial_snapshot`` (:func:`.snapshot_group.initial_snapshot`)."""
        from airflow_provider_cdc.sources.spanner.snapshot_group import initial_snapshot

        name = self.snapshot_source or f"{snapshot.pipeline}_snapshot"
        if not is_template(name):
            try:
                validate_identifier(name, "snapshot source")
            except InvalidIdentifierError as exc:
                raise PipelineSpecError(
                    f"SpannerChangeStream.snapshot_source: {exc}; give a plain identifier (the pipeline id "
                    f"{snapshot.pipeline!r} names no snapshot source)"
                ) from None
        connection = {k: v for k, v in self.connection().items() if k not in ("stream", "retention")}
        return initial_snapshot(
            first_window_start=snapshot.first_window_start,
            source=name,
            change_stream=self.stream,
            tables=self.snapshot_tables,
            locations=snapshot.locations.as_argument(),
            pipeline_id=snapshot.pipeline,
            readers=snapshot.readers,
            targets=snapshot.targets,
            spark_conn_id=snapshot.spark_conn_id,
            group_id="initial_snapshot",
            **snapshot.assets,
            **connection,
            **snapshot.metastore,
        )


@dataclass(frozen=True, kw_only=True)
class SpannerTables(SourceSpec):
    """Spanner tables read by their commit-timestamp column, one window of commit timestamps per run.

    :param source: the source's name (a plain identifier): its staging folder and metastore key.
    :param tables: ``CommitTimestampTable`` fields as dicts (``table``, ``timestamp_column``, and
        ``soft_delete_column``, ``entity_key``, ``target_table``), or a template rendering their JSON
        (``"{{ params.tables | tojson }}"``).
    :param on_late_rows: ``fail`` (default) or ``warn`` when rows arrive in a window already read.
    """

    kind: ClassVar[str] = "Spanner tables"

    instance_id: str
    database_id: str
    source: str
    tables: Sequence[Mapping[str, Any]] | str
    project_id: str | None = None
    on_late_rows: str = "fail"
    page_rows: int | str | None = None
    gcp_conn_id: str | None = None

    def validate(self) -> None:
        spec_text(self, "instance_id")
        spec_text(self, "database_id")
        spec_identifier(self, "source", "source")
        if not is_template(self.tables):
            if isinstance(self.tables, str) or not self.tables:
                fix = "give a list of {'table': …, 'timestamp_column': …} dicts, or a template"
                raise spec_error(self, "tables", f"is {self.tables!r}", fix)
            for index, table in enumerate(self.tables):
                missing = [key for key in ("table", "timestamp_column") if key not in table]
                if missing:
                    raise spec_error(
                        self, f"tables[{index}]", f"lacks {missing}", "name the table and its column"
                    )
                validate_table = table["table"]
                if not is_template(validate_table):
                    try:
                        validate_identifier(validate_table, "table")
                    except InvalidIdentifierError as exc:
                        fix = "give a plain table name"
                        raise spec_error(self, f"tables[{index}]", str(exc), fix) from None
        if not is_template(self.on_late_rows) and self.on_late_rows not in ("fail", "warn"):
            raise spec_error(self, "on_late_rows", f"is {self.on_late_rows!r}", "give 'fail' or 'warn'")

    def connection(self) -> dict[str, Any]:
        """The table operators' connection arguments."""
        arguments: dict[str, Any] = {
            "instance_id": self.instance_id, "database_id": self.database_id, "source": self.source,
        }  # fmt: skip
        for name in ("project_id", "gcp_conn_id"):
            if getattr(self, name) is not None:
                arguments[name] = getattr(self, name)
        return arguments

    def window_tasks(self, window: SourceWindow) -> SourceTasks:
        """open_window ─► read (mapped): the tables' rows committed in the window."""
        from airflow_provider_cdc.sources.spanner.table_operators import (
            COMMIT_TIMESTAMP,
            SpannerTableOpenWindowOperator,
            SpannerTableReadWindowOperator,
        )

        connection, arguments = self.connection(), window.window_arguments()
        open_window = SpannerTableOpenWindowOperator(
            task_id="open_window", mode=COMMIT_TIMESTAMP, tables=self.tables, readers=window.readers,
            first_window_start=window.first_window_start, on_late_rows=self.on_late_rows,
            page_rows=self.page_rows, **connection, **arguments,
        )  # fmt: skip
        read = SpannerTableReadWindowOperator.partial(task_id="read", **connection, **arguments).expand(
            reader_index=window.reader_indices()
        )
        return SourceTasks(open_window=open_window, read=read)
