"""The demo database: a change-stream workload laid out over consecutive windows on the emulator.

Used by the example DAG's embedded defaults (``python -m airflow_provider_cdc.testing.spanner_emulator
--demo``), the end-to-end tests and the latency benchmark. The history has splits, merges, partial
updates, deletes, transactions spanning partitions and transactions that write one row several times;
its final state is written as ground truth.

``python -m airflow_provider_cdc.testing.demo bigquery --windows N`` runs the BigQuery example DAG for N
windows against the demo database and the BigQuery fake, served from that process, and prints the
BigQuery tables (``scripts/demo.sh bigquery`` calls it).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.testing.workload import (
    ALL_CHANGES_STREAM,
    FULL_PROFILE,
    TABLES_BY_NAME,
    Workload,
    schema_ddl,
)

log = logging.getLogger(__name__)


@dataclass
class DemoSettings:
    """Where the demo lives and how its history is laid out over windows."""

    project: str = "demo-project"
    instance: str = "demo-instance"
    database: str = "demo"
    stream: str = ALL_CHANGES_STREAM
    start: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=timezone.utc))
    window: timedelta = timedelta(minutes=10)
    windows: int = 6
    changes_per_window: int = 1_000
    seed: int = 42
    #: a transaction may write one row up to this many times (Spanner reports one mod per row)
    max_writes_per_row: int = 3
    #: the values drawn (``testing.workload.values.VALUE_PROFILES``): ``google-emulator`` draws no NULL
    #: array elements, which BigQuery cannot hold
    value_profile: str = FULL_PROFILE
    #: changes committed in the minute before the first window: rows the pipeline's initial snapshot
    #: reads (later windows update some of them partially and delete others)
    prior_changes: int = 1_000
    #: the database's ``version_retention_period``: the demo's clock ends an hour past the snapshot
    version_retention: str = "7d"

    def window_bounds(self, index: int) -> tuple[datetime, datetime]:
        return self.start + self.window * index, self.start + self.window * (index + 1)


def encoded_state(workload: Workload, at: datetime | None = None) -> dict[str, list[dict[str, Any]]]:
    """Rows per table (final, or as of ``at``) in Spanner's JSON encoding, sorted by key."""
    current = workload.state if at is None else workload.state_at(at)
    state = {}
    for name, rows in current.items():
        table = TABLES_BY_NAME[name]
        state[name] = [table.encode_values(rows[key]) for key in sorted(rows)]
    return state


def load_demo(emulator: Any, settings: DemoSettings, truth_path: str | os.PathLike | None = None) -> Workload:
    """Create the demo instance/database on ``emulator`` and commit its history, window by window.

    The emulator's clock must be a ``ManualClock`` before ``settings.start``; it ends just after the last
    window, so every window is complete and readable.
    """
    from airflow_provider_cdc.testing.emulator_client import emulator_instance

    instance = emulator_instance(emulator.host, settings.project, settings.instance)
    retention = f"ALTER DATABASE `{settings.database}` SET OPTIONS (version_retention_period = " \
        f"'{settings.version_retention}')"  # fmt: skip
    database = instance.database(settings.database, ddl_statements=[*schema_ddl(retention="30d"), retention])
    database.create().result(60)
    workload = Workload(
        database, emulator, seed=settings.seed, progress_every=10**9,
        max_writes_per_row=settings.max_writes_per_row, value_profile=settings.value_profile,
    )
    if settings.prior_changes:
        # Rows before the first window, within the half minute before it: the initial snapshot's.
        emulator.clock.set(max(emulator.clock.now(), settings.start - timedelta(seconds=40)))
        workload.run(changes=settings.prior_changes, step=timedelta(seconds=30) / settings.prior_changes)
        if workload.transactions[-1].commit_timestamp >= settings.start:
            raise RuntimeError(f"the demo's prior rows overflowed the first window's start {settings.start}")
        log.info("demo rows before the first window: %d changes", settings.prior_changes)
    per_window = settings.changes_per_window
    step = settings.window * 0.9 / per_window
    for index in range(settings.windows):
        start, end = settings.window_bounds(index)
        if emulator.clock.now() < start:
            emulator.clock.set(start)
        workload.run(
            changes=per_window,
            step=step,
            split_every=max(per_window // 2, 1),
            merge_every=max(per_window // 2, 1) if index % 2 else None,
        )
        if workload.transactions[-1].commit_timestamp >= end:
            raise RuntimeError(f"demo window {index} overflowed its end {format_timestamp(end)}")
        log.info(
            "demo window %d [%s, %s): %d changes",
            index,
            format_timestamp(start),
            format_timestamp(end),
            per_window,
        )
    emulator.clock.set(settings.window_bounds(settings.windows - 1)[1] + timedelta(seconds=1))
    if truth_path is not None:
        payload = {
            "settings": {
                **asdict(settings),
                "start": settings.start.isoformat(),
                "window": settings.window.total_seconds(),
            },
            "host": emulator.host,
            "splits": len(workload.splits),
            "merges": len(workload.merges),
            "transactions": len(workload.transactions),
            "changes": workload.change_count,
            "state": encoded_state(workload),
            # the rows the initial snapshot reads, and how to key them
            "state_before_first_window": encoded_state(workload, settings.start - timedelta(microseconds=1)),
            "key_columns": {
                name: [c.name for c in TABLES_BY_NAME[name].key_columns] for name in workload.state
            },
            # the tables as they must be once windows 0..i are applied
            "state_after_window": [
                encoded_state(workload, settings.window_bounds(i)[1] - timedelta(microseconds=1))
                for i in range(settings.windows)
            ],
        }
        Path(truth_path).write_text(json.dumps(payload, sort_keys=True))
    return workload


#: The BigQuery example DAG and its default dataset (``example_dags/spanner_change_stream_to_bigquery.py``).
BIGQUERY_DAG_ID = "spanner_change_stream_to_bigquery"
BIGQUERY_PROJECT, BIGQUERY_DATASET = "demo-project", "cdc_demo"
_WINDOW_LINES = re.compile(r"Window \[[^]]*\) applied[^\[]*|\S+ → \S+: \d+ rows \([^)]*\)")


def run_bigquery_demo(windows: int, log_dir: str | os.PathLike, changes_per_window: int = 1_000) -> int:
    """Run the BigQuery example DAG for ``windows`` consecutive windows on embedded defaults, then print
    its BigQuery tables and whether they equal the history; returns 0 when they do.

    The demo database, drawn without NULL array elements (BigQuery arrays cannot hold them), is served by
    the emulator and the dataset ``demo-project.cdc_demo`` by the BigQuery fake, both from this process;
    each window runs as ``airflow dags test`` with this process's environment (``AIRFLOW_HOME``, the
    DAGs folder) and their endpoints, its output in ``{log_dir}/window-N.log``.
    """
    from airflow_provider_cdc.testing.bigquery_fake import FakeBigQuery
    from airflow_provider_cdc.testing.bigquery_fake.compare import compare_bigquery_to_truth
    from airflow_provider_cdc.testing.spanner_emulator import ManualClock, SpannerEmulator
    from airflow_provider_cdc.testing.workload import GOOGLE_EMULATOR_PROFILE

    settings = DemoSettings(
        windows=windows, changes_per_window=changes_per_window, value_profile=GOOGLE_EMULATOR_PROFILE
    )
    emulator = SpannerEmulator(ManualClock(settings.start - timedelta(minutes=1)))
    host = emulator.start()
    try:
        with FakeBigQuery() as fake:
            fake.create_dataset(BIGQUERY_PROJECT, BIGQUERY_DATASET)
            workload = load_demo(emulator, settings)
            print(f"[demo] demo database loaded: {workload.change_count} changes in {windows} windows, "
                  f"BigQuery fake at {fake.rest_endpoint} (REST) and {fake.write_endpoint} (Storage Write)",
                  file=sys.stderr, flush=True)  # fmt: skip
            env = {
                **os.environ,
                "SPANNER_EMULATOR_HOST": host,
                "CDC_BIGQUERY_API_ENDPOINT": fake.rest_endpoint,
                "CDC_BIGQUERY_WRITE_ENDPOINT": fake.write_endpoint,
            }
            for index in range(windows):
                if not _run_window(settings, index, env, Path(log_dir)):
                    return 1
            truth = encoded_state(workload)
            tables = sorted(truth)
            for table in tables:
                rows = fake.rows(BIGQUERY_PROJECT, BIGQUERY_DATASET, table)
                keys = [c.name for c in TABLES_BY_NAME[table].key_columns]
                rows.sort(key=lambda row: json.dumps([row[k] for k in keys], default=str))
                print(f"\n{BIGQUERY_PROJECT}.{BIGQUERY_DATASET}.{table}: {len(rows)} rows")
                for row in rows[:3]:
                    print("  " + json.dumps(row, default=str, ensure_ascii=False)[:220])
            print(f"\nDo the BigQuery tables equal the history committed in those {windows} windows?")
            results = compare_bigquery_to_truth(fake, BIGQUERY_PROJECT, BIGQUERY_DATASET, truth)
            for result in results:
                verdict = "equal" if result.equal else "DIFFERENT"
                print(f"{result.table}: BigQuery {result.lake_rows} rows, committed history "
                      f"{result.truth_rows} rows: {verdict}")  # fmt: skip
            return 0 if all(result.equal for result in results) else 1
    finally:
        emulator.stop()


def _run_window(settings: DemoSettings, index: int, env: dict[str, str], log_dir: Path) -> bool:
    """``airflow dags test`` of the window ``index`` (the date given is its end); prints its summary."""
    end = settings.window_bounds(index)[1].isoformat()
    airflow = Path(sys.executable).parent / "airflow"
    command = [str(airflow) if airflow.exists() else "airflow", "dags", "test", BIGQUERY_DAG_ID, end]
    print(f"\n[demo] window {index + 1}/{settings.windows}: airflow dags test {BIGQUERY_DAG_ID} {end} "
          "(data interval ends there)", file=sys.stderr, flush=True)  # fmt: skip
    log = log_dir / f"window-{index + 1}.log"
    started = time.monotonic()
    with log.open("w") as out:
        code = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    text = log.read_text(errors="replace")
    if code != 0:
        print("\n".join(text.splitlines()[-40:]), file=sys.stderr)
        return False
    for line in _WINDOW_LINES.findall(text):
        print(f"  {line.strip()}", file=sys.stderr)
    seconds = time.monotonic() - started
    print(f"[demo] window {index + 1} done in {seconds:.0f} s", file=sys.stderr, flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_provider_cdc.testing.demo",
        description="Run an example DAG on embedded defaults (the emulator's demo database, a local fake).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    bigquery = commands.add_parser("bigquery", help=f"{BIGQUERY_DAG_ID} against the BigQuery fake")
    bigquery.add_argument("--windows", type=int, default=5, help="consecutive 10-minute windows (default 5)")
    bigquery.add_argument("--changes-per-window", type=int, default=1_000)
    bigquery.add_argument("--log-dir", default=".", help="where each window's output goes")
    args = parser.parse_args(argv)
    if args.windows < 1:
        parser.error("--windows must be at least 1")
    return run_bigquery_demo(args.windows, args.log_dir, args.changes_per_window)


if __name__ == "__main__":
    sys.exit(main())
