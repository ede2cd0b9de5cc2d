"""The provider's metrics: every name declared once, one function per event, sent through Airflow's own
``Stats`` to whichever backend the deployment configured in ``[metrics]`` (StatsD, DogStatsD,
OpenTelemetry, or none).

Each metric has a name without variables (``cdc.step.duration``) whose variables travel as tags
(``pipeline``, ``dag_id``, ``step``, ``source``, ``target``, ``table``): StatsD with
``statsd_influxdb_enabled`` appends them to the name (``,pipeline=shop``), DogStatsD and OpenTelemetry
send them as tags and attributes, plain StatsD drops them. As Airflow does for its own metrics, while
``[metrics] legacy_names_on`` is on (the default) each is sent a second time under a name that holds
its variables (``cdc.shop.commit.duration``; a ``.`` in a value becomes ``__``), for StatsD without
tags. Timers are given as ``timedelta`` s, which Airflow's backends send in milliseconds.

Metrics never fail a task: an error sending one is logged at debug level and the step goes on. The
README's "Metrics" table lists every name (a test checks both agree).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

log = logging.getLogger(__name__)

__all__ = [
    "METRICS",
    "Metric",
    "StepTags",
    "step_failed",
    "step_started",
    "step_succeeded",
    "units_read",
    "window_committed",
]

TIMER, COUNTER, GAUGE = "timer", "counter", "gauge"

#: window end → applied: how long after its end a window was committed (timer, at the commit)
WINDOW_APPLIED_DELAY = "cdc.window.applied_delay"
#: the change rows a committed window applied (counter, at the commit)
WINDOW_ROWS = "cdc.window.rows"
#: the source transactions a committed window applied (counter, at the commit)
WINDOW_TRANSACTIONS = "cdc.window.transactions"
#: now − a table's apply watermark, per target and table, in seconds (gauge, at the commit)
TABLE_WATERMARK_LAG = "cdc.table.watermark_lag"
#: how long a step's successful try took (timer: open, read, merge, upsert, commit)
STEP_DURATION = "cdc.step.duration"
#: a step started again: its try number is above 1 (counter)
STEP_RETRIES = "cdc.step.retries"
#: a step's try failed (counter)
STEP_FAILURES = "cdc.step.failures"
#: the units (partitions, shards, files, batches) a reader read (counter, at the read)
READ_UNITS = "cdc.read.units"
#: the change rows a reader staged (counter, at the read)
READ_ROWS = "cdc.read.rows"

#: The steps whose duration, retries and failures are measured.
STEPS = ("open", "read", "merge", "upsert", "commit")
#: Names with variables longer than this are not sent (StatsD and OpenTelemetry refuse long names).
_MAX_NAME_LENGTH = 200


@dataclass(frozen=True)
class Metric:
    """A metric: its name, its type (``timer``, ``counter``, ``gauge``), its tags, and the name that
    holds its variables (``{pipeline}``, …) for StatsD without tags."""

    name: str
    kind: str
    tags: tuple[str, ...]
    legacy_name: str


METRICS: dict[str, Metric] = {
    metric.name: metric
    for metric in (
        Metric(WINDOW_APPLIED_DELAY, TIMER, ("pipeline", "dag_id", "source"),
               "cdc.{pipeline}.window.applied_delay"),
        Metric(WINDOW_ROWS, COUNTER, ("pipeline", "dag_id", "source"), "cdc.{pipeline}.window.rows"),
        Metric(WINDOW_TRANSACTIONS, COUNTER, ("pipeline", "dag_id", "source"),
               "cdc.{pipeline}.window.transactions"),
        Metric(TABLE_WATERMARK_LAG, GAUGE, ("pipeline", "dag_id", "target", "table"),
               "cdc.{pipeline}.{target}.{table}.watermark_lag"),
        Metric(STEP_DURATION, TIMER, ("pipeline", "dag_id", "step", "source", "target"),
               "cdc.{pipeline}.{step}.duration"),
        Metric(STEP_RETRIES, COUNTER, ("pipeline", "dag_id", "step", "source", "target"),
               "cdc.{pipeline}.{step}.retries"),
        Metric(STEP_FAILURES, COUNTER, ("pipeline", "dag_id", "step", "source", "target"),
               "cdc.{pipeline}.{step}.failures"),
        Metric(READ_UNITS, COUNTER, ("pipeline", "dag_id", "source"), "cdc.{pipeline}.read.units"),
        Metric(READ_ROWS, COUNTER, ("pipeline", "dag_id", "source"), "cdc.{pipeline}.read.rows"),
    )
}  # fmt: skip


@dataclass(frozen=True)
class StepTags:
    """Who sends a step's metrics: the pipeline, the DAG, the step, and where known its source (the
    last segment of its metastore key, as its staging folder) and target (its registered name)."""

    pipeline: str | None = None
    dag_id: str | None = None
    step: str | None = None
    source: str | None = None
    target: str | None = None

    def with_source(self, source_key: str | None) -> StepTags:
        """These tags with the source of ``source_key`` (a metastore key; unchanged when it names none)."""
        from airflow_provider_cdc.core.contract.locations import staging_folder

        try:
            return replace(self, source=staging_folder(str(source_key))) if source_key else self
        except ValueError:
            return self

    def values(self) -> dict[str, str]:
        return {name: str(value) for name, value in vars(self).items() if value}


def _quietly(event: Callable[..., None]) -> Callable[..., None]:
    """``event`` logging, at debug level, whatever fails in it instead of raising."""

    def guarded(*args: Any, **kwargs: Any) -> None:
        try:
            event(*args, **kwargs)
        except Exception as error:  # a metric never fails a task
            log.debug("Metrics of %s not sent: %s: %s", event.__name__, type(error).__name__, error)

    guarded.__name__ = event.__name__
    guarded.__doc__ = event.__doc__
    return guarded


def _legacy_names_on() -> bool:
    from airflow_provider_cdc._compat import airflow_conf

    return bool(airflow_conf().getboolean("metrics", "legacy_names_on", fallback=True))


def _send(stats: Any, metric: Metric, value: Any, tags: Mapping[str, str], legacy: bool) -> None:
    """Send ``value`` under ``metric``'s name with its tags, and with ``legacy`` under the name holding
    its variables (with the tags that are not among them)."""
    own = {name: tags[name] for name in metric.tags if tags.get(name)}
    sends = [(metric.name, own)]
    if legacy:
        variables = [part[1:-1] for part in metric.legacy_name.split(".") if part.startswith("{")]
        if all(own.get(name) for name in variables):
            name = metric.legacy_name.format(**{k: own[k].replace(".", "__") for k in variables})
            if len(name) <= _MAX_NAME_LENGTH:
                sends.append((name, {k: v for k, v in own.items() if k not in variables}))
    for name, name_tags in sends:
        if metric.kind == TIMER:
            stats.timing(name, value, tags=name_tags)
        elif metric.kind == COUNTER:
            stats.incr(name, count=value, tags=name_tags)
        else:
            stats.gauge(name, value, tags=name_tags)


def _emit(events: list[tuple[str, Any, Mapping[str, str]]]) -> None:
    from airflow_provider_cdc._compat import airflow_stats

    stats = airflow_stats()
    legacy = _legacy_names_on()
    for name, value, tags in events:
        _send(stats, METRICS[name], value, tags, legacy)


@_quietly
def step_started(tags: StepTags, try_number: int | None) -> None:
    """A step's try starts: one retry counted when its try number is above 1."""
    if isinstance(try_number, int) and not isinstance(try_number, bool) and try_number > 1:
        _emit([(STEP_RETRIES, 1, tags.values())])


@_quietly
def step_succeeded(tags: StepTags, seconds: float) -> None:
    """A step's try succeeded after ``seconds``."""
    _emit([(STEP_DURATION, timedelta(seconds=max(0.0, seconds)), tags.values())])


@_quietly
def step_failed(tags: StepTags) -> None:
    """A step's try failed."""
    _emit([(STEP_FAILURES, 1, tags.values())])


@_quietly
def units_read(tags: StepTags, summary: Mapping[str, Any]) -> None:
    """A reader's summary: the units it read (``partitions``) and the rows it staged (``rows``)."""
    values = tags.values()
    _emit([(READ_UNITS, int(summary.get("partitions") or 0), values),
           (READ_ROWS, int(summary.get("rows") or 0), values)])  # fmt: skip


@_quietly
def window_committed(
    tags: StepTags, window_end: datetime, summary: Mapping[str, Any], now: datetime | None = None
) -> None:
    """The commit's summary (``rows``, ``transactions``, ``watermarks``: target → table → RFC 3339
    text): the window's delay from its end to now, its rows and transactions, and each table's apply
    watermark lag behind now, per target."""
    from airflow_provider_cdc.core.timestamps import parse_timestamp

    moment = now or datetime.now(timezone.utc)
    values = tags.values()
    events: list[tuple[str, Any, Mapping[str, str]]] = [
        (WINDOW_APPLIED_DELAY, max(timedelta(0), moment - window_end), values),
        (WINDOW_ROWS, int(summary.get("rows") or 0), values),
        (WINDOW_TRANSACTIONS, int(summary.get("transactions") or 0), values),
    ]
    targets = summary.get("watermarks") or {}
    for target, marks in sorted(targets.items()) if isinstance(targets, Mapping) else ():
        for table, mark in sorted((marks or {}).items()) if isinstance(marks, Mapping) else ():
            if mark is None:
                continue
            lag = (moment - parse_timestamp(str(mark))).total_seconds()
            table_tags = {**values, "target": target, "table": str(table)}
            events.append((TABLE_WATERMARK_LAG, round(lag, 3), table_tags))
    _emit(events)
