"""Trigger behind the deferrable window-complete sensor: polls the metastore from the triggerer.

It reads the metastore only (no source connection), so one trigger serves every source.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow_provider_cdc._compat import BaseTrigger, TriggerEvent
from airflow_provider_cdc.core.timestamps import coerce_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook

if TYPE_CHECKING:  # imported where used: the sensor's DAG file imports this module
    from airflow_provider_cdc.sources.completion import LaggingPartition

#: The event status of a complete window.
COMPLETE = "complete"


class WindowCompleteTrigger(BaseTrigger):
    """Fires once every unit of a window of a source is staged (and every unit of the source alive at
    ``timestamp``, default the window's end, is read up to it), from the metastore alone.

    :param source_key: the source's key in the metastore (``projects/…/databases/<db>/<stream>``).
    :param window_start: the window's start (RFC 3339 text).
    :param window_end: the window's end (RFC 3339 text).
    :param metastore_conn_id: the metastore's connection.
    :param timestamp: read every unit alive at it up to it (default the window's end).
    :param poll_interval: seconds between checks.
    """

    #: The event status of a window that is complete.
    done_status = COMPLETE

    def __init__(
        self,
        *,
        source_key: str,
        window_start: str | None,
        window_end: str | None,
        metastore_conn_id: str = CdcMetastoreHook.default_conn_name,
        timestamp: str | None = None,
        poll_interval: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.source_key = source_key
        self.window_start = window_start
        self.window_end = window_end
        self.metastore_conn_id = metastore_conn_id
        self.timestamp = timestamp
        self.poll_interval = poll_interval
        self._metastore_hook: CdcMetastoreHook | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "source_key": self.source_key,
                "window_start": self.window_start,
                "window_end": self.window_end,
                "metastore_conn_id": self.metastore_conn_id,
                "timestamp": self.timestamp,
                "poll_interval": self.poll_interval,
            },
        )

    def window(self) -> Window | None:
        if self.window_start and self.window_end:
            return Window(coerce_timestamp(self.window_start), coerce_timestamp(self.window_end))
        return None

    def waited_for(self) -> str:
        """What the trigger waits for, in its log."""
        return f"window {self.window()} of {self.source_key}"

    def _check(self) -> list[LaggingPartition]:
        from airflow_provider_cdc.sources.completion import lagging_units

        window = self.window()
        if window is None:
            raise ValueError("a window-complete trigger needs window_start and window_end")
        timestamp = coerce_timestamp(self.timestamp) if self.timestamp else window.end
        if self._metastore_hook is None:  # one engine for every poll
            self._metastore_hook = CdcMetastoreHook(self.metastore_conn_id)
        store = self._metastore_hook.metastore
        return lagging_units(store, self.source_key, timestamp, window, unopened="<window>")

    def _event(self) -> dict[str, Any]:
        return {"status": self.done_status, "window_start": self.window_start, "window_end": self.window_end}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_provider_cdc.sources.completion import describe_lagging

        while True:
            try:
                lagging = await asyncio.to_thread(self._check)
            except Exception as exc:  # reported to the task, which fails with the message
                yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
                return
            if not lagging:
                if self._metastore_hook is not None:
                    self._metastore_hook.close()
                yield TriggerEvent(self._event())
                return
            self.log.info("Waiting for %s: %s", self.waited_for(), describe_lagging(lagging))
            await asyncio.sleep(self.poll_interval)
