"""The read path end to end: hook + metastore + staging against the emulator, through the real client."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import threading
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.staged_changes import difference as _difference
from support.staged_changes import expected_changes as _expected
from support.staged_changes import staged_changes, staged_row_change
from support.table_sources import point_airflow_at

from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.testing.workload import ALL_CHANGES_STREAM, Workload, schema_ddl


def _staged(root: Path, window: Window, *, dedupe: bool = True) -> Counter:
    return staged_changes(root, window, dedupe=dedupe)


WINDOW = timedelta(seconds=60)
WINDOWS = 20


def _hook(database: Any, **kwargs: Any) -> Any:
    from airflow_provider_cdc.sources.spanner.change_stream_hook import SpannerChangeStreamHook

    return SpannerChangeStreamHook(
        project_id="test-project",
        instance_id="test-instance",
        database_id=database.database_id,
        stream=kwargs.pop("stream", ALL_CHANGES_STREAM),
        **kwargs,
    )


@pytest.fixture(scope="module")
def history(spanner_emulator: Any, new_spanner_database: Any) -> tuple[Any, Workload, datetime]:
    """A workload spanning 20 one-minute windows with splits and merges inside them."""
    database = new_spanner_database(schema_ddl(), prefix="read")
    clock = spanner_emulator.clock
    begin = clock.advance(timedelta(seconds=1))
    workload = Workload(database, spanner_emulator, seed=11)
    workload.run(changes=4_000, step=timedelta(milliseconds=350), split_every=600, merge_every=1_000)
    assert len(workload.splits) >= 5 and len(workload.merges) >= 3
    end = begin + WINDOW * WINDOWS
    assert workload.transactions[-1].commit_timestamp < end, "the workload outgrew the windows"
    clock.set(end + timedelta(seconds=1))
    return database, workload, begin


def _windows(begin: datetime) -> list[Window]:
    return [Window(begin + WINDOW * i, begin + WINDOW * (i + 1)) for i in range(WINDOWS)]


def _recorded(hook: Any, root: Path, window: Window) -> Counter:
    """The staged rows of the claims the metastore records for the window: what the merge reads."""
    from airflow_provider_cdc.staging.reading import read_staged_changes

    items = hook.metastore.window_partitions(hook.stream_key, window.start, window.end)
    claims = {item.token: item.claim_id for item in items}
    rows = read_staged_changes(str(root), ALL_CHANGES_STREAM, window, claims=claims).to_table().to_pylist()
    return Counter(staged_row_change(row) for row in rows)


def _read(hook: Any, window: Window, root: Path, owner: str = "reader-0", **kwargs: Any) -> Any:
    hook.open_window("pipeline", window, str(root), owner)
    return hook.read_window(window, str(root), owner, **kwargs)


def test_consecutive_windows_stage_the_committed_history_exactly_once(
    history: tuple, spanner_airflow_env: str, tmp_path: Path
) -> None:
    database, workload, begin = history
    hook = _hook(database)
    total = 0
    for window in _windows(begin):
        summary = _read(hook, window, tmp_path)
        expected = _expected(workload, window)
        staged = _staged(tmp_path, window)
        assert staged == expected, f"window {window}: {_difference(staged, expected)}"
        assert _staged(tmp_path, window, dedupe=False) == expected, "a record was staged twice"
        assert summary.rows == sum(expected.values())
        assert round(summary.transactions) == len(workload.history_between(window.start, window.end))
        total += summary.rows
    assert total == sum(len(t.mods) for t in workload.transactions)
    # the lineage recorded every split and merge: more partitions than the two initial ones
    partitions = hook.metastore.list_partitions(hook.stream_key)
    assert len(partitions) >= 2 + 2 * len(workload.splits) + len(workload.merges)


def test_rereading_a_past_window_stages_identical_records(
    history: tuple, spanner_airflow_env: str, tmp_path: Path
) -> None:
    database, workload, begin = history
    hook = _hook(database)
    windows = _windows(begin)
    for window in windows[:12]:
        _read(hook, window, tmp_path / "first")
    for index in (3, 7, 11):  # after the lineage moved on: re-read from the recorded lineage
        window = windows[index]
        before = _staged(tmp_path / "first", window, dedupe=False)
        assert before == _expected(workload, window)
        _read(hook, window, tmp_path / "first")
        # What the merge reads (the recorded claims) is the same again; the earlier opening's recorded
        # output stays beside it (a run of that opening may still be merging it).
        assert _recorded(hook, tmp_path / "first", window) == before
        assert _staged(tmp_path / "first", window, dedupe=False) == before + before
        _read(hook, window, tmp_path / "second")
        assert _recorded(hook, tmp_path / "second", window) == before
        assert _staged(tmp_path / "second", window, dedupe=False) == before


def test_backfill_of_a_window_before_the_first_one_read(
    history: tuple, spanner_airflow_env: str, tmp_path: Path
) -> None:
    database, workload, begin = history
    hook = _hook(database)
    windows = _windows(begin)
    _read(hook, windows[10], tmp_path)
    for window in (windows[4], windows[5], windows[10]):
        _read(hook, window, tmp_path)
        assert _staged(tmp_path, window) == _expected(workload, window)


def _read_in_subprocess(env: dict, database_id: str, window: tuple[str, str], root: str, marker: str) -> None:
    os.environ.update(env)
    from airflow_provider_cdc.core.timestamps import coerce_timestamp
    from airflow_provider_cdc.sources.spanner.change_stream_hook import SpannerChangeStreamHook
    from airflow_provider_cdc.sources.spanner.result_batches import RowBatch

    hook = SpannerChangeStreamHook(
        project_id="test-project",
        instance_id="test-instance",
        database_id=database_id,
        stream=ALL_CHANGES_STREAM,
    )
    win = Window(coerce_timestamp(window[0]), coerce_timestamp(window[1]))
    reader = hook.window_reader(root, "doomed-reader", rows_per_file=10, lease_seconds=2.0)
    original = reader.query.row_batches

    def batches(*args: Any, **kwargs: Any) -> Any:
        """The query's rows one at a time, until the 41st."""
        count = 0
        for batch in original(*args, **kwargs):
            for value in batch.values:
                if count == 40:
                    Path(marker).write_text("killing")
                    os.kill(os.getpid(), 9)  # a reader dies mid-partition (no cleanup runs)
                count += 1
                yield RowBatch([value], batch.decode_row, batch.metadata)

    reader.query.row_batches = batches  # type: ignore[method-assign]
    reader.read(win)


def test_a_reader_killed_mid_partition_is_taken_over_and_nothing_is_lost(
    history: tuple, spanner_airflow_env: str, tmp_path: Path
) -> None:
    database, workload, begin = history
    window = Window(begin, begin + WINDOW * 3)  # a wide window: partitions with hundreds of records
    hook = _hook(database)
    hook.open_window("pipeline", window, str(tmp_path), "opener")
    env = {k: os.environ[k] for k in ("SPANNER_EMULATOR_HOST", "AIRFLOW_CONN_CDC_METASTORE_DEFAULT")}
    marker = tmp_path / "killed"
    process = multiprocessing.get_context("spawn").Process(
        target=_read_in_subprocess,
        args=(
            env,
            database.database_id,
            (window.start.isoformat(), window.end.isoformat()),
            str(tmp_path),
            str(marker),
        ),
    )
    process.start()
    process.join(900)  # a bound for a loaded machine, not a wait: the reader kills itself mid-way
    assert process.exitcode == -9 and marker.exists(), "the reader was not killed mid-partition"
    assert list((tmp_path / ALL_CHANGES_STREAM / window.window_id).rglob("*.parquet")), "it staged some files"
    # another reader takes the partition over once the dead reader's lease expires
    summary = hook.read_window(window, str(tmp_path), "rescuer", lease_seconds=2.0, poll_seconds=0.5)
    assert summary.partitions, "the rescuer read nothing"
    assert _staged(tmp_path, window, dedupe=False) == _expected(workload, window)


def _read_concurrently(
    database: Any, window: Window, root: Path, readers: int
) -> tuple[dict[str, list[tuple[float, float, str]]], list[BaseException]]:
    """Run ``readers`` readers of one window in threads; per token, who read it and when."""
    spans: dict[str, list[tuple[float, float, str]]] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            summary = _hook(database).read_window(window, str(root), f"reader-{index}", poll_seconds=0.05)
            with lock:
                for span in summary.spans:
                    spans.setdefault(span.token, []).append((span.started, span.finished, f"reader-{index}"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(readers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(900)  # a bound for a loaded machine, not a wait
    return spans, errors


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_concurrent_readers_never_read_one_partition_at_the_same_time(
    history: tuple,
    spanner_emulator: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    backend: str,
    request: Any,
) -> None:
    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "postgres_url")
    point_airflow_at(monkeypatch, spanner_emulator.host, url)
    database, workload, begin = history
    windows = _windows(begin)
    _hook(database).open_window("pipeline", windows[0], str(tmp_path), "opener")
    for window in windows[:8]:
        _hook(database).open_window("pipeline", window, str(tmp_path), "opener")
        spans, errors = _read_concurrently(database, window, tmp_path, readers=4)
        assert not errors, errors
        for token, intervals in spans.items():
            assert len(intervals) == 1, (
                f"partition {token} was read {len(intervals)} times in window {window}"
            )
        assert _staged(tmp_path, window, dedupe=False) == _expected(workload, window)


@pytest.mark.parametrize("code", ["UNAVAILABLE", "ABORTED"])
def test_interrupted_partition_queries_resume_without_loss_or_duplicates(
    history: tuple, spanner_emulator: Any, spanner_airflow_env: str, tmp_path: Path, code: str
) -> None:
    database, workload, begin = history
    window = _windows(begin)[2]
    hook = _hook(database)
    hook.open_window("pipeline", window, str(tmp_path), "reader")
    spanner_emulator.inject_stream_faults(count=3, code=code, after_rows=5)
    summary = hook.read_window(window, str(tmp_path), "reader", backoff_seconds=0.01)
    assert _staged(tmp_path, window, dedupe=False) == _expected(workload, window)
    retries = sum(span.retries for span in summary.spans)
    # UNAVAILABLE is resumed inside the client (resume tokens); ABORTED by the reader from the last record
    assert retries == (0 if code == "UNAVAILABLE" else 3)


def test_sensor_pokes_and_defers_until_partitions_are_drained(
    history: tuple, spanner_airflow_env: str, tmp_path: Path
) -> None:
    from airflow.exceptions import TaskDeferred

    from airflow_provider_cdc.sensors.partitions_drained import SpannerChangeStreamPartitionsDrainedSensor

    database, workload, begin = history
    windows = _windows(begin)
    hook = _hook(database)
    _read(hook, windows[0], tmp_path)
    kwargs = dict(
        project_id="test-project",
        instance_id="test-instance",
        database_id=database.database_id,
        stream=ALL_CHANGES_STREAM,
    )
    # parents drained to the start of window 1: yes; to the start of window 2: not yet
    ready = SpannerChangeStreamPartitionsDrainedSensor(task_id="ready", timestamp=windows[1].start, **kwargs)
    waiting = SpannerChangeStreamPartitionsDrainedSensor(
        task_id="waiting", timestamp=windows[2].start, **kwargs
    )
    assert ready.poke({}) is True
    assert waiting.poke({}) is False
    deferring = SpannerChangeStreamPartitionsDrainedSensor(
        task_id="deferring", timestamp=windows[2].start, deferrable=True, poke_interval=0.05, **kwargs
    )
    with pytest.raises(TaskDeferred) as deferred:
        deferring.execute({})
    trigger = deferred.value.trigger
    classpath, arguments = trigger.serialize()
    assert classpath.endswith("PartitionsDrainedTrigger")

    async def first_event() -> Any:
        return await trigger.run().__anext__()

    async def read_then_wait() -> Any:
        waiter = asyncio.ensure_future(first_event())
        await asyncio.sleep(0.3)
        assert not waiter.done(), "the trigger fired before window 1 was read"
        await asyncio.to_thread(_read, hook, windows[1], tmp_path)
        return await asyncio.wait_for(waiter, 30)

    event = asyncio.run(read_then_wait())
    assert event.payload["status"] == "drained"
    deferring.execute_complete({}, event.payload)


def test_the_drain_check_names_a_reader_that_stopped_reporting(
    history: tuple, spanner_airflow_env: str, tmp_path: Path
) -> None:
    import sqlalchemy as sa

    from airflow_provider_cdc.sources.spanner.change_stream_hook import describe_lagging

    database, workload, begin = history
    window = _windows(begin)[0]
    hook = _hook(database)
    hook.open_window("pipeline", window, str(tmp_path), "reader-0")
    store = hook.metastore
    waiting = store.lagging_partitions(hook.stream_key, window.end)
    assert waiting, "an opened, unread window holds the drain check back"
    held = waiting[0].token
    assert store.claim_partition(hook.stream_key, held, "reader-gone", 600) is not None
    assert "reader-gone" not in describe_lagging(hook.lagging_partitions(window.end))  # it just started
    with store.engine.begin() as conn:  # ten minutes without a record or heartbeat from its reader
        conn.execute(
            sa.text(
                "UPDATE cdc_partitions SET progress_us = progress_us - 600000000, "
                "updated_us = updated_us - 600000000"
            )
        )
    reasons = {p.token: p.reason for p in hook.lagging_partitions(window.end)}
    stall = "its reader reader-gone has reported no progress for 3 heartbeat intervals of 10000 ms"
    assert stall in reasons[held]
    assert "another reader takes it over when the lease expires at" in reasons[held]
    assert not any("reader-gone" in reason for token, reason in reasons.items() if token != held)


def test_operators_open_and_read_a_window_through_their_fields(
    history: tuple, spanner_airflow_env: str, tmp_path: Path
) -> None:
    from airflow_provider_cdc.sources.spanner.change_stream_operators import (
        SpannerChangeStreamOpenWindowOperator,
        SpannerChangeStreamReadWindowOperator,
    )

    database, workload, begin = history
    window = _windows(begin)[3]
    fields = dict(
        project_id="test-project",
        instance_id="test-instance",
        database_id=database.database_id,
        stream=ALL_CHANGES_STREAM,
        staging_root=str(tmp_path),
        window_start=window.start.isoformat(),
        window_end=window.end.isoformat(),
        heartbeat_ms=2_000,
    )
    pushed: dict[str, Any] = {}
    ti = SimpleNamespace(dag_id="cdc", run_id="run-1", task_id="read", map_index=0)
    ti.xcom_push = lambda key, value: pushed.update({key: value})
    context = {"ti": ti}
    opener = SpannerChangeStreamOpenWindowOperator(task_id="open", readers=2, **fields)
    assert opener.to_hook().heartbeat_ms == 2_000
    returned = opener.execute(context)
    assert set(pushed) == {"epoch", "window"}
    assert returned == pushed["window"]  # the handle is the open step's return value
    assert pushed["epoch"] == 1  # the opening's epoch, for the window's merge, upsert and commit
    stream_key = opener.to_hook().stream_key
    assert pushed["window"] == {  # the opening's handle, for the steps after it
        "pipeline": "cdc",
        "source_key": stream_key,
        "window_start": window.start.isoformat().replace("+00:00", "Z"),
        "window_end": window.end.isoformat().replace("+00:00", "Z"),
        "staging_root": str(tmp_path),
        "epoch": 1,
        "window_basis": "commit_time",  # the merge keeps the changes committed in the window
        "window_id": window.window_id,
        "staging_location": f"{tmp_path}/{ALL_CHANGES_STREAM}/{window.window_id}",
    }
    reader = SpannerChangeStreamReadWindowOperator(task_id="read", reader_index=1, **fields)
    summary = reader.execute(context)
    assert summary["reader_index"] == 1
    assert _staged(tmp_path, window) == _expected(workload, window)


@pytest.mark.parametrize(
    "stream", ["Orders; DROP TABLE Orders", "READ_x(", "1abc", "a b", "x" * 200, "Ünïcode"]
)
def test_hostile_stream_names_are_rejected_before_any_sql(stream: str, spanner_airflow_env: str) -> None:
    from airflow_provider_cdc.sources.spanner.change_stream_hook import SpannerChangeStreamHook
    from airflow_provider_cdc.sources.spanner.errors import ChangeStreamConfigError

    with pytest.raises(ChangeStreamConfigError, match="invalid change stream name"):
        SpannerChangeStreamHook(project_id="p", instance_id="test-instance", database_id="db1", stream=stream)


def test_errors_name_the_window_token_and_cause(
    history: tuple, spanner_airflow_env: str, tmp_path: Path
) -> None:
    from airflow_provider_cdc.sources.spanner.errors import ChangeStreamError

    database, workload, begin = history
    hook = _hook(database, stream="NoSuchStream")
    window = _windows(begin)[0]
    with pytest.raises(ChangeStreamError) as caught:
        _read(hook, window, tmp_path)
    message = str(caught.value)
    assert str(window) in message and "initial query" in message and "INVALID_ARGUMENT" in message
    assert "Table-valued function not found: READ_NoSuchStream" in message


def test_a_reader_that_lost_its_lease_changes_nothing(
    spanner_airflow_env: str, history: Any, tmp_path: Path
) -> None:
    """Reader A pauses past its lease, B reads and completes the partition, A wakes, writes, clears
    and completes: B's rows stay intact and count once; A's completion is refused."""
    import pyarrow.parquet as pq

    from airflow_provider_cdc.staging import StagingWriter, staged_files

    database, workload, begin = history
    window = _windows(begin)[1]
    assert _expected(workload, window), "the window must hold changes"
    hook = _hook(database)
    staging = str(tmp_path / "staging")
    hook.open_window("fenced", window, staging, "opener")
    store, key = hook.metastore, hook.stream_key
    token = store.claim_window_partition(key, window.start, window.end, "reader-a", 0.05, claim_id="a1")
    assert token is not None
    time.sleep(0.2)  # A stalls past its lease

    summary = hook.read_window(window, staging, "reader-b")
    claims = {item.token: item.claim_id for item in store.window_partitions(key, window.start, window.end)}
    assert claims[token] not in (None, "a1")
    recorded = staged_files(staging, ALL_CHANGES_STREAM, window, claims=claims)
    contents = {path: Path(path).read_bytes() for path in recorded}
    assert recorded and sum(pq.read_metadata(p).num_rows for p in recorded) == summary.rows

    # A wakes up: it opens its writer (clearing what it staged before), writes, and completes.
    rows = [{**row, "unit": token} for row in pq.read_table(recorded[0]).to_pylist()[:3]]
    with StagingWriter(staging, ALL_CHANGES_STREAM, window, token, claim_id="a1") as writer:
        writer.write_rows(rows)
    assert not store.complete_window_partition(
        key,
        window.start,
        window.end,
        token,
        "reader-a",
        rows=3,
        transactions=1,
        claim_id="a1",
        output_files=1,
    )

    assert {path: Path(path).read_bytes() for path in recorded} == contents  # B's output is intact
    staged = Counter()
    for path in staged_files(staging, ALL_CHANGES_STREAM, window, claims=claims):
        staged.update(staged_row_change(row) for row in pq.read_table(path).to_pylist())
    expected = _expected(workload, window)
    assert staged == expected, _difference(staged, expected)  # each change once, none of A's
    item = next(i for i in store.window_partitions(key, window.start, window.end) if i.token == token)
    assert item.is_done and item.claim_id == claims[token]


PARTS_DDL = [
    "CREATE TABLE Parts (Maker STRING(8) NOT NULL, Serial INT64, Label STRING(MAX), Size INT64 NOT NULL) "
    "PRIMARY KEY (Maker, Serial)",
    "CREATE TABLE Makers (Maker STRING(8) NOT NULL, Country STRING(MAX)) PRIMARY KEY (Maker)",
    "CREATE CHANGE STREAM PartsChanges FOR ALL",
]


def test_a_read_window_stages_each_columns_nullability_and_a_nullable_key_reaches_bigquery_keyed(
    spanner_emulator: Any,
    new_spanner_database: Any,
    spanner_airflow_env: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Data change records carry no nullability: the read asks INFORMATION_SCHEMA once per table it
    meets and stages ``is_nullable`` with every column. The window's change set then reaches a
    BigQuery target with its default ``derived_key="auto"``: the table whose key column ``Serial`` is
    nullable is keyed on the derived key, and its row with a NULL key lands."""
    import grpc
    import pyarrow as pa
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import bigquery
    from google.cloud.bigquery_storage_v1 import BigQueryWriteClient
    from google.cloud.bigquery_storage_v1.services.big_query_write.transports import (
        BigQueryWriteGrpcTransport,
    )

    from airflow_provider_cdc.changesets.reader import ChangeSetReader
    from airflow_provider_cdc.changesets.writer import write_change_set
    from airflow_provider_cdc.core.collapse import collapse_window
    from airflow_provider_cdc.core.contract.change_set import change_set_schema
    from airflow_provider_cdc.sources.spanner import window_reader
    from airflow_provider_cdc.sources.spanner.table_schema import ColumnNullability
    from airflow_provider_cdc.staging.reading import read_staged_changes
    from airflow_provider_cdc.targets.bigquery.keys import DERIVED_KEY_COLUMN
    from airflow_provider_cdc.targets.bigquery.target import BigQueryCdcTarget
    from airflow_provider_cdc.testing.bigquery_fake import FakeBigQuery

    queried: list[str] = []

    class CountingNullability(ColumnNullability):
        def of(self, table: str) -> Any:
            if table not in self._tables:
                queried.append(table)
            return super().of(table)

    monkeypatch.setattr(window_reader, "ColumnNullability", CountingNullability)
    database = new_spanner_database(PARTS_DDL, prefix="nullable")
    begin = spanner_emulator.clock.advance(timedelta(seconds=1))
    columns = ["Maker", "Serial", "Label", "Size"]
    for rows in (
        [["acme", 1, "bolt", 3], ["acme", None, "unnumbered", 4]],
        [["zeta", 7, None, 5]],
    ):
        with database.batch() as batch:
            batch.insert("Parts", columns, rows)
            batch.insert("Makers", ["Maker", "Country"], [[rows[0][0], "NL"]])
        spanner_emulator.clock.advance(timedelta(milliseconds=10))
    with database.batch() as batch:
        batch.update("Parts", ["Maker", "Serial", "Label"], [["acme", None, "renamed"]])
    end = spanner_emulator.clock.advance(timedelta(seconds=1))
    window = Window(begin, end)

    hook = _hook(database, stream="PartsChanges")
    _read(hook, window, tmp_path / "staging")
    staged = read_staged_changes(str(tmp_path / "staging"), "PartsChanges", window).to_table().to_pylist()
    assert {row["table_name"] for row in staged} == {"Parts", "Makers"} and len(staged) == 6
    nullable = {
        (row["table_name"], column["name"]): column["is_nullable"]
        for row in staged
        for column in json.loads(row["column_types_json"])
    }
    assert nullable == {
        ("Parts", "Maker"): False, ("Parts", "Serial"): True, ("Parts", "Label"): True,
        ("Parts", "Size"): False, ("Makers", "Maker"): False, ("Makers", "Country"): True,
    }  # fmt: skip
    assert sorted(queried) == ["Makers", "Parts"]  # once per table for the window's read

    change_set = tmp_path / "changesets" / window.window_id
    write_change_set(
        str(change_set),
        {
            table: pa.Table.from_pylist(rows, schema=change_set_schema())
            for table, rows in collapse_window(staged).items()
        },
    )
    with FakeBigQuery() as fake:
        fake.create_dataset("demo-project", "cdc")
        target = BigQueryCdcTarget(
            bigquery.Client(
                project="demo-project",
                credentials=AnonymousCredentials(),
                client_options={"api_endpoint": fake.rest_endpoint},
            ),
            BigQueryWriteClient(
                transport=BigQueryWriteGrpcTransport(channel=grpc.insecure_channel(fake.write_endpoint))
            ),
            "demo-project",
            "cdc",
            ledger=hook.metastore,
        )
        for table in ChangeSetReader(str(change_set)).tables():
            target.apply_window(table, "parts", window)
        assert fake.table("demo-project", "cdc", "Parts").primary_key == [DERIVED_KEY_COLUMN]
        assert fake.table("demo-project", "cdc", "Makers").primary_key == ["Maker"]
        parts = sorted(fake.rows("demo-project", "cdc", "Parts"), key=lambda row: row[DERIVED_KEY_COLUMN])
    assert parts == [
        {DERIVED_KEY_COLUMN: '{"Maker":"acme","Serial":"1"}', "Maker": "acme", "Serial": 1, "Label": "bolt",
         "Size": 3},
        {DERIVED_KEY_COLUMN: '{"Maker":"acme","Serial":null}', "Maker": "acme", "Serial": None,
         "Label": "renamed", "Size": 4},
        {DERIVED_KEY_COLUMN: '{"Maker":"zeta","Serial":"7"}', "Maker": "zeta", "Serial": 7, "Label": None,
         "Size": 5},
    ]  # fmt: skip
