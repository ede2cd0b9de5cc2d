"""Benchmark: change rows/s the BigQuery CDC append path sends to the loopback fake.

A change set of ``--changes`` full-image changes (one table, key plus ten columns of mixed types, 10 %
deletes; files of 64k rows) is written once. The fake (``airflow_provider_cdc.testing.bigquery_fake``)
runs in a process of its own. Each measurement runs in a fresh process:

* ``target``: ``BigQueryCdcTarget.apply_table`` on the change set: reading the Parquet files,
  decoding, mapping, proto encoding, packing requests under 10 MB, flow control and acknowledgement
  checks, through the real ``BigQueryWriteClient.append_rows``;
* ``raw``: the same rows, serialized before the clock starts, packed into requests the same way and
  sent with one ``BigQueryWriteClient.append_rows`` call, waiting only for the responses.

Both send to the same table of the same fake, which applies every row. Target and raw processes
alternate; the median over ``--repeat`` is printed with the ratio (goal ≥ 0.8), and each target
process's peak RSS, for ``--changes`` and for 4× as many (flat memory: the change set streams in
batches and at most a few requests are in flight).

    python benchmarks/bigquery_append.py --changes 100000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

PROJECT, DATASET, TABLE = "bench-project", "cdc", "Orders"
COLUMN_TYPES = [
    {"name": "OrderId", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
    {"name": "Customer", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2},
    {"name": "Amount", "type": {"code": "NUMERIC"}, "is_primary_key": False, "ordinal_position": 3},
    {"name": "Ratio", "type": {"code": "FLOAT64"}, "is_primary_key": False, "ordinal_position": 4},
    {"name": "Units", "type": {"code": "INT64"}, "is_primary_key": False, "ordinal_position": 5},
    {"name": "Paid", "type": {"code": "BOOL"}, "is_primary_key": False, "ordinal_position": 6},
    {"name": "Day", "type": {"code": "DATE"}, "is_primary_key": False, "ordinal_position": 7},
    {"name": "At", "type": {"code": "TIMESTAMP"}, "is_primary_key": False, "ordinal_position": 8},
    {"name": "Status", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 9},
    {"name": "Doc", "type": {"code": "JSON"}, "is_primary_key": False, "ordinal_position": 10},
    {
        "name": "Tags",
        "type": {"code": "ARRAY", "array_element_type": {"code": "STRING"}},
        "is_primary_key": False,
        "ordinal_position": 11,
    },
]
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def write_changes(root: Path, count: int) -> str:
    from datetime import date

    from airflow_provider_cdc.changesets.writer import Change, change_set_table, write_change_set

    changes = []
    for i in range(count):
        values = {
            "Customer": f"customer-{i % 9973}",
            "Amount": f"{i % 100000}.25",
            "Ratio": i / 7,
            "Units": i % 50,
            "Paid": i % 3 == 0,
            "Day": date(2026, 1, 1) + timedelta(days=i % 365),
            "At": START + timedelta(seconds=i),
            "Status": ("new", "paid", "shipped")[i % 3],
            "Doc": '{"source":"bench"}',
            "Tags": ["a", "b"][: i % 3],
        }
        if i % 10 == 9:
            changes.append(Change({"OrderId": i}, "DELETE", f"{i + 1:016X}", START))
        else:
            changes.append(Change({"OrderId": i}, "UPSERT", f"{i + 1:016X}", START, values))
    uri = root / f"changes-{count}" / "0-600000000"
    # Files of 64k rows, as a merge writes files of bounded size (a file is one Parquet row group).
    write_change_set(str(uri), {TABLE: change_set_table(COLUMN_TYPES, changes)}, rows_per_file=65_536)
    return str(uri)


def _target(endpoints: dict[str, str]):
    from airflow_provider_cdc.targets.bigquery.hook import BigQueryCdcHook

    hook = BigQueryCdcHook(
        api_endpoint=endpoints["rest_endpoint"], write_endpoint=endpoints["write_endpoint"]
    )
    return hook.get_target(DATASET, PROJECT)


def child(mode: str, change_set: str, endpoints: dict[str, str]) -> dict[str, float]:
    """One measurement (runs in a fresh process)."""
    import pyarrow as pa

    from airflow_provider_cdc.changesets.reader import (
        SOURCE_CHANGE_TYPE,
        SOURCE_SEQUENCE,
        ChangeSetReader,
        TableColumns,
        to_merge_source,
    )
    from airflow_provider_cdc.targets.bigquery.schema import encode_batch, proto_descriptor
    from airflow_provider_cdc.targets.bigquery.writer import DefaultStreamWriter, default_stream, pack_rows

    target = _target(endpoints)
    (table,) = ChangeSetReader(change_set).tables()
    if mode == "target":
        started = time.perf_counter()
        result = target.apply_table(table)
        seconds = time.perf_counter() - started
        rows = result.rows
    else:
        columns = TableColumns.from_column_types(TABLE, table.column_types())
        bq_columns, _created, _added = target.ensure_table(TABLE, columns)
        descriptor = proto_descriptor(bq_columns)
        decoded = pa.Table.from_batches([to_merge_source(b, columns) for b in table.dataset.to_batches()])
        serialized = encode_batch(
            decoded, bq_columns, decoded.column(SOURCE_CHANGE_TYPE), decoded.column(SOURCE_SEQUENCE), TABLE
        )
        writer = DefaultStreamWriter(target.write_client, default_stream(PROJECT, DATASET, TABLE), descriptor)
        batches = list(pack_rows(serialized, writer.pack_bytes))
        started = time.perf_counter()
        requests = (writer._request(batch, first=index == 0) for index, batch in enumerate(batches))
        responses = list(target.write_client.append_rows(requests=requests, retry=None))
        seconds = time.perf_counter() - started
        assert len(responses) == len(batches) and not any(r.row_errors for r in responses)
        rows = len(serialized)
    peak_mb = _peak_rss_mb()
    return {"rows": rows, "seconds": seconds, "rows_per_second": rows / seconds, "peak_rss_mb": peak_mb}


def _peak_rss_mb() -> float:
    """This process's peak RSS (``VmHWM``: unlike ``ru_maxrss``, not inherited from the parent)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _write_in_child(root: Path, count: int) -> str:
    """Write a change set in a process of its own (the Python change list is large)."""
    out = subprocess.run(
        [sys.executable, __file__, "--write", str(count), "--change-set", str(root)],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip().splitlines()[-1]


def _run_child(mode: str, change_set: str, endpoints: dict[str, str]) -> dict[str, float]:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            mode,
            "--change-set",
            change_set,
            "--endpoints",
            json.dumps(endpoints),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _rates(runs: list[dict[str, float]]) -> str:
    return ", ".join(f"{r['rows_per_second']:,.0f}" for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--memory-factor", type=int, default=4, help="also measure memory at this many × changes"
    )
    parser.add_argument("--child", choices=["target", "raw"])
    parser.add_argument("--write", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--change-set")
    parser.add_argument("--endpoints")
    args = parser.parse_args()
    if args.write:
        print(write_changes(Path(args.change_set), args.write))
        return
    if args.child:
        print(json.dumps(child(args.child, args.change_set, json.loads(args.endpoints))))
        return
    fake = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "airflow_provider_cdc.testing.bigquery_fake",
            "--dataset",
            f"{PROJECT}.{DATASET}",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        endpoints = json.loads(fake.stdout.readline())
        with tempfile.TemporaryDirectory() as tmp:
            small = _write_in_child(Path(tmp), args.changes)
            large = (
                _write_in_child(Path(tmp), args.changes * args.memory_factor)
                if args.memory_factor > 1
                else None
            )
            _run_child("target", small, endpoints)  # creates the table; warms the fake up
            target_runs, raw_runs = [], []
            for _ in range(args.repeat):
                target_runs.append(_run_child("target", small, endpoints))
                raw_runs.append(_run_child("raw", small, endpoints))
            target_rate = statistics.median(r["rows_per_second"] for r in target_runs)
            raw_rate = statistics.median(r["rows_per_second"] for r in raw_runs)
            print(f"changes: {args.changes}, repeats: {args.repeat}")
            print(
                f"target (BigQueryCdcTarget.apply_table): {target_rate:,.0f} rows/s "
                f"(runs: {_rates(target_runs)})"
            )
            print(
                f"raw append_rows (pre-serialized):       {raw_rate:,.0f} rows/s (runs: {_rates(raw_runs)})"
            )
            print(f"ratio target/raw: {target_rate / raw_rate:.2f} (goal >= 0.8)")
            small_rss = statistics.median(r["peak_rss_mb"] for r in target_runs)
            print(f"target peak RSS at {args.changes} changes: {small_rss:.0f} MB")
            if large:
                big = _run_child("target", large, endpoints)
                print(
                    f"target peak RSS at {args.changes * args.memory_factor} changes: "
                    f"{big['peak_rss_mb']:.0f} MB ({big['rows_per_second']:,.0f} rows/s)"
                )
    finally:
        fake.stdin.close()
        fake.wait(timeout=30)


if __name__ == "__main__":
    main()
