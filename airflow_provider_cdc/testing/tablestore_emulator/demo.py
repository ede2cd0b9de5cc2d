"""The Table Store demo: the project's Table Store stream emulator with a seeded workload (puts, partial
updates, column and row deletes, a shard split and a merge), then the example DAG
``tablestore_stream_to_lake`` (or ``tablestore_stream_to_bigquery``) run window by window through the
``tablestore`` connection, the target table compared with the emulator's table after each window.

    python -m airflow_provider_cdc.testing.tablestore_emulator.demo --windows 3 --log-dir .demo/cdc

The workload is written on the emulator's clock into one-minute windows that ended more than the
source's settle margin (5 minutes) ago; the emulator's clock then joins the real one (requests are
signed with it) and serves the DAG's runs from this process.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from . import ManualClock, TablestoreEmulator
from .workload import COLUMN_TYPES, TABLE, TablestoreWorkload, workload_start

WINDOW_SECONDS = 60
DAGS = {"lake": "tablestore_stream_to_lake", "bigquery": "tablestore_stream_to_bigquery"}
DATASET = ("demo-project", "cdc_demo")
KEY = ("region", "order_id")
_SUMMARY = re.compile(r"Window \[[^]]*\) of \S+: read \d+ rows[^\[]*|table \S+: window \d+ applied[^\[]*")


def _log(message: str) -> None:
    print(f"[demo] {message}", file=sys.stderr, flush=True)


def difference(rows: list[dict[str, Any]], truth: dict[tuple, dict[str, Any]]) -> str | None:
    """What differs between a target's rows and the emulator's table (``None``: equal)."""
    got = {tuple(row[k] for k in KEY): {c: row.get(c) for c in COLUMN_TYPES} for row in rows}
    want = {key: {c: values.get(c) for c in COLUMN_TYPES} for key, values in truth.items()}
    missing, unexpected = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    differing = [key for key in sorted(set(want) & set(got)) if want[key] != got[key]]
    if not (missing or unexpected or differing):
        return None
    return f"{len(missing)} missing {missing[:3]}, {len(unexpected)} unexpected, {len(differing)} differing"


def run(windows: int, log_dir: Path, target: str) -> int:
    """Run the demo; 0 when every window's table equals the emulator's."""
    from airflow_provider_cdc.testing.bigquery_fake import FakeBigQuery

    start = workload_start(windows, WINDOW_SECONDS, timedelta(minutes=5))
    emulator = TablestoreEmulator(ManualClock(int(start.timestamp() * 1_000_000) - 1_000_000), shards=2)
    endpoint = emulator.start()
    try:
        workload = TablestoreWorkload(emulator, start, WINDOW_SECONDS, changes_per_window=200, seed=7)
        workload.create()
        for index in range(windows):
            workload.write_window(index)
        emulator.clock.follow_real_time()  # the DAG's requests are dated by real time from here on
        shards = emulator.shards(TABLE)
        _log(
            f"Table Store emulator at {endpoint}: table {TABLE}, {windows * 200} writes in {windows} windows "
            f"of {WINDOW_SECONDS} s from {start.isoformat()}, {len(shards)} shards (split and merged)"
        )
        with FakeBigQuery() as fake:
            fake.create_dataset(*DATASET)
            env = {
                **os.environ,
                "CDC_START_DATE": start.isoformat(),
                "CDC_WINDOW_SECONDS": str(WINDOW_SECONDS),
                "CDC_BIGQUERY_API_ENDPOINT": fake.rest_endpoint,
                "CDC_BIGQUERY_WRITE_ENDPOINT": fake.write_endpoint,
                "AIRFLOW_CONN_TABLESTORE_DEFAULT": json.dumps(
                    {
                        "conn_type": "tablestore",
                        "host": endpoint,
                        "login": "test-key",
                        "password": "test-secret",
                        "extra": {"instance": emulator.instance},
                    }
                ),
            }
            demo_home = Path(env.get("CDC_DEMO_HOME", log_dir))
            lake = demo_home / "tablestore" / ("bigquery/lake" if target == "bigquery" else "lake")
            equal = True
            for index in range(windows):
                end = workload.window(index)[1]
                if not _run_window(DAGS[target], index, windows, end, env, log_dir):
                    return 1
                rows = _bigquery_rows(fake) if target == "bigquery" else _delta_rows(lake)
                problem = difference(rows, workload.truths[index])
                verdict = "equal to the emulator's table" if problem is None else f"DIFFERENT: {problem}"
                _log(f"window {index + 1}: {len(rows)} rows: {verdict}")
                equal = equal and problem is None
            return 0 if equal else 1
    finally:
        emulator.stop()


def _delta_rows(lake: Path) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    uri = str(lake / TABLE)
    return DeltaTable(uri).to_pyarrow_table().to_pylist() if DeltaTable.is_deltatable(uri) else []


def _bigquery_rows(fake: Any) -> list[dict[str, Any]]:
    return fake.rows(*DATASET, TABLE) if (*DATASET, TABLE) in fake.state.tables else []


def _run_window(
    dag_id: str, index: int, windows: int, end: datetime, env: dict[str, str], log_dir: Path
) -> bool:
    airflow = Path(sys.executable).parent / "airflow"
    command = [str(airflow) if airflow.exists() else "airflow", "dags", "test", dag_id, end.isoformat()]
    _log(f"window {index + 1}/{windows}: airflow dags test {dag_id} {end.isoformat()}")
    log = log_dir / f"tablestore-window-{index + 1}.log"
    started = time.monotonic()
    with log.open("w") as out:
        code = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    text = log.read_text(errors="replace")
    if code != 0:
        print("\n".join(text.splitlines()[-40:]), file=sys.stderr)
        return False
    for line in _SUMMARY.findall(text):
        print(f"  {line.strip()}", file=sys.stderr)
    _log(f"window {index + 1} done in {time.monotonic() - started:.0f} s")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_provider_cdc.testing.tablestore_emulator.demo", description=__doc__
    )
    parser.add_argument("--windows", type=int, default=3, help="one-minute windows (default 3)")
    parser.add_argument("--target", choices=sorted(DAGS), default="lake")
    parser.add_argument("--log-dir", default=".", help="where each window's output goes")
    args = parser.parse_args(argv)
    if args.windows < 1:
        parser.error("--windows must be at least 1")
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    return run(args.windows, log_dir, args.target)


if __name__ == "__main__":
    sys.exit(main())
