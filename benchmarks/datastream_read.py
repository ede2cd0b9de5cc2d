"""Datastream read throughput and memory: the source against a plain read of the same files, same run.

    .venv/bin/python benchmarks/datastream_read.py                      # 100k and 1M events, 5 repeats
    .venv/bin/python benchmarks/datastream_read.py --sizes 100000,1000000 --repeat 3
    .venv/bin/python benchmarks/datastream_read.py --sizes 20000 --repeat 1 --formats jsonl  # quick

For each size and file format (avro, jsonl, jsonl.gz) a seeded Datastream scenario
(``airflow_provider_cdc.testing.datastream``, ``--database``, default mysql) writes one window of about
that many events to a local folder, once. Then plain and source runs alternate, ``--repeat`` times each,
every run in a fresh process so that its peak memory is its own:
  plain  - the floor any reader pays: a ``fastavro.reader`` loop over the Avro files, a
           ``for line in file: json.loads(line)`` loop over the JSONL (gzip-opened .jsonl.gz) files,
           iterating the values only;
  source - what a task runs: ``DatastreamHook`` over a SQLite metastore opens the window (lists the
           files and records them as units) and ``read_window`` claims each file, turns its events
           into staged change rows (keys, images, sequence numbers, metadata) and writes Parquet staging
           (JSONL parsed columnar by pyarrow's JSON reader, Avro decoded by fastavro).
Printed per size and format: the median events/s of each side with their spread (min-max over the
repeats), the ratio of the medians (goals: source >= 0.7x plain for Avro, >= 0.5x for JSONL), each
side's peak RSS (the largest of the source's processes), and per format the growth of the source's
peak RSS from the first size to the last (goal: flat in window size). The source side runs with each
``--readers`` count (default 1 and 2, the example DAGs' mapped readers): one process opens the window
and the readers, each a process of its own started before the clock, share its files through the
metastore's claims; the plain side is one loop in one process.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from _harness import in_child, spread, usage

FORMATS = ("avro", "jsonl", "jsonl.gz")
SOURCE = "bench_stream"


def _data_files(root: str) -> list[str]:
    """Every Datastream data file under ``root``, by path."""
    found = []
    for folder, _, names in os.walk(root):
        found.extend(
            os.path.join(folder, name) for name in names if name.endswith((".avro", ".jsonl", ".gz"))
        )
    return sorted(found)


def _write(database: str, file_format: str, size: int, folder: str) -> dict[str, Any]:
    """Write one window of a seeded scenario under ``folder``; its window, settings and event count."""
    from airflow_provider_cdc.testing.datastream.scenario import DatastreamScenario
    from airflow_provider_cdc.testing.datastream.writer import LocalFolderSink

    scenario = DatastreamScenario(database, file_format, seed=11, windows=1, events_per_window=size)
    written = scenario.write_window(0, LocalFolderSink(folder))
    start, end = scenario.windows[0]
    return {
        "start": start.isoformat(),
        "end": end.isoformat(),
        "settings": {} if file_format == "avro" else {"column_types": scenario.jsonl_column_types()},
        "files": len(written),
        "events": sum(len(planned.events) for planned in scenario.files_for(0)),
    }


def _plain(folder: str, conn: Any) -> None:
    """Child: a plain decode loop over the window's files, iterating values only."""
    import fastavro

    files = _data_files(folder)
    loads = json.loads
    started = time.perf_counter()
    events = 0
    for path in files:
        if path.endswith(".avro"):
            with open(path, "rb") as stream:
                for _ in fastavro.reader(stream):
                    events += 1
        else:
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rb") as stream:
                for line in stream:
                    loads(line)
                    events += 1
    seconds = time.perf_counter() - started
    conn.send({"events": events, "seconds": seconds, **usage()})


def _hook(folder: str, info: dict[str, Any], workdir: str) -> Any:
    """A task's hook over the benchmark's SQLite metastore (Airflow loaded, as in a task)."""
    os.environ["AIRFLOW_CONN_CDC_METASTORE_DEFAULT"] = json.dumps(
        {"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": f"sqlite:///{workdir}/metastore.db"}}
    )
    # the task's per-file progress lines go to standard output: keep them out of the table
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    from airflow_provider_cdc.sources.datastream.hook import DatastreamHook

    end = datetime.fromisoformat(info["end"])
    hook = DatastreamHook(folder, SOURCE, settings=info["settings"], clock=lambda: end + timedelta(hours=1))
    _ = hook.metastore  # connect (and create the schema) before timing, as the plain side opens nothing
    return hook


def _window(info: dict[str, Any]) -> Any:
    from airflow_provider_cdc.core.window import Window

    return Window(datetime.fromisoformat(info["start"]), datetime.fromisoformat(info["end"]))


def _reader(
    folder: str, info: dict[str, Any], workdir: str, owner: str, ready: Any, go: Any, conn: Any
) -> None:
    """Child: one mapped reader of the window (another process opened it), started by ``go``."""
    hook = _hook(folder, info, workdir)
    ready.set()
    go.wait()
    summary = hook.read_window(_window(info), f"{workdir}/staging", owner)
    conn.send({"events": summary.rows, **usage()})


def _source(folder: str, info: dict[str, Any], workdir: str, readers: int, conn: Any) -> None:
    """Child: ``DatastreamHook`` opens the window and ``readers`` readers (this process, and the others
    in processes of their own, as mapped reader tasks run) read it into Parquet staging."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    go = context.Event()
    others = []
    for index in range(1, readers):
        ready, (parent, child) = context.Event(), context.Pipe()
        process = context.Process(
            target=_reader, args=(folder, info, workdir, f"bench-reader-{index}", ready, go, child)
        )
        process.start()
        others.append((process, parent, ready))
    hook = _hook(folder, info, workdir)
    for _, _, ready in others:
        ready.wait()
    window = _window(info)
    staging = f"{workdir}/staging"
    started = time.perf_counter()
    hook.open_window("bench", window, staging, "bench-reader-0")
    go.set()
    summary = hook.read_window(window, staging, "bench-reader-0")
    results = [parent.recv() for _, parent, _ in others]
    seconds = time.perf_counter() - started
    for process, _, _ in others:
        process.join(60)
    own = usage()
    rss = max([own["max_rss_mb"], *[r["max_rss_mb"] for r in results]])
    cpu = own["cpu_seconds"] + sum(r["cpu_seconds"] for r in results)
    events = summary.rows + sum(r["events"] for r in results)
    conn.send({"events": events, "seconds": seconds, "max_rss_mb": rss, "cpu_seconds": cpu})


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100000,1000000", help="events per window, comma-separated")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each side per size and format")
    parser.add_argument("--database", default="mysql", choices=("mysql", "oracle", "postgresql", "sqlserver"))
    parser.add_argument("--formats", default=",".join(FORMATS), help="file formats, comma-separated")
    parser.add_argument(
        "--readers",
        default="1,2",
        help="reader processes of the source side, comma-separated (the example DAGs map 2)",
    )
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    sizes = [int(s) for s in args.sizes.split(",")]
    reader_counts = [int(r) for r in args.readers.split(",") if r]
    if not reader_counts or min(reader_counts) < 1:
        parser.error("--readers must be positive integers")
    formats = [f for f in args.formats.split(",") if f]
    if unknown := sorted(set(formats) - set(FORMATS)):
        parser.error(f"unknown format(s) {unknown}; expected {', '.join(FORMATS)}")
    results: dict[tuple[int, str, int], tuple[dict[str, Any], list[dict], list[dict]]] = {}
    root = tempfile.mkdtemp(prefix="datastream-read-")
    try:
        for size in sizes:
            for file_format in formats:
                label = f"[{size:,} events, {file_format}]"
                folder = os.path.join(root, f"{file_format}-{size}")
                print(f"{label} writing the window's files ...", file=sys.stderr, flush=True)
                info = in_child(_in_child_write, args.database, file_format, size, folder)
                plain_runs: list[dict] = []
                source_runs: dict[int, list[dict]] = {readers: [] for readers in reader_counts}
                for attempt in range(args.repeat):
                    # alternate which side goes first, so that drift on a shared machine hits both alike
                    sides = ["plain", *reader_counts]
                    order = sides if attempt % 2 == 0 else sides[::-1]
                    for side in order:
                        if side == "plain":
                            run = in_child(_plain, folder)
                            plain_runs.append(run)
                            name = "plain"
                        else:
                            with tempfile.TemporaryDirectory(dir=root) as workdir:
                                run = in_child(_source, folder, info, workdir, side)
                            source_runs[side].append(run)
                            name = f"source x{side}"
                        print(
                            f"{label} {name:>9} run {attempt + 1}: {run['events'] / run['seconds']:,.0f} "
                            f"events/s, {run['seconds']:.2f} s, CPU {run['cpu_seconds']:.2f} s, "
                            f"peak RSS {run['max_rss_mb']:.0f} MB",
                            file=sys.stderr,
                            flush=True,
                        )
                for run in plain_runs + [run for runs in source_runs.values() for run in runs]:
                    if run["events"] != info["events"]:
                        print(f"MISMATCH {label}: a run saw {run['events']} events of {info['events']}")
                        return 1
                for readers, runs in source_runs.items():
                    results[(size, file_format, readers)] = (info, plain_runs, runs)
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"read a Datastream window ({args.database}): medians of {args.repeat} interleaved runs per side, "
        "each in a fresh process (spread min-max)"
    )
    print(
        f"{'events':>10} {'format':>8} {'files':>5} {'readers':>7} {'plain events/s':>27} "
        f"{'source events/s':>27} {'ratio':>6} {'plain RSS MB':>14} {'source RSS MB':>14}"
    )
    for (_, file_format, readers), (info, plain_runs, source_runs) in results.items():
        plain_rates = [run["events"] / run["seconds"] for run in plain_runs]
        source_rates = [run["events"] / run["seconds"] for run in source_runs]
        print(
            f"{info['events']:>10,} {file_format:>8} {info['files']:>5} {readers:>7} "
            f"{spread(plain_rates):>27} {spread(source_rates):>27} "
            f"{statistics.median(source_rates) / statistics.median(plain_rates):>6.2f} "
            f"{spread([run['max_rss_mb'] for run in plain_runs]):>14} "
            f"{spread([run['max_rss_mb'] for run in source_runs]):>14}"
        )
    if len(sizes) > 1:
        for file_format in formats:
            one = min(reader_counts)
            first = statistics.median(run["max_rss_mb"] for run in results[(sizes[0], file_format, one)][2])
            last = statistics.median(run["max_rss_mb"] for run in results[(sizes[-1], file_format, one)][2])
            print(
                f"source peak RSS growth {sizes[0]:,} -> {sizes[-1]:,} events ({file_format}): "
                f"{last / first:.2f}x"
            )
    return 0


def _in_child_write(database: str, file_format: str, size: int, folder: str, conn: Any) -> None:
    """Child: :func:`_write`, so that planning a large scenario does not grow the parent."""
    conn.send(_write(database, file_format, size, folder))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
