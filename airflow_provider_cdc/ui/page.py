"""What the pipeline pages show, as plain values: built from the metastore's overview and Airflow's
runs of each window, formatted for people (times in UTC, durations as ``2 min 13 s``), no HTML.

A window is ``reading`` until it is applied; a step's failed try records its error's first lines on
the window (``WindowRecord.error``), which the page shows. Airflow's run of the window tells that it
failed, at which task and try; the page links to that task's log for the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from airflow_provider_cdc.core.durations import human_duration
from airflow_provider_cdc.core.timestamps import from_micros
from airflow_provider_cdc.metastore import Metastore, WindowRecord, WindowState
from airflow_provider_cdc.metastore.model import task_instance_parts
from airflow_provider_cdc.metastore.overview import DEFAULT_PAGE, PipelineSummary
from airflow_provider_cdc.ui.airflow_records import DagPipeline, RunRecord
from airflow_provider_cdc.ui.charts import Point, bar_chart, line_chart

#: Windows the plots show (the newest).
PLOT_WINDOWS = 200
_TOKEN_SHOWN = 28


class Links(Protocol):
    """Where the pages link to, as the web server serving them addresses it."""

    def index(self) -> str: ...

    def pipeline(self, pipeline: str, *, older: str | None = None, newer: str | None = None) -> str: ...

    def run(self, dag_id: str, run_id: str) -> str: ...

    def task(self, dag_id: str, run_id: str, task_id: str, map_index: int) -> str: ...


#: The runs of windows of a DAG, by window id (``airflow_records.window_runs`` on a session).
RunLookup = Callable[[str, Sequence[WindowRecord]], dict[str, RunRecord]]


def when(value: datetime | None) -> str:
    """A UTC time as ``2026-01-01 00:10:00`` (microseconds only when there are some); ``-`` for None."""
    if value is None:
        return "-"
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    return f"{text}.{value.microsecond:06d}" if value.microsecond else text


def count(value: int | float | None) -> str:
    """A count with thousands separators (fractions kept to one decimal); ``-`` for None."""
    if value is None:
        return "-"
    return f"{value:,.1f}" if isinstance(value, float) and value % 1 else f"{int(value):,}"


@dataclass(frozen=True)
class Failure:
    """Why a window's run failed and where its error is."""

    text: str
    link: str | None
    #: the error's first lines as the failing step recorded them (``None``: not recorded)
    error: str | None = None


@dataclass(frozen=True)
class Step:
    task_id: str
    duration: str
    state: str | None


@dataclass(frozen=True)
class WindowView:
    window_id: str
    start: str
    end: str
    state: str
    attempt: int
    rows: str
    transactions: str
    keys: str
    opened: str
    open_to_applied: str
    steps: tuple[Step, ...]
    run_state: str | None
    run_link: str | None
    failure: Failure | None


@dataclass(frozen=True)
class PipelineView:
    pipeline: str
    dag_ids: tuple[str, ...]
    link: str
    source: str
    targets: str
    first_window: str
    last_applied: str
    lag: str
    state: str
    #: ``applied``, ``reading``, ``failed`` or ``none``: how the state is coloured
    state_kind: str
    reading: int


@dataclass(frozen=True)
class TableView:
    target: str
    table: str
    watermark: str
    lag: str


@dataclass(frozen=True)
class UnitView:
    window: str
    source: str
    unit: str
    unit_full: str
    state: str
    lease_owner: str
    lease: str
    attempts: int


@dataclass(frozen=True)
class PipelinesPage:
    pipelines: tuple[PipelineView, ...]
    #: metastores that could not be read (named by connection id, never by URL)
    problems: tuple[str, ...]
    generated: str


@dataclass(frozen=True)
class PipelinePage:
    pipeline: PipelineView
    windows: tuple[WindowView, ...]
    newest_link: str | None
    newer_link: str | None
    older_link: str | None
    tables: tuple[TableView, ...]
    units: tuple[UnitView, ...]
    more_units: bool
    #: per reading window: how many of its units are done, e.g. ``3 of 8 units done``
    unit_progress: tuple[tuple[str, str], ...]
    lag_chart: str
    rows_chart: str
    generated: str


def _window_text(record: WindowRecord | None) -> str:
    return "-" if record is None else f"[{when(record.start)}, {when(record.end)})"


def failure_of(run: RunRecord | None, links: Links) -> Failure | None:
    """Where the error of a failed run is: the log of the task that failed."""
    if run is None or run.state != "failed":
        return None
    task = run.failed_task
    if task is None:
        return Failure("the run failed; the error is in its tasks' logs", links.run(run.dag_id, run.run_id))
    mapped = f" (map index {task.map_index})" if task.map_index >= 0 else ""
    return Failure(
        f"task {task.task_id}{mapped} failed (try {task.try_number}); the error is in its log",
        links.task(run.dag_id, run.run_id, task.task_id, task.map_index),
    )


def window_view(record: WindowRecord, run: RunRecord | None, links: Links) -> WindowView:
    """A window as a row of the page: the metastore's record (with the error its last failed step
    recorded) and its Airflow run's steps."""
    failure = failure_of(run, links)
    error = getattr(record, "error", None)
    if error is not None and record.state is not WindowState.APPLIED:
        task = task_instance_parts(error.task)[2] if error.task else None
        tried = f" (try {error.try_number})" if error.try_number is not None else ""
        failure = Failure(
            f"task {task or 'of the window'} failed{tried}", failure.link if failure else None, error.text
        )
    state = record.state.value
    if record.state is WindowState.READING and failure is not None:
        state = "failed"
    return WindowView(
        window_id=record.window_id,
        start=when(record.start),
        end=when(record.end),
        state=state,
        attempt=record.attempt,
        rows=count(record.record_count),
        transactions=count(record.transaction_count),
        keys=count(record.key_count),
        opened=when(record.opened_at),
        open_to_applied=human_duration(record.applied_at - record.opened_at) if record.applied_at else "-",
        steps=tuple(Step(t.task_id, human_duration(t.seconds), t.state) for t in (run.tasks if run else ())),
        run_state=None if run is None else run.state,
        run_link=None if run is None else links.run(run.dag_id, run.run_id),
        failure=failure,
    )


def pipeline_view(
    summary: PipelineSummary,
    dags: Sequence[DagPipeline],
    held_back: RunRecord | None,
    links: Links,
    now: datetime,
) -> PipelineView:
    """A pipeline's row: its source, targets, last applied window, lag and state (``held_back``: the
    run of its oldest reading window, when Airflow has one)."""
    last, waiting = summary.last_applied, summary.oldest_reading
    if summary.newest is None:
        state, kind = "no window recorded yet", "none"
    elif waiting is None:
        state, kind = f"applied through {when(last.end) if last else '-'}", "applied"
    elif (failure := failure_of(held_back, links)) is not None:
        state, kind = f"window {_window_text(waiting)} failed: {failure.text}", "failed"
    else:
        idle = human_duration(now - waiting.updated_at)
        state = f"window {_window_text(waiting)} reading (attempt {waiting.attempt}), last change {idle} ago"
        kind = "reading"
    return PipelineView(
        pipeline=summary.pipeline,
        dag_ids=tuple(sorted({dag.dag_id for dag in dags})),
        link=links.pipeline(summary.pipeline),
        source=summary.newest.stream if summary.newest else "-",
        targets=", ".join(summary.targets) or "-",
        first_window=when(summary.first_window_start),
        last_applied=_window_text(last),
        lag=human_duration(now - last.end) if last else "-",
        state=state,
        state_kind=kind,
        reading=summary.reading,
    )


def pipeline_views(
    store: Metastore, dags: Sequence[DagPipeline], runs: RunLookup, links: Links, now: datetime
) -> list[PipelineView]:
    """The rows of the pipelines ``dags`` run on ``store``: those the DAGs name, and those only named by
    a DAG's id that the metastore knows."""
    by_pipeline: dict[str, list[DagPipeline]] = {}
    for dag in dags:
        by_pipeline.setdefault(dag.pipeline, []).append(dag)
    unnamed = [name for name, of in by_pipeline.items() if not any(dag.named for dag in of)]
    known = store.known_pipelines(unnamed) if unnamed else set()
    shown = sorted(name for name in by_pipeline if name in known or name not in unnamed)
    views = []
    for name, summary in sorted(store.pipeline_summaries(shown).items()):
        of = sorted(by_pipeline[name], key=lambda dag: dag.dag_id)
        held_back = None
        if summary.oldest_reading is not None:
            held_back = runs(of[0].dag_id, [summary.oldest_reading]).get(summary.oldest_reading.window_id)
        views.append(pipeline_view(summary, of, held_back, links, now))
    return views


def _plots(windows: Sequence[WindowRecord]) -> tuple[str, str]:
    lag = [
        Point(w.end, (w.applied_at - w.end).total_seconds(),
              f"window ending {when(w.end)}: applied {human_duration(w.applied_at - w.end)} after its end")
        for w in windows
        if w.state is WindowState.APPLIED and w.applied_at is not None
    ]  # fmt: skip
    rows = [
        Point(w.end, float(w.record_count), f"window ending {when(w.end)}: {count(w.record_count)} rows")
        for w in windows
        if w.record_count is not None
    ]
    return (
        line_chart(lag, title="Lag: how long after its end each window was applied", y_text=human_duration,
                   empty="No window applied yet"),
        bar_chart(rows, title="Change rows per window", y_text=lambda v: count(int(v)),
                  empty="No window has counted its rows yet"),
    )  # fmt: skip


def _lease(expires: datetime | None, now: datetime) -> str:
    if expires is None:
        return "-"
    if expires > now:
        return f"expires in {human_duration(expires - now)}"
    return f"expired {human_duration(now - expires)} ago"


def pipeline_page(
    store: Metastore,
    dags: Sequence[DagPipeline],
    runs: RunLookup,
    links: Links,
    now: datetime,
    *,
    older: str | None = None,
    newer: str | None = None,
    page_size: int = DEFAULT_PAGE,
) -> PipelinePage:
    """One pipeline (``dags`` run it, all on ``store``): its windows (a page), tables, units in
    flight and plots. ``older``/``newer``: the page's cursor (a window id)."""
    pipeline = dags[0].pipeline
    dag_id = sorted(dag.dag_id for dag in dags)[0]
    summary = store.pipeline_summaries([pipeline])[pipeline]
    page = store.window_page(pipeline, older_than=older, newer_than=newer, limit=page_size)
    shown = list(page.windows)
    waiting = summary.oldest_reading
    lookup = shown
    if waiting is not None and all(w.window_id != waiting.window_id for w in shown):
        lookup = [*shown, waiting]
    window_runs = runs(dag_id, lookup)
    held_back = window_runs.get(waiting.window_id) if waiting else None
    view = pipeline_view(summary, dags, held_back, links, now)
    tables = tuple(
        TableView(mark.target, mark.table, when(mark.watermark), human_duration(now - mark.watermark))
        for mark in store.apply_watermarks(pipeline)
    )
    flight = store.units_in_flight(pipeline)
    units = tuple(
        UnitView(
            window=f"[{when(u.window_start)}, {when(u.window_end)})",
            source=u.stream,
            unit=u.token if len(u.token) <= _TOKEN_SHOWN else u.token[: _TOKEN_SHOWN - 1] + "…",
            unit_full=u.token,
            state=u.state.value,
            lease_owner=u.lease_owner or "-",
            lease=_lease(u.lease_expires_at, now),
            attempts=u.attempts,
        )
        for u in flight.units
    )
    progress = []
    for window_id, states in sorted(flight.states.items()):
        start_us, end_us = (int(part) for part in window_id.split("-"))
        total = sum(states.values())
        text = f"{states.get('done', 0)} of {total} units done"
        progress.append((_window_id_text(start_us, end_us), text))
    lag_chart, rows_chart = _plots(store.recent_windows(pipeline, PLOT_WINDOWS))
    paged = older is not None or newer is not None
    return PipelinePage(
        pipeline=view,
        windows=tuple(window_view(w, window_runs.get(w.window_id), links) for w in shown),
        newest_link=links.pipeline(pipeline) if paged else None,
        newer_link=links.pipeline(pipeline, newer=page.newer) if page.newer else None,
        older_link=links.pipeline(pipeline, older=page.older) if page.older else None,
        tables=tables,
        units=units,
        more_units=flight.more,
        unit_progress=tuple(progress),
        lag_chart=lag_chart,
        rows_chart=rows_chart,
        generated=when(now.replace(microsecond=0)),
    )


def _window_id_text(start_us: int, end_us: int) -> str:
    return f"[{when(from_micros(start_us))}, {when(from_micros(end_us))})"
