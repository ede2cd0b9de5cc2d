"""Run the change-stream emulator: ``python -m airflow_provider_cdc.testing.spanner_emulator --port 9010``
(or ``cdc-spanner-emulator``), with a database of your own DDL (``--ddl schema.sql --database shop``);
``cdc-spanner-emulator clock --host HOST:PORT show | advance 10m | set <RFC 3339>`` reads or moves the
clock of a running one.

Part of the test kit: it needs the ``testing`` extra (``pip install 'airflow-provider-cdc[testing]'``).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow_provider_cdc.core.timestamps import from_micros, parse_timestamp

from .admin import ClockError, RemoteClock, parse_clock_duration, rfc3339
from .ddl import DdlError, split_statements
from .model import EmulatorError, PartitionSchedule, StatementError
from .server import SpannerEmulator, parse_clock

CHANGE_STREAM_DEMO, COMMIT_TIMESTAMP_DEMO = "change-stream", "commit-timestamp"
DEMO_KINDS = (CHANGE_STREAM_DEMO, COMMIT_TIMESTAMP_DEMO)
COMMAND = "cdc-spanner-emulator"
#: Instance and database IDs as Spanner accepts them (the messages are Google's emulator's).
_INSTANCE_ID = re.compile(r"[a-z][-a-z0-9]{0,62}[a-z0-9]")
_DATABASE_ID = re.compile(r"[a-z][a-z0-9_-]{0,28}[a-z0-9]")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_provider_cdc.testing.spanner_emulator",
        description="Spanner change-stream emulator for the google-cloud-spanner client "
        "(set SPANNER_EMULATOR_HOST=<host>:<port>).",
        epilog=f"Move the clock of a running emulator: {COMMAND} clock --host HOST:PORT show | advance 10m | "
        "set 2026-01-01T00:10:00Z. Part of the test kit: install it with "
        "pip install 'airflow-provider-cdc[testing]'.",
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
    own = parser.add_argument_group("your own database")
    own.add_argument(
        "--ddl",
        help="DDL file to create --database with: statements separated by ';', -- # /* */ comments allowed "
        "(as gcloud spanner databases create --ddl-file reads it)",
    )
    own.add_argument("--database", help="database ID to create (empty without --ddl)")
    own.add_argument("--project", default="test-project", help="project of --database (default test-project)")
    own.add_argument(
        "--instance", default="test-instance", help="instance of --database, created (default test-instance)"
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


def _read_ddl(path: str) -> list[tuple[int, str]]:
    """The statements of the DDL file ``path`` with their line numbers."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read the DDL file {path}: {exc.strerror or exc}") from exc
    try:
        return split_statements(text)
    except DdlError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def _check_ids(args: argparse.Namespace) -> None:
    if not _INSTANCE_ID.fullmatch(args.instance):
        raise ValueError(
            "Instance ID must start with a lowercase letter, be 2-64 characters long, contain only lowercase "
            f"letters, numbers, or hyphens, and not end with a hyphen. Got: {args.instance}"
        )
    if not _DATABASE_ID.fullmatch(args.database):
        raise ValueError(
            "Invalid database name. Database name must start with a lowercase letter, be 2-30 characters "
            "long, contain only lowercase letters, numbers, underscores or hyphens, and not end with an "
            f"underscore or hyphen. Got: {args.database}"
        )


def _load_ddl(emulator: SpannerEmulator, args: argparse.Namespace, statements: list[tuple[int, str]]) -> str:
    """Create ``--database`` with the file's statements; a refused one exits, naming it and why."""
    try:
        database = emulator.create_database(
            args.project, args.instance, args.database, [text for _, text in statements]
        )
    except StatementError as exc:
        line, text = statements[exc.index]
        shown = " ".join(text.split())
        raise ValueError(
            f"{args.ddl}:{line}: statement {exc.index + 1} refused ({exc.code.name}): {exc.message}\n"
            f"  {shown[:300]}{' …' if len(shown) > 300 else ''}"
        ) from exc
    except EmulatorError as exc:
        raise ValueError(f"{exc.code.name}: {exc.message}") from exc
    return database.path


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _connection_help(host: str, args: argparse.Namespace, database: str | None, emulator: Any) -> str:
    lines = [
        f"Spanner change-stream emulator serving on {host}",
        f"  export SPANNER_EMULATOR_HOST={host}",
    ]
    if database:
        schema = emulator.database(database)
        lines += [
            f"  project {args.project}, instance {args.instance}, database {args.database} "
            f"({_count(len(schema.tables), 'table')}, {_count(len(schema.streams), 'change stream')})",
            f"  schema applied at {rfc3339(from_micros(schema.last_commit_us))}: change streams read from "
            "then on",
        ]
    if args.clock == "manual":
        lines.append(
            f"  manual clock at {rfc3339(emulator.clock.now())}; move it with: {COMMAND} clock --host {host} "
            "advance 10m"
        )
    else:
        lines.append("  wall clock (for a clock you move: --clock manual --start <RFC 3339 time>)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["clock"]:
        return clock_main(argv[1:])
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
    statements: list[tuple[int, str]] = []
    try:
        if args.ddl and not args.database:
            raise ValueError("--ddl needs --database, the ID of the database to create")
        if args.database:
            _check_ids(args)
        if args.ddl:
            statements = _read_ddl(args.ddl)
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
    database = None
    if args.database:
        try:
            database = _load_ddl(emulator, args, statements)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    host = emulator.start(port=args.port, host=args.host)
    if args.demo:
        _load_demo(emulator, args.demo_kind, settings, args.demo_truth)
    if args.port_file:
        with open(args.port_file, "w") as handle:
            handle.write(host)
    logging.getLogger(__name__).info("Spanner change-stream emulator serving on %s", host)
    print(_connection_help(host, args, database, emulator), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: emulator.stop())
    try:
        emulator.wait()
    except KeyboardInterrupt:
        emulator.stop()
    return 0


def build_clock_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{COMMAND} clock",
        description="Read or move the clock of a running emulator: a manual clock (--clock manual) moves "
        "forward, and commits take its time; the wall clock can only be read. Prints the clock's time.",
    )
    parser.add_argument(
        "--host",
        default=os.environ.get("SPANNER_EMULATOR_HOST"),
        help="the emulator's HOST:PORT (default $SPANNER_EMULATOR_HOST)",
    )
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("show", help="print the clock's time")
    advance = actions.add_parser("advance", help="move the clock forward by a duration")
    advance.add_argument("duration", help="e.g. 10m, 90s, 1h30m, 1.5s, 250ms, 2d")
    set_ = actions.add_parser("set", help="move the clock forward to a time")
    set_.add_argument("time", help="RFC 3339, e.g. 2026-01-01T00:10:00Z")
    return parser


def clock_main(argv: list[str]) -> int:
    """``clock [--host HOST:PORT] show | advance DURATION | set TIME``: print the clock's (new) time."""
    parser = build_clock_parser()
    args = parser.parse_args(argv)
    if not args.host:
        parser.error("no emulator: pass --host HOST:PORT or set SPANNER_EMULATOR_HOST")
    clock = RemoteClock(args.host)
    try:
        if args.action == "advance":
            now = clock.advance(parse_clock_duration(args.duration))
        elif args.action == "set":
            now = clock.set(parse_timestamp(args.time))
        else:
            now = clock.now()
    except (ClockError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(rfc3339(now))
    return 0


if __name__ == "__main__":
    sys.exit(main())
