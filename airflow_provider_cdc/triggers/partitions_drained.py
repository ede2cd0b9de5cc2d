"""Trigger behind the deferrable drained sensor: polls the metastore from the triggerer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow_provider_cdc._compat import BaseTrigger, TriggerEvent


class PartitionsDrainedTrigger(BaseTrigger):
    """Fires once every partition alive at ``timestamp`` (and every partition of the window) is drained.

    ``retention`` (seconds or Spanner duration text; default the stream's ``retention_period``) makes it
    fire an error when the partitions lag and the window is older than that.
    """

    def __init__(
        self,
        *,
        instance_id: str,
        database_id: str,
        stream: str,
        project_id: str,
        timestamp: str,
        window_start: str | None = None,
        window_end: str | None = None,
        gcp_conn_id: str = "google_cloud_default",
        metastore_conn_id: str = "cdc_metastore_default",
        poll_interval: float = 5.0,
        retention: float | str | None = None,
    ) -> None:
        super().__init__()
        self.instance_id = instance_id
        self.database_id = database_id
        self.stream = stream
        self.project_id = project_id
        self.timestamp = timestamp
        self.window_start = window_start
        self.window_end = window_end
        self.gcp_conn_id = gcp_conn_id
        self.metastore_conn_id = metastore_conn_id
        self.poll_interval = poll_interval
        self.retention = retention
        self._hook: Any = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "instance_id": self.instance_id,
                "database_id": self.database_id,
                "stream": self.stream,
                "project_id": self.project_id,
                "timestamp": self.timestamp,
                "window_start": self.window_start,
                "window_end": self.window_end,
                "gcp_conn_id": self.gcp_conn_id,
                "metastore_conn_id": self.metastore_conn_id,
                "poll_interval": self.poll_interval,
                "retention": self.retention,
            },
        )

    def _check(self) -> list[Any]:
        from airflow_provider_cdc.domain.timestamps import coerce_timestamp
        from airflow_provider_cdc.domain.window import Window
        from airflow_provider_cdc.hooks.spanner_change_stream import SpannerChangeStreamHook

        hook = self._hook = self._hook or SpannerChangeStreamHook.from_fields(self)  # one client per trigger
        window = None
        if self.window_start and self.window_end:
            window = Window(coerce_timestamp(self.window_start), coerce_timestamp(self.window_end))
        timestamp = coerce_timestamp(self.timestamp)
        lagging = hook.lagging_partitions(timestamp, window)
        if lagging:
            hook.check_retention(window or timestamp)  # changes past retention can never be drained
        return lagging

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_provider_cdc.sensors.partitions_drained import describe_lagging

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
