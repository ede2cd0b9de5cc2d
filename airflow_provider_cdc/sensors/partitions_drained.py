"""Sensor: every change-stream partition alive at a timestamp is drained up to it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_cdc._compat import AirflowException, AirflowFailException, BaseSensorOperator
from airflow_provider_cdc._errors import metastore_errors
from airflow_provider_cdc.domain.timestamps import coerce_timestamp
from airflow_provider_cdc.domain.window import Window
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook

if TYPE_CHECKING:  # imported where used, so that parsing a DAG stays quick
    from airflow_provider_cdc.hooks.spanner_change_stream import LaggingPartition, SpannerChangeStreamHook


def describe_lagging(lagging: list[LaggingPartition], limit: int = 10) -> str:
    shown = "; ".join(f"{p.token} ({p.reason}, {p.behind_seconds:.1f}s behind)" for p in lagging[:limit])
    more = f"; and {len(lagging) - limit} more" if len(lagging) > limit else ""
    return f"{len(lagging)} partition(s) hold it back: {shown}{more}"


class SpannerChangeStreamPartitionsDrainedSensor(BaseSensorOperator):
    """Waits until every partition alive at ``timestamp`` has been read (drained) up to it.

    Used twice per window: with ``timestamp`` = the window start before reading (every parent
    partition drained to the start), and with ``timestamp`` = the window end and ``window_start``/
    ``window_end`` set before merging (every partition of the window read to its end). While waiting
    it logs which partition tokens hold it back and how far behind they are. ``deferrable=True``
    hands the wait to the triggerer.

    With ``pipeline_id`` it first requires the run's window (``window_start``/``window_end``, else the
    run's data interval) to be able to apply: the pipeline's window before it must be applied. A
    window run before its predecessor fails at once, naming the window it waits for and its state,
    instead of waiting for partitions nobody reads (and holding a run slot); when that window was
    never run the failure skips retries.

    While partitions lag, a window (or ``timestamp``) older than the stream's retention fails the
    sensor: those changes can no longer be read. ``retention`` (``timedelta``, seconds or Spanner
    duration text such as ``'7d'``; templated) overrides the stream's ``retention_period`` as
    :class:`~airflow_provider_cdc.hooks.spanner_change_stream.SpannerChangeStreamHook` reads it.
    """

    template_fields: Sequence[str] = (
        "instance_id",
        "database_id",
        "stream",
        "project_id",
        "timestamp",
        "window_start",
        "window_end",
        "pipeline_id",
        "retention",
    )
    ui_color = "#e8f0fe"

    def __init__(
        self,
        *,
        instance_id: str,
        database_id: str,
        stream: str,
        timestamp: Any = "{{ data_interval_start }}",
        window_start: Any = None,
        window_end: Any = None,
        project_id: str | None = None,
        gcp_conn_id: str = "google_cloud_default",
        metastore_conn_id: str = CdcMetastoreHook.default_conn_name,
        deferrable: bool = False,
        pipeline_id: str | None = None,
        retention: Any = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", 5.0)
        super().__init__(**kwargs)
        self.instance_id = instance_id
        self.database_id = database_id
        self.stream = stream
        self.project_id = project_id
        self.timestamp = timestamp
        self.window_start = window_start
        self.window_end = window_end
        self.gcp_conn_id = gcp_conn_id
        self.metastore_conn_id = metastore_conn_id
        self.deferrable = deferrable
        self.pipeline_id = pipeline_id
        self.retention = retention

    def _hook(self) -> SpannerChangeStreamHook:
        from airflow_provider_cdc.hooks.spanner_change_stream import SpannerChangeStreamHook

        return SpannerChangeStreamHook.from_fields(self)

    def _window(self) -> Window | None:
        if self.window_start is None and self.window_end is None:
            return None
        return Window(coerce_timestamp(self.window_start), coerce_timestamp(self.window_end))

    def _require_predecessor_applied(self, context: Any) -> None:
        window = self._window() or Window(
            coerce_timestamp(self.timestamp), coerce_timestamp(context["data_interval_end"])
        )
        with metastore_errors(f"window {window} of pipeline {self.pipeline_id!r}: checking its predecessor"):
            error = CdcMetastoreHook(self.metastore_conn_id).metastore.predecessor_error(
                str(self.pipeline_id), window.start, window.end
            )
        if error is not None:
            raise AirflowFailException(str(error)) if error.never_run else error

    def poke(self, context: Any) -> bool:
        if self.pipeline_id:
            self._require_predecessor_applied(context)
        hook, timestamp, window = self._hook(), coerce_timestamp(self.timestamp), self._window()
        lagging = hook.lagging_partitions(timestamp, window)
        if lagging:
            hook.check_retention(window or timestamp)  # changes past retention can never be drained
            self.log.info("Waiting for %s to be drained: %s", self.timestamp, describe_lagging(lagging))
            return False
        self.log.info("Every partition of %s alive at %s is drained to it", self.stream, self.timestamp)
        return True

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            return None
        from airflow_provider_cdc.triggers.partitions_drained import PartitionsDrainedTrigger

        hook = self._hook()
        window = self._window()
        retention = hook.retention_argument
        self.defer(
            trigger=PartitionsDrainedTrigger(
                instance_id=self.instance_id,
                database_id=self.database_id,
                stream=self.stream,
                project_id=hook.resolved_project_id,
                timestamp=coerce_timestamp(self.timestamp).isoformat(),
                window_start=window.start.isoformat() if window else None,
                window_end=window.end.isoformat() if window else None,
                gcp_conn_id=self.gcp_conn_id,
                metastore_conn_id=self.metastore_conn_id,
                poll_interval=float(self.poke_interval),
                retention=None if retention is None else retention.total_seconds(),
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)),
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> None:
        if event.get("status") != "drained":
            raise AirflowException(f"waiting for drained partitions failed: {event.get('message')}")
        self.log.info("Every partition alive at %s is drained to it", event.get("timestamp"))
