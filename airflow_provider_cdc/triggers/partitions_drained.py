"""Trigger behind the deferrable drained sensor: polls the metastore from the triggerer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow_provider_cdc._compat import BaseTrigger, TriggerEvent
from airflow_provider_cdc.core.timestamps import coerce_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.sources.spanner.connection import (
    ChangeStreamConnectionMixin,
    connection_arguments,
)

if TYPE_CHECKING:  # imported where used: the sensor's DAG file imports this module
    from airflow_provider_cdc.sources.spanner.change_stream_hook import LaggingPartition


class PartitionsDrainedTrigger(ChangeStreamConnectionMixin, BaseTrigger):
    """Fires once every partition alive at ``timestamp`` (and every partition of the window) is drained.

    Takes the change stream's connection fields
    (:class:`~airflow_provider_cdc.sources.spanner.connection.ChangeStreamConnection`) and serializes
    every one of them. ``retention`` (seconds or Spanner duration text; default the stream's
    ``retention_period``) makes it fire an error when the partitions lag and the window is older than that.
    """

    @connection_arguments
    def __init__(
        self,
        *,
        timestamp: str,
        window_start: str | None = None,
        window_end: str | None = None,
        poll_interval: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.timestamp = timestamp
        self.window_start = window_start
        self.window_end = window_end
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                **self.connection.serialize(),
                "timestamp": self.timestamp,
                "window_start": self.window_start,
                "window_end": self.window_end,
                "poll_interval": self.poll_interval,
            },
        )

    def _check(self) -> list[LaggingPartition]:
        hook = self.to_hook()  # one client, metastore and retention lookup for every poll
        window = None
        if self.window_start and self.window_end:
            window = Window(coerce_timestamp(self.window_start), coerce_timestamp(self.window_end))
        timestamp = coerce_timestamp(self.timestamp)
        lagging = hook.lagging_partitions(timestamp, window)
        if lagging:
            hook.check_retention(window or timestamp)  # changes past retention can never be drained
        return lagging

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_provider_cdc.sources.spanner.change_stream_hook import describe_lagging

        while True:
            try:
                lagging = await asyncio.to_thread(self._check)
            except Exception as exc:  # reported to the task, which fails with the message
                yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
                return
            if not lagging:
                yield TriggerEvent({"status": "drained", "timestamp": self.timestamp})
                return
            self.log.info("Waiting for %s to be drained: %s", self.timestamp, describe_lagging(lagging))
            await asyncio.sleep(self.poll_interval)
