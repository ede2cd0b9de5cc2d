"""Trigger behind the deferrable drained sensor: polls the metastore from the triggerer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_cdc.core.timestamps import coerce_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.sources.spanner.connection import (
    ChangeStreamConnectionMixin,
    connection_arguments,
)
from airflow_provider_cdc.triggers.window_complete import WindowCompleteTrigger

if TYPE_CHECKING:  # imported where used: the sensor's DAG file imports this module
    from airflow_provider_cdc.metastore.completion import LaggingPartition


class PartitionsDrainedTrigger(ChangeStreamConnectionMixin, WindowCompleteTrigger):
    """Fires once every partition alive at ``timestamp`` (and every partition of the window) is drained.

    The :class:`~airflow_provider_cdc.triggers.window_complete.WindowCompleteTrigger` of a change stream
    named by its connection fields
    (:class:`~airflow_provider_cdc.sources.spanner.connection.ChangeStreamConnection`, every one of them
    serialized); the window is optional. ``retention`` (seconds or Spanner duration text; default the
    stream's ``retention_period``) makes it fire an error when the partitions lag and the window is older
    than that. With ``pipeline_id`` and no window, the window whose predecessor is checked is
    ``[timestamp, interval_end)``.
    """

    done_status = "drained"

    @connection_arguments
    def __init__(
        self,
        *,
        timestamp: str,
        window_start: str | None = None,
        window_end: str | None = None,
        poll_interval: float = 5.0,
        interval_end: str | None = None,
        **kwargs: Any,
    ) -> None:
        # The stream's key needs its project resolved: the hook gives it (see _check).
        super().__init__(
            source_key="",
            window_start=window_start,
            window_end=window_end,
            timestamp=timestamp,
            poll_interval=poll_interval,
            **kwargs,
        )
        self.interval_end = interval_end

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {**self.connection.serialize(), **self.wait_arguments(), "interval_end": self.interval_end},
        )

    def waited_for(self) -> str:
        return f"{self.timestamp} to be drained"

    def checked_window(self) -> Window | None:
        window = self.window()
        if window is None and self.interval_end:
            start = coerce_timestamp(str(self.timestamp))
            window = Window(start, coerce_timestamp(str(self.interval_end)))
        return window

    def _check(self) -> list[LaggingPartition]:
        hook = self.to_hook()  # one client, metastore and retention lookup for every poll
        window = self.window()
        timestamp = coerce_timestamp(str(self.timestamp))
        lagging = hook.lagging_partitions(timestamp, window)
        if lagging:
            hook.check_retention(window or timestamp)  # changes past retention can never be drained
        return lagging

    def _event(self) -> dict[str, Any]:
        return {"status": self.done_status, "timestamp": self.timestamp}
