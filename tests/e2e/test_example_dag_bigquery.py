"""The BigQuery example DAG end to end on Airflow 3: Spanner emulator → Delta Lake → BigQuery (the fake).

The demo database (three windows of inserts, partial updates, deletes and re-inserts, with partition
splits and merges) is served by the project's emulator in this process, and the BigQuery fake
(``airflow_provider_cdc.testing.bigquery_fake``) serves the Storage Write API and the REST endpoints
on loopback, also from this process. ``airflow dags test spanner_change_stream_to_bigquery <window
end>`` runs each window (the date given is the end of the window it runs), in order, with the fake's
endpoints in ``CDC_BIGQUERY_API_ENDPOINT``/``CDC_BIGQUERY_WRITE_ENDPOINT`` and the staging, change sets
and Delta tables on ``gs://`` (the Cloud Storage fake; the key in ``google_cloud_default``). After
every window the BigQuery tables, as a query would see them, and the Delta tables equal the committed
history up to that window's end, and the commit recorded each BigQuery table's
``upsert_stream_apply_watermark``. Then a middle window runs again (``dags test`` clears its run): the
ledger has every table of it, nothing is sent again, and nothing changes.

The demo's values are drawn without NULL array elements (``value_profile="google-emulator"``): BigQuery
arrays cannot hold them, and the BigQuery upsert refuses such a row naming it.

The demo's ``Readings`` table has a nullable key column (``Day``, declared without ``NOT NULL``): with
the DAG's defaults (``derived_key="auto"``) its BigQuery table is keyed on the derived key ``_cdc_key``,
the other tables on their Spanner keys.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import pytest
from support.dag_runs import END_TO_END, ExampleDagRuns

DAG_ID = "spanner_change_stream_to_bigquery"
PIPELINE = DAG_ID  # the DAG's default pipeline_id
PROJECT, DATASET = "demo-project", "cdc_demo"  # the DAG's default BigQuery dataset
TABLES = ("Customers", "Orders", "Readings")
WINDOWS = 3
CHANGES_PER_WINDOW = 200
RERUN_WINDOW = 1

pytestmark = [pytest.mark.spark, END_TO_END]


@dataclass
class BigQueryDag(ExampleDagRuns):
    """The DAG's Airflow home, the emulator's history and the BigQuery fake."""

    dag_id: ClassVar[str] = DAG_ID
    home: Any  # ExampleDagHome
    fake: Any  # FakeBigQuery
    roots: Any  # GcsRoots: every root on the Cloud Storage fake

    @property
    def conf(self) -> dict[str, str]:
        return self.roots.conf

    @property
    def lake_root(self) -> str:
        return str(self.roots.root("lake"))

    def lake(self) -> Any:
        return self.roots.lake()

    def lake_snapshot(self) -> dict[str, tuple[int, list[str]]]:
        """Per Delta table: version and every row (hidden CDC columns included), sorted."""
        return self.roots.lake_snapshot(TABLES)

    def bigquery_rows(self) -> dict[str, list[str]]:
        """Per BigQuery table: every row as a query sees it, sorted."""
        return {table: _sorted_texts(self.fake.rows(PROJECT, DATASET, table)) for table in TABLES}

    def apply_watermarks(self) -> dict[str, datetime]:
        """Each fake table's apply watermark (what INFORMATION_SCHEMA.TABLES answers)."""
        from airflow_provider_cdc.core.timestamps import from_micros

        return {
            table: from_micros(self.fake.table(PROJECT, DATASET, table).apply_watermark_us)
            for table in TABLES
            if self.fake.table(PROJECT, DATASET, table).apply_watermark_us is not None
        }


def _sorted_texts(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(row, sort_keys=True, default=str) for row in rows)


@pytest.fixture(scope="module")
def bigquery_dag(
    spark_connect_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BigQueryDag]:
    """The demo database on an emulator, the BigQuery fake with the DAG's dataset, and an Airflow 3 home."""
    from conftest import emulator_dag_home
    from support.gcs_dag import gcs_roots

    from airflow_provider_cdc.testing.bigquery_fake import FakeBigQuery
    from airflow_provider_cdc.testing.demo import DemoSettings, load_demo
    from airflow_provider_cdc.testing.workload import GOOGLE_EMULATOR_PROFILE

    root = tmp_path_factory.mktemp("example-dag-bigquery")
    settings = DemoSettings(
        windows=WINDOWS, changes_per_window=CHANGES_PER_WINDOW, value_profile=GOOGLE_EMULATOR_PROFILE
    )
    with (
        FakeBigQuery() as fake,
        gcs_roots(root, "bigquery") as roots,
        emulator_dag_home(
            root, settings, load_demo, reserialize=False, spark_connect_port=spark_connect_server.port
        ) as home,
    ):
        fake.create_dataset(PROJECT, DATASET)
        home.env.update(
            CDC_BIGQUERY_API_ENDPOINT=fake.rest_endpoint, CDC_BIGQUERY_WRITE_ENDPOINT=fake.write_endpoint
        )
        roots.configure(home.env)
        yield BigQueryDag(home, fake, roots)


def _assert_equal_to_history(dag: BigQueryDag, index: int, when: str) -> None:
    """The BigQuery tables and the Delta tables hold the committed history up to window ``index``'s end."""
    from airflow_provider_cdc.testing.bigquery_fake.compare import compare_bigquery_to_truth
    from airflow_provider_cdc.testing.lake_check import compare_lake_to_truth

    truth = dag.truth_after(index)
    assert sorted(truth) == list(TABLES)
    for result in compare_lake_to_truth(dag.lake(), truth):
        assert result.equal, (
            f"Delta table {result.table} {when}: {result.lake_rows} rows, {result.truth_rows} in the "
            f"history; only in the lake: {result.only_in_lake}; only in the history: {result.only_in_truth}"
        )
    for result in compare_bigquery_to_truth(dag.fake, PROJECT, DATASET, truth):
        assert result.equal, (
            f"BigQuery table {result.table} {when}: {result.lake_rows} rows, {result.truth_rows} in the "
            f"history; only in BigQuery: {result.only_in_lake}; only in the history: {result.only_in_truth}"
        )


def _assert_history_exercises_the_target(dag: BigQueryDag) -> None:
    """Inserts, partial updates, deletes and re-inserts of a deleted key, in every table's history."""
    from airflow_provider_cdc.testing.workload import TABLES_BY_NAME

    first, last = dag.window(0)[0], dag.window(WINDOWS - 1)[1]
    mods = [m for t in dag.home.workload.history_between(first, last) for m in t.mods]
    assert {m.table for m in mods} == set(TABLES)
    assert any(m.mod_type == "DELETE" for m in mods)
    assert any(
        m.mod_type == "UPDATE" and len(m.new_values) < len(TABLES_BY_NAME[m.table].value_columns)
        for m in mods
    ), "no partial update"
    deleted: set[tuple[str, Any]] = set()
    reinserts = 0
    for mod in mods:
        if mod.mod_type == "DELETE":
            deleted.add((mod.table, mod.key))
        elif mod.mod_type == "INSERT" and (mod.table, mod.key) in deleted:
            reinserts += 1
    assert reinserts, "no deleted key was inserted again"


def test_windows_reach_bigquery_equal_to_the_history_and_a_rerun_changes_nothing(
    bigquery_dag: BigQueryDag,
) -> None:
    from airflow_provider_cdc.targets.bigquery.commit import BIGQUERY as BIGQUERY_TARGET

    dag = bigquery_dag
    _assert_history_exercises_the_target(dag)
    for index in range(WINDOWS):
        output = dag.run(index, f"window-{index}")
        assert dag.home.dag_runs(DAG_ID)[-1][1:] == ("success", *dag.window(index))
        _assert_equal_to_history(dag, index, f"after window {index}")
        assert {t: dag.fake.table(PROJECT, DATASET, t).primary_key for t in TABLES} == {
            "Customers": ["Region", "CustomerId"],
            "Orders": ["CustomerId", "OrderId"],
            "Readings": ["_cdc_key"],  # Day is nullable: the key is derived, with no setting
        }
        store = dag.metastore()
        try:
            windows = [(w.start, w.end, w.state.value) for w in store.list_windows(PIPELINE)]
            delta_marks = store.table_watermarks(PIPELINE, target="delta")
            bigquery_marks = store.table_watermarks(PIPELINE, target=BIGQUERY_TARGET)
        finally:
            store.dispose()
        # the initial snapshot's window [T - 1µs, T) first
        assert windows == [(*dag.snapshot_window(), "applied")] + [
            (*dag.window(i), "applied") for i in range(index + 1)
        ]
        assert delta_marks == dict.fromkeys(TABLES, dag.window(index)[1])
        # The commit recorded what INFORMATION_SCHEMA.TABLES answered after this window's sends.
        assert set(bigquery_marks) == set(TABLES), bigquery_marks
        assert bigquery_marks == dag.apply_watermarks()
        assert f"BigQuery apply watermarks of {PIPELINE} " in output

    # A middle window again: the ledger records every table of it as sent, so nothing is sent again.
    lake_before, rows_before = dag.lake_snapshot(), dag.bigquery_rows()
    appended = {t: dag.fake.table(PROJECT, DATASET, t).appended_rows for t in TABLES}
    store = dag.metastore()
    try:
        marks_before = store.table_watermarks(PIPELINE, target=BIGQUERY_TARGET)
        attempt_before = {w.start: w.attempt for w in store.list_windows(PIPELINE)}
    finally:
        store.dispose()
    dag.run(RERUN_WINDOW, f"window-{RERUN_WINDOW}-again")
    runs = [run[1:] for run in dag.home.dag_runs(DAG_ID)]
    assert runs == [("success", *dag.window(i)) for i in range(WINDOWS)], runs
    assert {t: dag.fake.table(PROJECT, DATASET, t).appended_rows for t in TABLES} == appended
    assert dag.bigquery_rows() == rows_before
    assert dag.lake_snapshot() == lake_before  # no Delta commit either
    _assert_equal_to_history(dag, WINDOWS - 1, f"after window {RERUN_WINDOW} ran again")
    store = dag.metastore()
    try:
        windows = {w.start: w for w in store.list_windows(PIPELINE)}
        marks_after = store.table_watermarks(PIPELINE, target=BIGQUERY_TARGET)
    finally:
        store.dispose()
    assert {w.state.value for w in windows.values()} == {"applied"}
    assert {s: w.attempt - attempt_before[s] for s, w in windows.items()} == {
        dag.snapshot_window()[0]: 0,
        **{dag.window(i)[0]: int(i == RERUN_WINDOW) for i in range(WINDOWS)},
    }
    # The recorded watermarks never move back and are what BigQuery answers after the re-run.
    assert set(marks_after) == set(TABLES)
    assert all(marks_after[t] >= marks_before[t] for t in TABLES)
    assert marks_after == dag.apply_watermarks()
