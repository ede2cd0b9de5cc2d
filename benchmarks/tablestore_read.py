"""Table Store read throughput and memory: the source against the plain client draining the same shards.

    .venv/bin/python benchmarks/tablestore_read.py                          # 20k and 100k records, 3 repeats
    .venv/bin/python benchmarks/tablestore_read.py --sizes 5000,20000 --repeat 1   # a quick look

For each size an emulator process (``airflow_provider_cdc.testing.tablestore_emulator``, 4 shards) is
loaded once with one window ``[start, end)`` of that many records on the table ``orders``: full puts,
partial updates (columns set and deleted) and deletes, with a shard split half-way so that lineage is
walked; its clock then stands 10 minutes past ``end``. Plain and source runs alternate, ``--repeat``
times each, every run in a fresh process so that its peak memory is its own:
  plain  - the floor any reader pays: ``TablestoreStreamClient`` describes the stream and drains every
           shard from ``start`` with ``GetStreamRecord`` (records decoded by the client), counting the
           records written before ``end``;
  source - what a task runs: ``TablestoreStreamHook`` over a SQLite metastore opens the window (shards
           and lineage recorded as units) and ``read_window`` claims each shard, turns its records into
           staged change rows (keys, images, sequence numbers, checkpoints) and writes Parquet staging.
Both sides use the same client over the same HTTP endpoint and ask for ``--batch-limit`` records per
call. Printed per size: the median records/s of each side with their spread (min-max over the repeats),
the ratio of the medians (goal: source >= 0.8x plain), each side's peak RSS, and the growth of the
source's peak RSS from the first size to the last (goal: flat in window size).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from _harness import in_child, spread, usage

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
WINDOW_SECONDS = 60
SETTLED = timedelta(minutes=10)
SHARDS = 4
KEY_ID, KEY_SECRET = "test-key", "test-secret"


def _load(emulator: Any, size: int, end_us: int) -> None:
    """Write ``size`` records spread over the window ending at ``end_us``: puts of new keys, partial
    updates and deletes of live keys, and a split of the first shard half-way."""
    from airflow_provider_cdc.testing.tablestore_emulator.workload import TABLE

    rng = random.Random(f"tablestore-read:{size}")
    start_us = emulator.clock()
    live: list[dict[str, Any]] = []
    regions = ("amer", "emea", "apac")
    statuses = ("new", "paid", "shipped", "returned")
    for change in range(size):
        at_us = start_us + (change + 1) * (end_us - start_us) // (size + 1)  # inside (start, end)
        emulator.clock.advance((at_us - emulator.clock()) / 1_000_000)
        roll = rng.random()
        columns = {
            "amount": round(rng.uniform(1, 5000), 2),
            "quantity": rng.randint(1, 40),
            "status": rng.choice(statuses),
            "paid": roll < 0.5,
            "note": f"note {change}",
        }
        if not live or roll < 0.5:
            key = {"region": rng.choice(regions), "order_id": change}
            emulator.put_row(TABLE, key, columns)
            live.append(key)
        elif roll < 0.9:
            put = {name: columns[name] for name in ("amount", "status")}
            emulator.update_row(TABLE, rng.choice(live), put=put, delete_all=["note"] if roll < 0.6 else [])
        else:
            position = rng.randrange(len(live))
            live[position], live[-1] = live[-1], live[position]
            emulator.delete_row(TABLE, live.pop())
        if change == size // 2:
            shard = next(s for s in emulator.shards(TABLE) if not s.get("closed"))
            emulator.split_shard(TABLE, shard["shard_id"])
    emulator.clock.advance(max(end_us - emulator.clock(), 0) / 1_000_000)


def _serve(size: int, conn: Any) -> None:
    """Child: the emulator loaded with one window; reports it, then serves until told to stop."""
    from airflow_provider_cdc.core.timestamps import to_micros
    from airflow_provider_cdc.testing.tablestore_emulator import ManualClock, TablestoreEmulator
    from airflow_provider_cdc.testing.tablestore_emulator.workload import PRIMARY_KEY, TABLE

    end = START + timedelta(seconds=WINDOW_SECONDS)
    emulator = TablestoreEmulator(ManualClock(to_micros(START) - 1_000_000), shards=SHARDS, seed=3)
    emulator.create_table(TABLE, PRIMARY_KEY, expiration_hours=24)
    emulator.clock.advance((to_micros(START) - emulator.clock()) / 1_000_000)  # to the window's start
    _load(emulator, size, to_micros(end))
    emulator.clock.advance(SETTLED.total_seconds())
    shards = emulator.shards(TABLE)
    emulator.start()
    conn.send(
        {
            "endpoint": emulator.endpoint,
            "instance": emulator.instance,
            "start": START.isoformat(),
            "end": end.isoformat(),
            "shards": len(shards),
        }
    )
    conn.recv()  # stop
    emulator.stop()


def _client(info: dict[str, Any]) -> Any:
    """The stream client both sides use, its clock at the emulator's (stopped) time."""
    from airflow_provider_cdc.sources.tablestore.client import TablestoreStreamClient

    now = datetime.fromisoformat(info["end"]) + SETTLED
    return TablestoreStreamClient(info["endpoint"], info["instance"], KEY_ID, KEY_SECRET, clock=lambda: now)


def _plain(info: dict[str, Any], batch_limit: int, conn: Any) -> None:
    """Child: the client drains every shard from the window's start, counting records before its end."""
    from airflow_provider_cdc.core.timestamps import to_micros
    from airflow_provider_cdc.testing.tablestore_emulator.workload import TABLE

    client = _client(info)
    stream_id = max(client.list_streams(TABLE), key=lambda s: s.creation_time_us).stream_id
    start_us = to_micros(datetime.fromisoformat(info["start"]))
    end_us = to_micros(datetime.fromisoformat(info["end"]))
    started = time.perf_counter()
    records = 0
    for shard in client.describe_stream(stream_id).shards:
        iterator = client.get_shard_iterator(stream_id, shard.shard_id, timestamp_us=start_us)
        while iterator is not None:
            batch = client.get_stream_records(iterator, limit=batch_limit)
            if not batch.records:
                break
            for record in batch.records:
                if record.sequence.timestamp_us < end_us:
                    records += 1
            iterator = batch.next_iterator
    seconds = time.perf_counter() - started
    conn.send({"records": records, "seconds": seconds, **usage()})


def _source(info: dict[str, Any], batch_limit: int, workdir: str, conn: Any) -> None:
    """Child: ``TablestoreStreamHook`` opens the window and reads it into Parquet staging."""
    os.environ["AIRFLOW_CONN_CDC_METASTORE_DEFAULT"] = json.dumps(
        {"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": f"sqlite:///{workdir}/metastore.db"}}
    )
    # the task's per-shard progress lines go to standard output: keep them out of the table
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    from airflow_provider_cdc.core.window import Window
    from airflow_provider_cdc.sources.tablestore.hook import TablestoreStreamHook
    from airflow_provider_cdc.testing.tablestore_emulator.workload import COLUMN_TYPES, TABLE

    window = Window(datetime.fromisoformat(info["start"]), datetime.fromisoformat(info["end"]))
    now = window.end + SETTLED
    hook = TablestoreStreamHook(
        TABLE, client=_client(info), clock=lambda: now, column_types=COLUMN_TYPES, batch_limit=batch_limit
    )
    _ = (hook.metastore, hook.stream_id)  # connect and find the stream before timing, as the plain side
    staging = f"{workdir}/staging"
    started = time.perf_counter()
    hook.open_window("bench", window, staging, "bench-reader")
    summary = hook.read_window(window, staging, "bench-reader")
    seconds = time.perf_counter() - started
    conn.send({"records": summary.rows, "seconds": seconds, **usage()})


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="20000,100000", help="records per window, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side per size (medians kept)")
    parser.add_argument(
        "--batch-limit", type=int, default=100, help="records per GetStreamRecord call (the source's default)"
    )
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.batch_limit < 1:
        parser.error("--batch-limit must be at least 1")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if not sizes or min(sizes) < 1:
        parser.error("--sizes must be positive integers")
    results = []
    for size in sizes:
        label = f"[{size:,} records]"
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        server = context.Process(target=_serve, args=(size, child))
        server.start()
        print(f"{label} loading the emulator ...", file=sys.stderr, flush=True)
        if not parent.poll(3600):
            server.terminate()
            print(f"{label}: the emulator did not report its window within an hour", file=sys.stderr)
            return 1
        info = parent.recv()
        plain_runs: list[dict] = []
        source_runs: list[dict] = []
        try:
            for attempt in range(args.repeat):
                # alternate which side goes first, so that drift on a shared machine hits both alike
                order = ("plain", "source") if attempt % 2 == 0 else ("source", "plain")
                for side in order:
                    if side == "plain":
                        run = in_child(_plain, info, args.batch_limit)
                        plain_runs.append(run)
                    else:
                        with tempfile.TemporaryDirectory(prefix="tablestore-read-") as workdir:
                            run = in_child(_source, info, args.batch_limit, workdir)
                        source_runs.append(run)
                    print(
                        f"{label} {side:>6} run {attempt + 1}: {run['records'] / run['seconds']:,.0f} "
                        f"records/s, {run['seconds']:.2f} s, CPU {run['cpu_seconds']:.2f} s, "
                        f"peak RSS {run['max_rss_mb']:.0f} MB",
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            parent.send("stop")
            server.join(60)
        for run in plain_runs + source_runs:
            if run["records"] != size:
                sides = ", ".join(
                    f"{name} {run['records']:,}"
                    for name, runs in (("plain", plain_runs), ("source", source_runs))
                    for run in runs
                )
                print(f"MISMATCH {label}: runs saw {sides} records of {size:,} written")
                return 1
        results.append((size, info, plain_runs, source_runs))
    print(
        f"read a Table Store window ({SHARDS} shards, one split; {args.batch_limit} records per call): "
        f"medians of {args.repeat} interleaved runs per side, each in a fresh process (spread min-max)"
    )
    print(
        f"{'records':>10} {'shards':>6} {'plain records/s':>27} {'source records/s':>27} {'ratio':>6} "
        f"{'plain RSS MB':>14} {'source RSS MB':>14}"
    )
    for size, info, plain_runs, source_runs in results:
        plain_rates = [run["records"] / run["seconds"] for run in plain_runs]
        source_rates = [run["records"] / run["seconds"] for run in source_runs]
        print(
            f"{size:>10,} {info['shards']:>6} {spread(plain_rates):>27} {spread(source_rates):>27} "
            f"{statistics.median(source_rates) / statistics.median(plain_rates):>6.2f} "
            f"{spread([run['max_rss_mb'] for run in plain_runs]):>14} "
            f"{spread([run['max_rss_mb'] for run in source_runs]):>14}"
        )
    if len(results) > 1:
        first = statistics.median(run["max_rss_mb"] for run in results[0][3])
        last = statistics.median(run["max_rss_mb"] for run in results[-1][3])
        print(f"source peak RSS growth {results[0][0]:,} -> {results[-1][0]:,} records: {last / first:.2f}x")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
