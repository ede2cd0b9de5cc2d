"""Read-window throughput and memory: the provider's reader against the transport floor and the raw client.

    .venv/bin/python benchmarks/read_window.py                            # 100k and 1M changes, 5 repeats
    .venv/bin/python benchmarks/read_window.py --sizes 20000 --repeat 3   # a quick look
    .venv/bin/python benchmarks/read_window.py --sizes 100000 --repeat 1 --profile   # where it goes

For each size an emulator process is loaded with a bulk workload (one window, partitions splitting and
merging inside it). Then the four sides take turns (the first side rotating from repeat to repeat),
``--repeat`` times each, every run in a fresh process so that its peak memory is its own; every side
runs the same change-stream queries, walking the partition lineage (child partitions) in order:
  floor  - the transport floor: the google-cloud-spanner client with ``lazy_decode=True``; a data
           change record's mods are only counted, only child-partitions records are decoded (the
           least any reader pays);
  fields - the floor plus reading every value a staged row is made of (the record's fields, its
           column types, each mod's keys and images) from the undecoded protobuf values, with no
           JSON parsing and no staging: what any reader that stages every field pays at least;
  raw    - the client decoding every value (``lazy_decode=False``) and iterating the rows;
  reader - the provider's WindowReader (what SpannerChangeStreamHook.read_window runs in a task):
           the window opened in a SQLite metastore, partitions claimed with leases in lineage order,
           records decoded and validated, staged to Parquet, watermarks and lineage recorded, progress
           logged. All sides build the Spanner client the same way. ``--hook`` reads through
           SpannerChangeStreamHook instead, which also loads Airflow into the reader's process.
Printed per size: the median of each side's change rows/s and peak RSS with their spread (min-max over
the repeats), the ratios of the medians (goals: reader rows/s >= 0.33x the floor's and >= 1.0x raw,
reader peak RSS <= 2x raw; fields/floor is the bound on reader/floor that reading the values from
protobuf sets), each process's CPU seconds (imports included), and the growth of the reader's peak
RSS from the first size to the last (goal: flat in window size). ``--profile`` also reads each window
once more with the reader under ``cProfile`` and prints its functions by own time (the read only).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from _harness import in_child, spread, usage

STREAM = "WorkloadChanges"
PROJECT, INSTANCE, DATABASE = "bench-project", "bench-instance", "bench"
_SQL = (
    f"SELECT ChangeRecord FROM READ_{STREAM}(start_timestamp => @s, end_timestamp => @e, "  # noqa: S608
    "partition_token => @t, heartbeat_milliseconds => @h)"
)


#: The measured sides, in the order of the first repeat (later repeats rotate it).
SIDES = ("floor", "fields", "raw", "reader")
#: The reader's throughput goal as a fraction of the transport floor's.
FLOOR_GOAL = 0.33


def _param_types() -> dict[str, Any]:
    """The query's parameter types (the client is imported in the measured processes only)."""
    from google.cloud.spanner_v1 import param_types

    return {
        "s": param_types.TIMESTAMP,
        "e": param_types.TIMESTAMP,
        "t": param_types.STRING,
        "h": param_types.INT64,
    }


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
    from google.cloud.spanner_v1 import Client

    from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, coerce_timestamp

    database = Client(project=PROJECT, disable_builtin_metrics=True).instance(INSTANCE).database(DATABASE)
    sql, types = _SQL, _param_types()
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
    conn.send({"rows": mods, "seconds": seconds, **usage()})


def _floor(host: str, start: str, end: str, conn: Any) -> None:
    """Child: the transport floor - the same queries with ``lazy_decode=True``, walking the lineage.

    Rows stay undecoded protobuf values: a data change record's mods are only counted, and only
    child-partitions records are decoded (by the result set's ``decode_row``) to find the children.
    """
    os.environ["SPANNER_EMULATOR_HOST"] = host
    from google.cloud.spanner_v1 import Client

    from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, coerce_timestamp

    database = Client(project=PROJECT, disable_builtin_metrics=True).instance(INSTANCE).database(DATABASE)
    window_start, query_end = coerce_timestamp(start), coerce_timestamp(end) - ONE_MICROSECOND
    started = time.perf_counter()
    queue: list[tuple[str | None, datetime]] = [(None, window_start)]
    seen: set[str] = set()
    mods = 0
    while queue:
        token, at = queue.pop(0)
        with database.snapshot() as snapshot:
            rows = snapshot.execute_sql(
                _SQL,
                params={"s": at, "e": query_end, "t": token, "h": 10_000},
                param_types=_param_types(),
                lazy_decode=True,
            )
            for row in rows:
                record = row[0].list_value.values[0].list_value.values
                data = record[0].list_value.values
                if data:
                    mods += len(data[0].list_value.values[6].list_value.values)
                elif record[2].list_value.values:
                    child_start, _, children = rows.decode_row(row)[0][0][2][0]
                    for child in children:
                        if child[0] not in seen:
                            seen.add(child[0])
                            queue.append((child[0], child_start))
    seconds = time.perf_counter() - started
    conn.send({"rows": mods, "seconds": seconds, **usage()})


def _fields(host: str, start: str, end: str, conn: Any) -> None:
    """Child: the floor of a reader that stages every field - as :func:`_floor`, also reading every
    value a staged row is made of from the undecoded protobuf values (no JSON parsing, no staging)."""
    os.environ["SPANNER_EMULATOR_HOST"] = host
    from google.cloud.spanner_v1 import Client

    from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, coerce_timestamp

    database = Client(project=PROJECT, disable_builtin_metrics=True).instance(INSTANCE).database(DATABASE)
    window_start, query_end = coerce_timestamp(start), coerce_timestamp(end) - ONE_MICROSECOND
    started = time.perf_counter()
    queue: list[tuple[str | None, datetime]] = [(None, window_start)]
    seen: set[str] = set()
    mods = 0
    values: list[Any] = []
    while queue:
        token, at = queue.pop(0)
        with database.snapshot() as snapshot:
            rows = snapshot.execute_sql(
                _SQL,
                params={"s": at, "e": query_end, "t": token, "h": 10_000},
                param_types=_param_types(),
                lazy_decode=True,
            )
            for row in rows:
                record = row[0].list_value.values[0].list_value.values
                data = record[0].list_value.values
                if data:
                    f = data[0].list_value.values
                    values[:] = (
                        f[0].string_value, f[1].string_value, f[2].string_value, f[3].bool_value,
                        f[4].string_value, f[5].SerializeToString(), f[7].string_value, f[8].string_value,
                        f[9].string_value, f[10].string_value,
                    )  # fmt: skip
                    for mod in f[6].list_value.values:
                        keys, new, old = mod.list_value.values
                        values[:] = (keys.string_value, new.string_value, old.string_value)
                        mods += 1
                elif record[2].list_value.values:
                    child_start, _, children = rows.decode_row(row)[0][0][2][0]
                    for child in children:
                        if child[0] not in seen:
                            seen.add(child[0])
                            queue.append((child[0], child_start))
    seconds = time.perf_counter() - started
    conn.send({"rows": mods, "seconds": seconds, **usage()})


def _reader(host: str, start: str, end: str, workdir: str, conn: Any) -> None:
    """Child: the provider's window reader reads the window into Parquet staging, SQLite metastore."""
    os.environ["SPANNER_EMULATOR_HOST"] = host
    from google.cloud.spanner_v1 import Client

    from airflow_provider_cdc.core.timestamps import coerce_timestamp
    from airflow_provider_cdc.core.window import Window
    from airflow_provider_cdc.metastore import Metastore
    from airflow_provider_cdc.sources.spanner.change_stream_query import ChangeStreamQuery
    from airflow_provider_cdc.sources.spanner.window_reader import WindowReader

    database = Client(project=PROJECT, disable_builtin_metrics=True).instance(INSTANCE).database(DATABASE)
    store = Metastore(f"sqlite:///{workdir}/metastore.db")
    store.create_schema()
    stream_key = f"{database.name}/{STREAM}"
    staging = f"{workdir}/staging"
    query = ChangeStreamQuery(database, STREAM)
    reader = WindowReader(query, store, stream_key, staging, owner="bench-reader")
    window = Window(coerce_timestamp(start), coerce_timestamp(end))
    started = time.perf_counter()
    # as SpannerChangeStreamHook.open_window and read_window do
    store.open_window("bench", stream_key, window.start, window.end, staging_uri=staging)
    store.reset_window_partitions(stream_key, window.start, window.end)
    reader.prepare(window)
    summary = reader.read(window)
    seconds = time.perf_counter() - started
    conn.send({"rows": summary.rows, "records": summary.data_records, "seconds": seconds, **usage()})


def _profiled_reader(host: str, start: str, end: str, workdir: str, conn: Any) -> None:
    """Child: :func:`_reader` under ``cProfile`` (imports excluded); sends the profile's text."""
    import cProfile
    import io
    import pstats

    class _Result:
        def send(self, value: Any) -> None:
            self.value = value

    for name in (
        "google.cloud.spanner_v1",
        "airflow_provider_cdc.core.window",
        "airflow_provider_cdc.metastore",
        "airflow_provider_cdc.sources.spanner.window_reader",
    ):
        __import__(name)  # imported before the profile starts
    result = _Result()
    profile = cProfile.Profile()
    profile.enable()
    _reader(host, start, end, workdir, result)
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(30)
    conn.send({**result.value, "profile": text.getvalue()})


def _hook(host: str, start: str, end: str, workdir: str, conn: Any) -> None:
    """Child: as :func:`_reader`, through the Airflow hook (Airflow loaded, the hook's own client)."""
    os.environ["SPANNER_EMULATOR_HOST"] = host
    os.environ["AIRFLOW_CONN_CDC_METASTORE_DEFAULT"] = json.dumps(
        {"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": f"sqlite:///{workdir}/metastore.db"}}
    )
    import logging

    logging.getLogger("airflow").setLevel(logging.WARNING)
    from airflow_provider_cdc.core.timestamps import coerce_timestamp
    from airflow_provider_cdc.core.window import Window
    from airflow_provider_cdc.sources.spanner.change_stream_hook import SpannerChangeStreamHook

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
    conn.send({"rows": summary.rows, "records": summary.data_records, "seconds": seconds, **usage()})


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100000,1000000", help="changes per window, comma-separated")
    parser.add_argument("--rows-per-commit", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5, help="runs of each side per size (medians kept)")
    parser.add_argument("--hook", action="store_true", help="read through SpannerChangeStreamHook")
    parser.add_argument(
        "--profile", action="store_true", help="also profile one reader run per size (cProfile)"
    )
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    sizes = [int(s) for s in args.sizes.split(",")]
    reader_target = _hook if args.hook else _reader
    results = []
    for size in sizes:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        server = context.Process(target=_serve, args=(size, args.rows_per_commit, child))
        server.start()
        print(f"[{size:,} changes] loading the emulator ...", file=sys.stderr, flush=True)
        info = parent.recv()
        runs: dict[str, list[dict]] = {side: [] for side in SIDES}
        for attempt in range(args.repeat):
            # rotate which side goes first, so that drift on a shared machine hits every side alike
            shift = attempt % len(SIDES)
            for side in SIDES[shift:] + SIDES[:shift]:
                if side == "reader":
                    with tempfile.TemporaryDirectory() as workdir:
                        run = in_child(reader_target, info["host"], info["start"], info["end"], workdir)
                else:
                    target = {"floor": _floor, "fields": _fields, "raw": _raw}[side]
                    run = in_child(target, info["host"], info["start"], info["end"])
                runs[side].append(run)
                print(
                    f"[{size:,} changes] {side:>6} run {attempt + 1}: {run['rows'] / run['seconds']:,.0f} "
                    f"rows/s, {run['seconds']:.2f} s, CPU {run['cpu_seconds']:.2f} s, "
                    f"peak RSS {run['max_rss_mb']:.0f} MB",
                    file=sys.stderr,
                    flush=True,
                )
        if args.profile:
            with tempfile.TemporaryDirectory() as workdir:
                run = in_child(_profiled_reader, info["host"], info["start"], info["end"], workdir)
            print(f"[{size:,} changes] the reader under cProfile:\n{run['profile']}", file=sys.stderr)
        parent.send("stop")
        server.join(60)
        expected = runs["raw"][0]["rows"]
        for run in (run for side in SIDES for run in runs[side]):
            if run["rows"] != expected:
                print(f"MISMATCH: runs of {size:,} changes saw {run['rows']} and {expected} rows")
                return 1
        results.append((size, runs))
    side = "hook" if args.hook else "reader"
    names = {"floor": "floor", "fields": "fields", "raw": "raw", "reader": side}
    print(
        f"read a window: medians of {args.repeat} interleaved runs per side, each in a fresh process "
        f"(spread min-max); {args.rows_per_commit} changes per commit"
    )
    print(
        f"{'changes':>10} {'records':>8} "
        + " ".join(f"{names[name] + ' rows/s':>24}" for name in SIDES)
        + f" {'fields/floor':>12} {side + '/floor':>12} {side + '/raw':>10} "
        + " ".join(f"{names[name] + ' RSS MB':>14}" for name in SIDES)
        + f" {'RSS/raw':>7} {'CPU s ' + '/'.join(names[name] for name in SIDES):>30}"
    )
    for size, runs in results:
        rates = {name: [run["rows"] / run["seconds"] for run in runs[name]] for name in SIDES}
        rss = {name: [run["max_rss_mb"] for run in runs[name]] for name in SIDES}
        rate = {name: statistics.median(rates[name]) for name in SIDES}
        cpu = "/".join(f"{statistics.median(r['cpu_seconds'] for r in runs[name]):.1f}" for name in SIDES)
        print(
            f"{size:>10,} {runs['reader'][0]['records']:>8,} "
            + " ".join(f"{spread(rates[name]):>24}" for name in SIDES)
            + f" {rate['fields'] / rate['floor']:>12.2f} {rate['reader'] / rate['floor']:>12.2f}"
            + f" {rate['reader'] / rate['raw']:>10.2f} "
            + " ".join(f"{spread(rss[name]):>14}" for name in SIDES)
            + f" {statistics.median(rss['reader']) / statistics.median(rss['raw']):>7.2f} {cpu:>30}"
        )
    print(
        f"goals: {side}/floor >= {FLOOR_GOAL:.2f} (rows/s, ratio of medians), {side}/raw >= 1.0, "
        f"{side} RSS <= 2x raw; fields/floor bounds {side}/floor (every staged value read from protobuf)"
    )
    if len(results) > 1:
        first = statistics.median(run["max_rss_mb"] for run in results[0][1]["reader"])
        last = statistics.median(run["max_rss_mb"] for run in results[-1][1]["reader"])
        print(f"{side} peak RSS growth {results[0][0]:,} -> {results[-1][0]:,} changes: {last / first:.2f}x")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
