"""The commit-timestamp example DAG end to end on Airflow 3: Spanner tables → Delta Lake, no change stream.

The commit-timestamp demo database (three windows: ``Performances`` inserted, rewritten in full, soft
deleted and undeleted; ``Documents`` edits appending ``DocumentHistory`` rows; transactions writing both
tables and pairs sharing one explicit timestamp) is served by the project's emulator in this process.
``airflow dags test spanner_commit_timestamp_tables_to_lake <window end>`` runs each window in order,
with the staging, change sets and Delta tables on ``gs://`` (the Cloud Storage fake; the key in
``google_cloud_default``).
After every window the Delta tables equal what the configuration makes of the history up to the window
end: ``Performances`` without its soft-deleted rows (and without the soft-delete column),
``DocumentLatest`` with each document's newest history row. A window run before its predecessor fails
at its first task, and a window run again changes nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest
from support.dag_runs import END_TO_END, example_dags_report

DAG_ID = "spanner_commit_timestamp_tables_to_lake"
PIPELINE = DAG_ID  # the DAG's default pipeline_id
TARGETS = ("DocumentLatest", "Performances")
WINDOWS = 3
TRANSACTIONS_PER_WINDOW = 60
RERUN_WINDOW = 1
DAGS_FOLDER = Path(__file__).resolve().parents[2] / "example_dags"

_e2e = END_TO_END


@dataclass
class LedgerDag:
    """The DAG's Airflow home and the demo history it reads."""

    home: Any  # ExampleDagHome
    truth: dict[str, Any]  # the demo's ground truth (what compare reads)
    roots: Any  # GcsRoots: every root on the Cloud Storage fake

    @property
    def lake_root(self) -> str:
        return str(self.roots.root("lake"))

    def window(self, index: int) -> tuple[datetime, datetime]:
        return self.home.settings.window_bounds(index)

    def run(self, index: int, name: str) -> str:
        """``airflow dags test`` of window ``index`` (the date given is its end); returns its output."""
        return self.home.airflow(
            "dags", "test", DAG_ID, self.window(index)[1].isoformat(), "-c", json.dumps(self.roots.conf),
            log=self.home.root / f"{name}.log",
        )  # fmt: skip

    def lake(self) -> Any:
        return self.roots.lake()

    def metastore(self) -> Any:
        from airflow_provider_cdc.metastore import Metastore

        return Metastore(self.home.metastore_url)

    def lake_snapshot(self) -> dict[str, tuple[int, list[str]]]:
        """Per Delta table: version and every row (hidden CDC columns included), sorted."""
        return self.roots.lake_snapshot(TARGETS)

    def dag_runs(self) -> list[tuple[str, datetime, datetime]]:
        """``(state, data_interval_start, data_interval_end)`` of every run, oldest first."""
        return [run[1:] for run in self.home.dag_runs(DAG_ID)]


@pytest.fixture(scope="module")
def ledger_dag(spark_connect_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LedgerDag]:
    """The commit-timestamp demo database on an emulator in this process, an Airflow 3 home, and every
    root on the Cloud Storage fake."""
    from conftest import emulator_dag_home
    from support.gcs_dag import gcs_roots

    from airflow_provider_cdc.testing.commit_timestamp_demo import (
        CommitTimestampDemoSettings,
        load_commit_timestamp_demo,
    )

    root = tmp_path_factory.mktemp("example-dag-commit-timestamp")
    settings = CommitTimestampDemoSettings(windows=WINDOWS, transactions_per_window=TRANSACTIONS_PER_WINDOW)
    with (
        gcs_roots(root, "commit-timestamp") as roots,
        emulator_dag_home(
            root,
            settings,
            load_commit_timestamp_demo,
            reserialize=False,
            spark_connect_port=spark_connect_server.port,
        ) as home,
    ):
        roots.configure(home.env)
        yield LedgerDag(home, json.loads((root / "truth.json").read_text()), roots)


def test_the_dag_loads_with_its_demo_defaults(tmp_path: Path) -> None:
    """The DAG file imports without errors, serializes, and its defaults read the demo database."""
    check = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.serialization.serialized_objects import DagSerialization
bag = DagBag(dag_folder=sys.argv[1])
dag = bag.dags.get(sys.argv[2])
report = {"errors": {str(k): v for k, v in bag.import_errors.items()}, "dags": sorted(bag.dag_ids)}
if dag is not None:
    DagSerialization.to_dict(dag)  # what the scheduler stores; raises on a field it cannot serialize
    open_window, merge = dag.get_task("open_window"), dag.get_task("merge")
    report.update(
        tasks=sorted(t.task_id for t in dag.tasks),
        max_active_runs=dag.max_active_runs,
        retries=open_window.retries,
        params={name: dag.params[name] for name in ("database_id", "source", "tables", "on_late_rows")},
        mode=open_window.mode,
        stream_key=merge.stream_key,
        window=[merge.window_handle.operator.task_id, merge.window_handle.key],
    )
print(json.dumps(report))
"""
    report = example_dags_report(check, tmp_path, str(DAGS_FOLDER / f"{DAG_ID}.py"), DAG_ID)

    from airflow_provider_cdc.testing.commit_timestamp_demo import TABLES

    assert report["errors"] == {}
    assert report["dags"] == [DAG_ID]
    assert report["tasks"] == ["commit", "merge", "open_window", "read", "upsert"]
    assert report["max_active_runs"] == 1 and report["retries"] == 2
    assert report["params"] == {
        "database_id": "ledger",
        "source": "ledger_tables",
        "tables": TABLES,  # the demo database's tables, as the demo maps them
        "on_late_rows": "fail",
    }
    assert report["mode"] == "commit_timestamp"
    # the source's key as the opening recorded it (projects/…/databases/{database_id}/{source}): the merge
    # takes the open step's window handle whole, no key of its own
    assert report["stream_key"] is None
    assert report["window"] == ["open_window", "return_value"]


def _assert_lake_equals(dag: LedgerDag, expected: dict[str, list[dict[str, Any]]], when: str) -> None:
    from airflow_provider_cdc.targets.delta.compare import compare_lake_to_rows

    assert sorted(expected) == list(TARGETS)
    for result in compare_lake_to_rows(dag.lake(), expected):
        assert result.equal, (
            f"Delta table {result.table} {when}: {result.lake_rows} rows, {result.truth_rows} in the "
            f"history; only in the lake: {result.only_in_lake}; only in the history: {result.only_in_truth}"
        )


def _assert_applied_through(dag: LedgerDag, index: int) -> dict[datetime, int]:
    """Metastore: windows 0..index applied, each target's watermark at index's end; returns attempts."""
    store = dag.metastore()
    try:
        windows = store.list_windows(PIPELINE)
        watermarks = store.table_watermarks(PIPELINE, target="delta")
    finally:
        store.dispose()
    assert [(w.start, w.end, w.state.value) for w in windows] == [
        (*dag.window(i), "applied") for i in range(index + 1)
    ]
    assert watermarks == dict.fromkeys(TARGETS, dag.window(index)[1])
    return {w.start: w.attempt for w in windows}


def _assert_final_state_of_the_history(dag: LedgerDag) -> None:
    """Soft-deleted performances are gone, live ones hold their last write, and each document is at its
    newest history row (the history has several rows for some documents)."""
    from airflow_provider_cdc.core.timestamps import format_timestamp

    history = dag.home.workload
    lake = dag.lake()
    performances = {
        (row["SingerId"], row["VenueId"], row["EventDate"]): row
        for row in lake.read_table("Performances").to_pylist()
    }
    deleted = [key for key, row in history.performances.items() if row["Deleted"]]
    live = {key: row for key, row in history.performances.items() if not row["Deleted"]}
    assert deleted and live
    assert not set(deleted) & set(performances)
    assert set(performances) == set(live)
    for key, row in live.items():
        assert isinstance(key[2], date)
        assert performances[key]["Revenue"] == row["Revenue"]
        assert format_timestamp(performances[key]["LastUpdateTime"]) == format_timestamp(
            row["LastUpdateTime"]
        )
    assert "Deleted" not in lake.read_table("Performances").schema.names

    documents = {(r["UserId"], r["DocumentId"]): r for r in lake.read_table("DocumentLatest").to_pylist()}
    assert dag.truth["counts"]["history_rows"] > len(history.latest) == len(documents)
    for key, row in history.latest.items():
        assert documents[key]["Delta"] == row["Delta"]
        assert format_timestamp(documents[key]["Ts"]) == format_timestamp(row["Ts"])


@_e2e
@pytest.mark.spark
def test_windows_equal_the_history_and_a_rerun_changes_nothing(ledger_dag: LedgerDag) -> None:
    from airflow_provider_cdc.core.timestamps import format_timestamp

    dag = ledger_dag
    counts = dag.truth["counts"]
    # The history holds what a commit-timestamp source must get right.
    for name in ("inserts", "updates", "soft_deletes", "undeletes", "cross_table_transactions"):
        assert counts[name] > 0, (name, counts)
    assert counts["shared_timestamp_pairs"] == WINDOWS

    # A window whose predecessor never ran fails at once, without retries, and applies nothing.
    out_of_order = dag.home.root / "window-1-first.log"
    with out_of_order.open("w") as out:
        subprocess.run(
            [
                str(Path(sys.executable).parent / "airflow"),
                "dags",
                "test",
                DAG_ID,
                dag.window(1)[1].isoformat(),
                "-c",
                json.dumps(dag.roots.conf),
            ],
            env=dag.home.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=300,
            check=False,
        )
    assert dag.dag_runs() == [("failed", *dag.window(1))]
    waits_for = f"waits for the window ending at {format_timestamp(dag.window(0)[1])}, which was never run"
    assert waits_for in out_of_order.read_text(errors="replace")
    assert not dag.lake().exists("Performances")

    for index in range(WINDOWS):
        output = dag.run(index, f"window-{index}")
        assert dag.dag_runs()[index] == ("success", *dag.window(index))
        _assert_lake_equals(dag, dag.truth["state_after_window"][index], f"after window {index}")
        _assert_applied_through(dag, index)
        assert "commit_timestamp read at" in output
    _assert_final_state_of_the_history(dag)

    # A window run again (dags test clears its run): the same rows read, merged and found applied.
    lake_before = dag.lake_snapshot()
    attempts_before = _assert_applied_through(dag, WINDOWS - 1)
    dag.run(RERUN_WINDOW, f"window-{RERUN_WINDOW}-again")
    assert [run[0] for run in dag.dag_runs()] == ["success"] * WINDOWS
    assert dag.lake_snapshot() == lake_before  # no Delta commit either
    _assert_lake_equals(dag, dag.truth["state"], f"after window {RERUN_WINDOW} ran again")
    attempts = _assert_applied_through(dag, WINDOWS - 1)
    assert {start: attempts[start] - attempts_before[start] for start in attempts} == {
        dag.window(i)[0]: int(i == RERUN_WINDOW) for i in range(WINDOWS)
    }
