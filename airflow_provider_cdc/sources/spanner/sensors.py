"""Sensor: every change-stream partition alive at a timestamp is drained up to it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_provider_cdc._compat import Context
from airflow_provider_cdc.core.timestamps import coerce_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.operators._window import WINDOW_END
from airflow_provider_cdc.sensors.window_complete import WindowCompleteSensor
from airflow_provider_cdc.sources.spanner.connection import (
    ChangeStreamConnectionMixin,
    connection_arguments,
)
from airflow_provider_cdc.sources.spanner.triggers import PartitionsDrainedTrigger

if TYPE_CHECKING:  # imported where used, so that parsing a DAG stays quick
    from airflow_provider_cdc.metastore.completion import LaggingPartition


class SpannerChangeStreamPartitionsDrainedSensor(ChangeStreamConnectionMixin, WindowCompleteSensor):
    """Waits until every partition alive at ``timestamp`` has been read (drained) up to it.

    Used twice per window: with ``timestamp`` = the window start before reading (every parent
    partition drained to the start), and with ``timestamp`` = the window end and ``window_start``/
    ``window_end`` set before merging (every partition of the window read to its end). While waiting
    it logs which partition tokens hold it back and how far behind they are. It defers by default
    (``deferrable=False`` pokes from a worker) and, deferrable on Airflow 3.3+, starts in the triggerer
    (``start_from_trigger``, see :class:`~airflow_provider_cdc.sensors.window_complete.WindowCompleteSensor`).
    The check before merging is :class:`~airflow_provider_cdc.sensors.window_complete.WindowCompleteSensor`'s,
    which any source uses without its connection; this sensor adds the retention check.

    With ``pipeline_id`` it first requires the run's window (``window_start``/``window_end``, else
    ``[timestamp, interval_end)``, ``interval_end`` defaulting to the run's data interval end) to be able
    to apply: the pipeline's window before it must be applied. A
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
        "interval_end",
    )
    done_status = PartitionsDrainedTrigger.done_status

    @connection_arguments
    def __init__(
        self,
        *,
        timestamp: Any = "{{ data_interval_start }}",
        window_start: Any = None,
        window_end: Any = None,
        deferrable: bool = True,
        pipeline_id: str | None = None,
        interval_end: Any = WINDOW_END,
        start_from_trigger: bool | None = None,
        **kwargs: Any,
    ) -> None:
        # The stream's key needs its project resolved: the hook gives it (see lagging).
        super().__init__(
            source_key="",
            timestamp=timestamp,
            window_start=window_start,
            window_end=window_end,
            deferrable=deferrable,
            pipeline_id=pipeline_id,
            start_from_trigger=False,  # decided below, once the connection fields are set
            **kwargs,
        )
        self.interval_end = interval_end
        self._start_in_triggerer(start_from_trigger)

    def _window(self) -> Window | None:
        if self.window_start is None and self.window_end is None:
            return None
        return Window(coerce_timestamp(self.window_start), coerce_timestamp(self.window_end))

    def _checked_window(self, context: Context) -> Window:
        end = self.interval_end if self.interval_end not in (None, "") else context["data_interval_end"]
        return self._window() or Window(coerce_timestamp(self.timestamp), coerce_timestamp(end))

    def start_trigger_class(self) -> type:
        return PartitionsDrainedTrigger

    def start_trigger_kwargs(self) -> dict[str, Any]:
        connection = self.connection.arguments()
        if isinstance(connection["impersonation_chain"], tuple):
            connection["impersonation_chain"] = list(connection["impersonation_chain"])
        return {
            **connection,
            "timestamp": self.timestamp,
            "window_start": self.window_start,
            "window_end": self.window_end,
            "pipeline_id": self.pipeline_id,
            "interval_end": self.interval_end,
            "poll_interval": float(self.poke_interval),
        }

    def _timestamp(self) -> datetime:
        return coerce_timestamp(self.timestamp)

    def waited_for(self) -> str:
        return f"{self.timestamp} to be drained"

    def lagging(self) -> list[LaggingPartition]:
        hook, timestamp, window = self.to_hook(), self._timestamp(), self._window()
        lagging = hook.lagging_partitions(timestamp, window)
        if lagging:
            hook.check_retention(window or timestamp)  # changes past retention can never be drained
        return lagging

    def log_done(self) -> None:
        self.log.info("Every partition of %s alive at %s is drained to it", self.stream, self.timestamp)

    def trigger(self) -> PartitionsDrainedTrigger:
        """The trigger that goes on waiting: every field, the project resolved, times as text."""
        window = self._window()
        connection = dataclasses.replace(self.connection, project_id=self.to_hook().resolved_project_id)
        return PartitionsDrainedTrigger(
            **connection.serialize(),
            timestamp=self._timestamp().isoformat(),
            window_start=window.start.isoformat() if window else None,
            window_end=window.end.isoformat() if window else None,
            poll_interval=float(self.poke_interval),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        self.raise_for_event(event)
        self.log.info("Every partition alive at %s is drained to it", event.get("timestamp"))
