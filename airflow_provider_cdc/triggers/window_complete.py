"""Trigger behind the deferrable window-complete sensor: polls the metastore from the triggerer.

It reads the metastore only (no source connection), so one trigger serves every source. A sensor that
starts in the triggerer (``start_from_trigger``) has its templated fields rendered there, checks the
window's predecessor here, and ends here when the window is complete: no worker process runs it.
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
    from airflow_provider_cdc.metastore.completion import LaggingPartition

#: The event status of a complete window.
COMPLETE = "complete"
#: The event status of a wait that failed (the event's ``message`` says why).
ERROR = "error"


class WindowCompleteTrigger(BaseTrigger):
    """Fires once every unit of a window of a source is staged (and every unit of the source alive at
    ``timestamp``, default the window's end, is read up to it), from the metastore alone.

    :param source_key: the source's key in the metastore (``projects/…/databases/<db>/<stream>``).
    :param window_start: the window's start (RFC 3339 text).
    :param window_end: the window's end (RFC 3339 text).
    :param metastore_conn_id: the metastore's connection.
    :param timestamp: read every unit alive at it up to it (default the window's end).
    :param poll_interval: seconds between checks.
    :param pipeline_id: check first that the window's predecessor in this pipeline is applied; if not,
        fire an error naming the window it waits for (``never_run``: that window was never run).
    :param end_from_trigger: end the task here when the wait is satisfied (``TaskSuccessEvent``) instead
        of resuming it on a worker; an error still resumes it, so that it fails with the message.
    """

    #: The event status of a satisfied wait.
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
        pipeline_id: str | None = None,
        end_from_trigger: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.source_key = source_key
        self.window_start = window_start
        self.window_end = window_end
        self.metastore_conn_id = metastore_conn_id
        self.timestamp = timestamp
        self.poll_interval = poll_interval
        self.pipeline_id = pipeline_id
        self.end_from_trigger = end_from_trigger
        self._metastore_hook: CdcMetastoreHook | None = None

    def wait_arguments(self) -> dict[str, Any]:
        """The keyword arguments every trigger of this family takes besides its own."""
        return {
            "timestamp": self.timestamp,
            "window_start": self.window_start,
            "window_end": self.window_end,
            "poll_interval": self.poll_interval,
            "pipeline_id": self.pipeline_id,
            "end_from_trigger": self.end_from_trigger,
        }

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "source_key": self.source_key,
                "metastore_conn_id": self.metastore_conn_id,
                **self.wait_arguments(),
            },
        )

    def window(self) -> Window | None:
        if self.window_start and self.window_end:
            return Window(coerce_timestamp(str(self.window_start)), coerce_timestamp(str(self.window_end)))
        return None

    def checked_window(self) -> Window | None:
        """The window whose predecessor must be applied (``pipeline_id`` set)."""
        return self.window()

    def waited_for(self) -> str:
        """What the trigger waits for, in its log."""
        return f"window {self.window()} of {self.source_key}"

    def _metastore(self) -> Any:
        if self._metastore_hook is None:  # one engine for every poll
            self._metastore_hook = CdcMetastoreHook(self.metastore_conn_id)
        return self._metastore_hook.metastore

    def _refusal(self) -> dict[str, Any] | None:
        """The error event of a window whose predecessor is not applied (None: it may apply)."""
        if not self.pipeline_id:
            return None
        window = self.checked_window()
        if window is None:
            raise ValueError("checking a window's predecessor needs the window")
        error = self._metastore().predecessor_error(str(self.pipeline_id), window.start, window.end)
        if error is None:
            return None
        return {"status": ERROR, "message": str(error), "never_run": error.never_run}

    def _check(self) -> list[LaggingPartition]:
        from airflow_provider_cdc.metastore.completion import lagging_units

        window = self.window()
        if window is None:
            raise ValueError("a window-complete trigger needs window_start and window_end")
        timestamp = coerce_timestamp(str(self.timestamp)) if self.timestamp else window.end
        return lagging_units(self._metastore(), self.source_key, timestamp, window, unopened="<window>")

    def _event(self) -> dict[str, Any]:
        return {"status": self.done_status, "window_start": self.window_start, "window_end": self.window_end}

    def _done(self) -> TriggerEvent:
        if self.end_from_trigger:
            from airflow.triggers.base import TaskSuccessEvent

            self.log.info("Done waiting for %s: the task ends here", self.waited_for())
            return TaskSuccessEvent()
        return TriggerEvent(self._event())

    def _close(self) -> None:
        if self._metastore_hook is not None:
            self._metastore_hook.close()
            self._metastore_hook = None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_provider_cdc.metastore.completion import describe_lagging

        try:
            refusal = await asyncio.to_thread(self._refusal)
        except Exception as exc:  # reported to the task, which fails with the message
            self._close()
            yield TriggerEvent({"status": ERROR, "message": f"{type(exc).__name__}: {exc}"})
            return
        if refusal is not None:
            self._close()
            yield TriggerEvent(refusal)
            return
        while True:
            try:
                lagging = await asyncio.to_thread(self._check)
            except Exception as exc:  # reported to the task, which fails with the message
                self._close()
                yield TriggerEvent({"status": ERROR, "message": f"{type(exc).__name__}: {exc}"})
                return
            if not lagging:
                self._close()
                yield self._done()
                return
            self.log.info("Waiting for %s: %s", self.waited_for(), describe_lagging(lagging))
            await asyncio.sleep(float(self.poll_interval))
