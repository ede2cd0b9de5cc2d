"""Benchmark of the merge job: change rows merged per second, and driver memory vs window size.

    .venv/bin/python benchmarks/merge_window.py                    # 0.5M and 2M changes, local[2]
    .venv/bin/python benchmarks/merge_window.py --sizes 200000 --cores 2
    .venv/bin/python benchmarks/merge_window.py --collapse native   # Spark's own operations (Spark 4)

For every size it writes a synthetic staging folder (ARCHITECTURE.md staged rows: several tables,
multi-record transactions, chains of INSERT/UPDATE/DELETE per key, 1% duplicate rows), then runs,
in a fresh process with its own Spark session: baselines and ``merge_window``, ``--repeat`` times
in turn (so load on the machine falls on both; the medians are reported). Baselines: a plain
read + count of the staging, a full scan of all its columns, and a *floor*: the least any key-ordered
merge does in Spark (read the collapse's input columns, shuffle them by key hash into the job's
partitions, sort each key's changes and write them as Parquet; no checks, no collapse). It prints
changes/s, the ratios to the scan and to the floor, and the peak resident memory of the driver (JVM,
Python driver, Python workers).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_provider_cdc.core.timestamps import to_micros  # noqa: E402
from airflow_provider_cdc.sources.spanner.sequence_numbers import spanner_change_sequence_number  # noqa: E402
from airflow_provider_cdc.staging import STAGED_CHANGE_SCHEMA  # noqa: E402

TABLES = ("Orders", "Customers", "Payments")
COLUMN_TYPES = json.dumps(
    [
        {"name": "Id", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
        {"name": "Amount", "type": {"code": "NUMERIC"}, "is_primary_key": False, "ordinal_position": 2},
        {"name": "Name", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 3},
        {"name": "Score", "type": {"code": "FLOAT64"}, "is_primary_key": False, "ordinal_position": 4},
    ],
    separators=(",", ":"),
)
WINDOW_START = datetime(2024, 5, 1, tzinfo=timezone.utc)
WINDOW_END = WINDOW_START + timedelta(hours=1)
PARTITIONS = 8
MODS_PER_TRANSACTION = 4


def generate_staging(directory: Path, changes: int, seed: int = 7) -> None:
    """Write ``changes`` staged rows (+1% duplicates) under ``directory``/partition=…/part-00000.parquet."""
    rng = np.random.default_rng(seed)
    keys = max(1, int(changes * 0.6))
    key_of = rng.integers(0, keys, changes)
    table_of = key_of % len(TABLES)
    # Position of each change within its key's chain (changes are in commit order already).
    order = np.argsort(key_of, kind="stable")
    sorted_keys = key_of[order]
    first = np.ones(changes, dtype=bool)
    first[1:] = sorted_keys[1:] != sorted_keys[:-1]
    last = np.ones(changes, dtype=bool)
    last[:-1] = sorted_keys[1:] != sorted_keys[:-1]
    is_first = np.empty(changes, dtype=bool)
    is_first[order] = first
    is_last = np.empty(changes, dtype=bool)
    is_last[order] = last
    coin = rng.random(changes)
    mod_types = np.where(is_first & (coin < 0.5), "INSERT", "UPDATE").astype(object)
    mod_types[is_last & ~is_first & (coin > 0.9)] = "DELETE"
    amounts = rng.integers(0, 1_000_000, changes)

    base = to_micros(WINDOW_START)
    span = to_micros(WINDOW_END) - base
    transactions = (changes + MODS_PER_TRANSACTION - 1) // MODS_PER_TRANSACTION
    step = max(1, span // (transactions + 1))
    rows: dict[str, list] = {name: [] for name in STAGED_CHANGE_SCHEMA.names}
    for index in range(changes):
        txn, position = divmod(index, MODS_PER_TRANSACTION)
        size = min(MODS_PER_TRANSACTION, changes - txn * MODS_PER_TRANSACTION)
        commit = base + txn * step
        tx_id = f"tx-{seed}-{txn}"
        record_sequence = f"{position:08d}"
        mod_type = mod_types[index]
        amount = amounts[index]
        if mod_type == "INSERT":
            values = f'{{"Amount":"{amount}","Name":"n{key_of[index]}","Score":{amount / 7:.3f}}}'
        elif mod_type == "UPDATE":
            values = f'{{"Amount":"{amount}"}}' if coin[index] < 0.75 else f'{{"Score":{coin[index]:.4f}}}'
        else:
            values = "{}"
        rows["unit"].append(f"token-{txn % PARTITIONS}")
        rows["commit_timestamp"].append(commit)
        rows["transaction_id"].append(tx_id)
        rows["transaction_record"].append(record_sequence)
        rows["transaction_record_count"].append(size)
        rows["table_name"].append(TABLES[table_of[index]])
        rows["operation"].append(mod_type)
        rows["keys_json"].append(f'{{"Id":"{key_of[index]}"}}')
        rows["after_json"].append(values)
        rows["before_json"].append("{}")
        rows["column_types_json"].append(COLUMN_TYPES)
        rows["source_metadata_json"].append(
            '{"is_last_record_in_transaction_in_partition":%s,"number_of_partitions_in_transaction":1,'
            '"value_capture_type":"OLD_AND_NEW_VALUES"}' % ("true" if position == size - 1 else "false")
        )
        rows["change_sequence_number"].append(
            spanner_change_sequence_number(commit, tx_id, record_sequence, 0)
        )
    arrays = {name: values for name, values in rows.items()}
    arrays["commit_timestamp"] = pa.array(np.array(rows["commit_timestamp"], dtype="datetime64[us]"),
                                          pa.timestamp("us", tz="UTC"))
    table = pa.table({name: arrays[name] for name in STAGED_CHANGE_SCHEMA.names}, schema=STAGED_CHANGE_SCHEMA)
    duplicates = table.take(rng.choice(changes, size=changes // 100, replace=False))
    table = pa.concat_tables([table, duplicates])
    tokens = table.column("unit").to_pylist()
    partition = np.array([int(token.rsplit("-", 1)[1]) for token in tokens])
    for number in range(PARTITIONS):
        folder = directory / f"partition={number:04x}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.filter(pa.array(partition == number)), folder / "part-00000.parquet")
    (directory / "_generated").write_text(str(changes))


class PeakMemory:
    """Samples the resident memory of this process's descendants (JVM, Python workers) and itself."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.peak = {"jvm": 0, "python_driver": 0, "python_workers": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @staticmethod
    def _rss(pid: int) -> int:
        try:
            with open(f"/proc/{pid}/statm") as statm:
                return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            return 0

    @staticmethod
    def _children() -> dict[int, list[int]]:
        tree: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as stat:
                        parent = int(stat.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                tree.setdefault(parent, []).append(int(entry))
        return tree

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.is_set():
            tree = self._children()
            jvm = workers = 0
            stack = list(tree.get(me, []))
            while stack:
                pid = stack.pop()
                try:
                    with open(f"/proc/{pid}/comm") as comm:
                        name = comm.read().strip()
                except OSError:
                    continue
                if name == "java":
                    jvm += self._rss(pid)
                elif name.startswith("python"):
                    workers += self._rss(pid)
                stack.extend(tree.get(pid, []))
            for key, value in (("jvm", jvm), ("python_workers", workers), ("python_driver", self._rss(me))):
                self.peak[key] = max(self.peak[key], value)
            self._stop.wait(self.interval)


def run_child(staging: Path, changeset: Path, cores: int, repeat: int, collapse: str = "kernel") -> dict:
    """Baselines and merge in one Spark session, ``repeat`` times in turn; returns the timings of
    every repeat and peak memory."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from airflow_provider_cdc.core.window import Window
    from airflow_provider_cdc.merge.job import MergeArguments, _spark_session, merge_window
    from airflow_provider_cdc.merge.kernels import COLLAPSE_INPUT_COLUMNS
    from airflow_provider_cdc.merge.plan import collapse_partitions

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    timings: dict[str, list[float]] = {"count": [], "scan": [], "floor": [], "merge": []}
    with PeakMemory() as memory:
        SparkSession.builder.master(f"local[{cores}]").config("spark.ui.enabled", "false").config(
            "spark.log.level", "WARN").config("spark.ui.showConsoleProgress", "false").getOrCreate()
        spark = _spark_session(None)
        staged = spark.read.parquet(str(staging))
        for _ in range(repeat):
            began = time.monotonic()
            rows = staged.count()
            timings["count"].append(time.monotonic() - began)
            began = time.monotonic()
            staged.write.format("noop").mode("overwrite").save()
            timings["scan"].append(time.monotonic() - began)
            began = time.monotonic()
            key_hash = F.xxhash64("table_name", "keys_json").alias("_key_hash")
            (
                staged.select(key_hash, *COLLAPSE_INPUT_COLUMNS)
                .repartition(collapse_partitions(rows, spark.sparkContext.defaultParallelism), "_key_hash")
                .sortWithinPartitions("_key_hash", "table_name", "keys_json", "change_sequence_number")
                .drop("_key_hash")
                .write.mode("overwrite")
                .parquet(str(changeset) + "-floor")
            )
            timings["floor"].append(time.monotonic() - began)
            shutil.rmtree(str(changeset) + "-floor", ignore_errors=True)
            args = MergeArguments(window=Window(WINDOW_START, WINDOW_END), staging=str(staging),
                                  changeset=str(changeset), collapse=collapse)
            began = time.monotonic()
            manifest = merge_window(spark, args)
            timings["merge"].append(time.monotonic() - began)
        spark.stop()
    return {
        "staged_rows": rows,
        **{f"{name}_seconds": values for name, values in timings.items()},
        "changeset_rows": manifest["rows"],
        "peak_bytes": memory.peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[500_000, 2_000_000])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each baseline and the merge, in turn (medians are reported)")
    parser.add_argument("--collapse", choices=("kernel", "native"), default="kernel",
                        help="the merge's collapse: the Arrow kernel (default) or Spark's own operations")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/cdc-merge-benchmark"))
    parser.add_argument("--child", nargs=2, metavar=("STAGING", "CHANGESET"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(Path(args.child[0]), Path(args.child[1]), args.cores, args.repeat,
                                   args.collapse)))
        return

    results = []
    for size in args.sizes:
        staging = args.workdir / f"staging-{size}"
        if not (staging / "_generated").exists() or (staging / "_generated").read_text() != str(size):
            began = time.monotonic()
            generate_staging(staging, size)
            print(f"generated {size:,} changes in {time.monotonic() - began:.1f}s at {staging}", flush=True)
        child = subprocess.run(
            [sys.executable, __file__, "--cores", str(args.cores), "--repeat", str(args.repeat),
             "--collapse", args.collapse, "--child",
             str(staging),
             str(args.workdir / f"changeset-{size}")],
            check=True, capture_output=True, text=True,
        )
        result = json.loads(child.stdout.strip().splitlines()[-1])
        result["changes"] = size
        results.append(result)
        print(f"{size:,} changes: " + "; ".join(
            f"{name} {' '.join(f'{seconds:.2f}' for seconds in result[f'{name}_seconds'])} s"
            for name in ("count", "scan", "floor", "merge")
        ), flush=True)

    mib = 1024 * 1024
    print(f"\nmerge_window benchmark ({args.collapse} collapse), local[{args.cores}], medians of "
          f"{args.repeat} run(s)")
    print(f"{'changes':>10} {'staged':>10} {'count s':>8} {'scan s':>7} {'floor s':>8} {'floor/s':>10} "
          f"{'merge s':>8} {'changes/s':>10} {'vs scan':>8} {'vs floor':>9} {'jvm MiB':>8} {'py drv':>7} "
          f"{'py wrk':>7}")
    for result in results:
        for name in ("count", "scan", "floor", "merge"):
            result[f"{name}_seconds"] = statistics.median(result[f"{name}_seconds"])
        peak = result["peak_bytes"]
        print(
            f"{result['changes']:>10,} {result['staged_rows']:>10,} {result['count_seconds']:>8.2f} "
            f"{result['scan_seconds']:>7.2f} {result['floor_seconds']:>8.2f} "
            f"{result['staged_rows'] / result['floor_seconds']:>10,.0f} {result['merge_seconds']:>8.2f} "
            f"{result['staged_rows'] / result['merge_seconds']:>10,.0f} "
            f"{result['merge_seconds'] / result['scan_seconds']:>7.1f}x "
            f"{result['merge_seconds'] / result['floor_seconds']:>8.1f}x "
            f"{peak['jvm'] / mib:>8.0f} {peak['python_driver'] / mib:>7.0f} "
            f"{peak['python_workers'] / mib:>7.0f}"
        )
    print("goal: ≥ 500,000 changes/s; the floor bounds what any Spark merge reaches on these cores")


if __name__ == "__main__":
    main()
