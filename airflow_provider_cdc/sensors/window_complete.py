"""Sensor: every unit of a window of a source is staged, checked in the metastore alone.

The pipeline's sensors defer by default, and a satisfied wait never holds a worker slot: ``execute``
checks once and returns at once when the condition already holds. On Airflow 3.3 and later (where the
triggerer renders a task's templated fields) a deferrable sensor whose arguments read no XCom starts in
the triggerer (``start_from_trigger``): its first check, every poll and a satisfied end run there, and
only a failed wait resumes the task on a worker, to fail it with the trigger's message. The triggerer
cannot serve an XCom read while rendering (Airflow 3.3 refuses the request and the trigger never
starts), so a sensor given the open task's window handle (``window=open_window.output``) defers from a
worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_cdc._compat import AirflowFailException, BaseSensorOperator, Context
from airflow_provider_cdc._errors import DrainWaitError, metastore_errors
from airflow_provider_cdc.core.contract.window_handle import WindowHandle
from airflow_provider_cdc.core.timestamps import coerce_timestamp, format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.failures import FailsPermanentErrors
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook, check_predecessor
from airflow_provider_cdc.operators._window import WINDOW_END, WINDOW_START, window_of
from airflow_provider_cdc.triggers.window_complete import WindowCompleteTrigger

if TYPE_CHECKING:
    from airflow_provider_cdc.metastore.completion import LaggingPartition


def _triggerer_renders_templates() -> bool:
    """Whether this Airflow renders a task's templated trigger arguments in the triggerer (3.3+)."""
    from airflow import __version__
    from packaging.version import Version

    return Version(__version__).release >= (3, 3)


#: Whether a deferrable sensor starts in the triggerer by default (Airflow 3.3+).
TRIGGERER_RENDERS_TEMPLATES = _triggerer_renders_templates()
#: What in a template reads the task instance (its XComs): the triggerer cannot serve those reads.
_TASK_INSTANCE_READS = ("xcom", "ti.", "task_instance")


def _renders_in_triggerer(value: Any) -> bool:
    """Whether the triggerer can render ``value``: plain values and templates of the run's context
    (params, data interval, macros), not an XComArg nor a template that pulls XComs."""
    if value is None or isinstance(value, (bool, int, float)):
        return True
    if isinstance(value, str):
        return not any(read in value for read in _TASK_INSTANCE_READS)
    if isinstance(value, (list, tuple)):
        return all(_renders_in_triggerer(item) for item in value)
    return False


class WindowCompleteSensor(FailsPermanentErrors, BaseSensorOperator):
    """Waits until every unit (partition, batch, file, shard) of a window of a source is staged, reading
    only the metastore: any source, no source connection.

    :param window: the open task's window handle (its return value, e.g. ``window=open_window.output``;
        templated, kept in the field ``window_handle``): the source key and the window are the handle's,
        and an explicit ``window_start``/``window_end``/``pipeline_id`` must agree with it (else the
        sensor fails without retries naming both values).
    :param source_key: without ``window``: the source's key in the metastore
        (``projects/…/databases/<db>/<stream>``).
    :param window_start: the window's start (default the run's data interval).
    :param window_end: the window's end (default the run's data interval).
    :param pipeline_id: when given, the window's predecessor must be applied first: a window run before
        its predecessor fails at once naming the window it waits for (without retries when that window
        was never run) instead of holding a run slot.
    :param metastore_conn_id: the metastore's connection.
    :param timestamp: every unit of the source alive at this time must be read up to it (default the
        window's end).
    :param deferrable: hand the wait to the triggerer (default ``True``; ``False`` pokes from a worker,
        as ``mode`` says).
    :param start_from_trigger: start the task in the triggerer, without a worker, and end it there when
        the wait is satisfied (default: when deferrable, on Airflow 3.3+, and no argument reads XComs;
        refused on earlier versions, whose triggerer cannot render templated fields, and for arguments
        that read XComs, which the triggerer cannot serve).

    While waiting it logs which units hold it back and why (a reader that stopped reporting is named).
    """

    template_fields: Sequence[str] = (
        "window_handle",
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
        window: Any = None,
        source_key: str | None = None,
        window_start: Any = WINDOW_START,
        window_end: Any = WINDOW_END,
        pipeline_id: str | None = None,
        metastore_conn_id: str = CdcMetastoreHook.default_conn_name,
        timestamp: Any = None,
        deferrable: bool = True,
        start_from_trigger: bool | None = None,
        **kwargs: Any,
    ) -> None:
        if window is None and source_key is None:
            raise TypeError(
                f"{type(self).__name__} needs window (the open task's window handle, e.g. "
                "window=open_window.output) or source_key"
            )
        kwargs.setdefault("poke_interval", 5.0)
        #: the window arguments given besides the handle (they must agree with it)
        self._explicit_arguments = {
            name: value
            for name, value in (("window_start", window_start), ("window_end", window_end),
                                ("pipeline_id", pipeline_id))
            if value is not None and value not in (WINDOW_START, WINDOW_END)
        }  # fmt: skip
        self._parsed_handle: tuple[Any, WindowHandle | None] | None = None
        super().__init__(**kwargs)
        self.window_handle = window
        self.source_key = source_key
        self.window_start = window_start
        self.window_end = window_end
        self.pipeline_id = pipeline_id
        self.metastore_conn_id = metastore_conn_id
        self.timestamp = timestamp
        self.deferrable = True if deferrable is None else bool(deferrable)  # None: the default
        self._start_in_triggerer(start_from_trigger)

    def _start_in_triggerer(self, wanted: bool | None) -> None:
        """Set ``start_from_trigger`` and the trigger it starts with (its arguments still templates)."""
        if wanted is False:
            return
        kwargs = self.start_trigger_kwargs()
        reads_xcom = [name for name, value in kwargs.items() if not _renders_in_triggerer(value)]
        if getattr(self, "window_handle", None) is not None:  # the open task's handle: an XCom
            reads_xcom.append("window")
        if wanted is None:
            wanted = self.deferrable and TRIGGERER_RENDERS_TEMPLATES and not reads_xcom
        if wanted and not (self.deferrable and TRIGGERER_RENDERS_TEMPLATES):
            raise ValueError(
                f"{type(self).__name__} {self.task_id!r}: start_from_trigger needs deferrable=True and "
                "Airflow 3.3 or later (the triggerer renders the templated fields)"
            )
        if wanted and reads_xcom:
            raise ValueError(
                f"{type(self).__name__} {self.task_id!r}: start_from_trigger cannot render "
                f"{', '.join(reads_xcom)}: the triggerer does not serve XCom reads (a task instance's or an "
                "XComArg); leave start_from_trigger unset and the sensor defers from a worker"
            )
        if not wanted:
            return
        from airflow.triggers.base import StartTriggerArgs

        trigger = self.start_trigger_class()
        self.start_trigger_args = StartTriggerArgs(
            trigger_cls=f"{trigger.__module__}.{trigger.__qualname__}",
            trigger_kwargs={**kwargs, "end_from_trigger": True},
            next_method="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)),
        )
        self.start_from_trigger = True

    def start_trigger_class(self) -> type:
        """The trigger class the sensor defers to."""
        return WindowCompleteTrigger

    def start_trigger_kwargs(self) -> dict[str, Any]:
        """The trigger's arguments as given (templates): the triggerer renders those whose names are
        template fields of this sensor."""
        return {
            "source_key": self.source_key,
            "window_start": self.window_start,
            "window_end": self.window_end,
            "metastore_conn_id": self.metastore_conn_id,
            "timestamp": self.timestamp,
            "pipeline_id": self.pipeline_id,
            "poll_interval": float(self.poke_interval),
        }

    # ----- what is waited for ---------------------------------------------------------------------
    def handle(self) -> WindowHandle | None:
        """The rendered ``window`` argument's handle (``None``: none given), parsed once: the source
        key and window become the handle's. An explicit ``window_start``, ``window_end`` or
        ``pipeline_id`` that differs fails without retries, naming both values."""
        from airflow_provider_cdc.operators.window_step import check_handle_agrees, window_handle_of

        value = self.window_handle
        parsed = self._parsed_handle
        if parsed is not None and parsed[0] is value:
            return parsed[1]
        handle = window_handle_of(value)
        if handle is not None:
            rendered = {name: getattr(self, name) for name in self._explicit_arguments}
            check_handle_agrees(handle, rendered)
            self.source_key = handle.source_key
            self.window_start = format_timestamp(handle.window.start)
            self.window_end = format_timestamp(handle.window.end)
        self._parsed_handle = (value, handle)
        return handle

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Render the fields, then take the window handle (the source key and the window)."""
        super().render_template_fields(context, jinja_env)
        self.handle()

    def _window(self) -> Window | None:
        handle = self.handle()
        if handle is not None:
            return handle.window
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
        from airflow_provider_cdc.metastore.completion import lagging_units

        window, timestamp = self._window(), self._timestamp()
        what = f"window {window} of {self.source_key}: checking which units are read to "
        with metastore_errors(what + format_timestamp(timestamp)):
            with CdcMetastoreHook(self.metastore_conn_id) as metastore:
                return lagging_units(
                    metastore.metastore, str(self.source_key), timestamp, window, unopened="<window>"
                )

    # ----- Airflow --------------------------------------------------------------------------------
    def poke(self, context: Context) -> bool:
        from airflow_provider_cdc.metastore.completion import describe_lagging

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
        """Poke from the worker; or, deferrable, check once and defer only when the wait is not over."""
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

    def raise_for_event(self, event: dict[str, Any]) -> None:
        """Fail the task unless ``event`` is the trigger's satisfied wait: a window run before its
        predecessor ran fails without retries, naming the window it waits for."""
        if event.get("status") == self.done_status:
            return
        message = f"waiting for {self.waited_for()} failed: {event.get('message')}"
        if event.get("never_run"):
            raise AirflowFailException(message)
        raise DrainWaitError(message)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        self.raise_for_event(event)
        self.log.info("Every unit of %s is staged", self.waited_for())
