"""Sensor: every unit of a window of a source is staged, checked in the metastore alone."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_cdc._compat import BaseSensorOperator, Context, default_deferrable
from airflow_provider_cdc._errors import DrainWaitError, metastore_errors
from airflow_provider_cdc.core.timestamps import coerce_timestamp, format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.failures import FailsPermanentErrors
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.operators._window import WINDOW_END, WINDOW_START, window_of
from airflow_provider_cdc.triggers.window_complete import WindowCompleteTrigger

if TYPE_CHECKING:
    from airflow_provider_cdc.sources.completion import LaggingPartition


class WindowCompleteSensor(FailsPermanentErrors, BaseSensorOperator):
    """Waits until every unit (partition, batch, file, shard) of a window of a source is staged, reading
    only the metastore: any source, no source connection.

    :param source_key: the source's key in the metastore (``projects/…/databases/<db>/<stream>``; the
        open task's window handle holds it: ``"{{ ti.xcom_pull(task_ids='open', key='window')
        ['source_key'] }}"``).
    :param window_start: the window's start (default the run's data interval).
    :param window_end: the window's end (default the run's data interval).
    :param pipeline_id: when given, the window's predecessor must be applied first: a window run before
        its predecessor fails at once naming the window it waits for (without retries when that window
        was never run) instead of holding a run slot.
    :param metastore_conn_id: the metastore's connection.
    :param timestamp: every unit of the source alive at this time must be read up to it (default the
        window's end).
    :param deferrable: hand the wait to the triggerer (default Airflow's ``[operators]
        default_deferrable``).

    While waiting it logs which units hold it back and why (a reader that stopped reporting is named).
    """

    template_fields: Sequence[str] = (
        "source_key",
        "window_start",
        "window_end",
        "pipeline_id",
        "metastore_conn_id",
        "timestamp",
    )
    ui_color = "#e8f0fe"
    #: The trigger event status of a satisfied wait.
    done_status = WindowCompleteTrigger.done_status

    def __init__(
        self,
        *,
        source_key: str,
        window_start: Any = WINDOW_START,
        window_end: Any = WINDOW_END,
        pipeline_id: str | None = None,
        metastore_conn_id: str = CdcMetastoreHook.default_conn_name,
        timestamp: Any = None,
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", 5.0)
        super().__init__(**kwargs)
        self.source_key = source_key
        self.window_start = window_start
        self.window_end = window_end
        self.pipeline_id = pipeline_id
        self.metastore_conn_id = metastore_conn_id
        self.timestamp = timestamp
        self.deferrable = default_deferrable() if deferrable is None else deferrable

    # ----- what is waited for ---------------------------------------------------------------------
    def _window(self) -> Window | None:
        return window_of(self.window_start, self.window_end)

    def _checked_window(self, context: Context) -> Window:
        """The window whose predecessor must be applied."""
        window = self._window()
        assert window is not None
        return window

    def _timestamp(self) -> datetime:
        if self.timestamp not in (None, ""):
            return coerce_timestamp(self.timestamp)
        window = self._window()
        assert window is not None
        return window.end

    def waited_for(self) -> str:
        return f"window {self._window()} of {self.source_key}"

    def lagging(self) -> list[LaggingPartition]:
        """The units that hold the wait back (``[]``: done)."""
        from airflow_provider_cdc.sources.completion import lagging_units

        window, timestamp = self._window(), self._timestamp()
        what = f"window {window} of {self.source_key}: checking which units are read to "
        with metastore_errors(what + format_timestamp(timestamp)):
            with CdcMetastoreHook(self.metastore_conn_id) as metastore:
                return lagging_units(
                    metastore.metastore, str(self.source_key), timestamp, window, unopened="<window>"
                )

    # ----- Airflow --------------------------------------------------------------------------------
    def poke(self, context: Context) -> bool:
        from airflow_provider_cdc.sources.completion import describe_lagging
        from airflow_provider_cdc.sources.operators import check_predecessor

        if self.pipeline_id:
            check_predecessor(self.metastore_conn_id, str(self.pipeline_id), self._checked_window(context))
        lagging = self.lagging()
        if lagging:
            self.log.info("Waiting for %s: %s", self.waited_for(), describe_lagging(lagging))
            return False
        self.log_done()
        return True

    def log_done(self) -> None:
        self.log.info("Every unit of %s is staged", self.waited_for())

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            return None
        self.defer(
            trigger=self.trigger(),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)),
        )

    def trigger(self) -> WindowCompleteTrigger:
        """The trigger that goes on waiting: every field, times as text."""
        window = self._window()
        assert window is not None
        return WindowCompleteTrigger(
            source_key=str(self.source_key),
            window_start=window.start.isoformat(),
            window_end=window.end.isoformat(),
            metastore_conn_id=self.metastore_conn_id,
            timestamp=self._timestamp().isoformat(),
            poll_interval=float(self.poke_interval),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        if event.get("status") != self.done_status:
            raise DrainWaitError(f"waiting for {self.waited_for()} failed: {event.get('message')}")
        self.log.info("Every unit of %s is staged", self.waited_for())
