"""Snapshot throughput and memory: the provider's table reader against the raw client, same batches, same run.

    .venv/bin/python benchmarks/snapshot.py                                 # 100k and 400k rows, 5 repeats
    .venv/bin/python benchmarks/snapshot.py --sizes 20000 --repeat 3        # a quick look
    .venv/bin/python benchmarks/snapshot.py --emulator project              # the project's emulator

For each size an emulator process (Google's ``emulator_main`` by default) is loaded with one table of
that many rows (eight columns: INT64 key, STRING, FLOAT64, DATE, BOOL, TIMESTAMP, NUMERIC, a 40-byte
STRING). The snapshot window ``[T - 1µs, T)`` is planned once, as ``SpannerTableHook.open_window`` does
(PartitionQuery batches in one read-only transaction, the plan file, the batches recorded as the
window's partitions in a SQLite metastore). Then raw and provider runs alternate, ``--repeat`` times
each, every run in a fresh process so that its peak memory is its own:
  raw      - the google-cloud-spanner client runs ``process_query_batch`` over the plan's batches
             (the same partitions, the same transaction) and only iterates the decoded rows;
  provider - the provider's TableWindowReader (what ``SpannerTableHook.read_window`` runs in a task):
             batches claimed with leases and claim ids, rows taken undecoded and turned into staged
             change rows, Parquet staging, each batch completed by compare-and-set. ``--hook`` reads
             through SpannerTableHook instead, which also loads Airflow into the process;
             ``--process-gc`` keeps the process's garbage-collector thresholds during the read
             (the reader otherwise runs full collections less often, as the raw loop does not).
Printed per size: the median rows/s of each side with their spread (min-max), the ratio of the
medians (goal >= 0.9), peak RSS and CPU seconds, and the growth of the provider's peak RSS from the
first size to the last (goal: flat in table size).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from _harness import in_child, spread, usage

PROJECT, INSTANCE, DATABASE, TABLE, SOURCE = "bench-project", "bench-instance", "bench", "Bench", "Snapshot"
DDL = (
    f"CREATE TABLE {TABLE} (Id INT64 NOT NULL, Name STRING(MAX), Score FLOAT64, Born DATE, Active BOOL, "
    "Ts TIMESTAMP OPTIONS (allow_commit_timestamp=true), Amount NUMERIC, Note STRING(MAX)) PRIMARY KEY (Id)"
)


def _serve(emulator_kind: str, size: int, conn: Any) -> None:
    """Child: an emulator with the table loaded; reports its host and T, then serves until told."""
    from datetime import date

    from google.cloud.spanner_v1 import COMMIT_TIMESTAMP, Client

    if emulator_kind == "google":
        from airflow_provider_cdc.testing.google_emulator import INSTANCE_CONFIG, GoogleSpannerEmulator

        emulator: Any = GoogleSpannerEmulator()
        emulator.start()
        config, clock = INSTANCE_CONFIG, None
    else:
        from airflow_provider_cdc.testing.spanner_emulator import ManualClock, SpannerEmulator

        clock = ManualClock(datetime(2026, 1, 1, tzinfo=timezone.utc))
        emulator = SpannerEmulator(clock, seed=3)
        emulator.start()
        config = "emulator"
    os.environ["SPANNER_EMULATOR_HOST"] = emulator.host
    client = Client(project=PROJECT, disable_builtin_metrics=True)
    instance = client.instance(
        INSTANCE, configuration_name=f"projects/{PROJECT}/instanceConfigs/{config}", node_count=1
    )
    instance.create().result(60)
    database = instance.database(DATABASE, ddl_statements=[DDL])
    database.create().result(60)
    columns = ["Id", "Name", "Score", "Born", "Active", "Ts", "Amount", "Note"]
    for start in range(0, size, 2000):
        with database.batch() as batch:
            batch.insert(
                TABLE,
                columns,
                [
                    (
                        k,
                        f"user {k}",
                        k * 1.5,
                        date(2020, 1, 1 + k % 28),
                        k % 2 == 0,
                        COMMIT_TIMESTAMP,
                        Decimal(k) / 100,
                        "x" * 40,
                    )
                    for k in range(start, min(size, start + 2000))
                ],
            )
        if clock is not None:
            clock.advance(timedelta(milliseconds=1))
    first = (batch.committed + timedelta(seconds=1)).replace(microsecond=0)
    if clock is not None:
        clock.set(first + timedelta(seconds=1))
    else:
        time.sleep(max((first - datetime.now(timezone.utc)).total_seconds() + 0.2, 0))
    conn.send({"host": emulator.host, "first": first.isoformat()})
    conn.recv()  # stop
    emulator.stop()


def _database(host: str) -> Any:
    os.environ["SPANNER_EMULATOR_HOST"] = host
    from google.cloud.spanner_v1 import Client

    return Client(project=PROJECT, disable_builtin_metrics=True).instance(INSTANCE).database(DATABASE)


def _plan(host: str, first: str, workdir: str, max_partitions: int | None, conn: Any) -> None:
    """Child: plan the snapshot window once (plan file, batches recorded in the metastore)."""
    from airflow_provider_cdc.core.timestamps import coerce_timestamp
    from airflow_provider_cdc.metastore import Metastore, PartitionSpec
    from airflow_provider_cdc.sources.spanner.snapshot import snapshot_table, snapshot_window
    from airflow_provider_cdc.sources.spanner.table_batches import SNAPSHOT, plan_batches, write_plan
    from airflow_provider_cdc.sources.spanner.table_schema import table_schema

    database = _database(host)
    window = snapshot_window(coerce_timestamp(first))
    with database.snapshot(read_timestamp=window.start, multi_use=True) as snapshot:
        planned = [snapshot_table(table_schema(snapshot, TABLE))]
    plan = plan_batches(
        database, SOURCE, SNAPSHOT, window, window.start, planned, max_partitions=max_partitions
    )
    path = write_plan(plan, f"{workdir}/plan")
    store = Metastore(f"sqlite:///{workdir}/metastore.db")
    store.create_schema()
    key = f"{database.name}/{SOURCE}"
    store.open_window("bench", key, window.start, window.end)
    store.add_partitions(key, [PartitionSpec(token, window.start) for token in plan.tokens])
    store.end_partitions(key, plan.tokens, window.end)
    conn.send({"plan": path, "window_id": window.window_id, "batches": len(plan.tokens)})


def _raw(host: str, plan_path: str, conn: Any) -> None:
    """Child: the raw client processes the plan's batches, iterating the decoded rows only."""
    from google.cloud.spanner_v1.database import BatchSnapshot

    from airflow_provider_cdc.sources.spanner.table_batches import BatchPlan

    database = _database(host)
    plan = BatchPlan.from_json(Path(plan_path).read_text())
    table = plan.tables[TABLE]
    started = time.perf_counter()
    rows = 0
    for batch in plan.batches:
        snapshot = BatchSnapshot.from_dict(database, plan.snapshot_state())
        for _row in snapshot.process_query_batch(
            {"partition": batch.partition, "query": {"sql": table.sql()}}
        ):
            rows += 1
    seconds = time.perf_counter() - started
    conn.send({"rows": rows, "seconds": seconds, **usage()})


def _prepare_run(host: str, info: dict, workdir: str, run_dir: str) -> tuple[Any, str]:
    """A fresh staging root holding the plan, and the window's batches pending again."""
    from airflow_provider_cdc.core.window import Window
    from airflow_provider_cdc.metastore import Metastore

    window = Window.from_window_id(info["window_id"])
    staging = f"{run_dir}/staging"
    target = Path(staging) / SOURCE / window.window_id / "_plans"
    target.mkdir(parents=True)
    shutil.copy(info["plan"], target)
    store = Metastore(f"sqlite:///{workdir}/metastore.db")
    key = f"projects/{PROJECT}/instances/{INSTANCE}/databases/{DATABASE}/{SOURCE}"
    tokens = [item.token for item in store.list_partitions(key)]
    store.reset_window_partitions(key, window.start, window.end)
    store.add_window_partitions(key, window.start, window.end, tokens)
    return store, staging


def _provider(host: str, info: dict, workdir: str, run_dir: str, process_gc: bool, conn: Any) -> None:
    """Child: the provider's table reader stages the snapshot window (SQLite metastore)."""
    from airflow_provider_cdc.core.window import Window
    from airflow_provider_cdc.sources.spanner.garbage_collection import FULL_COLLECTION_FACTOR
    from airflow_provider_cdc.sources.spanner.table_reader import TableWindowReader

    database = _database(host)
    store, staging = _prepare_run(host, info, workdir, run_dir)
    window = Window.from_window_id(info["window_id"])
    reader = TableWindowReader(
        database,
        store,
        f"{database.name}/{SOURCE}",
        SOURCE,
        staging,
        owner="bench",
        full_collection_factor=1 if process_gc else FULL_COLLECTION_FACTOR,
    )
    started = time.perf_counter()
    summary = reader.read(window)
    seconds = time.perf_counter() - started
    conn.send({"rows": summary.rows, "seconds": seconds, **usage()})


def _hook(host: str, info: dict, workdir: str, run_dir: str, process_gc: bool, conn: Any) -> None:
    """Child: as :func:`_provider`, through SpannerTableHook (Airflow loaded, the hook's own client)."""
    import logging

    os.environ["AIRFLOW_CONN_CDC_METASTORE_DEFAULT"] = json.dumps(
        {"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": f"sqlite:///{workdir}/metastore.db"}}
    )
    logging.getLogger("airflow").setLevel(logging.WARNING)
    from airflow_provider_cdc.core.window import Window
    from airflow_provider_cdc.sources.spanner.table_hook import SpannerTableHook

    if process_gc:  # the hook builds its reader with the default factor
        from airflow_provider_cdc.sources.spanner import table_reader

        table_reader.fewer_full_collections = lambda factor: contextlib.nullcontext()  # type: ignore[assignment]
    os.environ["SPANNER_EMULATOR_HOST"] = host
    _, staging = _prepare_run(host, info, workdir, run_dir)
    hook = SpannerTableHook(project_id=PROJECT, instance_id=INSTANCE, database_id=DATABASE, source=SOURCE)
    _ = (hook.metastore, hook.database)  # connect before timing, as the raw side does
    started = time.perf_counter()
    summary = hook.read_window(Window.from_window_id(info["window_id"]), staging, "bench")
    seconds = time.perf_counter() - started
    conn.send({"rows": summary.rows, "seconds": seconds, **usage()})


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100000,400000", help="table rows, comma-separated")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each side per size (medians kept)")
    parser.add_argument("--emulator", choices=("google", "project"), default="google")
    parser.add_argument("--max-partitions", type=int, default=None, help="PartitionQuery hint")
    parser.add_argument("--hook", action="store_true", help="read through SpannerTableHook")
    parser.add_argument(
        "--process-gc", action="store_true", help="the provider keeps the garbage collector's thresholds"
    )
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    sizes = [int(s) for s in args.sizes.split(",")]
    provider_target = _hook if args.hook else _provider
    results = []
    for size in sizes:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        server = context.Process(target=_serve, args=(args.emulator, size, child))
        server.start()
        print(f"[{size:,} rows] loading the {args.emulator} emulator ...", file=sys.stderr, flush=True)
        served = parent.recv()
        with tempfile.TemporaryDirectory() as workdir:
            info = in_child(_plan, served["host"], served["first"], workdir, args.max_partitions)
            raw_runs: list[dict] = []
            our_runs: list[dict] = []
            for attempt in range(args.repeat):
                # alternate which side goes first, so that drift on a shared machine hits both alike
                order = ("raw", "provider") if attempt % 2 == 0 else ("provider", "raw")
                for side in order:
                    if side == "raw":
                        run = in_child(_raw, served["host"], info["plan"])
                        raw_runs.append(run)
                    else:
                        with tempfile.TemporaryDirectory(dir=workdir) as run_dir:
                            run = in_child(
                                provider_target, served["host"], info, workdir, run_dir, args.process_gc
                            )
                        our_runs.append(run)
                    print(
                        f"[{size:,} rows] {side:>8} run {attempt + 1}: "
                        f"{run['rows'] / run['seconds']:,.0f} rows/s, {run['seconds']:.2f} s, "
                        f"CPU {run['cpu_seconds']:.2f} s, peak RSS {run['max_rss_mb']:.0f} MB",
                        file=sys.stderr,
                        flush=True,
                    )
        parent.send("stop")
        server.join(60)
        for run in raw_runs + our_runs:
            if run["rows"] != size:
                print(f"MISMATCH: a run of the {size:,}-row table saw {run['rows']} rows")
                return 1
        results.append((size, info["batches"], raw_runs, our_runs))
    side = "hook" if args.hook else "provider"
    print(
        f"snapshot of one table ({args.emulator} emulator"
        f"{', provider with the process GC thresholds' if args.process_gc else ''}): "
        f"medians of {args.repeat} interleaved runs "
        "per side, "
        "each in a fresh process (spread min-max)"
    )
    print(
        f"{'rows':>10} {'batches':>7} {'raw rows/s':>24} {side + ' rows/s':>24} {'ratio':>6} "
        f"{'raw RSS MB':>14} {side + ' RSS MB':>14} {'CPU s raw/' + side:>18}"
    )
    for size, batches, raw_runs, our_runs in results:
        raw_rates = [run["rows"] / run["seconds"] for run in raw_runs]
        our_rates = [run["rows"] / run["seconds"] for run in our_runs]
        cpu = (
            f"{statistics.median(r['cpu_seconds'] for r in raw_runs):.1f}/"
            f"{statistics.median(r['cpu_seconds'] for r in our_runs):.1f}"
        )
        print(
            f"{size:>10,} {batches:>7} {spread(raw_rates):>24} {spread(our_rates):>24} "
            f"{statistics.median(our_rates) / statistics.median(raw_rates):>6.2f} "
            f"{spread([r['max_rss_mb'] for r in raw_runs]):>14} "
            f"{spread([r['max_rss_mb'] for r in our_runs]):>14} "
            f"{cpu:>18}"
        )
    if len(results) > 1:
        first = statistics.median(run["max_rss_mb"] for run in results[0][3])
        last = statistics.median(run["max_rss_mb"] for run in results[-1][3])
        print(f"{side} peak RSS growth {results[0][0]:,} -> {results[-1][0]:,} rows: {last / first:.2f}x")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
