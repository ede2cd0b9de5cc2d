"""Benchmark: applying a window's change set to a Delta table (upsert part).

For each table size (default 100k, 1M and 10M rows) and each workload, a change set of
``--changes`` keys (default 10,000: 60 % updates of existing rows, half of them partial images,
10 % deletes, 30 % new rows) is applied to a copy of the same base table twice:

* ``plain``: one delta-rs MERGE of the already-typed change set (key equality; delete, update all
  columns, insert), the cheapest MERGE that gives the same table for in-order windows;
* ``guarded`` (with ``--clauses``): the plain MERGE plus the clauses the upsert adds to it, the
  sequence-number guard on matched rows and a per-row choice for each column that partial images
  leave out (flags computed before the clock starts), to show what those clauses cost;
* ``upsert``: ``DeltaLakeTarget.apply_change_set`` from the change-set Parquet files: JSON
  decoding, validation, the window guard, per-column partial-image expressions, the sequence
  number guard and the tagged commit.

Workloads: ``random`` changes keys spread over the whole key space (hash-like keys, as Spanner
recommends), ``local`` changes keys of the newest 2 % of the key space (time-ordered keys).

Each measurement runs in a fresh process (its peak RSS is reported): one apply on a throw-away
copy of the base table warms the process up (its time is shown as "upsert 1st s": imports and
first-use costs a spark-submit pays once per window), then ``--applies`` timed applies run, each
on a fresh copy, and the fastest counts (other work on the machine only ever slows an apply down).
Each upsert process also times its decode alone (``decode s``, the fastest of ``--applies``): column
types, reading and decoding the change set and the checks before the MERGE, the work the plain
MERGE is spared by starting from typed columns. Plain and upsert processes alternate; the median
over ``--repeat`` processes is printed, as wall time and as CPU time (all threads of the process;
less sensitive to other work on a busy machine). Base tables are cached under ``--workdir``.

    python benchmarks/apply_window.py --sizes 100000,1000000,10000000 --workdir .cache/bench

With ``--deferred`` (random keys only) each size gets ``--windows`` change sets of ``--changes`` keys
each, applied in one fresh process to a copy of the base table with ``apply_mode="deferred"``: each
window is appended to the table's pending changes (``append s``: the median over the windows after
the first; ``append 1st s`` the first), then the table is read plainly (every row, batch by batch) and
merge-on-read (the pending windows applied; each the fastest of two scans), and one compaction folds
every window into the table (``compact s``). ``upsert s`` is an immediate upsert of the first window
on a fresh copy, in the same process after a warm-up apply, for comparison. Row counts of
merge-on-read and of the compacted table must agree.

    python benchmarks/apply_window.py --deferred --sizes 100000,1000000 --windows 5
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_cdc.changesets.reader import TableColumns
from airflow_provider_cdc.changesets.writer import Change, change_set_table, write_change_set
from airflow_provider_cdc.core.timestamps import to_micros
from airflow_provider_cdc.targets.delta.target import (
    DEFAULT_TARGET_FILE_SIZE,
    DeltaLakeTarget,
    materialized_source,
)

TABLE = "Orders"
PIPELINE = "bench"
COLUMN_TYPES = [
    {"name": "OrderId", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
    {"name": "Customer", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2},
    {"name": "Amount", "type": {"code": "FLOAT64"}, "is_primary_key": False, "ordinal_position": 3},
    {"name": "Quantity", "type": {"code": "INT64"}, "is_primary_key": False, "ordinal_position": 4},
    {"name": "UpdatedAt", "type": {"code": "TIMESTAMP"}, "is_primary_key": False, "ordinal_position": 5},
]
BASE_TIME = datetime(2024, 1, 1, tzinfo=timezone.utc)
BASE_WINDOW = to_micros(BASE_TIME)
CHANGE_WINDOW = BASE_WINDOW + 60_000_000
WORKLOADS = ("random", "local")


def key_of(index: np.ndarray, workload: str) -> np.ndarray:
    """Key of the ``index``-th row: hash-spread for ``random``, increasing for ``local``."""
    if workload == "local":
        return index.astype(np.int64)
    x = index.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return ((x ^ (x >> np.uint64(31))) >> np.uint64(1)).astype(np.int64)


def base_rows(size: int, workload: str, chunk: int = 1_000_000):
    """Typed base rows in key order, streamed in chunks."""
    keys = np.sort(key_of(np.arange(size), workload))
    schema = TableColumns.from_column_types(TABLE, COLUMN_TYPES).table_schema()
    rng = np.random.default_rng(size)
    seq = "0000000000000001/0000000000000000/0000000000000000/0000000000000000"
    for start in range(0, size, chunk):
        part = keys[start : start + chunk]
        n = len(part)
        customer = pc.binary_join_element_wise("c", pc.cast(pa.array(part % 100_003), pa.string()), "")
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(part),
                customer,
                pa.array(rng.random(n) * 100),
                pa.array(rng.integers(1, 20, n)),
                pa.array(np.full(n, BASE_WINDOW - 1), pa.timestamp("us", tz="UTC")),
                pa.array(np.full(n, seq, dtype=object), pa.string()),
                pa.array(np.full(n, BASE_WINDOW - 1), pa.timestamp("us", tz="UTC")),
            ],
            schema=schema,
        )


def build_base(workdir: Path, size: int, workload: str, file_mib: int) -> Path:
    lake = workdir / f"base-{workload}-{size}-{file_mib}mib"
    if (lake / TABLE / "_delta_log").is_dir():
        return lake
    shutil.rmtree(lake, ignore_errors=True)
    began = time.perf_counter()
    schema = TableColumns.from_column_types(TABLE, COLUMN_TYPES).table_schema()
    reader = pa.RecordBatchReader.from_batches(schema, base_rows(size, workload))
    target = DeltaLakeTarget(str(lake), target_file_size=file_mib * 1024 * 1024)
    target.bulk_load(TABLE, COLUMN_TYPES, reader, PIPELINE, BASE_WINDOW)
    print(f"  built {workload} base table of {size:,} rows in {time.perf_counter() - began:.1f}s", flush=True)
    return lake


def build_change_set(workdir: Path, size: int, workload: str, changes: int) -> Path:
    path = workdir / f"changeset-{workload}-{size}-{changes}" / f"{BASE_WINDOW}-{CHANGE_WINDOW}"
    if (path / "_manifest.json").is_file():
        return path
    rng = np.random.default_rng(7)
    updates, deletes = int(changes * 0.6), int(changes * 0.1)
    inserts = changes - updates - deletes
    if workload == "local":
        hot = max(int(size * 0.02), updates + deletes)
        existing = rng.choice(np.arange(size - hot, size), updates + deletes, replace=False)
    else:
        existing = rng.choice(size, updates + deletes, replace=False)
    touched = key_of(existing, workload)
    fresh = key_of(np.arange(size, size + inserts), workload)
    commit = BASE_TIME + timedelta(seconds=30)
    seq = f"{to_micros(commit):016X}/0000000000000001/0000000000000000/0000000000000000"
    rows = []
    for i, key in enumerate(touched.tolist()):
        if i < deletes:
            rows.append(Change({"OrderId": key}, "DELETE", seq, commit))
        elif i % 2:
            rows.append(Change({"OrderId": key}, "UPSERT", seq, commit, {"Amount": i * 0.5}, ["Amount"]))
        else:
            values = {"Customer": f"c{i}", "Amount": i * 0.25, "Quantity": i % 7, "UpdatedAt": commit}
            rows.append(Change({"OrderId": key}, "UPSERT", seq, commit, values))
    for i, key in enumerate(fresh.tolist()):
        values = {"Customer": f"n{i}", "Amount": 1.0, "Quantity": 1, "UpdatedAt": commit}
        rows.append(Change({"OrderId": key}, "UPSERT", seq, commit, values))
    write_change_set(str(path), {TABLE: change_set_table(COLUMN_TYPES, rows)})
    return path


def copy_table(base: Path, destination: Path) -> None:
    """Copy a lake: data files are immutable and hard-linked, the log is copied."""
    shutil.rmtree(destination, ignore_errors=True)

    def link_or_copy(src: str, dst: str) -> None:
        if src.endswith(".parquet") and "_delta_log" not in src:
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)

    shutil.copytree(base, destination, copy_function=link_or_copy)


# --------------------------------------------------------------------------- one measurement


class _Clock:
    """Wall time and CPU time (all threads of this process) of a timed region."""

    def __enter__(self) -> _Clock:
        self._wall, self._cpu = time.perf_counter(), _cpu_seconds()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall, self.cpu = time.perf_counter() - self._wall, _cpu_seconds() - self._cpu


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _apply_once(method: str, lake: str, changeset: str) -> tuple[float, float]:
    """Wall and CPU seconds of one apply of the change set to the table at ``lake``."""
    from deltalake import DeltaTable

    from airflow_provider_cdc.changesets.reader import ChangeSetReader

    (part,) = ChangeSetReader(changeset).tables()
    if method in ("plain", "guarded"):
        table = TableColumns.from_column_types(TABLE, part.column_types())
        typed = materialized_source(part.dataset, table)
        names = table.table_schema().names
        source = typed.select([*names, "_change_type"])
        updates = {n: f"source.{n}" for n in names if n != "OrderId"}
        guard = ""
        if method == "guarded":
            from airflow_provider_cdc.targets.delta.merge import carried_columns as _carried_columns

            seq = "_change_sequence_number"
            guard = f" AND (target.{seq} IS NULL OR source.{seq} > target.{seq})"
            for name, carries in _carried_columns(typed, [c.name for c in table.values]).items():
                if not isinstance(carries, bool):
                    source = source.append_column(f"_carries_{name}", carries)
                    flag = f"source._carries_{name}"
                    updates[name] = f"CASE WHEN {flag} THEN source.{name} ELSE target.{name} END"
        with _Clock() as clock:
            dt = DeltaTable(f"{lake}/{TABLE}")
            (
                dt.merge(source, "target.OrderId = source.OrderId", "source", "target", streamed_exec=False)
                .when_matched_delete("source._change_type = 'DELETE'" + guard)
                .when_matched_update(updates, "source._change_type = 'UPSERT'" + guard)
                .when_not_matched_insert({n: f"source.{n}" for n in names}, "source._change_type = 'UPSERT'")
                .execute()
            )
        return clock.wall, clock.cpu
    with _Clock() as clock:
        target = DeltaLakeTarget(lake, apply_mode="immediate")
        result = target.apply_change_set(TABLE, part.dataset, part.column_types(), PIPELINE, CHANGE_WINDOW)
    assert result.status == "applied", result
    return clock.wall, clock.cpu


def build_window_change_sets(workdir: Path, size: int, changes: int, windows: int) -> list[Path]:
    """``windows`` consecutive windows of random-key change sets (as :func:`build_change_set`'s mix),
    each window's sequence numbers after the previous window's."""
    paths = []
    for w in range(windows):
        start, end = CHANGE_WINDOW + w * 60_000_000, CHANGE_WINDOW + (w + 1) * 60_000_000
        path = workdir / f"windows-{size}-{changes}" / f"{start}-{end}"
        paths.append(path)
        if (path / "_manifest.json").is_file():
            continue
        rng = np.random.default_rng(100 + w)
        updates, deletes = int(changes * 0.6), int(changes * 0.1)
        inserts = changes - updates - deletes
        touched = key_of(rng.choice(size, updates + deletes, replace=False), "random")
        fresh = key_of(np.arange(size + w * inserts, size + (w + 1) * inserts), "random")
        commit = BASE_TIME + timedelta(seconds=90 + 60 * w)
        seq = f"{to_micros(commit):016X}/0000000000000001/0000000000000000/0000000000000000"
        rows = []
        for i, key in enumerate(touched.tolist()):
            if i < deletes:
                rows.append(Change({"OrderId": key}, "DELETE", seq, commit))
            elif i % 2:
                rows.append(Change({"OrderId": key}, "UPSERT", seq, commit, {"Amount": i * 0.5}, ["Amount"]))
            else:
                values = {"Customer": f"c{i}", "Amount": i * 0.25, "Quantity": i % 7, "UpdatedAt": commit}
                rows.append(Change({"OrderId": key}, "UPSERT", seq, commit, values))
        for i, key in enumerate(fresh.tolist()):
            values = {"Customer": f"n{i}", "Amount": 1.0, "Quantity": 1, "UpdatedAt": commit}
            rows.append(Change({"OrderId": key}, "UPSERT", seq, commit, values))
        write_change_set(str(path), {TABLE: change_set_table(COLUMN_TYPES, rows)})
    return paths


def measure_deferred(base: str, changesets: list[str], scratch: str) -> dict:
    """Per-window appends, plain and merge-on-read scans, one compaction; one immediate upsert."""
    from deltalake import DeltaTable

    from airflow_provider_cdc.changesets.reader import ChangeSetReader

    def window_of(changeset: str) -> tuple[Any, int]:
        (part,) = ChangeSetReader(changeset).tables()
        return part, int(Path(changeset).name.split("-")[1])

    part, end = window_of(changesets[0])
    upserts = []
    for _ in range(2):  # the first warms the process up
        copy_table(Path(base), Path(scratch))
        immediate = DeltaLakeTarget(scratch, apply_mode="immediate")
        with _Clock() as upsert:
            immediate.apply_change_set(TABLE, part.dataset, part.column_types(), PIPELINE, end)
        upserts.append(upsert.wall)
    copy_table(Path(base), Path(scratch))
    target = DeltaLakeTarget(scratch, apply_mode="deferred", compact_every=None)
    appends = []
    for changeset in changesets:
        part, end = window_of(changeset)
        with _Clock() as clock:
            result = target.apply_change_set(TABLE, part.dataset, part.column_types(), PIPELINE, end)
        assert result.deferred and result.status == "applied", result
        appends.append(clock.wall)
    plain, merged = [], []
    for _ in range(2):  # the fastest of two scans of each kind
        with _Clock() as clock:
            stored = sum(
                b.num_rows for b in DeltaTable(f"{scratch}/{TABLE}").to_pyarrow_dataset().to_batches()
            )
        plain.append(clock.wall)
        with _Clock() as clock:
            latest = sum(b.num_rows for b in target.latest_batches(TABLE, PIPELINE))
        merged.append(clock.wall)
    with _Clock() as compaction:
        done = target.compact(TABLE, PIPELINE)
    assert len(done.folded_windows) == len(changesets), done
    compacted = DeltaTable(f"{scratch}/{TABLE}").count()
    if compacted != latest:
        raise RuntimeError(f"merge-on-read gives {latest} rows, the compacted table {compacted}")
    shutil.rmtree(scratch, ignore_errors=True)
    return {
        "append_first_seconds": appends[0],
        "append_seconds": statistics.median(appends[1:] or appends),
        "upsert_seconds": upserts[-1],
        "compact_seconds": compaction.wall,
        "plain_read_seconds": min(plain),
        "merge_on_read_seconds": min(merged),
        "stored_rows": stored,
        "rows": latest,
        "peak_rss_mb": _peak_rss_mb(),
    }


def run_deferred(args: argparse.Namespace, workdir: Path, sizes: list[int]) -> None:
    print(
        f"apply_window --deferred: random keys, {args.windows} windows of {args.changes:,} changes, "
        f"median of {args.repeat} process(es), delta.targetFileSize {args.target_file_size_mib} MiB"
    )
    print(
        f"{'rows':>12} {'append s':>9} {'append 1st s':>13} {'upsert s':>9} {'compact s':>10} "
        f"{'plain read s':>13} {'MoR read s':>11} {'ratio':>6} {'peak MB':>8}"
    )
    appends: dict[int, float] = {}
    for size in sizes:
        base = build_base(workdir, size, "random", args.target_file_size_mib)
        changesets = build_window_change_sets(workdir, size, args.changes, args.windows)
        runs = []
        for _ in range(args.repeat):
            completed = subprocess.run(
                [
                    *(sys.executable, __file__, "--measure", "deferred", "--lake", str(base)),
                    *(
                        "--changeset",
                        ",".join(map(str, changesets)),
                        "--scratch",
                        str(workdir / "run-deferred"),
                    ),
                ],
                stdout=subprocess.PIPE,
                text=True,
                check=True,
            )
            runs.append(json.loads(completed.stdout.strip().splitlines()[-1]))

        def median(name: str, found: list[dict] = runs) -> float:
            return statistics.median(r[name] for r in found)

        appends[size] = median("append_seconds")
        plain, merged = median("plain_read_seconds"), median("merge_on_read_seconds")
        print(
            f"{size:>12,} {appends[size]:>9.3f} {median('append_first_seconds'):>13.3f} "
            f"{median('upsert_seconds'):>9.3f} {median('compact_seconds'):>10.3f} {plain:>13.3f} "
            f"{merged:>11.3f} {merged / plain:>6.2f} {max(r['peak_rss_mb'] for r in runs):>8.0f}",
            flush=True,
        )
    if len(appends) > 1:
        small, large = min(appends), max(appends)
        print(f"append growth {small:,} → {large:,} rows: {appends[large] / appends[small]:.2f}x (goal ≤ 2x)")
    shutil.rmtree(workdir / "run-deferred", ignore_errors=True)


def _decode_once(changeset: str) -> float:
    """Wall seconds of what the upsert does before its MERGE and the plain MERGE does not do:
    column types, reading and decoding the change set, the duplicate-key and image checks."""
    from airflow_provider_cdc.changesets.reader import ChangeSetReader
    from airflow_provider_cdc.targets.delta.merge import carried_columns as _carried_columns

    (part,) = ChangeSetReader(changeset).tables()
    with _Clock() as clock:
        table = TableColumns.from_column_types(TABLE, part.column_types())
        source = materialized_source(part.dataset, table)
        _carried_columns(source, [c.name for c in table.values])
    return clock.wall


def _peak_rss_mb() -> float:
    """Peak RSS of this process since it started (VmHWM; unlike ru_maxrss not inherited at fork)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def measure(method: str, base: str, changeset: str, scratch: str, applies: int) -> dict:
    """Apply once on a throw-away copy (process warm-up), then time ``applies`` applies on fresh copies."""
    from deltalake import DeltaTable

    copy_table(Path(base), Path(scratch))
    cold, _ = _apply_once(method, scratch, changeset)
    warm = []
    for _ in range(applies):
        copy_table(Path(base), Path(scratch))
        warm.append(_apply_once(method, scratch, changeset))
    rows = DeltaTable(f"{scratch}/{TABLE}").count()
    shutil.rmtree(scratch, ignore_errors=True)
    decode = [_decode_once(changeset) for _ in range(applies)] if method == "upsert" else [0.0]
    return {
        "decode_seconds": min(decode),
        "seconds": min(wall for wall, _ in warm),
        "cpu_seconds": min(cpu for _, cpu in warm),
        "all_seconds": [wall for wall, _ in warm],
        "cold_seconds": cold,
        "rows": rows,
        "peak_rss_mb": _peak_rss_mb(),
    }


def run_measurement(method: str, base: Path, changeset: Path, scratch: Path, applies: int) -> dict:
    """One measurement in a fresh process; it reports its time, row count and peak RSS."""
    completed = subprocess.run(
        [
            *(sys.executable, __file__, "--measure", method, "--lake", str(base)),
            *("--changeset", str(changeset), "--scratch", str(scratch), "--applies", str(applies)),
        ],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000,10000000")
    parser.add_argument("--changes", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3, help="processes per method and size")
    parser.add_argument("--applies", type=int, default=3, help="timed applies per process (fastest counts)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--workdir", default=".cache/bench")
    parser.add_argument(
        "--target-file-size-mib",
        type=int,
        default=DEFAULT_TARGET_FILE_SIZE // (1024 * 1024),
        help="delta.targetFileSize of the tables (default: DeltaLakeTarget's)",
    )
    parser.add_argument(
        "--clauses", action="store_true", help="also time the plain MERGE with the upsert's extra clauses"
    )
    parser.add_argument("--deferred", action="store_true", help="measure deferred apply (random keys)")
    parser.add_argument("--windows", type=int, default=5, help="--deferred: windows appended per size")
    parser.add_argument(
        "--measure", choices=("plain", "guarded", "upsert", "deferred"), help=argparse.SUPPRESS
    )
    parser.add_argument("--lake", help=argparse.SUPPRESS)
    parser.add_argument("--changeset", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure == "deferred":
        print(json.dumps(measure_deferred(args.lake, args.changeset.split(","), args.scratch)))
        return
    if args.measure:
        print(json.dumps(measure(args.measure, args.lake, args.changeset, args.scratch, args.applies)))
        return

    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.deferred:
        run_deferred(args, workdir, sizes)
        return
    print(
        f"apply_window: {args.changes:,} changes per window, median of {args.repeat} process(es) "
        f"(each the fastest of {args.applies} apply/applies), "
        f"delta.targetFileSize {args.target_file_size_mib} MiB"
    )
    for workload in args.workloads.split(","):
        print(f"\nworkload {workload}")
        methods = ("plain", "guarded", "upsert") if args.clauses else ("plain", "upsert")
        print(
            f"{'rows':>12} {'plain s':>9} {'upsert s':>9} {'ratio':>6} {'plain cpu':>10} {'upsert cpu':>11} "
            f"{'ratio':>6} {'decode s':>9} {'upsert 1st s':>13} {'plain MB':>9} {'upsert MB':>10}"
            + (f" {'guarded s':>10} {'ratio':>6}" if args.clauses else "")
        )
        upsert_times: dict[int, float] = {}
        for size in sizes:
            base = build_base(workdir, size, workload, args.target_file_size_mib)
            changeset = build_change_set(workdir, size, workload, args.changes)
            runs: dict[str, list[dict]] = {m: [] for m in methods}
            for _ in range(args.repeat):
                for method in methods:
                    scratch = workdir / f"run-{method}"
                    runs[method].append(run_measurement(method, base, changeset, scratch, args.applies))
            rows = {m: {r["rows"] for r in runs[m]} for m in runs}
            if len({frozenset(r) for r in rows.values()}) != 1:
                raise RuntimeError(f"the methods disagree on the row count: {rows}")
            plain = statistics.median(r["seconds"] for r in runs["plain"])
            upsert = statistics.median(r["seconds"] for r in runs["upsert"])
            plain_cpu = statistics.median(r["cpu_seconds"] for r in runs["plain"])
            upsert_cpu = statistics.median(r["cpu_seconds"] for r in runs["upsert"])
            upsert_times[size] = upsert
            guarded = ""
            if args.clauses:
                seconds = statistics.median(r["seconds"] for r in runs["guarded"])
                guarded = f" {seconds:>10.3f} {seconds / plain:>6.2f}"
            print(
                f"{size:>12,} {plain:>9.3f} {upsert:>9.3f} {upsert / plain:>6.2f} "
                f"{plain_cpu:>10.3f} {upsert_cpu:>11.3f} {upsert_cpu / plain_cpu:>6.2f} "
                f"{statistics.median(r['decode_seconds'] for r in runs['upsert']):>9.3f} "
                f"{statistics.median(r['cold_seconds'] for r in runs['upsert']):>13.3f} "
                f"{max(r['peak_rss_mb'] for r in runs['plain']):>9.0f} "
                f"{max(r['peak_rss_mb'] for r in runs['upsert']):>10.0f}{guarded}",
                flush=True,
            )
        if len(upsert_times) > 1:
            small, large = min(upsert_times), max(upsert_times)
            print(
                f"upsert growth {small:,} → {large:,} rows: {upsert_times[large] / upsert_times[small]:.2f}x "
                "(goal ≤ 2x); ratio goal ≤ 1.2x"
            )
    for method in ("plain", "guarded", "upsert"):
        shutil.rmtree(workdir / f"run-{method}", ignore_errors=True)


if __name__ == "__main__":
    main()
