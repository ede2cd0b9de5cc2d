"""The table-source operators: arguments, registration, and a snapshot applied as a pipeline's first window.

The end-to-end test (``spark``) runs the operators as a DAG wires them, against the project's
emulator: a snapshot window ``[T - 1µs, T)`` opened, read, merged (on a Spark Connect server), upserted to
Delta and committed, then the change stream's first window ``[T, T + w)``, which may only apply
after the snapshot; the Delta tables equal the database at each window end.
"""

from __future__ import annotations

import inspect
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.table_sources import (
    INSTANCE,
    PROJECT,
    SNAPSHOT_DDL,
    column_types,
    database_tables,
    point_airflow_at,
    seeded_writes,
    write_across,
)

from airflow_provider_cdc._compat import AirflowFailException
from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.sources.spanner.table_operators import (
    SpannerTableOpenWindowOperator,
    SpannerTableReadWindowOperator,
    snapshot_window_bounds,
)

T = datetime(2026, 1, 1, tzinfo=timezone.utc)
CONNECTION = {"project_id": PROJECT, "instance_id": INSTANCE, "database_id": "db", "source": "Snapshot"}


#: What the open operators pushed as XComs: (task id, key) → value.
PUSHED: dict[tuple[str, str], Any] = {}


def _context(task_id: str = "read", map_index: int = -1) -> dict[str, Any]:
    def xcom_push(key: str, value: Any) -> None:
        PUSHED[(task_id, key)] = value

    ti = SimpleNamespace(
        dag_id="pipe", run_id="run-1", task_id=task_id, map_index=map_index, xcom_push=xcom_push
    )
    return {"ti": ti}


def test_the_provider_registers_the_hook_and_the_operators() -> None:
    from airflow_provider_cdc import get_provider_info

    info = get_provider_info()
    hooks = {m for entry in info["hooks"] for m in entry["python-modules"]}
    operators = {m for entry in info["operators"] for m in entry["python-modules"]}
    assert "airflow_provider_cdc.sources.spanner.table_hook" in hooks
    assert "airflow_provider_cdc.sources.spanner.table_operators" in operators
    integrations = {entry["integration-name"] for entry in info["integrations"]}
    assert "Google Cloud Spanner tables" in integrations


def test_operators_take_the_connection_fields_from_their_signature_and_template_them() -> None:
    for operator in (SpannerTableOpenWindowOperator, SpannerTableReadWindowOperator):
        parameters = {
            name
            for cls in operator.__mro__
            if "__init__" in vars(cls)
            for name in inspect.signature(cls.__init__).parameters
        }  # as Airflow reads them
        for name in (
            "project_id",
            "instance_id",
            "database_id",
            "source",
            "gcp_conn_id",
            "impersonation_chain",
            "metastore_conn_id",
            "staging_root",
            "window_start",
            "window_end",
        ):
            assert name in parameters, (operator.__name__, name)
            assert name in operator.template_fields, (operator.__name__, name)
    read = SpannerTableReadWindowOperator.partial(task_id="read", staging_root="/s", **CONNECTION).expand(
        reader_index=[0, 1]
    )
    assert read is not None
    with pytest.raises(TypeError, match="missing (the )?keyword argument 'source'"):
        SpannerTableReadWindowOperator(task_id="r", staging_root="/s", instance_id="i", database_id="d")


def test_snapshot_window_bounds_end_where_the_stream_starts() -> None:
    assert snapshot_window_bounds("2026-01-01T00:00:00Z") == {
        "window_start": "2025-12-31T23:59:59.999999Z",
        "window_end": "2026-01-01T00:00:00.000000Z",
    }


def test_the_open_operator_refuses_a_bad_mode_and_a_relative_root() -> None:
    bounds = snapshot_window_bounds(T)
    with pytest.raises(AirflowFailException, match="mode: mode must be 'snapshot' or 'commit_timestamp'"):
        SpannerTableOpenWindowOperator(
            task_id="o", mode="everything", tables=["A"], staging_root="/s", **bounds, **CONNECTION
        ).execute(_context())
    with pytest.raises(AirflowFailException, match="relative path"):
        SpannerTableOpenWindowOperator(
            task_id="o", mode="snapshot", tables=["A"], staging_root="staging", **bounds, **CONNECTION
        ).execute(_context())


def _delta_tables(lake: Path, types: dict[str, dict]) -> dict[str, dict]:
    from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

    target, tables = DeltaLakeTarget(str(lake)), {}
    keys = {"Accounts": ("Id",), "Notes": ("Owner", "Seq")}
    for table in types:
        rows = {}
        for row in target.read_table(table).to_pylist():
            values = {k: v for k, v in row.items() if not k.startswith("_")}
            key = tuple(sorted((name, values.pop(name)) for name in keys[table]))
            rows[key] = values
        tables[table] = rows
    return {name: rows for name, rows in tables.items() if rows}


@pytest.mark.spark
def test_a_snapshot_is_applied_as_the_pipelines_first_window_and_the_stream_follows(
    spanner_emulator: Any,
    new_spanner_database: Any,
    spark_connect_server: Any,
    monkeypatch: pytest.MonkeyPatch,
    sqlite_url: str,
    tmp_path: Path,
) -> None:
    """Merges run on a Spark Connect server (the next test runs them with ``spark-submit``)."""
    from conftest import spark_connect_connection

    from airflow_provider_cdc.metastore import Metastore
    from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator
    from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator
    from airflow_provider_cdc.sources.spanner.change_stream_operators import (
        SpannerChangeStreamOpenWindowOperator,
        SpannerChangeStreamReadWindowOperator,
    )
    from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator

    point_airflow_at(monkeypatch, spanner_emulator.host, sqlite_url)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    clock = spanner_emulator.clock
    database = new_spanner_database(SNAPSHOT_DDL, prefix="ops")
    writes, first = seeded_writes(database, clock, seed=21, accounts=50, steps=40)
    stream_window = Window(first, first + timedelta(seconds=10))
    write_across(
        writes, clock, first - timedelta(milliseconds=200), stream_window.end, timedelta(milliseconds=50)
    )

    roots = {name: str(tmp_path / name) for name in ("staging_root", "changeset_root", "lake_root")}
    spanner = {"project_id": PROJECT, "instance_id": INSTANCE, "database_id": database.database_id}
    database_path = f"projects/{PROJECT}/instances/{INSTANCE}/databases/{database.database_id}"
    snapshot = snapshot_window_bounds(first)
    stream_bounds = {
        "window_start": format_timestamp(stream_window.start),
        "window_end": format_timestamp(stream_window.end),
    }
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SPARK_CONNECT", spark_connect_connection(spark_connect_server.port))
    spark = {"conn_id": "cdc_spark_connect"}
    types = {name: column_types(database, name) for name in ("Accounts", "Notes")}
    store = Metastore(sqlite_url)

    def apply(bounds: dict, stream_key: str, summaries: list, opened_by: str) -> None:
        epoch = PUSHED[(opened_by, "epoch")]  # what the DAGs template from the open task's XCom
        SparkMergeWindowOperator(
            task_id="merge",
            locations=roots,
            stream_key=stream_key,
            pipeline_id="pipe",
            epoch=str(epoch),
            **bounds,
            **spark,
        ).execute(_context("merge"))
        SparkUpsertWindowOperator(
            task_id="upsert",
            locations=roots,
            pipeline_id="pipe",
            epoch=str(epoch),
            **bounds,
            conn_id=spark["conn_id"],
        ).execute(_context("upsert"))
        CdcCommitWindowOperator(
            task_id="commit",
            pipeline_id="pipe",
            read_summaries=summaries,
            locations=roots,
            epoch=str(epoch),
            **bounds,
        ).execute(_context("commit"))

    table = {"staging_root": roots["staging_root"], "pipeline_id": "pipe", "source": "Snapshot", **spanner}
    opened = SpannerTableOpenWindowOperator(
        task_id="snapshot_open", mode="snapshot", tables=["Accounts", "Notes"], readers=2, **snapshot, **table
    ).execute(_context("snapshot_open"))
    assert (opened["pipeline"], opened["epoch"]) == ("pipe", 1)  # the snapshot window's handle
    assert store.get_pipeline("pipe").first_window_start == first - ONE_MICROSECOND
    summaries = [
        SpannerTableReadWindowOperator(task_id="snapshot_read", reader_index=i, **snapshot, **table).execute(
            _context("snapshot_read", i)
        )
        for i in range(2)  # the readers are mapped over a fixed list
    ]
    existing = database_tables(database, types, first - ONE_MICROSECOND)
    assert sum(s["rows"] for s in summaries) == sum(len(rows) for rows in existing.values())
    assert {s["reader_index"] for s in summaries} == {0, 1}
    # The stream's first window waits for the snapshot: it may not apply before the snapshot is.
    stream = {"staging_root": roots["staging_root"], "pipeline_id": "pipe", "stream": "Everything", **spanner}
    SpannerChangeStreamOpenWindowOperator(
        task_id="open", first_window_start=snapshot["window_start"], **stream_bounds, **stream
    ).execute(_context("open"))
    problem = store.predecessor_error("pipe", stream_window.start, stream_window.end)
    assert problem is not None and "reading" in str(problem) and not problem.never_run

    assert PUSHED[("snapshot_open", "epoch")] == 1 and PUSHED[("open", "epoch")] == 1
    apply(snapshot, f"{database_path}/Snapshot", summaries, "snapshot_open")
    assert _delta_tables(tmp_path / "lake_root", types) == existing
    assert store.predecessor_error("pipe", stream_window.start, stream_window.end) is None
    read = SpannerChangeStreamReadWindowOperator(task_id="read", **stream_bounds, **stream).execute(
        _context()
    )
    apply(stream_bounds, f"{database_path}/Everything", [read], "open")
    assert _delta_tables(tmp_path / "lake_root", types) == database_tables(
        database, types, stream_window.end - ONE_MICROSECOND
    )

    # A snapshot opened after the pipeline started elsewhere is refused: it must be the first window.
    late = {**table, "pipeline_id": "other"}
    store.record_pipeline("other", first)
    with pytest.raises(AirflowFailException, match="a snapshot must be the pipeline's first window"):
        SpannerTableOpenWindowOperator(
            task_id="o", mode="snapshot", tables=["Accounts"], **snapshot, **late
        ).execute(_context("o"))


def test_tables_rendered_as_json_text_reach_the_hook_as_a_list() -> None:
    from airflow_provider_cdc._compat import AirflowFailException
    from airflow_provider_cdc.sources.spanner.table_operators import tables_argument

    tables = [{"table": "DocumentHistory", "timestamp_column": "Ts", "entity_key": ["UserId", "DocumentId"]}]
    assert tables_argument(tables) is tables
    assert tables_argument(json.dumps(tables)) == tables
    assert tables_argument("  ") is None
    with pytest.raises(AirflowFailException, match=r"tables must be a list, or its JSON text .*\[\{'table'"):
        tables_argument("[{'table': 'DocumentHistory'}]")  # a Python repr: render with '| tojson'


def _snapshot_pipeline(
    spanner_emulator: Any,
    new_spanner_database: Any,
    monkeypatch: pytest.MonkeyPatch,
    sqlite_url: str,
    tmp_path: Path,
    prefix: str,
) -> SimpleNamespace:
    """A snapshot window of a written database and its steps as one run executes them (each takes the
    epoch its run opened): ``open_and_read``, ``merge``, ``upsert``, ``commit``."""
    from airflow_provider_cdc.metastore import Metastore
    from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator
    from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator
    from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator

    point_airflow_at(monkeypatch, spanner_emulator.host, sqlite_url)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)  # Spark on this worker
    clock = spanner_emulator.clock
    database = new_spanner_database(SNAPSHOT_DDL, prefix=prefix)
    _, first = seeded_writes(database, clock, seed=5, accounts=60, steps=30)
    clock.set(first + timedelta(seconds=1))

    roots = {name: str(tmp_path / name) for name in ("staging_root", "changeset_root", "lake_root")}
    spanner = {"project_id": PROJECT, "instance_id": INSTANCE, "database_id": database.database_id}
    snapshot = snapshot_window_bounds(first)
    window = Window(first - ONE_MICROSECOND, first)
    table = {"staging_root": roots["staging_root"], "pipeline_id": "pipe", "source": "Snapshot", **spanner}
    stream_key = f"projects/{PROJECT}/instances/{INSTANCE}/databases/{database.database_id}/Snapshot"
    spark = {"conn_id": "spark_default", "conf": {"spark.ui.enabled": "false"}}

    def open_window(run: str, readers: int = 2) -> int:
        SpannerTableOpenWindowOperator(
            task_id=f"{run}_open", mode="snapshot", tables=["Accounts", "Notes"], readers=readers,
            max_partitions=3, **snapshot, **table,
        ).execute(_context(f"{run}_open"))  # fmt: skip
        return PUSHED[(f"{run}_open", "epoch")]

    def read(run: str, readers: int = 2) -> list[dict]:
        return [
            SpannerTableReadWindowOperator(
                task_id=f"{run}_read", reader_index=i, **snapshot, **table
            ).execute(_context(f"{run}_read", i))
            for i in range(readers)
        ]

    def open_and_read(run: str, readers: int = 2) -> tuple[int, list[dict]]:
        epoch = open_window(run, readers)
        return epoch, read(run, readers)

    def merge(epoch: int) -> None:
        SparkMergeWindowOperator(
            task_id="merge", locations=roots, stream_key=stream_key, pipeline_id="pipe", epoch=str(epoch),
            **snapshot, **spark,
        ).execute(_context("merge"))  # fmt: skip

    def upsert(epoch: int) -> None:
        SparkUpsertWindowOperator(
            task_id="upsert", locations=roots, pipeline_id="pipe", epoch=str(epoch), **snapshot,
            conn_id=spark["conn_id"],
        ).execute(_context("upsert"))  # fmt: skip

    def commit(epoch: int, summaries: list[dict]) -> dict:
        return CdcCommitWindowOperator(
            task_id="commit", pipeline_id="pipe", read_summaries=summaries, locations=roots, epoch=str(epoch),
            **snapshot,
        ).execute(_context("commit"))  # fmt: skip

    return SimpleNamespace(
        database=database,
        window=window,
        stream_key=stream_key,
        store=Metastore(sqlite_url),
        types={name: column_types(database, name) for name in ("Accounts", "Notes")},
        change_set=tmp_path / "changeset_root" / window.window_id,
        open_window=open_window,
        read=read,
        open_and_read=open_and_read,
        merge=merge,
        upsert=upsert,
        commit=commit,
    )


@pytest.mark.spark
def test_two_merges_of_one_window_at_once_the_later_opening_applies_it(
    spanner_emulator: Any,
    new_spanner_database: Any,
    monkeypatch: pytest.MonkeyPatch,
    sqlite_url: str,
    tmp_path: Path,
) -> None:
    """Run A's merge job is running when run B opens the window again, reads it, merges and publishes;
    A's job then writes its change set (in its own epoch's folder) and publishes nothing. B's upsert and
    commit apply the window without a manual clear, and the lake equals the database."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from airflow_provider_cdc.core.contract.locations import MANIFEST_NAME
    from airflow_provider_cdc.metastore import WindowState

    run = _snapshot_pipeline(
        spanner_emulator, new_spanner_database, monkeypatch, sqlite_url, tmp_path, prefix="race"
    )
    epoch_a, _ = run.open_and_read("a")
    submit = SparkSubmitOperator.execute
    b_run: list[tuple[int, list[dict]]] = []

    def b_runs_while_a_merges(self: Any, context: Any) -> Any:
        if not b_run:  # A's job has started: B opens, reads and merges the window meanwhile
            b_run.append(run.open_and_read("b"))
            run.merge(b_run[0][0])
        return submit(self, context)

    monkeypatch.setattr(SparkSubmitOperator, "execute", b_runs_while_a_merges)
    with pytest.raises(AirflowFailException, match="epoch 1"):
        run.merge(epoch_a)
    monkeypatch.setattr(SparkSubmitOperator, "execute", submit)
    epoch_b, summaries_b = b_run[0]
    assert epoch_b == 2
    manifest = json.loads((run.change_set / MANIFEST_NAME).read_text())
    assert (manifest["epoch"], manifest["folder"]) == (2, "epoch=2")  # B's, untouched by A's job
    assert (run.change_set / "epoch=1").is_dir()  # A's job wrote only into its own folder
    run.upsert(epoch_b)
    run.commit(epoch_b, summaries_b)
    assert run.store.get_window("pipe", run.window.start, run.window.end).state is WindowState.APPLIED
    assert _delta_tables(tmp_path / "lake_root", run.types) == database_tables(
        run.database, run.types, run.window.start
    )


@pytest.mark.spark
def test_a_second_run_reopening_the_snapshot_fences_the_first_and_a_lost_batch_file_is_refused(
    spanner_emulator: Any,
    new_spanner_database: Any,
    monkeypatch: pytest.MonkeyPatch,
    sqlite_url: str,
    tmp_path: Path,
) -> None:
    """Run A opens the snapshot (epoch 1) and reads it; run B opens it again (epoch 2) while A's merge
    runs: A publishes no manifest, and A's upsert and commit are refused, its staged batches intact.
    A batch file of B lost before B's merge fails the merge naming window, batch and claim, before
    anything is written; opening the window again (epoch 3) and reading it heals it, and the lake
    equals the database. B's commit, of an older epoch, is refused after."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from airflow_provider_cdc.core.contract.locations import MANIFEST_NAME
    from airflow_provider_cdc.hooks.pipeline import StagedInputMissingError
    from airflow_provider_cdc.metastore import WindowState

    run = _snapshot_pipeline(
        spanner_emulator, new_spanner_database, monkeypatch, sqlite_url, tmp_path, prefix="epochs"
    )
    database, window, types, store = run.database, run.window, run.types, run.store
    change_set = run.change_set
    stream_key, open_and_read, merge, upsert, commit = (
        run.stream_key,
        run.open_and_read,
        run.merge,
        run.upsert,
        run.commit,
    )

    def staged_part_files() -> set[Path]:
        return set((tmp_path / "staging_root" / "Snapshot" / window.window_id).rglob("part-*.parquet"))

    epoch_a, summaries_a = open_and_read("a")
    assert epoch_a == 1
    staged_by_a = staged_part_files()
    assert staged_by_a

    # Run B opens the window again while A's merge job runs.
    submit = SparkSubmitOperator.execute
    opened_meanwhile: list[int] = []

    def submit_then_reopen(self: Any, context: Any) -> Any:
        result = submit(self, context)
        if not opened_meanwhile:
            opened_meanwhile.append(run.open_window("b"))
        return result

    monkeypatch.setattr(SparkSubmitOperator, "execute", submit_then_reopen)
    stale = r"opened again \(it is in epoch 2, reading\) since this run opened it in epoch 1: the merge of"
    with pytest.raises(AirflowFailException, match=stale):
        merge(epoch_a)
    monkeypatch.setattr(SparkSubmitOperator, "execute", submit)
    assert opened_meanwhile == [2]
    assert not (change_set / MANIFEST_NAME).exists()  # A published nothing
    assert staged_by_a <= staged_part_files()  # the re-opening deleted none of A's staged files
    for step in (lambda: merge(epoch_a), lambda: upsert(epoch_a), lambda: commit(epoch_a, summaries_a)):
        with pytest.raises(AirflowFailException, match="epoch 1"):
            step()
    assert store.get_window("pipe", window.start, window.end).state is WindowState.READING
    assert not (tmp_path / "lake_root").exists()

    # Run B reads; one staged file of a batch is lost before B's merge.
    summaries_b = run.read("b")
    recorded = [p for p in store.window_partitions(stream_key, window.start, window.end) if p.output_files]
    lost = recorded[0]
    from airflow_provider_cdc.core.contract.locations import claim_folder, partition_key

    folder = Path(
        claim_folder(
            str(tmp_path / "staging_root" / "Snapshot" / window.window_id),
            partition_key(lost.token),
            lost.claim_id,
        )
    )
    (folder / "part-00000.parquet").unlink()
    with pytest.raises(StagedInputMissingError) as refused:
        merge(2)
    message = str(refused.value)
    assert f"window {window}" in message and lost.token in message and f"claim {lost.claim_id}" in message
    assert f"recorded {lost.output_files} file(s) with {lost.rows} row(s)" in message
    assert "part-00000.parquet" in message and "Nothing was written" in message
    assert not (change_set / MANIFEST_NAME).exists() and not (tmp_path / "lake_root").exists()

    # Clearing the run opens the window again and reads it: the merge, upsert and commit go through.
    epoch_c, summaries_c = open_and_read("c")
    assert epoch_c == 3
    merge(epoch_c)
    manifest = json.loads((change_set / MANIFEST_NAME).read_text())
    assert manifest["epoch"] == 3 and manifest["previous_windows"]["tables"] == {}
    upsert(epoch_c)
    commit(epoch_c, summaries_c)
    assert store.get_window("pipe", window.start, window.end).state is WindowState.APPLIED
    assert _delta_tables(tmp_path / "lake_root", types) == database_tables(database, types, window.start)
    with pytest.raises(AirflowFailException, match="epoch 2"):
        commit(2, summaries_b)  # a stale commit changes nothing
    assert store.get_window("pipe", window.start, window.end).attempt == 3
