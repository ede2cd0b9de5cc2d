"""The Datastream demo: a stream written to Cloud Storage (the loopback emulator) as Datastream would, in
real time, then the example DAG ``datastream_to_lake`` (or ``datastream_to_bigquery``) run window by
window, and the target tables compared with the truth after each window.

    python -m airflow_provider_cdc.testing.datastream.demo --windows 4 --log-dir .demo/cdc

A MySQL stream (Avro by default) of ``--windows`` 30-second arrival windows is planned from now: its
files (CDC, a backfill arriving over several windows, a backlog of late CDC files into old minute
folders, re-deliveries, a column added mid-stream, primary-key changes) are uploaded to
``gs://datastream-demo/stream`` when the plan says they arrive (Cloud Storage stamps ``timeCreated``
then, so the demo takes as long as its windows). The DAG then runs each window with ``airflow dags
test`` against the same emulator (``STORAGE_EMULATOR_HOST``, an anonymous ``google_cloud_default``), and
each window's tables are compared with the state the history gives from the files arrived by its end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from .compare import compare_to_truth, delta_rows
from .history import truth
from .scenario import DatastreamScenario
from .writer import GcsSink, write_file

BUCKET, PREFIX = "datastream-demo", "stream"
WINDOW_SECONDS = 30
LATENESS_SECONDS = 5
DAGS = {"lake": "datastream_to_lake", "bigquery": "datastream_to_bigquery"}
BIGQUERY_DATASET = ("demo-project", "cdc_demo")
_SUMMARY = re.compile(
    r"Window \[[^]]*\): \d+ file\(s\)[^\[]*|Window \[[^]]*\) of \S+: read \d+ rows[^\[]*|"
    r"table \S+: window \d+ applied[^\[]*|\S+ → \S+: \d+ rows \([^)]*\)"
)


def _log(message: str) -> None:
    print(f"[demo] {message}", file=sys.stderr, flush=True)


def _upload_in_real_time(scenario: DatastreamScenario, client: Any) -> list[Any]:
    """Upload every planned file when the plan says it arrives; returns the files with their real
    ``timeCreated``."""
    sink = GcsSink(client, BUCKET, PREFIX)
    written = []
    for planned in sorted(scenario.files, key=lambda f: f.arrival):
        wait = (planned.arrival - datetime.now(timezone.utc)).total_seconds()
        if wait > 0:
            time.sleep(wait)
        written.append((planned, write_file(planned, sink)))
    return written


def run(windows: int, log_dir: Path, target: str, database: str, file_format: str) -> int:
    """Run the demo; 0 when every window's tables equal the truth."""
    from gcp_storage_emulator.server import create_server
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from airflow_provider_cdc.testing.bigquery_fake import FakeBigQuery

    with __import__("socket").socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=BUCKET)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    os.environ["STORAGE_EMULATOR_HOST"] = endpoint
    try:
        client = storage.Client(project="demo-project", credentials=AnonymousCredentials())
        now = datetime.now(timezone.utc)
        start = now.replace(microsecond=0) + timedelta(seconds=10 - now.second % 10 + 5)
        scenario = DatastreamScenario(
            database, file_format, seed=7, windows=windows, window_seconds=WINDOW_SECONDS, start=start
        )
        counts = scenario.describe()["windows"]
        _log(
            f"writing a {database} stream ({file_format}) to gs://{BUCKET}/{PREFIX} on the Cloud Storage "
            f"emulator at {endpoint}: {sum(w['files'] for w in counts)} files, "
            f"{sum(w['events'] for w in counts)} events over {windows} windows of {WINDOW_SECONDS} s from "
            f"{start.isoformat()} (uploaded as they arrive)"
        )
        written = _upload_in_real_time(scenario, client)
        wait = scenario.windows[-1][1] + timedelta(seconds=LATENESS_SECONDS) - datetime.now(timezone.utc)
        time.sleep(max(wait.total_seconds(), 0))
        with FakeBigQuery() as fake:
            fake.create_dataset(*BIGQUERY_DATASET)
            env = {
                **os.environ,
                "STORAGE_EMULATOR_HOST": endpoint,
                "AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps(
                    {
                        "conn_type": "google_cloud_platform",
                        "extra": {"is_anonymous": True, "project": "demo-project"},
                    }
                ),
                "CDC_START_DATE": start.isoformat(),
                "CDC_WINDOW_SECONDS": str(WINDOW_SECONDS),
                "CDC_DATASTREAM_ROOT": f"gs://{BUCKET}/{PREFIX}",
                "CDC_DATASTREAM_LATENESS_SECONDS": str(LATENESS_SECONDS),
                "CDC_BIGQUERY_API_ENDPOINT": fake.rest_endpoint,
                "CDC_BIGQUERY_WRITE_ENDPOINT": fake.write_endpoint,
            }
            if file_format != "avro":
                env["CDC_DATASTREAM_SETTINGS"] = json.dumps({"column_types": scenario.jsonl_column_types()})
            demo_home = Path(env.get("CDC_DEMO_HOME", log_dir))
            lake_root = str(demo_home / "datastream" / "lake")

            def rows(table: str) -> list[dict[str, Any]]:
                if target == "lake":
                    return delta_rows(lake_root, table)
                if (*BIGQUERY_DATASET, table) not in fake.state.tables:
                    return []
                return fake.rows(*BIGQUERY_DATASET, table)

            equal = True
            for index, (_, end) in enumerate(scenario.windows):
                if not _run_window(DAGS[target], index, windows, end, env, log_dir):
                    return 1
                arrived = [
                    event for planned, file in written if file.arrival < end for event in planned.events
                ]
                differences = compare_to_truth(truth(arrived, backfill_below_log_events=True), rows)
                tables = {name: len(rows(name)) for name in ("shop_customers", "shop_orders")}
                verdict = (
                    "equal to the truth"
                    if not differences
                    else "DIFFERENT: " + "; ".join(map(str, differences))
                )
                _log(f"window {index + 1}: tables {tables}: {verdict}")
                equal = equal and not differences
            return 0 if equal else 1
    finally:
        server.stop()


def _run_window(
    dag_id: str, index: int, windows: int, end: datetime, env: dict[str, str], log_dir: Path
) -> bool:
    airflow = Path(sys.executable).parent / "airflow"
    command = [str(airflow) if airflow.exists() else "airflow", "dags", "test", dag_id, end.isoformat()]
    _log(
        f"window {index + 1}/{windows}: airflow dags test {dag_id} {end.isoformat()} "
        "(the data interval ends there)"
    )
    log = log_dir / f"datastream-window-{index + 1}.log"
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
        prog="python -m airflow_provider_cdc.testing.datastream.demo", description=__doc__
    )
    parser.add_argument("--windows", type=int, default=4, help="30-second arrival windows (default 4)")
    parser.add_argument("--target", choices=sorted(DAGS), default="lake")
    parser.add_argument("--database", choices=("mysql", "oracle", "postgresql", "sqlserver"), default="mysql")
    parser.add_argument("--format", choices=("avro", "jsonl", "jsonl.gz"), default="avro")
    parser.add_argument("--log-dir", default=".", help="where each window's output goes")
    args = parser.parse_args(argv)
    if args.windows < 1:
        parser.error("--windows must be at least 1")
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    return run(args.windows, log_dir, args.target, args.database, args.format)


if __name__ == "__main__":
    sys.exit(main())
