"""Run the change-stream emulator: ``python -m airflow_provider_cdc.testing.spanner_emulator --port 9010``
(or ``cdc-spanner-emulator``).

Part of the test kit: it needs the ``testing`` extra (``pip install 'airflow-provider-cdc[testing]'``).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from datetime import timedelta
from typing import Any

from .model import PartitionSchedule
from .server import SpannerEmulator, parse_clock

CHANGE_STREAM_DEMO, COMMIT_TIMESTAMP_DEMO = "change-stream", "commit-timestamp"
DEMO_KINDS = (CHANGE_STREAM_DEMO, COMMIT_TIMESTAMP_DEMO)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_provider_cdc.testing.spanner_emulator",
        description="Spanner change-stream emulator for the google-cloud-spanner client "
        "(set SPANNER_EMULATOR_HOST=<host>:<port>).",
        epilog="Part of the test kit: install it with pip install 'airflow-provider-cdc[testing]'.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9010, help="port to bind (0 = any free port)")
    parser.add_argument(
        "--clock", choices=["wall", "manual"], default="wall", help="wall time or simulated time"
    )
    parser.add_argument("--start", help="start of a manual clock (RFC 3339)")
    parser.add_argument("--seed", type=int, default=0, help="seed for partition tokens, splits and merges")
    parser.add_argument("--initial-partitions", type=int, default=2, help="partitions of a new database")
    parser.add_argument(
        "--split-every", type=float, help="split or merge a partition every N seconds of clock time"
    )
    parser.add_argument("--max-partitions", type=int, default=8)
    parser.add_argument("--min-partitions", type=int, default=1)
    parser.add_argument(
        "--port-file", help="write the bound host:port to this file once serving (and loaded)"
    )
    demo = parser.add_argument_group("demo database (a manual clock starting before 2026-01-01)")
    demo.add_argument(
        "--demo", action="store_true", help="load a demo database (--demo-kind, default change-stream)"
    )
    demo.add_argument(
        "--demo-kind",
        choices=DEMO_KINDS,
        default=CHANGE_STREAM_DEMO,
        help="change-stream: demo-project/demo-instance/demo read by a change stream (default); "
        "commit-timestamp: demo-project/demo-instance/ledger, tables read by their commit-timestamp column",
    )
    demo.add_argument("--demo-windows", type=int, default=6, help="ten-minute windows of history")
    demo.add_argument(
        "--demo-changes-per-window",
        type=int,
        help="changes (change-stream demo, default 1000) or transactions (commit-timestamp demo, "
        "default 120) per window",
    )
    demo.add_argument("--demo-truth", help="write the demo history's final state (JSON) to this file")
    return parser


def _demo_settings(args: argparse.Namespace) -> Any:
    """The settings of the demo ``--demo-kind`` names."""
    if args.demo_kind == COMMIT_TIMESTAMP_DEMO:
        from airflow_provider_cdc.testing.commit_timestamp_demo import CommitTimestampDemoSettings

        settings = CommitTimestampDemoSettings(windows=args.demo_windows)
        if args.demo_changes_per_window is not None:
            settings.transactions_per_window = args.demo_changes_per_window
        return settings
    from airflow_provider_cdc.testing.demo import DemoSettings

    return DemoSettings(
        windows=args.demo_windows,
        changes_per_window=1_000 if args.demo_changes_per_window is None else args.demo_changes_per_window,
    )


def _load_demo(emulator: SpannerEmulator, kind: str, settings: Any, truth: str | None) -> None:
    """Load the demo database of ``kind`` (its truth written to ``truth``) and log what it holds."""
    logger = logging.getLogger(__name__)
    if kind == COMMIT_TIMESTAMP_DEMO:
        from airflow_provider_cdc.testing.commit_timestamp_demo import load_commit_timestamp_demo

        history = load_commit_timestamp_demo(emulator, settings, truth)
        counts = history.counts
        logger.info(
            "demo database loaded: %s/%s/%s, %d transactions over %d windows: %d inserts, %d updates, "
            "%d soft deletes, %d undeletes, %d DocumentHistory rows, %d transactions across both tables, "
            "%d pairs sharing one explicit timestamp",
            settings.project,
            settings.instance,
            settings.database,
            counts.transactions,
            settings.windows,
            counts.inserts,
            counts.updates,
            counts.soft_deletes,
            counts.undeletes,
            counts.history_rows,
            counts.cross_table_transactions,
            counts.shared_timestamp_pairs,
        )
        return
    from airflow_provider_cdc.testing.demo import load_demo

    workload = load_demo(emulator, settings, truth)
    logger.info(
        "demo database loaded: %d changes in %d transactions over %d windows, %d splits, %d merges",
        workload.change_count,
        len(workload.transactions),
        settings.windows,
        len(workload.splits),
        len(workload.merges),
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    schedule = None
    if args.split_every:
        schedule = PartitionSchedule(
            every=timedelta(seconds=args.split_every),
            seed=args.seed,
            min_partitions=args.min_partitions,
            max_partitions=args.max_partitions,
        )
    try:
        if args.demo:
            settings = _demo_settings(args)
            args.clock, args.start = "manual", (settings.start - timedelta(minutes=1)).isoformat()
        clock = parse_clock(args.clock, args.start)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    emulator = SpannerEmulator(
        clock, seed=args.seed, initial_partitions=args.initial_partitions, partition_schedule=schedule
    )
    host = emulator.start(port=args.port, host=args.host)
    if args.demo:
        _load_demo(emulator, args.demo_kind, settings, args.demo_truth)
    if args.port_file:
        with open(args.port_file, "w") as handle:
            handle.write(host)
    logging.getLogger(__name__).info("Spanner change-stream emulator serving on %s", host)
    signal.signal(signal.SIGTERM, lambda *_: emulator.stop())
    try:
        emulator.wait()
    except KeyboardInterrupt:
        emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
