"""Read-window throughput and memory: the provider's reader against the raw client, same queries, same run.

    .venv/bin/python benchmarks/read_window.py                 # windows of 100k and 1M changes
    .venv/bin/python benchmarks/read_window.py --sizes 20000   # a quick look

For each size an emulator process is loaded with a bulk workload (one window, partitions splitting and
merging inside it). Then, each in a fresh process so that peak memory is its own:
  raw  - the google-cloud-spanner client runs the same change-stream queries in lineage order and only
         iterates the rows (the floor any reader pays);
  ours - SpannerChangeStreamHook.read_window: records parsed, staged to Parquet, lineage and progress
         in a SQLite metastore.
Printed: change rows/s of each, their ratio (goal >= 0.9), and peak RSS of each (goal: flat in size).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

STREAM = "WorkloadChanges"
PROJECT, INSTANCE, DATABASE = "bench-project", "bench-instance", "bench"


def _serve(size: int, rows_per_commit: int, conn: Any) -> None:
    """Child: emulator + bulk workload inside one window; reports the window, then serves until told."""
    from google.cloud.spanner_v1 import Client

    from airflow_provider_cdc.testing.spanner_emulator import ManualClock, SpannerEmulator
    from airflow_provider_cdc.testing.workload import BulkWorkload, schema_ddl

    emulator = SpannerEmulator(
        ManualClock(datetime(2026, 1, 1, tzinfo=timezone.utc)), seed=3, initial_partitions=4
    )
    emulator.start()
    os.environ["SPANNER_EMULATOR_HOST"] = emulator.host
    client = Client(project=PROJECT, disable_builtin_metrics=True)
    instance = client.instance(
        INSTANCE, configuration_name=f"projects/{PROJECT}/instanceConfigs/emulator", node_count=1
    )
    instance.create().result(30)
    database = instance.database(DATABASE, ddl_statements=schema_ddl())
    database.create().result(30)
    begin = emulator.clock.advance(timedelta(seconds=1))
    workload = BulkWorkload(database, emulator, seed=5, progress_every=10**9)
    commits = max(size // rows_per_commit, 1)
    workload.run(
        changes=size,
        rows_per_commit=rows_per_commit,
        step=timedelta(milliseconds=10),
        split_every=max(size // 4, 1),
        merge_every=max(size // 3, 1),
    )
    end = emulator.clock.advance(timedelta(seconds=1))
    conn.send({"host": emulator.host, "start": begin.isoformat(), "end": end.isoformat(), "commits": commits})
    conn.recv()  # stop
    emulator.stop()


def _raw(host: str, start: str, end: str, conn: Any) -> None:
    """Child: the raw client walks the window's partitions in lineage order, iterating rows only."""
    os.environ["SPANNER_EMULATOR_HOST"] = host
    from google.cloud.spanner_v1 import Client, param_types

    from airflow_provider_cdc.domain.timestamps import ONE_MICROSECOND, coerce_timestamp

    database = Client(project=PROJECT, disable_builtin_metrics=True).instance(INSTANCE).database(DATABASE)
    sql = (
        f"SELECT ChangeRecord FROM READ_{STREAM}(start_timestamp => @s, end_timestamp => @e, "  # noqa: S608
        "partition_token => @t, heartbeat_milliseconds => @h)"
    )
    types = {
        "s": param_types.TIMESTAMP,
        "e": param_types.TIMESTAMP,
        "t": param_types.STRING,
        "h": param_types.INT64,
    }
    window_start, query_end = coerce_timestamp(start), coerce_timestamp(end) - ONE_MICROSECOND
    started = time.perf_counter()
    queue: list[tuple[str | None, datetime]] = [(None, window_start)]
    seen: set[str] = set()
    mods = 0
    while queue:
        token, at = queue.pop(0)
        with database.snapshot() as snapshot:
            rows = snapshot.execute_sql(
                sql, params={"s": at, "e": query_end, "t": token, "h": 10_000}, param_types=types
            )
            for row in rows:
                record = row[0][0]
                if record[0]:
                    mods += len(record[0][0][6])
                elif record[2]:
                    child_start = record[2][0][0]
                    for child in record[2][0][2]:
                        if child[0] not in seen:
                            seen.add(child[0])
                            queue.append((child[0], child_start))
    seconds = time.perf_counter() - started
    conn.send(
        {
            "rows": mods,
            "seconds": seconds,
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
    )


def _ours(host: str, start: str, end: str, workdir: str, conn: Any) -> None:
    """Child: the provider's hook reads the window into Parquet staging with a SQLite metastore."""
    os.environ["SPANNER_EMULATOR_HOST"] = host
    os.environ["AIRFLOW_CONN_CDC_METASTORE_DEFAULT"] = json.dumps(
        {"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": f"sqlite:///{workdir}/metastore.db"}}
    )
    import logging

    logging.getLogger("airflow").setLevel(logging.WARNING)
    from airflow_provider_cdc.domain.timestamps import coerce_timestamp
    from airflow_provider_cdc.domain.window import Window
    from airflow_provider_cdc.hooks.spanner_change_stream import SpannerChangeStreamHook

    hook = SpannerChangeStreamHook(
        project_id=PROJECT, instance_id=INSTANCE, database_id=DATABASE, stream=STREAM
    )
    window = Window(coerce_timestamp(start), coerce_timestamp(end))
    staging = f"{workdir}/staging"
    _ = (hook.metastore, hook.database)  # connect before timing, as the raw reader does
    started = time.perf_counter()
    hook.open_window("bench", window, staging, "bench-reader")
    summary = hook.read_window(window, staging, "bench-reader")
    seconds = time.perf_counter() - started
    conn.send(
        {
            "rows": summary.rows,
            "seconds": seconds,
            "partitions": len(summary.spans),
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
    )


def _in_child(target: Any, *args: Any) -> dict:
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=target, args=(*args, child))
    process.start()
    result = parent.recv()
    process.join(60)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100000,1000000", help="changes per window, comma-separated")
    parser.add_argument("--rows-per-commit", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=2, help="measurements per size (best is kept)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = []
    for size in sizes:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        server = context.Process(target=_serve, args=(size, args.rows_per_commit, child))
        server.start()
        print(f"[{size:,} changes] loading the emulator ...", file=sys.stderr, flush=True)
        info = parent.recv()
        raw_runs, our_runs = [], []
        for _ in range(args.repeat):
            raw_runs.append(_in_child(_raw, info["host"], info["start"], info["end"]))
            with tempfile.TemporaryDirectory() as workdir:
                our_runs.append(_in_child(_ours, info["host"], info["start"], info["end"], workdir))
        parent.send("stop")
        server.join(60)
        raw = min(raw_runs, key=lambda r: r["seconds"])
        ours = min(our_runs, key=lambda r: r["seconds"])
        if raw["rows"] != ours["rows"]:
            print(f"MISMATCH: raw iterated {raw['rows']} change rows, the reader staged {ours['rows']}")
            return 1
        results.append((size, raw, ours))
    print(
        f"{'changes':>10} {'raw rows/s':>12} {'ours rows/s':>12} {'ratio':>6} "
        f"{'raw RSS MB':>11} {'ours RSS MB':>12}"
    )
    for size, raw, ours in results:
        raw_rate, our_rate = raw["rows"] / raw["seconds"], ours["rows"] / ours["seconds"]
        print(
            f"{size:>10,} {raw_rate:>12,.0f} {our_rate:>12,.0f} {our_rate / raw_rate:>6.2f} "
            f"{raw['max_rss_mb']:>11.0f} {ours['max_rss_mb']:>12.0f}"
        )
    if len(results) > 1:
        first, last = results[0][2]["max_rss_mb"], results[-1][2]["max_rss_mb"]
        print(f"reader peak RSS growth {results[0][0]:,} -> {results[-1][0]:,} changes: {last / first:.2f}x")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
