"""The pipeline pages built from a metastore (SQLite and PostgreSQL): what each page shows, paging
through windows, and that a page's database work does not grow with the number of windows."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from typing import Any

import pytest
import sqlalchemy as sa
from support.metastores import store

from airflow_provider_cdc.core.timestamps import to_micros
from airflow_provider_cdc.metastore import Metastore, WindowRecord
from airflow_provider_cdc.metastore import schema as metastore_schema
from airflow_provider_cdc.ui.airflow_records import DagPipeline, RunRecord, TaskRecord
from airflow_provider_cdc.ui.page import PipelinesPage, pipeline_page, pipeline_views
from airflow_provider_cdc.ui.render import render_document, render_pipeline, render_pipelines
from tests.support.clock import ManualClock
from tests.support.pipeline_pages import READER, T0, WINDOW, applied_after, record_pipeline, window_rows

DAG = "orders_to_lake"

__all__ = ["store"]  # a fixture


class Links:
    def index(self) -> str:
        return "/cdc/"

    def pipeline(self, pipeline: str, *, older: str | None = None, newer: str | None = None) -> str:
        return (
            f"/cdc/pipelines/{pipeline}"
            + (f"?older={older}" if older else "")
            + (f"?newer={newer}" if newer else "")
        )

    def run(self, dag_id: str, run_id: str) -> str:
        return f"/dags/{dag_id}/runs/{run_id}"

    def task(self, dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
        return f"/dags/{dag_id}/runs/{run_id}/tasks/{task_id}"


STEPS = (("wait_parents", 0.4, "success"), ("open_window", 1.2, "success"), ("read", 14.0, "success"),
         ("merge", 133.0, "success"), ("upsert", 9.0, "success"), ("commit", 0.8, "success"))  # fmt: skip


class Runs:
    """Airflow's runs of windows as a test gives them (by window id); records every lookup."""

    def __init__(self, runs: dict[str, RunRecord] | None = None) -> None:
        self.runs = runs or {}
        self.lookups: list[list[str]] = []

    def __call__(self, dag_id: str, windows: Sequence[WindowRecord]) -> dict[str, RunRecord]:
        self.lookups.append([w.window_id for w in windows])
        return {w.window_id: self.runs[w.window_id] for w in windows if w.window_id in self.runs}


def run_of(window_id: str, state: str, failed_task: str | None = None) -> RunRecord:
    tasks = [TaskRecord(task, status, seconds, 1, -1, None) for task, seconds, status in STEPS]
    if failed_task is not None:
        tasks = tasks[: [t.task_id for t in tasks].index(failed_task)]
        tasks.append(TaskRecord(failed_task, "failed", 61.0, 2, -1, None))
    return RunRecord(DAG, f"scheduled__{window_id}", state, tuple(tasks))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(to_micros(T0))


class Page(HTMLParser):
    """A rendered page: its table rows by table id (cells' text and the row's attributes), links and SVGs."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tables: dict[str, list[tuple[dict[str, str | None], list[str]]]] = {}
        self.links: list[tuple[str | None, str]] = []
        self.svg_points: dict[str, int] = {}
        self._table: str | None = None
        self._figure: str | None = None
        self._row: tuple[dict[str, str | None], list[str]] | None = None
        self._cell: list[str] | None = None
        self._link: tuple[str | None, list[str]] | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "table":
            self._table = found.get("id")
        elif tag == "figure":
            self._figure = found.get("id")
        elif tag == "tr" and self._table and found:
            self._row = (found, [])
            self.tables.setdefault(self._table, []).append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "a":
            self._link = (found.get("href"), [])
        elif self._figure and "point" in (found.get("class") or ""):
            self.svg_points[self._figure] = self.svg_points.get(self._figure, 0) + 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        elif tag == "figure":
            self._figure = None
        elif tag == "tr":
            self._row = None
        elif tag == "td" and self._row is not None and self._cell is not None:
            self._row[1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "a" and self._link is not None:
            self.links.append((self._link[0], "".join(self._link[1]).strip()))
            self._link = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._link is not None:
            self._link[1].append(data)


def test_a_pipeline_page_shows_its_windows_tables_units_and_plots(
    store: Metastore, clock: ManualClock
) -> None:
    recorded = record_pipeline(store, clock, "orders")
    ids = [f"{to_micros(s)}-{to_micros(e)}" for s, e in recorded.windows]
    runs = Runs({ids[1]: run_of(ids[1], "success"), ids[3]: run_of(ids[3], "failed", failed_task="merge")})
    now = recorded.windows[-1][1] + timedelta(minutes=20)
    dags = [DagPipeline(DAG, "orders", "cdc_metastore_default", True)]

    page = pipeline_page(store, dags, runs, Links(), now)

    view = page.pipeline
    assert (view.pipeline, view.dag_ids, view.source, view.targets) == (
        "orders",
        (DAG,),
        recorded.stream,
        "bigquery, delta",
    )
    assert view.last_applied == "[2026-01-01 00:20:00, 2026-01-01 00:30:00)"
    assert view.lag == "30 min" and view.state_kind == "failed"
    assert view.state == (
        "window [2026-01-01 00:30:00, 2026-01-01 00:40:00) failed: "
        "task merge failed (try 2); the error is in its log"
    )
    # newest first: the failed window, then the applied ones with their counts
    assert [(w.start, w.state, w.attempt, w.rows) for w in page.windows] == [
        ("2026-01-01 00:30:00", "failed", 2, "-"),
        ("2026-01-01 00:20:00", "applied", 1, str(window_rows(2))),
        ("2026-01-01 00:10:00", "applied", 1, str(window_rows(1))),
        ("2026-01-01 00:00:00", "applied", 1, str(window_rows(0))),
    ]
    failed, _, second, first = page.windows
    assert failed.failure is not None
    assert failed.failure.link == f"/dags/{DAG}/runs/scheduled__{ids[3]}/tasks/merge"
    assert [(s.task_id, s.duration) for s in second.steps] == [
        ("wait_parents", "400 ms"), ("open_window", "1.2 s"), ("read", "14 s"), ("merge", "2 min 13 s"),
        ("upsert", "9 s"), ("commit", "800 ms"),
    ]  # fmt: skip
    assert first.steps == () and first.run_link is None  # no run of it in Airflow
    assert first.open_to_applied == "2 min 8 s"  # opened 5 s after its end, applied 2 min 13 s after it
    assert [(t.target, t.table, t.watermark, t.lag) for t in page.tables] == [
        ("bigquery", "Orders", "2026-01-01 00:30:00", "30 min"),
        ("delta", "Customers", "2026-01-01 00:30:00", "30 min"),
        ("delta", "Orders", "2026-01-01 00:30:00", "30 min"),
    ]
    # one unit of the reading window is done; the other is held by a reader, its lease 10 min long
    assert [(u.unit, u.state, u.lease_owner, u.lease) for u in page.units] == [
        ("token-b", "running", READER, "expired 8 min 55 s ago")
    ]
    assert page.unit_progress == (("[2026-01-01 00:30:00, 2026-01-01 00:40:00)", "1 of 2 units done"),)
    assert page.older_link is page.newer_link is page.newest_link is None

    html = render_document(render_pipeline(page, Links()))
    shown = Page(html)
    windows = shown.tables["windows"]
    assert [row[0]["data-state"] for row in windows] == ["failed", "applied", "applied", "applied"]
    assert windows[0][1][:4] == ["2026-01-01 00:30:00", "2026-01-01 00:40:00", "failed", "2"]
    assert "task merge failed (try 2); the error is in its log" in windows[0][1][-1]
    assert "merge 2 min 13 s" in windows[2][1][-1]
    assert ("/dags/orders_to_lake/runs/scheduled__" + ids[3] + "/tasks/merge",
            "task merge failed (try 2); the error is in its log") in shown.links  # fmt: skip
    assert shown.tables["tables"][0][1] == ["bigquery", "Orders", "2026-01-01 00:30:00", "30 min"]
    assert shown.tables["units"][0][1][2:5] == ["token-b", "running", READER]
    # the plots: the lag of each applied window and the rows of each counted one
    assert shown.svg_points == {"lag-chart": 3, "rows-chart": 3}
    lag_values = [json.loads(v) for v in _attribute_values(page.lag_chart, "data-y")]
    assert lag_values == [applied_after(i).total_seconds() for i in range(3)]
    assert [json.loads(v) for v in _attribute_values(page.rows_chart, "data-y")] == [
        float(window_rows(i)) for i in range(3)
    ]


def _attribute_values(markup: str, name: str) -> list[str]:
    values: list[str] = []

    class Collect(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            values.extend(value or "" for key, value in attrs if key == name)

    Collect().feed(markup)
    return values


def test_the_list_shows_the_pipelines_the_dags_run_and_the_metastore_knows(
    store: Metastore, clock: ManualClock
) -> None:
    orders = record_pipeline(store, clock, "orders")
    record_pipeline(store, clock, "payments", windows=2, last_reading=False, tables={"delta": ["Payments"]})
    ids = [f"{to_micros(s)}-{to_micros(e)}" for s, e in orders.windows]
    runs = Runs({ids[3]: run_of(ids[3], "running")})
    dags = [
        DagPipeline(DAG, "orders", "cdc_metastore_default", True),
        DagPipeline("payments", "payments", "cdc_metastore_default", False),  # named by its DAG id only
        DagPipeline("cleanup", "cleanup", "cdc_metastore_default", False),  # not a pipeline: not shown
        DagPipeline("refunds_to_lake", "refunds", "cdc_metastore_default", True),  # named, not run yet
    ]
    now = datetime(2026, 11, 28, 18, 35, tzinfo=timezone.utc)
    clock.advance((to_micros(orders.windows[-1][1] + timedelta(minutes=3)) - clock()) / 1e6)

    views = {view.pipeline: view for view in pipeline_views(store, dags, runs, Links(), now)}

    assert sorted(views) == ["orders", "payments", "refunds"]
    assert views["orders"].state_kind == "reading"  # its run is running, nothing failed
    assert views["orders"].state.startswith(
        "window [2026-01-01 00:30:00, 2026-01-01 00:40:00) reading (attempt 2)"
    )
    assert (views["orders"].lag, views["payments"].lag) == ("331 d", "331 d")
    assert views["payments"].state == "applied through 2026-01-01 00:20:00"
    assert views["payments"].targets == "delta"
    assert (views["refunds"].state, views["refunds"].lag, views["refunds"].source) == (
        "no window recorded yet",
        "-",
        "-",
    )
    assert runs.lookups == [[ids[3]]]  # only the window holding a pipeline back is looked up
    html = render_pipelines(PipelinesPage(tuple(views.values()), (), "now"))
    rows = Page(html).tables["pipelines"]
    assert [row[0]["data-pipeline"] for row in rows] == ["orders", "payments", "refunds"]
    assert rows[1][1][1:6] == ["payments", recorded_stream("payments"), "delta",
                               "[2026-01-01 00:10:00, 2026-01-01 00:20:00)", "331 d"]  # fmt: skip


def recorded_stream(pipeline: str) -> str:
    return f"projects/p/instances/i/databases/shop/{pipeline.title()}Stream"


def insert_windows(store: Metastore, pipeline: str, count: int, *, reading_last: bool = True) -> None:
    """``count`` windows of ``pipeline`` in one statement per 1,000 (the last still reading)."""
    W = metastore_schema.windows
    rows = []
    for index in range(count):
        start = to_micros(T0 + index * WINDOW)
        end = to_micros(T0 + (index + 1) * WINDOW)
        reading = reading_last and index == count - 1
        rows.append({
            "pipeline": pipeline, "start_us": start, "end_us": end, "stream": recorded_stream(pipeline),
            "state": "reading" if reading else "applied", "attempt": 1, "staging_uri": None,
            "record_count": None if reading else 100 + index % 50, "opened_us": end + 5_000_000,
            "updated_us": end + 60_000_000, "applied_us": None if reading else end + 60_000_000,
            "change_set_uri": None, "transaction_count": None, "key_count": None,
        })  # fmt: skip
    with store.engine.begin() as conn:
        for start in range(0, len(rows), 1000):
            conn.execute(sa.insert(W), rows[start : start + 1000])
        conn.execute(sa.insert(metastore_schema.pipelines), [
            {"pipeline": pipeline, "first_window_start_us": to_micros(T0), "tables_recorded_from_us": None,
             "created_us": 0}
        ])  # fmt: skip
        if store.dialect_name == "postgresql":
            conn.execute(sa.text("ANALYZE cdc_windows"))


def test_paging_through_windows_by_window_id(store: Metastore) -> None:
    insert_windows(store, "orders", 120)
    dags = [DagPipeline(DAG, "orders", "cdc_metastore_default", True)]
    now = datetime(2026, 6, 1, tzinfo=timezone.utc)

    def starts(page: Any) -> list[str]:
        return [w.start for w in page.windows]

    first = pipeline_page(store, dags, Runs(), Links(), now)
    assert len(first.windows) == 50 and first.newer_link is None and first.newest_link is None
    assert first.windows[0].state == "reading" and starts(first)[0] == "2026-01-01 19:50:00"
    older = first.older_link.split("older=")[1]
    second = pipeline_page(store, dags, Runs(), Links(), now, older=older)
    assert starts(second)[0] == "2026-01-01 11:30:00" and len(second.windows) == 50
    third = pipeline_page(store, dags, Runs(), Links(), now, older=second.older_link.split("older=")[1])
    assert len(third.windows) == 20 and third.older_link is None
    assert starts(third)[-1] == "2026-01-01 00:00:00"
    back = pipeline_page(store, dags, Runs(), Links(), now, newer=third.newer_link.split("newer=")[1])
    assert starts(back) == starts(second)
    again = pipeline_page(store, dags, Runs(), Links(), now, newer=back.newer_link.split("newer=")[1])
    assert starts(again) == starts(first) and again.newer_link is None  # the newest page again
    with pytest.raises(ValueError, match="not a window id"):
        pipeline_page(store, dags, Runs(), Links(), now, older="1; DROP TABLE cdc_windows")


class Work:
    """The statements a block runs on a metastore and the database's work for them: SQLite's virtual
    machine steps, or the rows PostgreSQL's scans read (``EXPLAIN ANALYZE`` of each statement)."""

    def __init__(self, store: Metastore) -> None:
        self.store = store
        self.statements: list[tuple[str, Any]] = []
        self.steps = 0

    def __enter__(self) -> Work:
        self.store.dispose()
        sa.event.listen(self.store.engine, "before_cursor_execute", self._statement)
        if self.store.dialect_name == "sqlite":
            sa.event.listen(self.store.engine, "connect", self._count_steps)
        return self

    def __exit__(self, *exc: object) -> None:
        sa.event.remove(self.store.engine, "before_cursor_execute", self._statement)
        if self.store.dialect_name == "sqlite":
            sa.event.remove(self.store.engine, "connect", self._count_steps)
        self.store.dispose()

    def _statement(self, conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            self.statements.append((statement, parameters))

    def _count_steps(self, dbapi_connection: Any, record: Any) -> None:
        def step() -> int:
            self.steps += 100
            return 0

        dbapi_connection.set_progress_handler(step, 100)

    def rows_scanned(self) -> int:
        """PostgreSQL: the rows every scan of the recorded statements read, run again under EXPLAIN."""

        def scanned(plan: dict[str, Any]) -> int:
            own = plan["Actual Rows"] * plan["Actual Loops"] if "Scan" in plan["Node Type"] else 0
            return own + sum(scanned(child) for child in plan.get("Plans", ()))

        total = 0
        with self.store.engine.connect() as conn:
            cursor = conn.connection.cursor()
            for statement, parameters in self.statements:
                cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters)
                total += scanned(cursor.fetchone()[0][0]["Plan"])
        return total


def page_work(store: Metastore, pipeline: str) -> Work:
    dags = [DagPipeline(f"{pipeline}_dag", pipeline, "cdc_metastore_default", True)]
    by_dag_id = [DagPipeline(pipeline, pipeline, "cdc_metastore_default", False)]  # the metastore says
    now = datetime(2026, 11, 28, tzinfo=timezone.utc)
    with Work(store) as work:
        page = pipeline_page(store, dags, Runs(), Links(), now)
        views = pipeline_views(store, by_dag_id, Runs(), Links(), now)
    assert len(page.windows) == 50 and views[0].pipeline == pipeline
    return work


def test_a_page_of_10000_windows_reads_no_more_than_a_page_of_100(store: Metastore) -> None:
    insert_windows(store, "small", 100)
    insert_windows(store, "large", 10_000)
    small, large = page_work(store, "small"), page_work(store, "large")

    # the same statements, whatever the number of windows
    assert len(large.statements) == len(small.statements) <= 20
    if store.dialect_name == "sqlite":
        # no statement walks the windows: the work of 10,000 windows is that of 100
        assert large.steps < 1.3 * small.steps + 5_000, (small.steps, large.steps)
    else:
        small_rows, large_rows = small.rows_scanned(), large.rows_scanned()
        assert large_rows < 1.3 * small_rows + 100, (small_rows, large_rows)
        assert large_rows < 1_000


def test_a_failed_window_shows_the_error_its_step_recorded(store: Metastore, clock: ManualClock) -> None:
    """The first lines of the error a failed step recorded on its window are on the page, escaped, with
    the link to the task's log for the rest; an applied window shows none."""
    recorded = record_pipeline(store, clock, "orders")
    ids = [f"{to_micros(s)}-{to_micros(e)}" for s, e in recorded.windows]
    start, end = recorded.windows[3]
    task = f"{DAG}/scheduled__{ids[3]}/merge/-1"
    text = "SparkJobError: <window 3> staged rows of unit 'token-b' are missing"
    assert store.record_window_error("orders", start, end, text, task=task, try_number=3)
    runs = Runs({ids[3]: run_of(ids[3], "failed", failed_task="merge")})
    dags = [DagPipeline(DAG, "orders", "cdc_metastore_default", True)]

    page = pipeline_page(store, dags, runs, Links(), end + timedelta(minutes=5))

    failed = page.windows[0]
    assert failed.state == "failed" and failed.failure is not None
    assert (failed.failure.text, failed.failure.error) == ("task merge failed (try 3)", text)
    assert failed.failure.link == f"/dags/{DAG}/runs/scheduled__{ids[3]}/tasks/merge"
    assert all(w.failure is None for w in page.windows[1:])
    html = render_document(render_pipeline(page, Links()))
    assert "SparkJobError: &lt;window 3&gt; staged rows of unit &#39;token-b&#39; are missing" in html
    assert "<window 3>" not in html
