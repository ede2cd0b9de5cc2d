"""Sensor: every change-stream partition alive at a timestamp is drained up to it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_cdc._compat import AirflowFailException, BaseSensorOperator, Context, default_deferrable
from airflow_provider_cdc._errors import DrainWaitError, metastore_errors
from airflow_provider_cdc.core.timestamps import coerce_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.sources.spanner.connection import (
    ChangeStreamConnectionMixin,
    connection_arguments,
)
from airflow_provider_cdc.triggers.partitions_drained import PartitionsDrainedTrigger

if TYPE_CHECKING:  # imported where used, so that parsing a DAG stays quick
    from airflow_provider_cdc.sources.spanner.change_stream_hook import SpannerChangeStreamHook


class SpannerChangeStreamPartitionsDrainedSensor(ChangeStreamConnectionMixin, BaseSensorOperator):
    """Waits until every partition alive at ``timestamp`` has been read (drained) up to it.

    Used twice per window: with ``timestamp`` = the window start before reading (every parent
    partition drained to the start), and with ``timestamp`` = the window end and ``window_start``/
    ``window_end`` set before merging (every partition of the window read to its end). While waiting
    it logs which partition tokens hold it back and how far behind they are. ``deferrable=True``
    hands the wait to the triggerer; by default it follows Airflow's ``[operators] default_deferrable``.

    With ``pipeline_id`` it first requires the run's window (``window_start``/``window_end``, else the
    run's data interval) to be able to apply: the pipeline's window before it must be applied. A
    window run before its predecessor fails at once, naming the window it waits for and its state,
    instead of waiting for partitions nobody reads (and holding a run slot); when that window was
    never run the failure skips retries.

    While partitions lag, a window (or ``timestamp``) older than the stream's retention fails the
    sensor: those changes can no longer be read. ``retention`` (``timedelta``, seconds or Spanner
    duration text such as ``'7d'``) overrides the stream's ``retention_period`` as
    :class:`~airflow_provider_cdc.sources.spanner.change_stream_hook.SpannerChangeStreamHook` reads it. The
    change stream's connection fields are those of
    :class:`~airflow_provider_cdc.sources.spanner.connection.ChangeStreamConnection`; every field is
    templated.
    """

    template_fields: Sequence[str] = (
        *ChangeStreamConnectionMixin.template_fields,
        "timestamp",
        "window_start",
        "window_end",
        "pipeline_id",
    )
    ui_color = "#e8f0fe"

    @connection_arguments
    def __init__(
        self,
        *,
        timestamp: Any = "{{ data_interval_start }}",
        window_start: Any = None,
        window_end: Any = None,
        deferrable: bool | None = None,
        pipeline_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", 5.0)
        super().__init__(**kwargs)
        self.timestamp = timestamp
        self.window_start = window_start
        self.window_end = window_end
        self.deferrable = default_deferrable() if deferrable is None else deferrable
        self.pipeline_id = pipeline_id

    def _window(self) -> Window | None:
        if self.window_start is None and self.window_end is None:
            return None
        return Window(coerce_timestamp(self.window_start), coerce_timestamp(self.window_end))

    def _require_predecessor_applied(self, context: Context) -> None:
        window = self._window() or Window(
            coerce_timestamp(self.timestamp), coerce_timestamp(context["data_interval_end"])
        )
        with metastore_errors(f"window {window} of pipeline {self.pipeline_id!r}: checking its predecessor"):
            with CdcMetastoreHook(self.metastore_conn_id) as metastore:
                error = metastore.metastore.predecessor_error(str(self.pipeline_id), window.start, window.end)
        if error is not None:
            raise AirflowFailException(str(error)) if error.never_run else error

    def poke(self, context: Context) -> bool:
        from airflow_provider_cdc.sources.spanner.change_stream_hook import describe_lagging

        if self.pipeline_id:
            self._require_predecessor_applied(context)
        hook, timestamp, window = self.to_hook(), coerce_timestamp(self.timestamp), self._window()
        lagging = hook.lagging_partitions(timestamp, window)
        if lagging:
            hook.check_retention(window or timestamp)  # changes past retention can never be drained
            self.log.info("Waiting for %s to be drained: %s", self.timestamp, describe_lagging(lagging))
            return False
        self.log.info("Every partition of %s alive at %s is drained to it", self.stream, self.timestamp)
        return True

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            return None
        self.defer(
            trigger=self._trigger(self.to_hook()),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)),
        )

    def _trigger(self, hook: SpannerChangeStreamHook) -> PartitionsDrainedTrigger:
        """The trigger that goes on waiting: every field, the project resolved, times as text."""
        window = self._window()
        connection = dataclasses.replace(self.connection, project_id=hook.resolved_project_id)
        return PartitionsDrainedTrigger(
            **connection.serialize(),
            timestamp=coerce_timestamp(self.timestamp).isoformat(),
            window_start=window.start.isoformat() if window else None,
            window_end=window.end.isoformat() if window else None,
            poll_interval=float(self.poke_interval),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        if event.get("status") != "drained":
            raise DrainWaitError(f"waiting for drained partitions failed: {event.get('message')}")
        self.log.info("Every partition alive at %s is drained to it", event.get("timestamp"))
