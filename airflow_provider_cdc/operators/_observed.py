"""What every window step does around its ``execute``: its metrics, and its failure kept on its window.

:class:`ObservedStep` wraps the ``execute`` of each class that names its step (``cdc_step``: ``open``,
``read``, ``merge``, ``upsert``, ``commit``): a try whose number is above 1 counts a retry, a try that
succeeds sends its duration (:mod:`airflow_provider_cdc.metrics`), one that fails counts a failure and
records the error's first lines (credentials redacted) on the window in the metastore, with the task
instance and its try, for ``explain`` and the pipeline pages; a later try of the same task that
succeeds clears it. None of this ever changes a step's outcome: whatever fails in it is logged at debug
level, and the step's own error is raised unchanged.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from airflow_provider_cdc import metrics
from airflow_provider_cdc.metrics import StepTags

if TYPE_CHECKING:
    from airflow_provider_cdc.core.window import Window

__all__ = ["ObservedStep", "error_text"]

log = logging.getLogger(__name__)

_Method = TypeVar("_Method", bound=Callable[..., Any])
#: An error's lines a window keeps.
ERROR_LINES = 8
#: Exceptions that end a try without failing it (a deferral, a skip, a reschedule).
_NOT_FAILURES = frozenset(
    {"TaskDeferred", "AirflowSkipException", "AirflowRescheduleException", "DownstreamTasksSkipped"}
)


def error_text(error: BaseException) -> str:
    """``error``'s type and the first lines of its message, credentials (URL and DSN passwords, and
    what Airflow masks in task logs) redacted. A step failed without retries names its cause's type
    and ends with ``[not retried: …]``."""
    from airflow_provider_cdc._compat import AirflowFailException, redact_secrets
    from airflow_provider_cdc._errors import redact
    from airflow_provider_cdc.failures import PermanentFailure

    shown = error.__cause__ if isinstance(error, PermanentFailure) and error.__cause__ else error
    lines = [line.rstrip() for line in str(error).strip().splitlines() if line.strip()] or [repr(error)]
    kept = lines[:ERROR_LINES]
    if len(lines) > ERROR_LINES:
        kept.append("…")
    if isinstance(error, AirflowFailException):
        verdict = re.search(r"\[not retried: [^\]]*\]$", lines[-1])
        kept[-1] += f" {verdict.group(0) if verdict else NOT_RETRIED}"
    return redact_secrets(redact(f"{type(shown).__name__}: " + "\n".join(kept)))


#: How a window's failure says that its task fails without retries (``explain`` tells what to do).
NOT_RETRIED = "[not retried: the task fails without retries]"


def _metastore_failed(error: BaseException) -> bool:
    """The error (or one of its causes) is the metastore failing: recording it there would only wait."""
    from airflow_provider_cdc._errors import MetastoreUnavailableError

    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MetastoreUnavailableError) or type(current).__name__ == "OperationalError":
            return True
        current = current.__cause__ or current.__context__
    return False


def _is_failure(error: BaseException) -> bool:
    return isinstance(error, Exception) and not any(
        cls.__name__ in _NOT_FAILURES for cls in type(error).__mro__
    )


def _task_instance(context: Any) -> Any:
    return context.get("ti") if isinstance(context, Mapping) else None


def observed(method: _Method) -> _Method:
    """``method`` (an ``execute``) with the step's metrics and failure record around it (once, however
    deeply subclasses' ``execute`` call each other)."""
    if getattr(method, "__cdc_observed__", False):
        return method

    @functools.wraps(method)
    def wrapper(self: ObservedStep, context: Any, *args: Any, **kwargs: Any) -> Any:
        if self.__dict__.get("_cdc_observing"):
            return method(self, context, *args, **kwargs)
        self._cdc_observing = True
        ti = _task_instance(context)
        try_number = getattr(ti, "try_number", None)
        metrics.step_started(self.metric_tags(context), try_number)
        started = time.monotonic()
        try:
            result = method(self, context, *args, **kwargs)
        except BaseException as error:
            if _is_failure(error):
                metrics.step_failed(self.metric_tags(context))
                self._record_failure(context, error)
            raise
        else:
            metrics.step_succeeded(self.metric_tags(context), time.monotonic() - started)
            if isinstance(try_number, int) and try_number > 1:
                self._clear_failure(context)
            return result
        finally:
            self._cdc_observing = False

    wrapper.__cdc_observed__ = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


class ObservedStep:
    """A window step whose ``execute`` is observed (see the module). A class sets :attr:`cdc_step`
    (and the upserts :attr:`cdc_target`); put it before the Airflow base class."""

    #: the step this operator runs (``open``, ``read``, ``merge``, ``upsert``, ``commit``); ``None``:
    #: not observed
    cdc_step: ClassVar[str | None] = None
    #: the target an apply step applies to (its registered name)
    cdc_target: ClassVar[str | None] = None
    _cdc_observing: bool = False
    _cdc_source_key: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        execute = cls.__dict__.get("execute")
        if callable(execute):
            cls.execute = observed(execute)  # type: ignore[attr-defined]

    def note_source(self, source_key: str | None) -> None:
        """The metastore key of the step's source, once the step knows it (its metrics' ``source``)."""
        self._cdc_source_key = source_key

    def observed_pipeline(self, context: Any) -> str | None:
        """The pipeline of this run of the step: ``pipeline_id``, else the DAG id (``None``: neither is
        a valid pipeline id)."""
        from airflow_provider_cdc.core.identifiers import validate_pipeline_id

        given = getattr(self, "pipeline_id", None)
        ti = _task_instance(context)
        name = given if given else getattr(ti, "dag_id", None)
        try:
            return validate_pipeline_id(str(name)) if name else None
        except ValueError:
            return None

    def observed_window(self) -> Window | None:
        """The window of this run of the step (``None``: its bounds are not valid)."""
        try:
            return self.window()  # type: ignore[attr-defined,no-any-return]
        except Exception:
            return None

    def metric_tags(self, context: Any, *, source_key: str | None = None) -> StepTags:
        """The tags of this run's metrics: pipeline, DAG, step, and its source and target where known."""
        ti = _task_instance(context)
        dag_id = getattr(ti, "dag_id", None)
        tags = StepTags(
            pipeline=self.observed_pipeline(context),
            dag_id=str(dag_id) if dag_id else None,
            step=self.cdc_step,
            target=self.cdc_target,
        )
        return tags.with_source(source_key or self._cdc_source_key or getattr(self, "stream_key", None))

    # ----- the failure kept on the window ---------------------------------------------------------
    def _window_store(self) -> Any:
        """The step's metastore hook, or ``None`` when the step has none to record in (no connection,
        or the default SQLite file that no step created yet)."""
        from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook

        conn_id = getattr(self, "metastore_conn_id", None)
        if not conn_id:
            return None
        hook = CdcMetastoreHook(str(conn_id))
        url = hook.get_url()
        if url.startswith("sqlite:///") and not Path(url[len("sqlite:///") :]).exists():
            return None
        return hook

    def _failure_key(self, context: Any) -> tuple[str, Window, str] | None:
        from airflow_provider_cdc.metastore.model import task_instance_name

        pipeline, window = self.observed_pipeline(context), self.observed_window()
        ti = _task_instance(context)
        if pipeline is None or window is None or ti is None:
            return None
        return pipeline, window, task_instance_name(ti)

    def _record_failure(self, context: Any, error: BaseException) -> None:
        if _metastore_failed(error):
            return
        try:
            key = self._failure_key(context)
            hook = None if key is None else self._window_store()
            if key is None or hook is None:
                return
            pipeline, window, task = key
            epoch = None
            if callable(getattr(self, "window_epoch", None)):
                try:
                    epoch = self.window_epoch()  # type: ignore[attr-defined]
                except Exception:
                    epoch = None
            try_number = getattr(_task_instance(context), "try_number", None)
            with hook:
                hook.metastore.record_window_error(
                    pipeline, window.start, window.end, error_text(error), task=task,
                    try_number=try_number if isinstance(try_number, int) else None, epoch=epoch,
                )  # fmt: skip
        except Exception as failure:  # the step's own error is what the task reports
            log.debug("The failure was not recorded on the window: %s: %s", type(failure).__name__, failure)

    def _clear_failure(self, context: Any) -> None:
        try:
            key = self._failure_key(context)
            hook = None if key is None else self._window_store()
            if key is None or hook is None:
                return
            pipeline, window, task = key
            with hook:
                hook.metastore.clear_window_error(pipeline, window.start, window.end, task)
        except Exception as failure:
            log.debug("An earlier failure was not cleared: %s: %s", type(failure).__name__, failure)
