"""The example DAG end to end against Google's Cloud Spanner emulator, in real time.

The DAG's defaults (project ``demo-project``, instance ``demo-instance``, database ``demo``, stream
``WorkloadChanges``) name a database on Google's emulator; the DAG's windows are 20 seconds long from a
start a few seconds in the future (``CDC_WINDOW_SECONDS``, ``CDC_START_DATE``). A seeded workload
commits inserts, partial updates, deletes and re-inserts to three tables without pause while Google's
emulator splits and merges the stream's partitions, and as each of three windows ends,
``airflow dags test spanner_change_stream_to_lake <window end>`` runs it (on Airflow 3 the date it is
given is the end of the window it runs), in order, while later windows are still being written. After
each window every Delta table must hold exactly the committed history up to that window's end. The
workload writes only values Google's emulator reports faithfully (``value_profile="google-emulator"``)
and writes some rows several times in one transaction (``max_writes_per_row``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from support.dag_runs import END_TO_END

DAG_ID = "spanner_change_stream_to_lake"
PIPELINE = DAG_ID
PROJECT, INSTANCE, DATABASE = "demo-project", "demo-instance", "demo"
TABLES = ("Customers", "Orders", "Readings")
WINDOW = timedelta(seconds=20)
WINDOWS = 3
PRIOR_CHANGES = 60  # committed before the first window: the initial snapshot's rows
CHANGES_PER_SECOND = 12

pytestmark = [pytest.mark.spark, END_TO_END]


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _sleep_until(moment: datetime) -> None:
    delay = (moment - _now()).total_seconds()
    if delay > 0:
        time.sleep(delay)


@dataclass
class LiveWorkload:
    """A workload committing about ``CHANGES_PER_SECOND`` changes a second in a thread until stopped."""

    workload: Any  # Workload
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[BaseException] = field(default_factory=list)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._commit, name="workload", daemon=True)
        self.thread.start()

    def _commit(self) -> None:
        batch = max(1, CHANGES_PER_SECOND // 4)
        try:
            while not self.stop.is_set():
                self.workload.run(changes=batch)
                self.stop.wait(0.25)
        except BaseException as exc:  # raised by finish()
            self.errors.append(exc)

    def finish(self) -> Any:
        """Stop committing; returns the workload, whose history is then complete."""
        self.stop.set()
        if self.thread is not None:
            self.thread.join(60)
            assert not self.thread.is_alive(), "the workload did not stop"
        if self.errors:
            raise self.errors[0]
        return self.workload


@dataclass
class GoogleDag:
    """The example DAG's Airflow home, its windows and the workload committing to Google's emulator."""

    home: Any  # ExampleDagHome
    start: datetime
    live: LiveWorkload

    def window(self, index: int) -> tuple[datetime, datetime]:
        return self.start + WINDOW * index, self.start + WINDOW * (index + 1)


@pytest.fixture(scope="module")
def google_dag(
    google_spanner_emulator: Any, spark_connect_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GoogleDag]:
    """An Airflow 3 home for the DAG, and the workload committing from the first window's start on.

    Airflow's metadata database is migrated and the DAG serialized while the first window passes.
    """
    from conftest import ExampleDagHome, example_dag_environment, free_port, google_emulator_database

    from airflow_provider_cdc.testing.workload import WORKLOAD_TABLES, Workload, schema_ddl

    root = tmp_path_factory.mktemp("example-dag-google")
    # The DAG's default database, with the workload schema and its change streams.
    database = google_emulator_database(
        google_spanner_emulator.host, PROJECT, INSTANCE, DATABASE, schema_ddl(tables=WORKLOAD_TABLES)
    )
    # The first window starts after the change stream exists, on a whole second.
    start = _now().replace(microsecond=0) + timedelta(seconds=8)
    api_port, metastore_url = free_port(), f"sqlite:///{root / 'cdc_metastore.db'}"
    env = example_dag_environment(
        root, google_spanner_emulator.host, api_port, metastore_url, spark_connect_server.port
    )
    env.update(CDC_WINDOW_SECONDS=str(int(WINDOW.total_seconds())), CDC_START_DATE=start.isoformat())
    home = ExampleDagHome(
        root=root,
        airflow_home=root / "airflow",
        env=env,
        settings=None,
        workload=None,
        metastore_url=metastore_url,
        api_port=api_port,
    )
    home.airflow_home.mkdir()
    live = LiveWorkload(
        Workload(
            database, None, 31, value_profile="google-emulator", max_writes_per_row=3, max_rows_per_table=60
        )
    )
    home.workload = live.workload
    # Rows before the first window: the DAG's initial snapshot reads them at T - 1µs.
    live.workload.run(changes=PRIOR_CHANGES, step=timedelta(0))
    assert live.workload.transactions[-1].commit_timestamp < start, "the prior rows overran the first window"
    _sleep_until(start)
    live.start()
    try:
        home.airflow("db", "migrate", log=root / "db-migrate.log")
        home.airflow("dags", "reserialize", log=root / "dags-reserialize.log")
        yield GoogleDag(home, start, live)
    finally:
        live.stop.set()
        if live.thread is not None:
            live.thread.join(60)


class LakeSnapshot:
    """The Delta tables as read at one moment (what ``compare_lake_to_truth`` reads)."""

    def __init__(self, lake: Any) -> None:
        self.tables = {table: lake.read_table(table) for table in TABLES if lake.exists(table)}

    def exists(self, table: str) -> bool:
        return table in self.tables

    def read_table(self, table: str) -> Any:
        return self.tables[table]


def _truth_at(workload: Any, moment: datetime) -> dict[str, list[dict[str, Any]]]:
    """The tables' rows once every transaction committed before ``moment`` is applied (Spanner JSON)."""
    from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND
    from airflow_provider_cdc.testing.workload import TABLES_BY_NAME

    state = workload.state_at(moment - ONE_MICROSECOND)
    return {
        name: [TABLES_BY_NAME[name].encode_values(rows[key]) for key in sorted(rows)]
        for name, rows in state.items()
    }


def test_consecutive_windows_against_google_emulator_equal_the_committed_history(
    google_dag: GoogleDag,
) -> None:
    from airflow_provider_cdc.metastore import Metastore
    from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget
    from airflow_provider_cdc.testing.lake_check import compare_lake_to_truth
    from airflow_provider_cdc.testing.workload import TABLES_BY_NAME

    home = google_dag.home
    lake = DeltaLakeTarget(str(home.lake_root))
    after: list[tuple[LakeSnapshot, list[tuple[datetime, datetime, str]], dict[str, datetime]]] = []
    for index in range(WINDOWS):
        start, end = google_dag.window(index)
        _sleep_until(end)  # the run starts as the window ends, as the scheduler starts it
        # On Airflow 3 the date given to `airflow dags test` is the end of the window it runs.
        home.airflow(
            "dags", "test", DAG_ID, end.isoformat(), log=home.root / f"window-{index}.log", timeout=600
        )
        runs = home.dag_runs(DAG_ID)
        assert runs[-1][1:] == ("success", start, end), runs
        store = Metastore(home.metastore_url)
        try:
            windows = [(w.start, w.end, w.state.value) for w in store.list_windows(PIPELINE)]
            after.append((LakeSnapshot(lake), windows, store.table_watermarks(PIPELINE, target="delta")))
        finally:
            store.dispose()
    workload = google_dag.live.finish()
    assert [(start, end) for *_, start, end in home.dag_runs(DAG_ID)] == [
        google_dag.window(i) for i in range(WINDOWS)
    ]

    first, last = google_dag.window(0)[0], google_dag.window(WINDOWS - 1)[1]
    assert workload.transactions[-1].commit_timestamp > last, (
        "the last window did not run while writes went on"
    )
    # The history has what the pipeline must get right, in every window.
    mods = [m for t in workload.history_between(first, last) for m in t.mods]
    assert {m.table for m in mods} == set(TABLES)
    assert any(m.mod_type == "DELETE" for m in mods)
    assert any(
        m.mod_type == "UPDATE" and len(m.new_values) < len(TABLES_BY_NAME[m.table].value_columns)
        for m in mods
    ), "no partial update"
    deleted: set[tuple[str, tuple[Any, ...]]] = set()
    reinserts = 0
    for mod in mods:
        if mod.mod_type == "DELETE":
            deleted.add((mod.table, mod.key))
        elif mod.mod_type == "INSERT" and (mod.table, mod.key) in deleted:
            reinserts += 1
    assert reinserts, "no deleted key was inserted again"

    for index, (snapshot, windows, watermarks) in enumerate(after):
        start, end = google_dag.window(index)
        assert workload.history_between(start, end), f"window {index} got no commits"
        for result in compare_lake_to_truth(snapshot, _truth_at(workload, end)):
            assert result.equal, (
                f"table {result.table} after window {index} [{start}, {end}): {result.lake_rows} rows in "
                f"the lake, {result.truth_rows} in the history; only in the lake: {result.only_in_lake}; "
                f"only in the history: {result.only_in_truth}"
            )
        snapshot_window = (first - timedelta(microseconds=1), first)  # the initial snapshot's
        assert windows == [(*snapshot_window, "applied")] + [
            (*google_dag.window(i), "applied") for i in range(index + 1)
        ]
        changed = {m.table for t in workload.transactions if t.commit_timestamp < end for m in t.mods}
        assert watermarks == dict.fromkeys(sorted(changed), end), (index, watermarks)
