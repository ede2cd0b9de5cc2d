"""Metastore behaviour on SQLite and PostgreSQL: schema versions, lineage, leases, windows, watermarks."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from support.metastores import clock, store

from airflow_provider_cdc.core.identifiers import InvalidIdentifierError
from airflow_provider_cdc.core.timestamps import to_micros
from airflow_provider_cdc.metastore import (
    CURRENT_VERSION,
    LeaseLostError,
    Metastore,
    MetastoreError,
    PartitionNotFoundError,
    PartitionRecord,
    PartitionSpec,
    PartitionState,
    PartitionStateError,
    PipelineRecord,
    SchemaVersionError,
    UnknownStreamError,
    WindowConflictError,
    WindowNotFoundError,
    WindowOrderError,
    WindowPartitionRecord,
    WindowPartitionState,
    WindowState,
    migrations,
)
from airflow_provider_cdc.metastore import schema as schema_module
from airflow_provider_cdc.metastore.model import window_parents_to_wait_for
from airflow_provider_cdc.sources.spanner.records import ChildPartition
from tests.support.clock import ManualClock

ROOT = Path(__file__).resolve().parents[2]
STREAM = "projects/test-project/instances/test-instance/databases/shop/OrdersStream"
PIPELINE = "shop_orders"
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)

__all__ = ["clock", "store"]  # fixtures


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def run_threads(
    target: Callable[[Any], None],
    args: Iterable[Any],
    *,
    timeout: float,
    barrier: threading.Barrier | None = None,
) -> None:
    """Run ``target(arg)`` in a thread per arg and wait; fail with every exception the threads raised.

    A failing thread aborts ``barrier`` (the one ``target`` waits on) so that the others stop waiting.
    """
    errors: list[BaseException] = []

    def run(arg: Any) -> None:
        try:
            target(arg)
        except BaseException as exc:  # surfaced below
            errors.append(exc)
            if barrier is not None:
                barrier.abort()

    threads = [threading.Thread(target=run, args=(arg,)) for arg in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not errors, errors


def race_threads(
    metastore_url: str, reader: Callable[[Metastore, str, Callable[[list], None]], None]
) -> list[list]:
    """Four threads (owners ``thread-0`` to ``thread-3``), each on a metastore of its own and released
    together, run ``reader(metastore, owner, record)``; returns the claims they recorded."""
    claims: list[list] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def record(claim: list) -> None:
        with lock:
            claims.append(claim)

    def run(owner: str) -> None:
        metastore = Metastore(metastore_url)
        try:
            barrier.wait(timeout=30)
            reader(metastore, owner, record)
        finally:
            metastore.dispose()

    run_threads(run, [f"thread-{n}" for n in range(4)], timeout=120, barrier=barrier)
    return claims


def run_workers(code: str, args: list[list[str]], timeout: float = 60) -> list[str]:
    """Run ``code`` in one fresh interpreter per argument list; release them together; return stdouts.

    Each worker prints ``ready`` once imported and set up, then waits for a line on stdin, so the
    interesting part starts at the same moment in every process.
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), *a],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for a in args
    ]
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready", f"worker did not start:\n{proc.stderr.read()}"
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = []
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, f"worker failed:\n{err}"
            outputs.append(out)
        return outputs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# ---------------------------------------------------------------------------------------------
# Schema creation, versions and upgrades.

V1_DDL = [
    """CREATE TABLE cdc_schema_version (
        version INTEGER NOT NULL PRIMARY KEY, description VARCHAR(200) NOT NULL,
        applied_us BIGINT NOT NULL)""",
    """CREATE TABLE cdc_partitions (
        stream VARCHAR(512) NOT NULL, token VARCHAR(1024) NOT NULL, parent_tokens TEXT NOT NULL,
        start_us BIGINT NOT NULL, end_us BIGINT, state VARCHAR(16) NOT NULL, watermark_us BIGINT NOT NULL,
        heartbeat_ms INTEGER, lease_owner VARCHAR(256), lease_expires_us BIGINT, attempts INTEGER NOT NULL,
        record_count BIGINT NOT NULL, created_us BIGINT NOT NULL, updated_us BIGINT NOT NULL,
        finished_us BIGINT,
        PRIMARY KEY (stream, token))""",
    "CREATE INDEX ix_cdc_partitions_stream_start ON cdc_partitions (stream, start_us)",
    """CREATE TABLE cdc_windows (
        pipeline VARCHAR(250) NOT NULL, start_us BIGINT NOT NULL, end_us BIGINT NOT NULL,
        stream VARCHAR(512) NOT NULL, state VARCHAR(16) NOT NULL, attempt INTEGER NOT NULL, staging_uri TEXT,
        record_count BIGINT, opened_us BIGINT NOT NULL, updated_us BIGINT NOT NULL, drained_us BIGINT,
        merged_us BIGINT, applied_us BIGINT, PRIMARY KEY (pipeline, start_us, end_us))""",
    "INSERT INTO cdc_schema_version VALUES (1, 'partitions and windows', 1700000000000000)",
]


def columns_of(engine: sa.engine.Engine) -> dict[str, dict[str, tuple[str, bool]]]:
    inspector = sa.inspect(engine)
    return {
        table: {
            c["name"]: (c["type"].compile(engine.dialect), c["nullable"])
            for c in inspector.get_columns(table)
        }
        for table in sorted(schema_module.metadata.tables)
    }


def test_create_schema_is_idempotent_and_versioned(metastore_url: str) -> None:
    store = Metastore(metastore_url)
    assert store.schema_version() is None
    assert store.create_schema() == list(range(1, CURRENT_VERSION + 1))
    assert store.create_schema() == []
    assert store.schema_version() == CURRENT_VERSION
    with store.engine.connect() as conn:
        versions = conn.execute(sa.text("SELECT version FROM cdc_schema_version ORDER BY version")).scalars()
        assert list(versions) == list(range(1, CURRENT_VERSION + 1))
    assert set(sa.inspect(store.engine).get_table_names()) >= {
        "cdc_partitions",
        "cdc_windows",
        "cdc_schema_version",
        "cdc_table_watermarks",
    }
    store.dispose()


def test_migrated_schema_matches_table_definitions(metastore_url: str) -> None:
    store = Metastore(metastore_url)
    store.create_schema()
    expected = {
        name: {c.name: (c.type.compile(store.engine.dialect), c.nullable) for c in table.columns}
        for name, table in schema_module.metadata.tables.items()
    }
    assert columns_of(store.engine) == expected
    inspector = sa.inspect(store.engine)
    for name, table in schema_module.metadata.tables.items():
        assert inspector.get_pk_constraint(name)["constrained_columns"] == [c.name for c in table.primary_key]
    store.dispose()


def test_upgrade_from_version_1_keeps_data(metastore_url: str, sqlite_url: str) -> None:
    engine = sa.create_engine(metastore_url)
    with engine.begin() as conn:
        for ddl in V1_DDL:
            conn.execute(sa.text(ddl))
        conn.execute(
            sa.text(
                "INSERT INTO cdc_partitions VALUES (:stream, 'tok-1', '[\"tok-0\"]', :start, NULL, "
                "'running', :wm, 1000, NULL, NULL, 2, 17, 1, 2, NULL)"
            ),
            {"stream": STREAM, "start": 1767225600000000, "wm": 1767225600123456},
        )
        conn.execute(
            sa.text(
                "INSERT INTO cdc_windows VALUES (:pipeline, 1767225600000000, 1767225660000000, :stream, "
                "'drained', 1, 'file:///staging/w', 42, 1, 2, 3, NULL, NULL)"
            ),
            {"pipeline": PIPELINE, "stream": STREAM},
        )
    engine.dispose()

    store = Metastore(metastore_url)
    assert store.schema_version() == 1
    assert store.create_schema() == list(range(2, CURRENT_VERSION + 1))
    assert store.create_schema() == []
    # The pipeline's first window is its earliest recorded one; none of its windows is applied.
    assert store.get_pipeline(PIPELINE) == PipelineRecord(PIPELINE, T0, None)

    partition = store.get_partition(STREAM, "tok-1")
    assert partition.parent_tokens == ("tok-0",)
    assert partition.state is PartitionState.RUNNING
    assert partition.watermark == T0 + timedelta(microseconds=123456)
    assert (partition.attempts, partition.record_count, partition.heartbeat_ms) == (2, 17, 1000)
    assert partition.progress_at is None

    # A window recorded as drained (a state windows no longer have) is reading again.
    window = store.get_window(PIPELINE, T0, at(60))
    assert (window.state, window.staging_uri, window.record_count) == (
        WindowState.READING,
        "file:///staging/w",
        42,
    )
    assert window.change_set_uri is None
    assert store.transition_window(
        PIPELINE,
        T0,
        at(60),
        "reading",
        "applied",
        change_set_uri="file:///cs/w",
        key_count=5,
        transaction_count=3,
    )
    applied = store.get_window(PIPELINE, T0, at(60))
    assert (applied.change_set_uri, applied.key_count, applied.transaction_count) == ("file:///cs/w", 5, 3)
    assert store.advance_table_watermark(PIPELINE, "Orders", at(60), target="delta")
    assert store.table_watermarks(PIPELINE, target="delta") == {"Orders": at(60)}

    # The upgraded tables have the same columns as freshly created ones.
    fresh = Metastore(sqlite_url) if store.dialect_name == "sqlite" else None
    if fresh is not None:
        fresh.create_schema()
        assert columns_of(store.engine) == columns_of(fresh.engine)
        fresh.dispose()
    else:
        expected = {
            name: {c.name: (c.type.compile(store.engine.dialect), c.nullable) for c in table.columns}
            for name, table in schema_module.metadata.tables.items()
        }
        assert columns_of(store.engine) == expected
    store.dispose()


def test_newer_or_foreign_schema_is_refused(metastore_url: str) -> None:
    engine = sa.create_engine(metastore_url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE cdc_windows (pipeline VARCHAR(10))"))
    store = Metastore(metastore_url)
    with pytest.raises(SchemaVersionError, match="cdc_windows exist without a cdc_schema_version"):
        store.create_schema()
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE cdc_windows"))
    store.create_schema()
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO cdc_schema_version VALUES (99, 'future', 0)"))
    with pytest.raises(SchemaVersionError, match=f"version 99 is newer than version {CURRENT_VERSION}"):
        store.create_schema()
    engine.dispose()
    store.dispose()


CREATE_SCHEMA_WORKER = """
    import json, sys
    from airflow_provider_cdc.metastore import Metastore
    store = Metastore(sys.argv[1])
    print("ready", flush=True)
    sys.stdin.readline()
    print(json.dumps(store.create_schema()))
"""


def test_concurrent_create_schema_in_processes(metastore_url: str) -> None:
    outputs = run_workers(CREATE_SCHEMA_WORKER, [[metastore_url] for _ in range(2)])
    applied = sorted(json.loads(out) for out in outputs)
    assert applied == [[], list(range(1, CURRENT_VERSION + 1))]
    store = Metastore(metastore_url)
    assert store.schema_version() == CURRENT_VERSION
    assert store.create_schema() == []
    store.dispose()


# ---------------------------------------------------------------------------------------------
# Partitions: lineage, forward-only states, watermarks.


def test_add_partitions_is_insert_if_absent(store: Metastore) -> None:
    specs = [
        PartitionSpec("a", T0, heartbeat_ms=2000),
        {"token": "b", "start_timestamp": "2026-01-01T00:00:00Z"},
    ]
    assert store.add_partitions(STREAM, specs) == ["a", "b"]
    assert store.advance_watermark(STREAM, "a", at(5))
    # A second report of the same tokens (retry, another reader) changes nothing.
    assert store.add_partitions(STREAM, [PartitionSpec("a", at(1)), PartitionSpec("c", at(2))]) == ["c"]
    a = store.get_partition(STREAM, "a")
    assert (a.start_timestamp, a.watermark, a.heartbeat_ms, a.state) == (
        T0,
        at(5),
        2000,
        PartitionState.CREATED,
    )
    assert [p.token for p in store.list_partitions(STREAM)] == ["a", "b", "c"]
    assert store.is_known_stream(STREAM)
    assert not store.is_known_stream(STREAM + "Other")


def test_finish_records_children_and_end_once(store: Metastore) -> None:
    store.add_partitions(STREAM, [PartitionSpec("p1", T0), PartitionSpec("p2", T0)])
    merged = ChildPartition(token="m", parent_partition_tokens=("p1", "p2"))
    split = [ChildPartition("s1", ("p1",)), ChildPartition("s2", ("p1",))]

    assert store.finish_partition(STREAM, "p1", at(30), [*split, merged]) is True
    p1 = store.get_partition(STREAM, "p1")
    assert (p1.state, p1.end_timestamp, p1.watermark) == (PartitionState.FINISHED, at(30), at(30))
    assert p1.finished_at is not None and p1.lease_owner is None
    # The other parent reports the same merged child: it exists once, with both parents.
    assert store.finish_partition(STREAM, "p2", at(30), [merged]) is True
    assert [p.token for p in store.list_partitions(STREAM) if p.token == "m"] == ["m"]
    child = store.get_partition(STREAM, "m")
    assert (child.parent_tokens, child.start_timestamp, child.watermark) == (("p1", "p2"), at(30), at(30))
    assert [p.token for p in store.parents_of(STREAM, "m")] == ["p1", "p2"]
    for child in ("s1", "s2"):
        assert [p.token for p in store.parents_of(STREAM, child)] == ["p1"]
        assert store.get_partition(STREAM, child).start_timestamp == at(30)

    # Forward only: finishing again at the same end is a harmless retry, at another end an error.
    assert store.finish_partition(STREAM, "p1", at(30), split) is False
    with pytest.raises(PartitionStateError, match=r"'p1'.*already finished at 2026-01-01 00:00:30"):
        store.finish_partition(STREAM, "p1", at(31), split)
    assert store.claim_partition(STREAM, "p1", "reader-1", 30) is None
    assert store.advance_watermark(STREAM, "p1", at(40)) is False
    assert store.get_partition(STREAM, "p1").watermark == at(30)


def test_finish_rejects_what_spanner_never_reports(store: Metastore) -> None:
    store.add_partitions(STREAM, [PartitionSpec("p", at(10))])
    with pytest.raises(PartitionStateError, match="must be retried, not finished"):
        store.finish_partition(STREAM, "p", at(20), [])
    with pytest.raises(PartitionStateError, match="child partition 'x' does not name it"):
        store.finish_partition(STREAM, "p", at(20), [ChildPartition("x", ("other",))])
    with pytest.raises(PartitionStateError, match="before its start"):
        store.finish_partition(STREAM, "p", at(5), ["c"])
    with pytest.raises(PartitionNotFoundError, match=f"'nope' of change stream '{STREAM}'"):
        store.finish_partition(STREAM, "nope", at(20), ["c"])
    assert store.get_partition(STREAM, "p").state is PartitionState.CREATED


def test_watermark_never_moves_back(store: Metastore) -> None:
    store.add_partitions(STREAM, [PartitionSpec("p", T0)])
    assert store.get_partition(STREAM, "p").watermark == T0
    assert store.advance_watermark(STREAM, "p", at(10), records=4) is True
    assert store.advance_watermark(STREAM, "p", at(3), records=9) is False
    assert store.advance_watermark(STREAM, "p", at(10), records=9) is False
    p = store.get_partition(STREAM, "p")
    assert (p.watermark, p.record_count) == (at(10), 4)
    exact = at(10) + timedelta(microseconds=1)
    assert store.advance_watermark(STREAM, "p", exact.isoformat(), records=1) is True
    assert store.get_partition(STREAM, "p").watermark == exact
    # Finishing below the watermark keeps the watermark.
    store.finish_partition(STREAM, "p", at(10), ["q"])
    assert store.get_partition(STREAM, "p").watermark == exact


def test_timestamps_are_exact_microseconds(store: Metastore) -> None:
    far = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)
    early = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=timezone(timedelta(hours=2)))
    store.add_partitions(STREAM, [PartitionSpec("e", early)])
    assert store.advance_watermark(STREAM, "e", far)
    p = store.get_partition(STREAM, "e")
    assert p.start_timestamp == early and p.start_timestamp.tzinfo == timezone.utc
    assert p.watermark == far


def test_lineage_keeps_tokens_exactly(store: Metastore) -> None:
    # LIKE wildcards and JSON escapes in tokens must survive the stored parent list unchanged.
    store.add_partitions(
        STREAM, [PartitionSpec("a_b", T0), PartitionSpec("a%b", T0), PartitionSpec('q"x', T0)]
    )
    store.finish_partition(STREAM, "a_b", at(1), [ChildPartition("c1", ("a_b",))])
    store.finish_partition(STREAM, "a%b", at(1), [ChildPartition("c2", ("a%b", 'q"x'))])
    assert [p.token for p in store.parents_of(STREAM, "c1")] == ["a_b"]
    assert [p.token for p in store.parents_of(STREAM, "c2")] == ["a%b", 'q"x']
    assert store.get_partition(STREAM, "c2").parent_tokens == ("a%b", 'q"x')


def test_merged_child_created_once_when_parents_race(store: Metastore, metastore_url: str) -> None:
    rounds = 8
    tokens = [(f"l{i}", f"r{i}", f"m{i}") for i in range(rounds)]
    store.add_partitions(STREAM, [PartitionSpec(t, T0) for left, right, _ in tokens for t in (left, right)])
    stores = [Metastore(metastore_url) for _ in range(2)]
    barrier = threading.Barrier(2)

    def finish(side: int) -> None:
        for i, (left, right, child) in enumerate(tokens):
            barrier.wait(timeout=30)
            parent = (left, right)[side]
            stores[side].finish_partition(STREAM, parent, at(10 + i), [ChildPartition(child, (left, right))])

    run_threads(finish, (0, 1), timeout=60, barrier=barrier)
    for i, (left, right, child) in enumerate(tokens):
        rows = [p for p in store.list_partitions(STREAM) if p.token == child]
        assert len(rows) == 1
        assert rows[0].parent_tokens == (left, right) and rows[0].start_timestamp == at(10 + i)
    for s in stores:
        s.dispose()


def test_concurrent_add_of_same_token_creates_it_once(store: Metastore, metastore_url: str) -> None:
    stores = [Metastore(metastore_url) for _ in range(4)]
    created: list[list[str]] = [[] for _ in stores]
    barrier = threading.Barrier(len(stores))

    def add(n: int) -> None:
        for i in range(10):
            barrier.wait(timeout=30)
            created[n] += stores[n].add_partitions(STREAM, [PartitionSpec(f"t{i}", at(i), ("root",))])

    run_threads(add, range(len(stores)), timeout=60, barrier=barrier)
    assert sorted(tok for c in created for tok in c) == sorted(f"t{i}" for i in range(10))
    assert len(store.list_partitions(STREAM)) == 10
    for s in stores:
        s.dispose()


def test_child_waits_for_all_parents(store: Metastore) -> None:
    store.add_partitions(STREAM, [PartitionSpec("p1", T0), PartitionSpec("p2", T0)])
    store.finish_partition(STREAM, "p1", at(30), [ChildPartition("m", ("p1", "p2"))])
    # p2 has not reached 00:00:30, so the merged child must not be read yet.
    assert tokens(store.lagging_partitions(STREAM, at(30))) == ["p2"]
    assert store.claim_partition(STREAM, "m", "reader-1", 30) is None
    assert store.advance_watermark(STREAM, "p2", at(29))
    assert store.claim_partition(STREAM, "m", "reader-1", 30) is None
    assert store.get_partition(STREAM, "m").state is PartitionState.CREATED
    store.finish_partition(STREAM, "p2", at(30), [ChildPartition("m", ("p1", "p2"))])
    assert store.lagging_partitions(STREAM, at(30)) == []
    claimed = store.claim_partition(STREAM, "m", "reader-1", 30)
    assert claimed is not None and claimed.token == "m" and claimed.state is PartitionState.RUNNING


# ---------------------------------------------------------------------------------------------
# Leases.


def test_lease_is_exclusive_and_expires(store: Metastore, clock: ManualClock) -> None:
    store.add_partitions(STREAM, [PartitionSpec("p", T0)])
    first = store.claim_partition(STREAM, "p", "reader-a", 30)
    assert first is not None
    assert (first.lease_owner, first.attempts, first.state) == ("reader-a", 1, PartitionState.RUNNING)
    assert store.claim_partition(STREAM, "p", "reader-b", 30) is None
    # A claim by the holder renews its lease (here to a short one) and counts an attempt.
    renewed = store.claim_partition(STREAM, "p", "reader-a", 0.3)
    assert renewed is not None and (renewed.lease_owner, renewed.attempts) == ("reader-a", 2)
    assert renewed.lease_expires_at < first.lease_expires_at
    assert store.claim_partition(STREAM, "p", "reader-b", 30) is None

    clock.advance(0.299)
    assert store.claim_partition(STREAM, "p", "reader-b", 30) is None  # held to the last microsecond
    clock.advance(0.002)  # reader-a dies: its lease runs out
    taken = store.claim_partition(STREAM, "p", "reader-b", 30)
    assert taken is not None and (taken.token, taken.lease_owner, taken.attempts) == ("p", "reader-b", 3)
    assert store.claim_partition(STREAM, "p", "reader-a", 30) is None
    with pytest.raises(
        LeaseLostError, match="'reader-a' no longer holds the lease; it is held by 'reader-b'"
    ):
        store.advance_watermark(STREAM, "p", at(5), owner="reader-a")
    with pytest.raises(LeaseLostError, match="'p'"):
        store.finish_partition(STREAM, "p", at(9), ["c"], owner="reader-a")
    assert store.get_partition(STREAM, "p").watermark == T0
    assert store.advance_watermark(STREAM, "p", at(5), owner="reader-b")
    assert not store.release(STREAM, "p", "reader-a")
    assert store.release(STREAM, "p", "reader-b")
    assert store.get_partition(STREAM, "p").lease_owner is None
    again = store.claim_partition(STREAM, "p", "reader-a", 30)
    assert again is not None and again.attempts == 4 and again.watermark == at(5)
    assert store.finish_partition(STREAM, "p", at(9), ["c"], owner="reader-a")


CLAIM_WORKER = """
    import json, random, sys, time
    from datetime import datetime, timezone
    from airflow_provider_cdc.metastore import Metastore
    url, stream, owner, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    store = Metastore(url)
    store.is_known_stream(stream)  # connect before the start
    print("ready", flush=True)
    sys.stdin.readline()
    claims = []
    for n in range(rounds):
        candidates = [p.token for p in store.list_partitions(stream)]
        random.shuffle(candidates)
        got = next(
            (p for p in (store.claim_partition(stream, t, owner, 30) for t in candidates) if p is not None),
            None,
        )
        if got is None:
            time.sleep(0.002)
            continue
        began = time.monotonic()
        time.sleep(random.uniform(0.04, 0.08))
        store.advance_watermark(stream, got.token, datetime.now(timezone.utc), owner=owner)
        ended = time.monotonic()
        assert store.release(stream, got.token, owner)
        claims.append([owner, got.token, began, ended])
    print(json.dumps(claims))
"""


def claim_any(store: Metastore, owner: str) -> PartitionRecord | None:
    """Claim one of the stream's partitions, trying them in random order; None if none is free."""
    candidates = [p.token for p in store.list_partitions(STREAM)]
    random.shuffle(candidates)
    for token in candidates:
        got = store.claim_partition(STREAM, token, owner, 30)
        if got is not None:
            return got
    return None


#: How long a test reader holds a claim: long enough that, even on a loaded machine, readers hold
#: partitions at the same time (which the exclusivity checks need to mean anything).
HOLD_SECONDS = 0.05


def assert_no_overlapping_holds(claims: list[list]) -> None:
    by_token: dict[str, list[tuple[float, float, str]]] = {}
    for owner, token, began, ended in claims:
        by_token.setdefault(token, []).append((began, ended, owner))
    for token, holds in by_token.items():
        holds.sort()
        for (_b1, e1, o1), (b2, _e2, o2) in zip(holds, holds[1:], strict=False):
            assert e1 <= b2, f"{o1} and {o2} held partition {token!r} at the same time"
    # The check is meaningful only if readers really held different partitions at once.
    events = sorted([(b, 1) for _, _, b, _ in claims] + [(e, -1) for _, _, _, e in claims])
    held = peak = 0
    for _, delta in events:
        held += delta
        peak = max(peak, held)
    assert peak >= 2, "readers never held partitions concurrently"


def test_threads_never_hold_a_partition_at_once(store: Metastore, metastore_url: str) -> None:
    store.add_partitions(STREAM, [PartitionSpec(f"p{i}", T0) for i in range(6)])

    def reader(metastore: Metastore, owner: str, record: Callable[[list], None]) -> None:
        for _ in range(15):
            got = claim_any(metastore, owner)
            if got is None:
                time.sleep(0.002)
                continue
            began = time.monotonic()
            time.sleep(HOLD_SECONDS)
            metastore.advance_watermark(STREAM, got.token, at(time.monotonic()), owner=owner)
            ended = time.monotonic()
            assert metastore.release(STREAM, got.token, owner)
            record([owner, got.token, began, ended])

    claims = race_threads(metastore_url, reader)
    assert len(claims) >= 30
    assert_no_overlapping_holds(claims)
    assert sum(p.attempts for p in store.list_partitions(STREAM)) == len(claims)


def test_processes_never_hold_a_partition_at_once(store: Metastore, metastore_url: str) -> None:
    store.add_partitions(STREAM, [PartitionSpec(f"p{i}", T0) for i in range(6)])
    outputs = run_workers(
        CLAIM_WORKER, [[metastore_url, STREAM, f"process-{n}", "15"] for n in range(4)], timeout=120
    )
    claims = [claim for out in outputs for claim in json.loads(out)]
    assert len(claims) >= 30
    assert len({owner for owner, *_ in claims}) == 4
    assert_no_overlapping_holds(claims)
    assert sum(p.attempts for p in store.list_partitions(STREAM)) == len(claims)


# ---------------------------------------------------------------------------------------------
# Partition queries.


def build_lineage(store: Metastore) -> None:
    """a, b from 0; a splits at 30 into c, d; b and d merge at 50 into e."""
    store.add_partitions(STREAM, [PartitionSpec("a", T0), PartitionSpec("b", T0)])
    store.finish_partition(STREAM, "a", at(30), [ChildPartition("c", ("a",)), ChildPartition("d", ("a",))])
    store.advance_watermark(STREAM, "b", at(50))
    store.finish_partition(STREAM, "b", at(50), [ChildPartition("e", ("b", "d"))])
    store.finish_partition(STREAM, "d", at(50), [ChildPartition("e", ("b", "d"))])


def tokens(records: list) -> list[str]:
    return sorted(r.token for r in records)


def test_alive_overlapping_and_lagging(store: Metastore) -> None:
    build_lineage(store)
    assert tokens(store.partitions_alive_at(STREAM, at(0))) == ["a", "b"]
    assert tokens(store.partitions_alive_at(STREAM, at(30))) == ["b", "c", "d"]
    assert tokens(store.partitions_alive_at(STREAM, at(49))) == ["b", "c", "d"]
    assert tokens(store.partitions_alive_at(STREAM, at(50))) == ["c", "e"]
    assert tokens(store.partitions_overlapping(STREAM, at(10), at(30))) == ["a", "b"]
    assert tokens(store.partitions_overlapping(STREAM, at(29), at(51))) == ["a", "b", "c", "d", "e"]

    lagging = store.lagging_partitions(STREAM, at(40))
    assert [(p.token, p.watermark) for p in lagging] == [("c", at(30))]
    assert tokens(store.lagging_partitions(STREAM, at(60))) == ["c", "e"]
    assert store.lagging_partitions(STREAM, at(30)) == []
    unfinished = store.list_partitions(STREAM, state="created")
    assert [(p.token, p.watermark) for p in unfinished] == [("c", at(30)), ("e", at(50))]
    store.advance_watermark(STREAM, "c", at(60))
    store.advance_watermark(STREAM, "e", at(60))
    assert store.lagging_partitions(STREAM, at(60)) == []
    unfinished = store.list_partitions(STREAM, state=PartitionState.CREATED)
    assert [(p.token, p.watermark) for p in unfinished] == [("c", at(60)), ("e", at(60))]
    with pytest.raises(ValueError, match="empty interval"):
        store.partitions_overlapping(STREAM, at(5), at(5))


def test_queries_agree_with_the_partition_rules(store: Metastore) -> None:
    build_lineage(store)
    store.advance_watermark(STREAM, "c", at(42))
    everything = store.list_partitions(STREAM)
    for second in range(0, 71, 2):
        ts = at(second)
        alive = [p.token for p in everything if p.is_alive_at(ts)]
        assert [p.token for p in store.partitions_alive_at(STREAM, ts)] == alive
        lagging = [p.token for p in everything if p.is_alive_at(ts) and not p.is_drained_to(ts)]
        assert [p.token for p in store.lagging_partitions(STREAM, ts)] == lagging
        # Every partition that holds changes before ts is either drained to ts or reported lagging.
        for p in everything:
            if p.start_timestamp < ts and p.token not in lagging:
                assert p.is_drained_to(ts), (p.token, second)


def test_unknown_stream_and_token_are_named(store: Metastore) -> None:
    other = "projects/x/instances/y/databases/z/Missing"
    for call in (
        lambda: store.partitions_alive_at(other, T0),
        lambda: store.lagging_partitions(other, T0),
        lambda: store.partitions_overlapping(other, T0, at(1)),
        lambda: store.stalled_partitions(other),
        lambda: store.list_partitions(other),
    ):
        with pytest.raises(UnknownStreamError, match=f"change stream '{other}' has no partitions"):
            call()
    store.add_partitions(STREAM, [PartitionSpec("p", T0)])
    for call in (
        lambda: store.get_partition(STREAM, "ghost"),
        lambda: store.advance_watermark(STREAM, "ghost", at(1)),
        lambda: store.claim_partition(STREAM, "ghost", "r", 5),
        lambda: store.release(STREAM, "ghost", "r"),
        lambda: store.finish_partition(STREAM, "ghost", at(1), ["c"]),
        lambda: store.parents_of(STREAM, "ghost"),
    ):
        with pytest.raises(
            PartitionNotFoundError, match=f"token 'ghost' of change stream '{STREAM}'"
        ) as info:
            call()
        assert isinstance(info.value, MetastoreError)


def test_stalled_partitions_by_missed_heartbeats(store: Metastore) -> None:
    store.add_partitions(STREAM, [PartitionSpec("p", T0, heartbeat_ms=1000), PartitionSpec("q", T0)])
    store.claim_partition(STREAM, "p", "r", 30)
    store.claim_partition(STREAM, "q", "r", 30)
    assert store.stalled_partitions(STREAM, missed_heartbeats=3) == []
    # Ten seconds without progress: p missed its heartbeats; q has no heartbeat interval to judge by.
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE cdc_partitions SET progress_us = progress_us - 10000000"))
    assert tokens(store.stalled_partitions(STREAM, missed_heartbeats=3)) == ["p"]
    assert store.stalled_partitions(STREAM, missed_heartbeats=11) == []
    store.advance_watermark(STREAM, "p", at(1), owner="r")
    assert store.stalled_partitions(STREAM, missed_heartbeats=3) == []


# ---------------------------------------------------------------------------------------------
# Windows and table watermarks.


def test_window_moves_forward_only(store: Metastore) -> None:
    w = store.open_window(PIPELINE, STREAM, T0, at(60), staging_uri="gs://bucket/staging")
    assert (w.state, w.attempt, w.window_id) == (WindowState.READING, 1, "1767225600000000-1767225660000000")
    assert (w.window.start, w.window.end) == (T0, at(60))
    assert store.open_window(PIPELINE, STREAM, T0, at(60)) == w
    with pytest.raises(WindowConflictError, match="recorded for change stream"):
        store.open_window(PIPELINE, STREAM + "2", T0, at(60))

    assert store.transition_window(
        PIPELINE, T0, at(60), "reading", "applied", record_count=10, change_set_uri="gs://b/cs", key_count=4
    )
    assert not store.transition_window(PIPELINE, T0, at(60), "reading", "applied", record_count=99)
    with pytest.raises(WindowConflictError, match="only moves forward.*applied → reading"):
        store.transition_window(PIPELINE, T0, at(60), "applied", "reading")
    with pytest.raises(WindowConflictError, match="only moves forward.*applied → applied"):
        store.transition_window(PIPELINE, T0, at(60), WindowState.APPLIED, WindowState.APPLIED)
    for gone in ("drained", "merged", "done"):
        invalid = f"invalid new window state '{gone}': expected one of reading, applied"
        with pytest.raises(ValueError, match=invalid):
            store.transition_window(PIPELINE, T0, at(60), "reading", gone)
    w = store.get_window(PIPELINE, T0, at(60))
    assert (w.state, w.record_count, w.key_count, w.change_set_uri, w.staging_uri) == (
        WindowState.APPLIED,
        10,
        4,
        "gs://b/cs",
        "gs://bucket/staging",
    )
    assert w.opened_at <= w.applied_at
    with pytest.raises(
        WindowNotFoundError, match=f"window 1767225660000000-1767225720000000 of pipeline '{PIPELINE}'"
    ):
        store.transition_window(PIPELINE, at(60), at(120), "reading", "applied")


def test_every_opening_of_a_window_is_an_epoch_of_its_own(store: Metastore) -> None:
    first = store.open_window(PIPELINE, STREAM, T0, at(60), reopen=True)
    assert (first.state, first.attempt) == (WindowState.READING, 1)
    # Opened again while still reading (a second run of the window): the next epoch, the first fenced out.
    second = store.open_window(PIPELINE, STREAM, T0, at(60), reopen=True)
    assert (second.state, second.attempt) == (WindowState.READING, 2)
    assert not store.transition_window(PIPELINE, T0, at(60), "reading", "applied", attempt=1)
    assert store.transition_window(PIPELINE, T0, at(60), "reading", "applied", attempt=2, record_count=3)
    third = store.open_window(PIPELINE, STREAM, T0, at(60), reopen=True)
    assert (third.state, third.attempt, third.record_count) == (WindowState.READING, 3, None)
    assert third.applied_at is None
    assert store.open_window(PIPELINE, STREAM, T0, at(60)).attempt == 3  # without reopen: as it is


def test_reopen_window_for_rerun_fences_the_old_attempt(store: Metastore) -> None:
    store.open_window(PIPELINE, STREAM, T0, at(60))
    store.transition_window(
        PIPELINE, T0, at(60), "reading", "applied", record_count=3, change_set_uri="gs://b/cs", key_count=2
    )
    with pytest.raises(WindowConflictError, match="is applied, not reading"):
        store.reopen_window(PIPELINE, T0, at(60), expected="reading")
    again = store.reopen_window(PIPELINE, T0, at(60), expected="applied")
    assert (again.state, again.attempt, again.applied_at) == (WindowState.READING, 2, None)
    assert (again.record_count, again.key_count, again.change_set_uri) == (None, None, None)
    # A straggler of attempt 1 cannot move the re-run's window.
    assert not store.transition_window(PIPELINE, T0, at(60), "reading", "applied", attempt=1)
    assert store.transition_window(PIPELINE, T0, at(60), "reading", "applied", attempt=2)
    assert store.get_window(PIPELINE, T0, at(60)).state is WindowState.APPLIED


def test_list_windows(store: Metastore) -> None:
    for start in (120, 0, 60):
        store.open_window(PIPELINE, STREAM, at(start), at(start + 60))
    store.open_window("other_pipeline", STREAM, T0, at(60))
    store.transition_window(PIPELINE, at(60), at(120), "reading", "applied")
    assert [w.start for w in store.list_windows(PIPELINE)] == [at(0), at(60), at(120)]
    assert [w.start for w in store.list_windows(PIPELINE, state="applied")] == [at(60)]
    assert store.list_windows("nobody") == []


def test_table_watermarks_only_advance(store: Metastore) -> None:
    assert store.table_watermarks(PIPELINE, target="delta") == {}
    assert store.advance_table_watermark(PIPELINE, "Orders", at(60), target="delta")
    assert store.advance_table_watermark(PIPELINE, "Customers", at(30), target="delta")
    assert not store.advance_table_watermark(PIPELINE, "Orders", at(59), target="delta")
    assert store.advance_table_watermark(PIPELINE, "Orders", at(120), target="delta")
    assert store.advance_table_watermark("other", "Orders", at(1), target="delta")
    assert store.table_watermarks(PIPELINE, target="delta") == {"Customers": at(30), "Orders": at(120)}


# ---------------------------------------------------------------------------------------------
# Input validation.


def test_bad_input_is_named(store: Metastore) -> None:
    with pytest.raises(InvalidIdentifierError, match="invalid change stream name 'Orders; DROP TABLE x'"):
        store.add_partitions("projects/p/Orders; DROP TABLE x", [PartitionSpec("t", T0)])
    with pytest.raises(ValueError, match="invalid database path"):
        store.add_partitions("projects//Orders", [PartitionSpec("t", T0)])
    with pytest.raises(InvalidIdentifierError, match="invalid table name 'Orders-x'"):
        store.advance_table_watermark(PIPELINE, "Orders-x", T0, target="delta")
    with pytest.raises(ValueError, match="invalid pipeline id 'a b'"):
        store.list_windows("a b")
    with pytest.raises(ValueError, match="invalid partition token ''"):
        store.add_partitions(STREAM, [PartitionSpec("", T0)])
    with pytest.raises(ValueError, match="'t' .* has no start_timestamp"):
        store.add_partitions(STREAM, [{"token": "t"}])
    with pytest.raises(ValueError, match="names itself as its parent"):
        store.add_partitions(STREAM, [PartitionSpec("t", T0, ("t",))])
    with pytest.raises(ValueError, match="invalid lease_seconds 0"):
        store.claim_partition(STREAM, "t", "r", 0)
    with pytest.raises(ValueError, match="invalid watermark of partition token 't'"):
        store.advance_watermark(STREAM, "t", "yesterday")
    with pytest.raises(ValueError, match="end 2026-01-01 00:00:00\\+00:00 is not after start"):
        store.open_window(PIPELINE, STREAM, T0, T0)
    with pytest.raises(ValueError, match="invalid window start: naive datetime 2026-01-01T00:00:00"):
        store.open_window(PIPELINE, STREAM, datetime(2026, 1, 1), at(60))
    assert not store.is_known_stream(STREAM)


def test_bad_urls_are_refused() -> None:
    with pytest.raises(ValueError, match="not a SQLAlchemy URL"):
        Metastore("no url here")
    with pytest.raises(MetastoreError, match="'mysql' is not supported"):
        Metastore("mysql://user:secret@host/db")
    assert "secret" not in repr(Metastore("postgresql+psycopg2://user:secret@localhost/db"))


# ---------------------------------------------------------------------------------------------
# Partitions of a window: which ones the window must read, claimed with leases in lineage order.

W_START, W_END = at(0), at(60)


def window_states(store: Metastore, start: datetime = W_START, end: datetime = W_END) -> dict[str, str]:
    return {p.token: p.state.value for p in store.window_partitions(STREAM, start, end)}


def test_upgrade_from_version_2_adds_window_partitions(metastore_url: str) -> None:
    engine = sa.create_engine(metastore_url)
    with engine.begin() as conn:
        for ddl in V1_DDL:
            conn.execute(sa.text(ddl))
        migrations.MIGRATIONS[1].apply(conn)
        conn.execute(sa.text("INSERT INTO cdc_schema_version VALUES (2, 'v2', 1700000000000000)"))
    engine.dispose()

    store = Metastore(metastore_url)
    assert store.schema_version() == 2
    store.add_partitions(STREAM, [PartitionSpec("p", T0, heartbeat_ms=1000)])
    store.advance_watermark(STREAM, "p", at(5), records=3)
    assert not sa.inspect(store.engine).has_table("cdc_window_partitions")

    assert store.create_schema() == list(range(3, CURRENT_VERSION + 1))
    assert store.create_schema() == []
    assert store.schema_version() == CURRENT_VERSION
    p = store.get_partition(STREAM, "p")
    assert (p.start_timestamp, p.watermark, p.record_count, p.heartbeat_ms) == (T0, at(5), 3, 1000)
    assert store.add_window_partitions(STREAM, W_START, W_END, ["p"]) == ["p"]
    assert store.claim_window_partition(STREAM, W_START, W_END, "r", 30) == "p"
    assert store.complete_window_partition(STREAM, W_START, W_END, "p", "r", rows=2, transactions=1.5)
    item = store.window_partitions(STREAM, W_START, W_END)[0]
    assert (item.state, item.rows, item.transactions) == (WindowPartitionState.DONE, 2, 1.5)

    expected = {
        name: {c.name: (c.type.compile(store.engine.dialect), c.nullable) for c in table.columns}
        for name, table in schema_module.metadata.tables.items()
    }
    assert columns_of(store.engine) == expected
    pk = sa.inspect(store.engine).get_pk_constraint("cdc_window_partitions")["constrained_columns"]
    assert pk == ["stream", "window_start_us", "window_end_us", "token"]
    store.dispose()


def test_window_partition_state_is_checked_by_the_database(store: Metastore) -> None:
    store.add_partitions(STREAM, [PartitionSpec("p", T0)])
    store.add_window_partitions(STREAM, W_START, W_END, ["p"])
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE cdc_window_partitions SET state = 'finished'"))
    assert window_states(store) == {"p": "pending"}


def test_add_window_partitions_is_insert_if_absent(store: Metastore) -> None:
    store.add_partitions(STREAM, [PartitionSpec("a", T0), PartitionSpec("b", T0), PartitionSpec("c", at(5))])
    assert store.window_partitions(STREAM, W_START, W_END) == []
    assert store.add_window_partitions(STREAM, W_START, W_END, ["b", "a", "b"]) == ["b", "a"]
    assert store.add_window_partitions(STREAM, W_START, W_END, ["a", "c"]) == ["c"]
    assert store.add_window_partitions(STREAM, W_START, W_END, []) == []
    items = store.window_partitions(STREAM, W_START, W_END)
    assert [i.token for i in items] == ["a", "b", "c"]
    first = items[0]
    assert isinstance(first, WindowPartitionRecord)
    assert (first.stream, first.window_start, first.window_end, first.window.window_id) == (
        STREAM,
        W_START,
        W_END,
        "1767225600000000-1767225660000000",
    )
    assert (first.state, first.lease_owner, first.lease_expires_at, first.attempts) == (
        "pending",
        None,
        None,
        0,
    )
    assert (first.rows, first.transactions, first.done_at, first.is_done) == (None, None, None, False)
    assert first.created_at == first.updated_at
    # A token the metastore does not know is refused, and nothing of that call is recorded.
    with pytest.raises(PartitionNotFoundError, match=f"token 'ghost' of change stream '{STREAM}'"):
        store.add_window_partitions(STREAM, at(60), at(120), ["a", "ghost"])
    assert store.window_partitions(STREAM, at(60), at(120)) == []
    # Windows are independent; an unknown stream simply has no items.
    assert store.add_window_partitions(STREAM, at(60), at(120), ["c"]) == ["c"]
    assert [i.token for i in store.window_partitions(STREAM, at(60), at(120))] == ["c"]
    assert store.window_partitions(STREAM + "Other", W_START, W_END) == []


def test_claim_follows_partition_start_then_token(store: Metastore) -> None:
    store.add_partitions(
        STREAM, [PartitionSpec("z", T0), PartitionSpec("late", at(10)), PartitionSpec("y", T0)]
    )
    store.add_window_partitions(STREAM, W_START, W_END, ["late", "z", "y"])
    claimed = [store.claim_window_partition(STREAM, W_START, W_END, f"r{n}", 30) for n in range(4)]
    assert claimed == ["y", "z", "late", None]
    assert store.claim_window_partition(STREAM, at(60), at(120), "r0", 30) is None
    assert store.claim_window_partition(STREAM + "Other", W_START, W_END, "r0", 30) is None
    item = store.window_partitions(STREAM, W_START, W_END)[0]
    assert (item.token, item.state, item.lease_owner, item.attempts) == ("y", "running", "r0", 1)
    assert item.lease_expires_at - item.updated_at == timedelta(seconds=30)


def test_merged_child_waits_for_both_parents_in_the_window(store: Metastore) -> None:
    store.add_partitions(STREAM, [PartitionSpec("p1", T0), PartitionSpec("p2", T0)])
    store.finish_partition(STREAM, "p1", at(30), [ChildPartition("m", ("p1", "p2"))])
    store.finish_partition(STREAM, "p2", at(30), [ChildPartition("m", ("p1", "p2"))])
    store.add_window_partitions(STREAM, W_START, W_END, ["m", "p1", "p2"])

    assert store.claim_window_partition(STREAM, W_START, W_END, "r1", 30) == "p1"
    assert store.claim_window_partition(STREAM, W_START, W_END, "r2", 30) == "p2"
    assert store.claim_window_partition(STREAM, W_START, W_END, "r3", 30) is None
    assert store.complete_window_partition(STREAM, W_START, W_END, "p1", "r1", rows=4, transactions=2)
    # One parent done is not enough: the other still holds earlier changes of the merged range.
    assert store.claim_window_partition(STREAM, W_START, W_END, "r3", 30) is None
    assert window_states(store) == {"p1": "done", "p2": "running", "m": "pending"}
    assert store.complete_window_partition(STREAM, W_START, W_END, "p2", "r2", rows=0, transactions=0)
    assert store.claim_window_partition(STREAM, W_START, W_END, "r3", 30) == "m"

    # In later windows the parents ended before the start (the boundary included): ready at once.
    for start in (at(30), at(60)):
        store.add_window_partitions(STREAM, start, start + timedelta(seconds=60), ["m"])
        assert store.claim_window_partition(STREAM, start, start + timedelta(seconds=60), "r4", 30) == "m"


def test_child_waits_for_a_parent_that_ends_in_the_window_without_being_read(store: Metastore) -> None:
    store.add_partitions(STREAM, [PartitionSpec("p", T0), PartitionSpec("orphan", T0, ("never-recorded",))])
    store.finish_partition(STREAM, "p", at(30), [ChildPartition("c", ("p",))])
    store.add_window_partitions(STREAM, W_START, W_END, ["c", "orphan"])
    # "orphan"'s parent is unknown (nothing to wait for); "c"'s parent p ended inside the window
    # and is not done in it, so c waits even though p has no item of its own here.
    assert store.claim_window_partition(STREAM, W_START, W_END, "r", 30) == "orphan"
    assert store.claim_window_partition(STREAM, W_START, W_END, "r2", 30) is None
    store.add_window_partitions(STREAM, W_START, W_END, ["p"])
    assert store.claim_window_partition(STREAM, W_START, W_END, "r2", 30) == "p"
    assert store.complete_window_partition(STREAM, W_START, W_END, "p", "r2", rows=1, transactions=1)
    assert store.claim_window_partition(STREAM, W_START, W_END, "r2", 30) == "c"


def test_window_parents_to_wait_for_rule() -> None:
    ends = {"ended_before": 10, "ended_at_start": 20, "ends_inside": 30, "open": None}
    parents = ["unknown", "ended_before", "ended_at_start", "ends_inside", "open"]
    assert window_parents_to_wait_for(parents, ends, 20) == ["ends_inside", "open"]
    assert window_parents_to_wait_for(parents, ends, 30) == ["open"]
    assert window_parents_to_wait_for([], ends, 0) == []


def test_own_reclaim_expired_takeover_and_stale_completion(store: Metastore, clock: ManualClock) -> None:
    store.add_partitions(STREAM, [PartitionSpec("p", T0)])
    store.add_window_partitions(STREAM, W_START, W_END, ["p"])
    assert store.claim_window_partition(STREAM, W_START, W_END, "reader-a", 30) == "p"
    assert store.claim_window_partition(STREAM, W_START, W_END, "reader-b", 30) is None
    # A retried reader under the same name takes its own partition back at once.
    assert store.claim_window_partition(STREAM, W_START, W_END, "reader-a", 30) == "p"
    assert store.window_partitions(STREAM, W_START, W_END)[0].attempts == 2

    assert not store.renew_window_partition_lease(STREAM, W_START, W_END, "p", "reader-b", 30)
    assert store.renew_window_partition_lease(STREAM, W_START, W_END, "p", "reader-a", 0.3)
    assert store.claim_window_partition(STREAM, W_START, W_END, "reader-b", 30) is None
    clock.advance(0.299)
    assert store.claim_window_partition(STREAM, W_START, W_END, "reader-b", 30) is None
    clock.advance(0.002)  # reader-a dies: its lease runs out
    assert store.claim_window_partition(STREAM, W_START, W_END, "reader-b", 30) == "p"
    item = store.window_partitions(STREAM, W_START, W_END)[0]
    assert (item.state, item.lease_owner, item.attempts) == ("running", "reader-b", 3)

    # reader-a comes back: it can neither renew nor complete what reader-b now reads.
    assert not store.renew_window_partition_lease(STREAM, W_START, W_END, "p", "reader-a", 30)
    assert not store.complete_window_partition(
        STREAM, W_START, W_END, "p", "reader-a", rows=9, transactions=9
    )
    assert store.window_partitions(STREAM, W_START, W_END)[0].rows is None
    assert store.complete_window_partition(STREAM, W_START, W_END, "p", "reader-b", rows=7, transactions=2.5)
    done = store.window_partitions(STREAM, W_START, W_END)[0]
    assert (done.state, done.rows, done.transactions, done.lease_owner, done.lease_expires_at) == (
        WindowPartitionState.DONE,
        7,
        2.5,
        None,
        None,
    )
    assert done.is_done and done.state == "done" and f"{done.state}" == "done"
    assert done.done_at is not None and done.done_at >= item.updated_at
    # Done is final: no claim, renewal or second completion.
    assert store.claim_window_partition(STREAM, W_START, W_END, "reader-b", 30) is None
    assert not store.renew_window_partition_lease(STREAM, W_START, W_END, "p", "reader-b", 30)
    assert not store.complete_window_partition(
        STREAM, W_START, W_END, "p", "reader-b", rows=1, transactions=1
    )
    assert store.window_partitions(STREAM, W_START, W_END)[0].rows == 7


def test_reset_window_partitions_for_a_rerun(store: Metastore) -> None:
    store.add_partitions(STREAM, [PartitionSpec(t, T0) for t in ("a", "b", "c")])
    store.add_window_partitions(STREAM, W_START, W_END, ["a", "b", "c"])
    store.add_window_partitions(STREAM, at(60), at(120), ["a"])
    assert store.claim_window_partition(STREAM, W_START, W_END, "old", 30) == "a"
    assert store.complete_window_partition(STREAM, W_START, W_END, "a", "old", rows=3, transactions=1)
    assert store.claim_window_partition(STREAM, W_START, W_END, "old", 30) == "b"

    assert store.reset_window_partitions(STREAM, W_START, W_END) == 3
    assert store.window_partitions(STREAM, W_START, W_END) == []
    assert store.reset_window_partitions(STREAM, W_START, W_END) == 0
    assert window_states(store, at(60), at(120)) == {"a": "pending"}
    # The re-run records the window again; the old reader's hold does not survive the reset.
    assert store.add_window_partitions(STREAM, W_START, W_END, ["a", "b", "c"]) == ["a", "b", "c"]
    assert not store.renew_window_partition_lease(STREAM, W_START, W_END, "b", "old", 30)
    assert not store.complete_window_partition(STREAM, W_START, W_END, "b", "old", rows=1, transactions=1)
    assert window_states(store) == {"a": "pending", "b": "pending", "c": "pending"}
    assert {i.attempts for i in store.window_partitions(STREAM, W_START, W_END)} == {0}
    assert store.reset_window_partitions(STREAM + "Other", W_START, W_END) == 0


def test_only_the_latest_claim_completes_a_partition_and_names_its_output(
    store: Metastore, clock: ManualClock
) -> None:
    store.add_partitions(STREAM, [PartitionSpec("a", T0)])
    store.add_window_partitions(STREAM, W_START, W_END, ["a"])
    assert store.claim_window_partition(STREAM, W_START, W_END, "r1", 0.05, claim_id="c1") == "a"
    clock.advance(0.1)  # r1 stalls past its lease; r2 takes the partition over
    assert store.claim_window_partition(STREAM, W_START, W_END, "r2", 30, claim_id="c2") == "a"
    # The same reader claiming again (a retried task) fences its own earlier claim out too.
    assert store.claim_window_partition(STREAM, W_START, W_END, "r2", 30, claim_id="c3") == "a"
    assert not store.complete_window_partition(
        STREAM, W_START, W_END, "a", "r2", rows=5, transactions=1, claim_id="c2", output_files=1
    )
    assert store.complete_window_partition(
        STREAM, W_START, W_END, "a", "r2", rows=5, transactions=1, claim_id="c3", output_files=2
    )
    assert not store.complete_window_partition(
        STREAM, W_START, W_END, "a", "r1", rows=9, transactions=1, claim_id="c1", output_files=7
    )
    (item,) = store.window_partitions(STREAM, W_START, W_END)
    assert (item.state, item.claim_id, item.output_files, item.rows, item.attempts) == (
        WindowPartitionState.DONE,
        "c3",
        2,
        5,
        3,
    )
    with pytest.raises(ValueError, match="invalid claim id '../x'"):
        store.claim_window_partition(STREAM, W_START, W_END, "r3", 30, claim_id="../x")


def test_lower_initial_starts(store: Metastore) -> None:
    store.add_partitions(
        STREAM,
        [
            PartitionSpec("fresh", at(100)),
            PartitionSpec("read", at(100)),
            PartitionSpec("child", at(100), ("fresh",)),
            PartitionSpec("older", at(40)),
            PartitionSpec("elsewhere", at(100)),
        ],
    )
    store.advance_watermark(STREAM, "read", at(110))
    changed = store.lower_initial_starts(
        STREAM, ["fresh", "read", "child", "older", "never-recorded"], at(50)
    )
    assert changed == 2
    got = {p.token: (p.start_timestamp, p.watermark) for p in store.list_partitions(STREAM)}
    assert got == {
        "fresh": (at(50), at(50)),  # nothing read yet: the watermark moves with the start
        "read": (at(50), at(110)),  # read up to 110: that is kept
        "child": (at(100), at(100)),  # has a parent: its start is where the parent ended
        "older": (at(40), at(40)),  # already starts earlier
        "elsewhere": (at(100), at(100)),  # not among the tokens
    }
    assert tokens(store.partitions_alive_at(STREAM, at(50))) == ["fresh", "older", "read"]
    assert store.lower_initial_starts(STREAM, ["fresh", "read"], at(50)) == 0
    assert store.lower_initial_starts(STREAM + "Other", ["fresh"], at(0)) == 0


def test_window_partition_bad_input_is_named(store: Metastore) -> None:
    store.add_partitions(STREAM, [PartitionSpec("p", T0)])
    store.add_window_partitions(STREAM, W_START, W_END, ["p"])
    store.claim_window_partition(STREAM, W_START, W_END, "r", 30)
    with pytest.raises(ValueError, match=f"window of change stream '{STREAM}': end .* is not after start"):
        store.add_window_partitions(STREAM, W_END, W_START, ["p"])
    with pytest.raises(ValueError, match="invalid window start: naive datetime"):
        store.window_partitions(STREAM, datetime(2026, 1, 1), W_END)
    with pytest.raises(InvalidIdentifierError, match="invalid change stream name"):
        store.reset_window_partitions("projects/p/Orders stream", W_START, W_END)
    with pytest.raises(ValueError, match="invalid partition token ''"):
        store.add_window_partitions(STREAM, W_START, W_END, [""])
    with pytest.raises(ValueError, match="invalid lease_seconds -1"):
        store.claim_window_partition(STREAM, W_START, W_END, "r", -1)
    with pytest.raises(ValueError, match="invalid lease owner ''"):
        store.renew_window_partition_lease(STREAM, W_START, W_END, "p", "", 30)
    for rows, transactions, message in (
        (-1, 1.0, "invalid rows -1"),
        (True, 1.0, "invalid rows True"),
        (1, float("nan"), "invalid transactions nan"),
        (1, -0.5, "invalid transactions -0.5"),
        (1, "2", "invalid transactions '2'"),
    ):
        with pytest.raises(ValueError, match=message):
            store.complete_window_partition(
                STREAM, W_START, W_END, "p", "r", rows=rows, transactions=transactions
            )
    with pytest.raises(ValueError, match="invalid start: "):
        store.lower_initial_starts(STREAM, ["p"], "not a time")
    assert window_states(store) == {"p": "running"}


WINDOW_CLAIM_WORKER = """
    import json, random, sys, time
    from datetime import datetime, timezone
    from airflow_provider_cdc.metastore import Metastore
    url, stream, owner, start_us, end_us = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
    start = datetime.fromtimestamp(int(start_us) / 1e6, timezone.utc)
    end = datetime.fromtimestamp(int(end_us) / 1e6, timezone.utc)
    store = Metastore(url)
    store.window_partitions(stream, start, end)  # connect before the start
    print("ready", flush=True)
    sys.stdin.readline()
    claims = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        token = store.claim_window_partition(stream, start, end, owner, 30)
        if token is None:
            if all(p.state == "done" for p in store.window_partitions(stream, start, end)):
                break
            time.sleep(0.002)
            continue
        began = time.monotonic()
        time.sleep(random.uniform(0.04, 0.08))
        ended = time.monotonic()
        assert store.complete_window_partition(stream, start, end, token, owner, rows=1, transactions=0.5)
        claims.append([owner, token, began, ended])
    print(json.dumps(claims))
"""


def build_merging_window(store: Metastore) -> dict[str, tuple[str, str]]:
    """Eight initial partitions; pairs merge at 00:00:20 into four children; all in window [0, 60)."""
    store.add_partitions(STREAM, [PartitionSpec(f"r{i}", T0) for i in range(8)])
    merges = {f"m{k}": (f"r{2 * k}", f"r{2 * k + 1}") for k in range(4)}
    for child, pair in merges.items():
        for parent in pair:
            store.finish_partition(STREAM, parent, at(20), [ChildPartition(child, pair)])
    store.add_window_partitions(STREAM, W_START, W_END, [p.token for p in store.list_partitions(STREAM)])
    return merges


def assert_window_read_once_in_lineage_order(
    store: Metastore, claims: list[list], merges: dict[str, tuple[str, str]]
) -> None:
    claimed = sorted(token for _, token, _, _ in claims)
    assert claimed == sorted([f"r{i}" for i in range(8)] + list(merges)), "a partition was read twice"
    assert_no_overlapping_holds(claims)
    hold = {token: (began, ended) for _, token, began, ended in claims}
    for child, pair in merges.items():
        # The child was claimed only after both parents' completions had been issued.
        assert hold[child][0] >= max(hold[parent][1] for parent in pair), child
    items = store.window_partitions(STREAM, W_START, W_END)
    assert {(i.state, i.attempts, i.rows, i.transactions) for i in items} == {("done", 1, 1, 0.5)}


def test_threads_never_read_a_window_partition_at_once(store: Metastore, metastore_url: str) -> None:
    merges = build_merging_window(store)

    def reader(metastore: Metastore, owner: str, record: Callable[[list], None]) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            token = metastore.claim_window_partition(STREAM, W_START, W_END, owner, 30)
            if token is None:
                if all(p.is_done for p in metastore.window_partitions(STREAM, W_START, W_END)):
                    return
                time.sleep(0.002)
                continue
            began = time.monotonic()
            time.sleep(HOLD_SECONDS)
            ended = time.monotonic()
            assert metastore.complete_window_partition(
                STREAM, W_START, W_END, token, owner, rows=1, transactions=0.5
            )
            record([owner, token, began, ended])

    claims = race_threads(metastore_url, reader)
    assert_window_read_once_in_lineage_order(store, claims, merges)


def test_processes_never_read_a_window_partition_at_once(store: Metastore, metastore_url: str) -> None:
    merges = build_merging_window(store)
    bounds = [str(int(W_START.timestamp() * 1_000_000)), str(int(W_END.timestamp() * 1_000_000))]
    outputs = run_workers(
        WINDOW_CLAIM_WORKER, [[metastore_url, STREAM, f"process-{n}", *bounds] for n in range(4)], timeout=120
    )
    claims = [claim for out in outputs for claim in json.loads(out)]
    assert_window_read_once_in_lineage_order(store, claims, merges)


def test_backfill_finds_the_lineage_of_partitions_a_later_initial_query_recorded(store: Metastore) -> None:
    # The first window read starts at 01:00: its initial query records the partitions alive then.
    store.add_partitions(STREAM, [PartitionSpec("m", at(60)), PartitionSpec("x", at(60))])
    store.advance_watermark(STREAM, "x", at(90))
    # A backfill of [0, 60) starts from the partitions alive at 0; p1 and p2 merge into m at 40.
    store.add_partitions(STREAM, [PartitionSpec("p1", T0), PartitionSpec("p2", T0)])
    store.finish_partition(STREAM, "p1", at(40), [ChildPartition("m", ("p1", "p2"))])
    store.finish_partition(STREAM, "p2", at(40), [ChildPartition("m", ("p1", "p2"))])
    m = store.get_partition(STREAM, "m")
    assert (m.parent_tokens, m.start_timestamp, m.watermark) == (("p1", "p2"), at(40), at(40))
    # A partition read past its recorded start keeps its watermark; a child with parents keeps its own.
    store.finish_partition(STREAM, "p1", at(40), [ChildPartition("x", ("p1",))])
    x = store.get_partition(STREAM, "x")
    assert (x.parent_tokens, x.start_timestamp, x.watermark) == (("p1",), at(40), at(90))
    assert store.add_partitions(STREAM, [PartitionSpec("m", at(30), ("other",))]) == []
    assert store.get_partition(STREAM, "m").parent_tokens == ("p1", "p2")
    assert tokens(store.partitions_overlapping(STREAM, at(0), at(60))) == ["m", "p1", "p2", "x"]


# ---------------------------------------------------------------------------------------------
# The pipeline ledger: contiguous windows and the versions each window left in each table.


def _apply(store: Metastore, start: datetime, end: datetime, tables: dict | None = None) -> None:
    store.open_window(PIPELINE, STREAM, start, end)
    if tables:
        store.record_window_tables(PIPELINE, start, end, tables, target="delta")
    assert store.transition_window(PIPELINE, start, end, "reading", "applied")


def test_a_window_applies_only_after_the_one_before_it(store: Metastore) -> None:
    store.record_pipeline(PIPELINE, T0)
    assert store.predecessor_error(PIPELINE, T0, at(60)) is None  # the first window
    never_run = "waits for the window ending at .*, which was never run"
    with pytest.raises(WindowOrderError, match=never_run) as info:
        store.require_predecessor_applied(PIPELINE, at(60), at(120))
    assert info.value.never_run
    store.open_window(PIPELINE, STREAM, T0, at(60))
    with pytest.raises(WindowOrderError) as info:
        store.require_predecessor_applied(PIPELINE, at(60), at(120))
    message = str(info.value)
    assert "window [2026-01-01T00:01:00.000000Z, 2026-01-01T00:02:00.000000Z) of pipeline 'shop_orders'" in (
        message
    )
    waits = "waits for window [2026-01-01T00:00:00.000000Z, 2026-01-01T00:01:00.000000Z), which is reading"
    assert waits in message
    assert not info.value.never_run
    assert store.transition_window(PIPELINE, T0, at(60), "reading", "applied")
    store.require_predecessor_applied(PIPELINE, at(60), at(120))
    with pytest.raises(WindowOrderError, match="starts before the pipeline's first window"):
        store.require_predecessor_applied(PIPELINE, at(-60), T0)
    # The first window is recorded once: a later call does not move it.
    assert store.record_pipeline(PIPELINE, at(60)).first_window_start == T0


def test_table_versions_come_from_applied_windows_only(store: Metastore) -> None:
    store.record_pipeline(PIPELINE, T0)
    _apply(store, T0, at(60), {"Orders": (0, 5), "Customers": (0, 2)})
    _apply(store, at(60), at(120), {"Orders": (1, 3)})
    store.open_window(PIPELINE, STREAM, at(120), at(180))
    store.record_window_tables(PIPELINE, at(120), at(180), {"Orders": (2, 1)}, target="delta")  # not applied
    versions = store.table_versions(PIPELINE, target="delta")
    assert versions.tables == {"Orders": to_micros(at(120)), "Customers": to_micros(at(60))}
    assert versions.recorded_from_us is None
    # A table recorded twice for one window keeps its first record.
    store.record_window_tables(PIPELINE, T0, at(60), {"Orders": (7, 7)}, target="delta")
    orders = store.window_tables(PIPELINE, table="Orders", target="delta")
    assert [(r.window_end, r.target_version, r.rows) for r in orders] == [
        (at(60), 0, 5),
        (at(120), 1, 3),
        (at(180), 2, 1),
    ]


def test_table_versions_of_no_target_are_what_any_target_recorded(store: Metastore) -> None:
    store.record_pipeline(PIPELINE, T0)
    _apply(store, T0, at(60), {"Orders": (0, 5)})
    store.open_window(PIPELINE, STREAM, at(60), at(120))
    store.record_window_tables(PIPELINE, at(60), at(120), {"Customers": (None, 2)}, target="bigquery")
    assert store.transition_window(PIPELINE, at(60), at(120), "reading", "applied")
    assert store.table_versions(PIPELINE, target="delta").tables == {"Orders": to_micros(at(60))}
    assert store.table_versions(PIPELINE, target=None).tables == {
        "Orders": to_micros(at(60)),
        "Customers": to_micros(at(120)),
    }
    assert store.table_versions(PIPELINE, target=None, before=at(60)).tables == {"Orders": to_micros(at(60))}


def test_upgrade_to_version_4_records_existing_pipelines(metastore_url: str) -> None:
    engine = sa.create_engine(metastore_url)
    with engine.begin() as conn:
        for ddl in V1_DDL:
            conn.execute(sa.text(ddl))
        for step in migrations.MIGRATIONS[1:3]:
            step.apply(conn)
        conn.execute(sa.text("INSERT INTO cdc_schema_version VALUES (3, 'v3', 1700000000000000)"))
    engine.dispose()
    store = Metastore(metastore_url)
    with store.engine.begin() as conn:  # two windows applied and one merged, as version 3 recorded them
        for start, state in ((T0, "applied"), (at(60), "applied"), (at(120), "merged")):
            conn.execute(
                sa.text(
                    "INSERT INTO cdc_windows (pipeline, start_us, end_us, stream, state, attempt, opened_us, "
                    "updated_us) VALUES (:pipeline, :start, :end, :stream, :state, 1, 1, 2)"
                ),
                {"pipeline": PIPELINE, "start": to_micros(start), "end": to_micros(start) + 60_000_000,
                 "stream": STREAM, "state": state},
            )  # fmt: skip
    assert store.create_schema() == list(range(4, CURRENT_VERSION + 1))
    assert store.get_pipeline(PIPELINE) == PipelineRecord(PIPELINE, T0, at(120))
    assert store.table_versions(PIPELINE, target="delta").recorded_from_us == to_micros(at(120))
    assert [w.state.value for w in store.list_windows(PIPELINE)] == ["applied", "applied", "reading"]
    store.dispose()


def minute_window(n: int) -> dict[str, int]:
    """The ``n``-th minute window from T0 as the SQL parameters ``start`` and ``end`` (µs)."""
    return {"start": to_micros(at(60 * n)), "end": to_micros(at(60 * n + 60))}


def migrate_to(conn: sa.Connection, version: int) -> None:
    """The schema as version ``version`` left it: its steps applied and recorded, from an empty database."""
    schema_module.schema_version.create(conn)
    for step in migrations.MIGRATIONS[:version]:
        step.apply(conn)
        conn.execute(
            schema_module.schema_version.insert().values(
                version=step.version, description=step.description, applied_us=1700000000000000
            )
        )


def build_version_4(url: str) -> None:
    """A database at schema version 4 holding windows in each state version 4 knew."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        migrate_to(conn, 4)
        rows = [
            (0, "applied", 1, "file:///cs/0", None, 100, 200, 300),
            (1, "merged", 2, "file:///cs/1", "upsert failed: disk full", 400, 500, None),
            (2, "drained", 1, None, None, 600, None, None),
            (3, "reading", 1, None, None, None, None, None),
        ]
        for n, state, attempt, change_set, error, drained, merged, applied in rows:
            conn.execute(
                sa.text(
                    "INSERT INTO cdc_windows (pipeline, start_us, end_us, stream, state, attempt, "
                    "staging_uri, record_count, opened_us, updated_us, drained_us, merged_us, applied_us, "
                    "change_set_uri, transaction_count, key_count, error) VALUES (:pipeline, :start, :end, "
                    ":stream, :state, :attempt, :staging, :count, 10, 20, :drained, :merged, :applied, "
                    ":change_set, 3, 4, :error)"
                ),
                {
                    "pipeline": PIPELINE,
                    **minute_window(n),
                    "stream": STREAM,
                    "state": state,
                    "attempt": attempt,
                    "staging": f"file:///staging/{n}",
                    "count": 10 + n,
                    "drained": drained,
                    "merged": merged,
                    "applied": applied,
                    "change_set": change_set,
                    "error": error,
                },
            )
        conn.execute(
            sa.text("INSERT INTO cdc_pipelines VALUES (:pipeline, :first, NULL, 1)"),
            {"pipeline": PIPELINE, "first": to_micros(T0)},
        )
    engine.dispose()


def test_upgrade_from_version_4_leaves_windows_reading_or_applied(
    metastore_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_provider_cdc import cli

    build_version_4(metastore_url)
    store = Metastore(metastore_url)
    assert store.schema_version() == 4
    assert cli.main(["migrate", "--metastore-url", metastore_url]) == 0
    applied = list(range(5, CURRENT_VERSION + 1))
    assert capsys.readouterr().out == f"metastore at schema version {CURRENT_VERSION} (applied {applied})\n"
    assert cli.main(["migrate", "--metastore-url", metastore_url]) == 0
    assert capsys.readouterr().out == f"metastore at schema version {CURRENT_VERSION}\n"
    assert store.schema_version() == CURRENT_VERSION == 9

    # Drained and merged windows are reading again; everything else of every window is kept.
    windows = store.list_windows(PIPELINE)
    assert [(w.state, w.attempt, w.record_count, w.staging_uri, w.change_set_uri) for w in windows] == [
        (WindowState.APPLIED, 1, 10, "file:///staging/0", "file:///cs/0"),
        (WindowState.READING, 2, 11, "file:///staging/1", "file:///cs/1"),
        (WindowState.READING, 1, 12, "file:///staging/2", None),
        (WindowState.READING, 1, 13, "file:///staging/3", None),
    ]
    assert windows[0].applied_at == datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=300)
    assert {(w.transaction_count, w.key_count) for w in windows} == {(3, 4)}
    assert store.get_pipeline(PIPELINE) == PipelineRecord(PIPELINE, T0, None)
    # They carry on as any window: a re-run of attempt 2 applies the formerly merged window.
    assert store.transition_window(PIPELINE, at(60), at(120), "reading", "applied", attempt=2)
    store.require_predecessor_applied(PIPELINE, at(120), at(180))

    # The tables are those of a fresh database, and the database refuses the old states.
    expected = {
        name: {c.name: (c.type.compile(store.engine.dialect), c.nullable) for c in table.columns}
        for name, table in schema_module.metadata.tables.items()
    }
    assert columns_of(store.engine) == expected
    assert not {"error", "drained_us", "merged_us"} & set(expected["cdc_windows"])
    pk = sa.inspect(store.engine).get_pk_constraint("cdc_windows")["constrained_columns"]
    assert pk == ["pipeline", "start_us", "end_us"]
    for state in ("drained", "merged"):
        with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
            conn.execute(sa.text("UPDATE cdc_windows SET state = :state"), {"state": state})
    assert store.open_window(PIPELINE, STREAM, at(240), at(300)).state is WindowState.READING
    store.dispose()


def test_ledger_and_apply_watermarks_are_kept_per_target(store: Metastore) -> None:
    store.record_pipeline(PIPELINE, T0)
    store.open_window(PIPELINE, STREAM, T0, at(60))
    store.record_window_tables(PIPELINE, T0, at(60), {"Orders": (3, 5)}, target="delta")
    store.record_window_tables(PIPELINE, T0, at(60), {"Orders": (None, 4)}, target="bigquery")
    assert store.transition_window(PIPELINE, T0, at(60), "reading", "applied")
    assert [(r.table, r.target_version, r.rows) for r in store.window_tables(PIPELINE, target="delta")] == [
        ("Orders", 3, 5)
    ]
    sent = store.window_tables(PIPELINE, target="bigquery", window=(T0, at(60)))
    assert [(r.table, r.target_version, r.rows) for r in sent] == [("Orders", None, 4)]
    # What a window left in the Delta tables is the Delta target's record alone.
    assert store.table_versions(PIPELINE, target="delta").tables == {"Orders": to_micros(at(60))}
    assert store.table_versions(PIPELINE, target="bigquery").tables == {"Orders": to_micros(at(60))}

    assert store.advance_table_watermark(PIPELINE, "Orders", at(60), target="delta")
    assert store.advance_table_watermark(PIPELINE, "Orders", at(30), target="bigquery")
    assert not store.advance_table_watermark(PIPELINE, "Orders", at(20), target="bigquery")
    assert store.table_watermarks(PIPELINE, target="delta") == {"Orders": at(60)}
    assert store.table_watermarks(PIPELINE, target="bigquery") == {"Orders": at(30)}
    assert store.table_watermarks(PIPELINE, target="spark_sql") == {}

    for bad in ("BigQuery", "big-query", "", "9delta", "x" * 33, None):
        with pytest.raises(ValueError, match=f"invalid target {bad!r}: expected a lowercase letter"):
            store.table_watermarks(PIPELINE, target=bad)
    with pytest.raises(ValueError, match="invalid target 'delta; DROP TABLE x'"):
        store.record_window_tables(PIPELINE, T0, at(60), {"Orders": (1, 1)}, target="delta; DROP TABLE x")
    with pytest.raises(ValueError, match="invalid target 'Delta'"):
        store.advance_table_watermark(PIPELINE, "Orders", at(90), target="Delta")
    # Pipeline ids keep every character an Airflow DAG id has, dots included.
    assert store.advance_table_watermark("shop.eu-west_1", "Orders", at(60), target="bigquery")
    assert store.table_watermarks("shop.eu-west_1", target="bigquery") == {"Orders": at(60)}


def build_version_5(url: str) -> None:
    """A database at schema version 5 whose ledger and watermarks hold rows of the Delta tables and,
    under ``{pipeline}.bigquery``, of the BigQuery tables, as version 5 recorded them."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        migrate_to(conn, 5)
        for n in range(2):
            conn.execute(
                sa.text(
                    "INSERT INTO cdc_windows (pipeline, start_us, end_us, stream, state, attempt, opened_us, "
                    "updated_us, applied_us) VALUES (:pipeline, :start, :end, :stream, 'applied', 1, 1, 2, 3)"
                ),
                {
                    "pipeline": PIPELINE,
                    **minute_window(n),
                    "stream": STREAM,
                },
            )
        conn.execute(
            sa.text("INSERT INTO cdc_pipelines VALUES (:pipeline, :first, NULL, 1)"),
            {"pipeline": PIPELINE, "first": to_micros(T0)},
        )
        ledger = [  # pipeline, window, table, target version, rows
            (PIPELINE, 0, "Orders", 7, 5),
            (PIPELINE, 1, "Orders", 8, 2),
            (PIPELINE, 0, "Customers", 4, 1),
            (f"{PIPELINE}.bigquery", 0, "Orders", None, 5),  # the same window and table, sent to BigQuery
            (f"{PIPELINE}.bigquery", 1, "Orders", None, 2),
            ("shop.eu", 0, "Orders", 1, 9),  # a dotted pipeline id of the Delta tables
        ]
        for pipeline, n, table, version, rows in ledger:
            conn.execute(
                sa.text(
                    "INSERT INTO cdc_window_tables (pipeline, window_start_us, window_end_us, table_name, "
                    "target_version, rows, recorded_us) VALUES (:pipeline, :start, :end, :table, :version, "
                    ":rows, 5)"
                ),
                {
                    "pipeline": pipeline,
                    **minute_window(n),
                    "table": table,
                    "version": version,
                    "rows": rows,
                },
            )
        marks = [
            (PIPELINE, "Orders", 120),
            (PIPELINE, "Customers", 60),
            (f"{PIPELINE}.bigquery", "Orders", 100),
            ("shop.eu", "Orders", 60),
        ]
        for pipeline, table, seconds in marks:
            conn.execute(
                sa.text("INSERT INTO cdc_table_watermarks VALUES (:pipeline, :table, :mark, 6)"),
                {"pipeline": pipeline, "table": table, "mark": to_micros(at(seconds))},
            )
    engine.dispose()


def test_upgrade_from_version_5_keys_the_ledger_and_watermarks_by_target(metastore_url: str) -> None:
    build_version_5(metastore_url)
    store = Metastore(metastore_url)
    assert store.schema_version() == 5
    assert store.create_schema() == list(range(6, CURRENT_VERSION + 1))
    assert store.create_schema() == []
    assert store.schema_version() == CURRENT_VERSION == 9

    def ledger(pipeline: str, target: str = "delta") -> list[tuple]:
        return [
            (r.table, r.window_end, r.target_version, r.rows)
            for r in store.window_tables(pipeline, target=target)
        ]

    # Rows under {pipeline}.bigquery are the pipeline's own, target bigquery; all others are Delta's.
    assert ledger(PIPELINE) == [
        ("Customers", at(60), 4, 1),
        ("Orders", at(60), 7, 5),
        ("Orders", at(120), 8, 2),
    ]
    assert ledger(PIPELINE, "bigquery") == [("Orders", at(60), None, 5), ("Orders", at(120), None, 2)]
    assert ledger("shop.eu") == [("Orders", at(60), 1, 9)] and ledger("shop.eu", "bigquery") == []
    assert ledger(f"{PIPELINE}.bigquery") == ledger(f"{PIPELINE}.bigquery", "bigquery") == []
    versions = store.table_versions(PIPELINE, target="delta").tables
    assert versions == {"Orders": to_micros(at(120)), "Customers": to_micros(at(60))}
    assert store.table_watermarks(PIPELINE, target="delta") == {"Customers": at(60), "Orders": at(120)}
    assert store.table_watermarks(PIPELINE, target="bigquery") == {"Orders": at(100)}
    assert store.table_watermarks("shop.eu", target="delta") == {"Orders": at(60)}
    assert store.table_watermarks(f"{PIPELINE}.bigquery", target="bigquery") == {}

    # The tables, keys and index are those of a fresh database.
    expected = {
        name: {c.name: (c.type.compile(store.engine.dialect), c.nullable) for c in table.columns}
        for name, table in schema_module.metadata.tables.items()
    }
    assert columns_of(store.engine) == expected
    inspector = sa.inspect(store.engine)
    assert inspector.get_pk_constraint("cdc_window_tables")["constrained_columns"] == [
        "pipeline",
        "target",
        "window_start_us",
        "window_end_us",
        "table_name",
    ]
    assert inspector.get_pk_constraint("cdc_table_watermarks")["constrained_columns"] == [
        "pipeline",
        "target",
        "table_name",
    ]
    indexes = {i["name"]: i["column_names"] for i in inspector.get_indexes("cdc_window_tables")}
    assert indexes["ix_cdc_window_tables_table"] == ["pipeline", "target", "table_name", "window_end_us"]
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:  # no row without a target
        conn.execute(
            sa.text(
                "INSERT INTO cdc_table_watermarks (pipeline, table_name, watermark_us, "
                "updated_us) VALUES ('shop', 'Lines', 1, 1)"
            )
        )

    # Both targets carry on under the pipeline's own id, each only forward.
    assert store.advance_table_watermark(PIPELINE, "Orders", at(150), target="bigquery")
    assert not store.advance_table_watermark(PIPELINE, "Orders", at(90), target="delta")
    store.open_window(PIPELINE, STREAM, at(120), at(180))
    store.record_window_tables(PIPELINE, at(120), at(180), {"Orders": (None, 1)}, target="bigquery")
    store.record_window_tables(PIPELINE, at(120), at(180), {"Orders": (9, 1)}, target="delta")
    assert ledger(PIPELINE, "bigquery")[-1] == ("Orders", at(180), None, 1)
    assert ledger(PIPELINE)[-1] == ("Orders", at(180), 9, 1)
    store.dispose()


# ---------------------------------------------------------------------------------------------
# The hook: one engine per hook, disposed by close(); the schema ensured once per process.


@pytest.fixture
def metastore_connection(metastore_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(
        "AIRFLOW_CONN_CDC_METASTORE_TEST",
        json.dumps({"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": metastore_url}}),
    )
    return "cdc_metastore_test"


def count_schema_creations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the URL of every ``create_schema`` call from now on."""
    calls: list[str] = []
    create_schema = Metastore.create_schema

    def counting(self: Metastore) -> list[int]:
        calls.append(repr(self))
        return create_schema(self)

    monkeypatch.setattr(Metastore, "create_schema", counting)
    return calls


def test_hooks_of_one_database_create_the_schema_once_per_process(
    metastore_connection: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook

    calls = count_schema_creations(monkeypatch)
    with CdcMetastoreHook(metastore_connection) as first, CdcMetastoreHook(metastore_connection) as second:
        assert first.metastore.schema_version() == CURRENT_VERSION
        assert first.metastore is first.metastore
        assert second.metastore is not first.metastore
        assert second.metastore.engine is not first.metastore.engine
        second.metastore.open_window(PIPELINE, STREAM, T0, at(60))
        assert [w.start for w in first.metastore.list_windows(PIPELINE)] == [T0]
    assert len(calls) == 1

    # Concurrent first uses in threads still create it once.
    hooks = [CdcMetastoreHook(metastore_connection) for _ in range(4)]
    barrier = threading.Barrier(len(hooks))

    def use(hook: CdcMetastoreHook) -> None:
        barrier.wait(timeout=30)
        with hook:
            hook.metastore.list_windows(PIPELINE)

    run_threads(use, hooks, timeout=60, barrier=barrier)
    assert len(calls) == 1

    # Another database is another schema; a SQLite file created anew is a new database.
    other = tmp_path / "other.db"
    monkeypatch.setenv(
        "AIRFLOW_CONN_CDC_METASTORE_OTHER",
        json.dumps({"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": f"sqlite:///{other}"}}),
    )
    for _ in range(2):
        with CdcMetastoreHook("cdc_metastore_other") as hook:
            assert hook.metastore.list_windows(PIPELINE) == []
    assert len(calls) == 2
    other.unlink()
    for suffix in ("-wal", "-shm"):
        Path(f"{other}{suffix}").unlink(missing_ok=True)
    with CdcMetastoreHook("cdc_metastore_other") as hook:
        assert hook.metastore.schema_version() == CURRENT_VERSION
    assert len(calls) == 3


def test_hook_close_disposes_its_engine_and_a_later_use_reconnects(
    metastore_connection: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook

    disposed: list[sa.engine.Engine] = []
    dispose = sa.engine.Engine.dispose

    def recording_dispose(engine: sa.engine.Engine, *args: Any, **kwargs: Any) -> None:
        disposed.append(engine)
        dispose(engine, *args, **kwargs)

    monkeypatch.setattr(sa.engine.Engine, "dispose", recording_dispose)
    hook = CdcMetastoreHook(metastore_connection)
    hook.close()  # nothing opened yet: nothing to dispose
    assert disposed == []
    store = hook.metastore
    store.open_window(PIPELINE, STREAM, T0, at(60))
    calls = count_schema_creations(monkeypatch)

    hook.close()
    assert disposed == [store.engine]
    hook.close()  # harmless to repeat
    assert disposed == [store.engine]
    # The next use opens a new engine on the same database, without creating the schema again.
    reopened = hook.metastore
    assert reopened is not store and reopened.engine is not store.engine
    assert [w.start for w in reopened.list_windows(PIPELINE)] == [T0]
    assert calls == []
    # A metastore taken from the hook before close() still works: its engine connects again.
    assert store.get_window(PIPELINE, T0, at(60)).state is WindowState.READING

    with hook:
        assert hook.get_conn() is reopened
    assert disposed == [store.engine, reopened.engine]  # leaving the block closed the hook
    assert hook.metastore is not reopened
    hook.close()
    store.dispose()


# ----------------------------------------------------------------------------------------------------
# A window's last failure (version 9) and where pipelines stand.


def test_upgrade_from_version_8_keeps_windows_and_adds_their_failure(metastore_url: str) -> None:
    engine = sa.create_engine(metastore_url)
    with engine.begin() as conn:
        migrate_to(conn, 8)
        conn.execute(sa.text(
            "INSERT INTO cdc_windows (pipeline, start_us, end_us, stream, state, attempt, opened_us, "
            "updated_us) VALUES ('shop', 1767225600000000, 1767225660000000, 'OrdersStream', 'reading', 2, "
            "1, 2)"
        ))  # fmt: skip
    engine.dispose()
    store = Metastore(metastore_url)
    assert store.schema_version() == 8
    assert store.create_schema() == [9] and store.create_schema() == []
    record = store.get_window("shop", at(0), at(60))
    assert (record.attempt, record.error) == (2, None)
    with store.engine.begin() as conn:  # a step that finds its columns present adds none
        migrations.MIGRATIONS[8].apply(conn)
    expected = {
        name: {c.name: (c.type.compile(store.engine.dialect), c.nullable) for c in table.columns}
        for name, table in schema_module.metadata.tables.items()
    }
    assert columns_of(store.engine) == expected
    store.dispose()


def test_a_window_keeps_its_last_failure_until_applied_reopened_or_cleared(
    store: Metastore, clock: ManualClock
) -> None:
    store.open_window(PIPELINE, STREAM, at(0), at(60))
    task = "shop/scheduled__1/read/2"
    assert store.record_window_error(PIPELINE, at(0), at(60), "ValueError: boom", task=task, try_number=1)
    error = store.get_window(PIPELINE, at(0), at(60)).error
    assert error is not None and (error.text, error.try_number) == ("ValueError: boom", 1)
    assert (error.dag_id, error.run_id, error.task_id) == ("shop", "scheduled__1", "read[2]")
    # a step of another opening (epoch) records nothing; another task's success clears nothing
    assert not store.record_window_error(PIPELINE, at(0), at(60), "stale", task=task, epoch=2)
    assert not store.clear_window_error(PIPELINE, at(0), at(60), "shop/scheduled__1/read/1")
    assert store.get_window(PIPELINE, at(0), at(60)).error == error
    assert store.clear_window_error(PIPELINE, at(0), at(60), task)
    assert store.get_window(PIPELINE, at(0), at(60)).error is None
    # opened again: the next epoch starts without the last one's failure
    store.record_window_error(PIPELINE, at(0), at(60), "OSError: gone", task=task, try_number=3)
    assert store.open_window(PIPELINE, STREAM, at(0), at(60), reopen=True).error is None
    # applied: no failure, and none recorded on it afterwards
    store.record_window_error(PIPELINE, at(0), at(60), "OSError: gone", task=task, epoch=2)
    assert store.transition_window(PIPELINE, at(0), at(60), "reading", "applied")
    assert store.get_window(PIPELINE, at(0), at(60)).error is None
    assert not store.record_window_error(PIPELINE, at(0), at(60), "late", task=task)
    long_text = "x" * 10_000
    store.open_window(PIPELINE, STREAM, at(60), at(120))
    store.record_window_error(PIPELINE, at(60), at(120), long_text)
    assert len(store.get_window(PIPELINE, at(60), at(120)).error.text) == 4_000
    with pytest.raises(ValueError, match="needs its text"):
        store.record_window_error(PIPELINE, at(60), at(120), " ")
    with pytest.raises(ValueError, match="invalid pipeline id"):
        store.record_window_error("shop'; DROP TABLE cdc_windows; --", at(60), at(120), "x")


def test_where_a_pipeline_stands(store: Metastore) -> None:
    store.record_pipeline(PIPELINE, at(0))
    for start in (0, 60, 120, 180):
        store.open_window(PIPELINE, STREAM, at(start), at(start + 60))
    store.transition_window(PIPELINE, at(0), at(60), "reading", "applied")
    store.record_window_error(PIPELINE, at(60), at(120), "ValueError: boom")
    store.advance_table_watermark(PIPELINE, "Orders", at(60), target="delta")
    store.advance_table_watermark(PIPELINE, "Customers", at(30), target="delta")
    store.advance_table_watermark(PIPELINE, "Orders", at(50), target="bigquery")
    standing = store.pipeline_standing(PIPELINE)
    assert (standing.applied, standing.failed, standing.in_flight) == (1, 1, 2)
    assert standing.last_applied.start == at(0) and standing.newest.start == at(180)
    assert standing.oldest_unapplied.start == at(60) and standing.first_window_start == at(0)
    assert standing.oldest_watermarks == {"bigquery": at(50), "delta": at(30)}
    assert standing.targets == ("bigquery", "delta")
    assert [w.start for w in store.windows_starting_at(PIPELINE, at(60))] == [at(60)]
    assert [w.end for w in store.windows_ending_at(PIPELINE, at(60))] == [at(60)]
    assert store.newest_window(PIPELINE).start == at(180) and store.newest_window("other") is None
    assert store.target_watermarks(PIPELINE) == {
        "delta": {"Customers": at(30), "Orders": at(60)},
        "bigquery": {"Orders": at(50)},
    }
    empty = store.pipeline_standing("other")
    assert (empty.applied, empty.failed, empty.in_flight, empty.newest, empty.targets) == (0, 0, 0, None, ())
