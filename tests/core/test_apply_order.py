"""Windows apply in order, and the lake holds what the metastore says: contiguity, agreement, repair."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_provider_cdc import cli
from airflow_provider_cdc.changesets.writer import Change, change_set_table, write_change_set
from airflow_provider_cdc.core.apply_order import TableVersions, version_problem
from airflow_provider_cdc.core.timestamps import to_micros
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.hooks.pipeline import LakeNotAppliedError
from airflow_provider_cdc.metastore import Metastore, WindowOrderError, WindowState
from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator
from airflow_provider_cdc.targets.delta import upsert_job
from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

PIPELINE = "shop"
STREAM = "projects/p/instances/i/databases/d/Orders"
T0 = datetime(2026, 2, 1, tzinfo=timezone.utc)
TYPES = [
    {"name": "Id", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
    {"name": "Amount", "type": {"code": "INT64"}, "is_primary_key": False, "ordinal_position": 2},
]
TABLES = ("Orders", "Customers")


def window(n: int) -> Window:
    return Window(T0 + timedelta(minutes=10 * n), T0 + timedelta(minutes=10 * (n + 1)))


# ------------------------------------------------------------------------------------------------
# The rules


def test_version_rules() -> None:
    recorded = TableVersions({"Orders": 300}, recorded_from_us=None)
    assert version_problem("p", "Orders", 300, 400, recorded) is None  # holds what was recorded
    assert version_problem("p", "Orders", 400, 400, recorded) is None  # holds this very window
    restored = version_problem("p", "Orders", 200, 400, recorded)
    assert restored and "holds window version 200" in restored and "is version 300" in restored
    gone = version_problem("p", "Orders", None, 400, recorded)
    assert gone and "holds no window of the pipeline" in gone
    assert version_problem("p", "Customers", None, 400, recorded) is None  # never written
    foreign = version_problem("p", "Customers", 350, 400, recorded)
    assert foreign and "never recorded for it" in foreign
    legacy = TableVersions({}, recorded_from_us=350)  # windows up to 350 applied before the ledger
    assert version_problem("p", "Customers", 350, 400, legacy) is None
    assert version_problem("p", "Customers", 360, 400, legacy) is not None
    assert TableVersions.from_json(recorded.to_json()) == recorded


# ------------------------------------------------------------------------------------------------
# A pipeline of windows applied through the upsert job and the commit operator


class Pipeline:
    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.lake = root / "lake"
        self.changesets = root / "changesets"
        self.url = url
        self.store = Metastore(url)
        self.store.create_schema()
        self.store.record_pipeline(PIPELINE, window(0).start)

    def write(self, n: int, tables: tuple[str, ...] = TABLES) -> None:
        """Window n: key n + 1 inserted, key 0 set to n, in each of ``tables``."""
        at = window(n).start + timedelta(seconds=1)
        changes = [Change({"Id": n + 1}, "UPSERT", f"{to_micros(at):016X}", at, {"Amount": n}),
                   Change({"Id": 0}, "UPSERT", f"{to_micros(at):016X}", at, {"Amount": n})]
        write_change_set(str(self.changesets / window(n).window_id),
                         {table: change_set_table(TYPES, changes) for table in tables})

    def upsert(self, n: int) -> dict[str, Any]:
        self.store.require_predecessor_applied(PIPELINE, window(n).start, window(n).end)
        return upsert_job.run(
            str(self.changesets / window(n).window_id),
            str(self.lake),
            PIPELINE,
            None,
            None,
            self.store.table_versions(PIPELINE, target="delta"),
        )

    def commit(self, n: int) -> dict[str, Any]:
        return CdcCommitWindowOperator(
            task_id="commit", pipeline_id=PIPELINE, window_start=window(n).start, window_end=window(n).end,
            locations={"changeset_root": str(self.changesets), "lake_root": str(self.lake)},
            metastore_conn_id="cdc_ledger",
        ).execute({})

    def run(self, n: int, tables: tuple[str, ...] = TABLES) -> None:
        self.store.open_window(PIPELINE, STREAM, window(n).start, window(n).end)
        self.write(n, tables)
        self.upsert(n)
        self.commit(n)

    def rows(self, table: str) -> list[tuple[int, int]]:
        rows = DeltaLakeTarget(str(self.lake)).read_table(table).to_pylist()
        return sorted((r["Id"], r["Amount"]) for r in rows)


@pytest.fixture
def pipeline(tmp_path: Path, monkeypatch) -> Pipeline:
    url = f"sqlite:///{tmp_path / 'metastore.db'}"
    monkeypatch.setenv("AIRFLOW_CONN_CDC_LEDGER",
                       json.dumps({"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": url}}))
    return Pipeline(tmp_path, url)


def test_the_commit_records_the_delta_version_each_table_got(pipeline: Pipeline) -> None:
    pipeline.run(0)
    pipeline.run(1, tables=("Orders",))
    recorded = pipeline.store.window_tables(PIPELINE, target="delta")
    records = [(r.table, r.window_end, r.target_version, r.rows) for r in recorded]
    assert records == [
        ("Customers", window(0).end, 0, 2),
        ("Orders", window(0).end, 0, 2),
        ("Orders", window(1).end, 1, 2),
    ]
    assert pipeline.store.table_versions(PIPELINE, target="delta").tables == {
        "Orders": window(1).end_micros,
        "Customers": window(0).end_micros,
    }


def test_a_window_waits_for_the_one_before_it(pipeline: Pipeline) -> None:
    pipeline.run(0)
    pipeline.store.open_window(PIPELINE, STREAM, window(1).start, window(1).end)  # its run failed
    pipeline.store.open_window(PIPELINE, STREAM, window(2).start, window(2).end)
    pipeline.write(2)
    waits = r"waits for window \[2026-02-01T00:10:00.000000Z, .*which is reading"
    with pytest.raises(WindowOrderError, match=waits):
        pipeline.upsert(2)
    with pytest.raises(WindowOrderError, match="which is reading"):
        pipeline.commit(2)
    assert pipeline.rows("Orders") == [(0, 0), (1, 0)]  # window 2 changed nothing
    assert pipeline.store.get_window(PIPELINE, window(2).start, window(2).end).state is WindowState.READING
    # Re-running the failed window lets the later one go on.
    pipeline.write(1)
    pipeline.upsert(1)
    pipeline.commit(1)
    pipeline.upsert(2)
    pipeline.commit(2)
    assert pipeline.rows("Orders") == [(0, 2), (1, 0), (2, 1), (3, 2)]
    assert pipeline.store.table_watermarks(PIPELINE, target="delta") == {t: window(2).end for t in TABLES}


def test_the_commit_refuses_a_window_the_upsert_did_not_apply(pipeline: Pipeline) -> None:
    pipeline.run(0)
    pipeline.store.open_window(PIPELINE, STREAM, window(1).start, window(1).end)
    pipeline.write(1)
    with pytest.raises(LakeNotAppliedError, match="table 'Customers' does not hold it"):
        pipeline.commit(1)
    assert pipeline.store.get_window(PIPELINE, window(1).start, window(1).end).state is WindowState.READING
    assert pipeline.store.table_watermarks(PIPELINE, target="delta") == {t: window(0).end for t in TABLES}


def test_a_restored_table_stops_the_pipeline_and_repair_heals_it(pipeline: Pipeline, capsys) -> None:
    for n in range(3):
        pipeline.run(n)
    before = pipeline.rows("Orders")
    DeltaTable(str(pipeline.lake / "Orders")).restore(0)  # back to window 0
    pipeline.store.open_window(PIPELINE, STREAM, window(3).start, window(3).end)
    pipeline.write(3)
    customers_version = DeltaTable(str(pipeline.lake / "Customers")).version()
    with pytest.raises(upsert_job.LakeAgreementError) as info:
        pipeline.upsert(3)
    message = str(info.value)
    assert f"table 'Orders' holds window version {window(0).end_micros}" in message
    assert f"last window applied to it is version {window(2).end_micros}" in message
    assert (f"python -m airflow_provider_cdc repair --pipeline {PIPELINE} --lake-root {pipeline.lake} "
            f"--changeset-root {pipeline.changesets}") in message
    assert DeltaTable(str(pipeline.lake / "Customers")).version() == customers_version  # nothing applied

    args = ["repair", "--pipeline", PIPELINE, "--lake-root", str(pipeline.lake),
            "--changeset-root", str(pipeline.changesets), "--metastore-url", pipeline.url]
    assert cli.main([*args, "--dry-run"]) == 0
    assert pipeline.rows("Orders") != before
    assert cli.main(args) == 0
    assert pipeline.rows("Orders") == before
    assert "Orders" in capsys.readouterr().out
    pipeline.upsert(3)
    pipeline.commit(3)
    assert pipeline.rows("Orders") == pipeline.rows("Customers") == [(0, 3), (1, 0), (2, 1), (3, 2), (4, 3)]
    assert cli.main(args) == 0  # nothing left to repair


def test_repair_names_a_change_set_that_is_gone_and_changes_nothing(pipeline: Pipeline, capsys) -> None:
    for n in range(3):
        pipeline.run(n)
    DeltaTable(str(pipeline.lake / "Orders")).restore(0)
    restored = pipeline.rows("Orders")
    shutil.rmtree(pipeline.changesets / window(1).window_id)
    code = cli.main(["repair", "--pipeline", PIPELINE, "--lake-root", str(pipeline.lake),
                     "--changeset-root", str(pipeline.changesets), "--metastore-url", pipeline.url])
    assert code == 1
    assert window(1).window_id in capsys.readouterr().out
    assert pipeline.rows("Orders") == restored


def test_wait_parents_fails_at_once_when_the_window_before_is_not_applied(pipeline: Pipeline) -> None:
    from airflow_provider_cdc._compat import AirflowFailException
    from airflow_provider_cdc.sensors.partitions_drained import SpannerChangeStreamPartitionsDrainedSensor

    def poke(n: int) -> bool:
        sensor = SpannerChangeStreamPartitionsDrainedSensor(
            task_id="wait_parents", instance_id="i", database_id="d", stream="Orders", project_id="p",
            timestamp=window(n).start, interval_end=window(n).end, pipeline_id=PIPELINE,
            metastore_conn_id="cdc_ledger",
        )
        return sensor.poke({"data_interval_end": window(n).end})

    pipeline.run(0)
    # Triggered out of order: the window before was never run, so waiting cannot help (no retries).
    with pytest.raises(AirflowFailException, match=r"waits for the window ending at .*which was never run"):
        poke(2)
    # The window before failed (it is still reading): fail with its state; retries may find it applied.
    pipeline.store.open_window(PIPELINE, STREAM, window(1).start, window(1).end)
    with pytest.raises(WindowOrderError, match="which is reading, attempt 1"):
        poke(2)
