"""Operator's command line: what the metastore and the lake hold, for diagnosing a pipeline.

python -m airflow_provider_cdc status --pipeline spanner_change_stream_to_lake
python -m airflow_provider_cdc tables --lake-root /path/to/lake
python -m airflow_provider_cdc timings --dag-id spanner_change_stream_to_lake
python -m airflow_provider_cdc compare --lake-root /path/to/lake --truth demo-truth.json
python -m airflow_provider_cdc repair --pipeline spanner_change_stream_to_lake --lake-root /path/to/lake \
    --changeset-root /path/to/changesets
python -m airflow_provider_cdc migrate
python -m airflow_provider_cdc latest --lake-root /path/to/lake --table Orders --output orders.parquet
python -m airflow_provider_cdc compact --lake-root /path/to/lake --table Orders --pipeline orders
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from typing import Any

from airflow_provider_cdc.core.timestamps import format_timestamp


def _short(token: str, width: int = 14) -> str:
    return token if len(token) <= width else token[: width - 1] + "…"


def _ts(value: datetime | None) -> str:
    return format_timestamp(value)[:-4] + "Z" if value else "-"


def _seconds(a: datetime | None, b: datetime | None) -> str:
    return f"{(b - a).total_seconds():.1f}s" if a and b else "-"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def _metastore_without_schema(url: str | None) -> Any:
    from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
    from airflow_provider_cdc.metastore import Metastore

    return Metastore(url or CdcMetastoreHook().get_url())


def _metastore(url: str | None) -> Any:
    if url:
        from airflow_provider_cdc.metastore import Metastore

        store = Metastore(url)
        store.create_schema()
        return store
    from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook

    return CdcMetastoreHook().metastore


def status(args: argparse.Namespace) -> int:
    """Windows, partitions (state, watermark, lease, lag) and apply watermarks of a pipeline."""
    store = _metastore(args.metastore_url)
    now = datetime.now(timezone.utc)
    windows = store.list_windows(args.pipeline)
    print(f"Windows of pipeline {args.pipeline}: {len(windows)}")
    headers = [
        "window start",
        "window end",
        "state",
        "attempt",
        "rows",
        "transactions",
        "opened → applied",
    ]
    rows = [
        [_ts(w.start), _ts(w.end), w.state.value, w.attempt, _count(w.record_count),
         _count(w.transaction_count), _seconds(w.opened_at, w.applied_at)]
        for w in windows
    ]  # fmt: skip
    print(_table(headers, rows))
    streams = sorted({w.stream for w in windows} | set(args.stream or []))
    for stream in streams:
        if not store.is_known_stream(stream):
            print(f"\nStream {stream}: no partitions recorded")
            continue
        partitions = store.list_partitions(stream)
        alive = [p for p in partitions if p.end_timestamp is None]
        print(f"\nPartitions of {stream}: {len(partitions)} recorded, {len(alive)} open")
        headers = [
            "token",
            "state",
            "start",
            "end",
            "watermark",
            "parents",
            "lease owner",
            "lease expires",
            "records",
        ]
        rows = [
            [_short(p.token), p.state.value, _ts(p.start_timestamp), _ts(p.end_timestamp), _ts(p.watermark),
             ",".join(_short(t, 8) for t in p.parent_tokens) or "-", p.lease_owner or "-",
             _ts(p.lease_expires_at), p.record_count]
            for p in partitions[-args.limit :]
        ]  # fmt: skip
        print(_table(headers, rows))
        last = windows[-1].end if windows else None
        if last is not None:
            lagging = store.lagging_partitions(stream, last)
            for p in lagging:
                print(f"  holding back {_ts(last)}: {p.token} drained to {_ts(p.watermark)}")
    marks = store.table_watermarks(args.pipeline)
    reported = _reported_watermarks(store, args.pipeline)
    if not reported:
        print(f"\nApply watermarks of {args.pipeline} (upsert_stream_apply_watermark):")
        print(
            _table(
                ["table", "watermark", "lag behind now"],
                [[t, _ts(m), _lag(now, m)] for t, m in sorted(marks.items())],
            )
        )
        return 0
    named = " and ".join(
        f"the {kind.title} tables' ({kind.watermark}, as the commit recorded it)" for kind, _marks in reported
    )
    print(f"\nApply watermarks of {args.pipeline}: the Delta tables' (committed window ends) and {named}")
    headers = ["table", "Delta watermark", "lag behind now"]
    for kind, _marks in reported:
        headers += [f"{kind.title} watermark", "lag behind now"]
    tables = sorted(set(marks).union(*(set(m) for _kind, m in reported)))
    rows = []
    for t in tables:
        row = [t, _ts(marks.get(t)), _lag(now, marks.get(t))]
        for _kind, target_marks in reported:
            row += [_ts(target_marks.get(t)), _lag(now, target_marks.get(t))]
        rows.append(row)
    print(_table(headers, rows))
    return 0


def _lag(now: datetime, mark: datetime | None) -> str:
    return f"{(now - mark).total_seconds():.0f}s" if mark else "-"


def _reported_watermarks(store: Any, pipeline: str) -> list[tuple[Any, dict[str, datetime]]]:
    """Per registered target that reports its own watermarks (BigQuery), the watermarks the commit
    recorded for the pipeline; targets without any are left out."""
    from airflow_provider_cdc.targets.registry import target_kind, target_names

    kinds = [target_kind(name) for name in target_names()]
    found = [
        (kind, store.table_watermarks(pipeline, target=kind.name))
        for kind in kinds
        if not kind.watermark_is_window_end
    ]
    return [(kind, marks) for kind, marks in found if marks]


def _storage_options_argument(args: argparse.Namespace) -> dict[str, str] | None:
    """``--storage-options`` (delta-rs storage options as JSON), or ``None``."""
    text = getattr(args, "storage_options", None)
    return json.loads(text) if text else None


def tables(args: argparse.Namespace) -> int:
    """Each Delta table under the lake root: row count and a few rows."""
    from pyarrow import fs

    from airflow_provider_cdc.filesystems import resolve
    from airflow_provider_cdc.metastore.model import DELTA_TARGET
    from airflow_provider_cdc.targets.registry import open_target

    options = _storage_options_argument(args)
    lake: Any = open_target(DELTA_TARGET, args.lake_root, options)
    # the same filesystem every step opens the lake with (gs:// with the same credentials)
    filesystem, root = resolve(args.lake_root, options)
    names = sorted(
        info.base_name
        for info in filesystem.get_file_info(fs.FileSelector(root, allow_not_found=True))
        # folders of the lake's own (``_tombstones``) are not tables
        if info.type == fs.FileType.Directory
        and not info.base_name.startswith("_")
        and lake.exists(info.base_name)
    )
    if not names:
        print(f"No Delta tables under {args.lake_root}")
        return 1
    for name in names:
        table = lake.read_table(name)
        version = lake.open(name).version()
        print(f"\n{name}: {table.num_rows} rows, {table.num_columns} columns, Delta version {version}")
        keys = [f.name for f in table.schema if (f.metadata or {}).get(b"spanner.primary_key") == b"true"]
        if keys:
            table = table.sort_by([(k, "ascending") for k in keys])
        for row in table.slice(0, args.rows).to_pylist():
            print("  " + json.dumps(row, default=str, ensure_ascii=False)[:220])
    return 0


def timings(args: argparse.Namespace) -> int:
    """Per DAG run (window): each task's duration, from Airflow's own records."""
    from airflow.models import DagRun, TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        runs = (
            session.query(DagRun)
            .filter(DagRun.dag_id == args.dag_id)
            .order_by(DagRun.data_interval_start)
            .all()
        )
        task_ids: list[str] = []
        rows = []
        for run in runs:
            tis = session.query(TaskInstance).filter(
                TaskInstance.dag_id == args.dag_id, TaskInstance.run_id == run.run_id
            )
            durations: dict[str, float] = {}
            for ti in tis:
                durations[ti.task_id] = durations.get(ti.task_id, 0.0) + float(ti.duration or 0.0)
                if ti.task_id not in task_ids:
                    task_ids.append(ti.task_id)
            rows.append((run, durations, sum(durations.values())))
    order = [
        t
        for t in ("wait_parents", "open_window", "read", "drained", "merge", "upsert", "commit")
        if t in task_ids
    ]
    order += [t for t in task_ids if t not in order]
    print(
        _table(
            ["window start", "state", *order, "sum of tasks"],
            [
                [_ts(run.data_interval_start), run.state, *[f"{d.get(t, 0.0):.1f}s" for t in order],
                 f"{total:.1f}s"]
                for run, d, total in rows
            ],
        )
    )  # fmt: skip
    return 0


def _keys_of(rows: list[dict[str, Any]], columns: list[str]) -> set[str]:
    """The keys of ``rows`` (values of ``columns``) as comparable text."""
    return {json.dumps([row.get(c) for c in columns]) for row in rows}


def compare(args: argparse.Namespace) -> int:
    """Do the Delta tables equal the ground truth written by the demo emulator?"""
    from airflow_provider_cdc.metastore.model import DELTA_TARGET
    from airflow_provider_cdc.targets.delta.compare import compare_lake_to_rows
    from airflow_provider_cdc.targets.registry import open_target

    with open(args.truth) as handle:
        recorded = json.load(handle)
    truth = recorded["state"] if args.windows is None else recorded["state_after_window"][args.windows - 1]
    lake: Any = open_target(DELTA_TARGET, args.lake_root, _storage_options_argument(args))
    results = compare_lake_to_rows(lake, truth)
    before = recorded.get("state_before_first_window") or {}
    keys = recorded.get("key_columns") or {}
    for r in results:
        verdict = "equal" if r.equal else "DIFFERENT"
        prior = ""
        if r.table in before and r.table in keys:
            # rows that existed before the first window (the initial snapshot's) and are still there
            kept = _keys_of(before[r.table], keys[r.table]) & _keys_of(truth.get(r.table, []), keys[r.table])
            prior = f" ({len(kept)} of them from the {len(before[r.table])} rows before the first window)"
        print(f"{r.table}: lake {r.lake_rows} rows, committed history {r.truth_rows} rows{prior}: {verdict}")
        for row in r.only_in_lake[:1]:
            print(f"  only in the lake: {row[:200]}")
        for row in r.only_in_truth[:1]:
            print(f"  only in the history: {row[:200]}")
    return 0 if all(r.equal for r in results) else 1


def repair(args: argparse.Namespace) -> int:
    """Re-apply, from their change sets, the windows a restored or rolled-back table lacks."""
    from airflow_provider_cdc.repair import repair_pipeline

    store = _metastore(args.metastore_url)
    options = json.loads(args.storage_options) if args.storage_options else None
    reports = repair_pipeline(
        store, args.pipeline, args.lake_root, args.changeset_root, options, dry_run=args.dry_run
    )
    if not reports:
        print(f"Every table of pipeline {args.pipeline} holds the windows the metastore applied to it")
        return 0
    rows = [
        [
            r.table,
            r.expected,
            _count(r.found),
            len(r.reapplied),
            ", ".join(r.missing) or "-",
            (r.problem or "")[:80],
        ]
        for r in reports
    ]
    print(_table(["table", "metastore", "table held", "re-applied", "change sets gone", "problem"], rows))
    return 0 if all(r.agrees for r in reports) else 1


def migrate(args: argparse.Namespace) -> int:
    """Create or upgrade the metastore's tables to this provider's schema version."""
    from airflow_provider_cdc.metastore import CURRENT_VERSION

    store = _metastore_without_schema(args.metastore_url)
    applied = store.create_schema()
    print(f"metastore at schema version {CURRENT_VERSION}" + (f" (applied {applied})" if applied else ""))
    return 0


def latest(args: argparse.Namespace) -> int:
    """A Delta table's latest state: its rows with its pending windows applied (merge-on-read)."""
    import pyarrow.parquet as pq

    from airflow_provider_cdc.core.timestamps import to_micros
    from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

    lake = DeltaLakeTarget(args.lake_root, json.loads(args.storage_options) if args.storage_options else None)
    if not lake.exists(args.table):
        print(f"No Delta table {args.table} under {args.lake_root}")
        return 1
    pending = lake.pending(args.table)
    app_id = pending.last_app_id()
    pipeline = args.pipeline or (app_id.split(":", 1)[1] if app_id else None)
    windows = lake.pending_windows(args.table, pipeline) if pipeline else []
    watermark = lake.apply_watermark(args.table, pipeline) if pipeline else None
    reader = lake.latest_batches(args.table, pipeline)
    rows, shown = 0, []
    writer = None
    try:
        for batch in reader:
            if args.output:
                writer = writer or pq.ParquetWriter(args.output, reader.schema)
                writer.write_batch(batch)
            if len(shown) < args.rows:
                shown += batch.slice(0, args.rows - len(shown)).to_pylist()
            rows += batch.num_rows
    finally:
        if writer is not None:
            writer.close()
        elif args.output:
            pq.write_table(reader.schema.empty_table(), args.output)
    micros = "" if watermark is None else f", {to_micros(watermark)} µs"
    print(
        f"{args.table}: {rows} rows: Delta version {lake.open(args.table).version()} (apply watermark "
        f"{_ts(watermark)}{micros}) and {len(windows)} pending window(s)"
        + (f"; written to {args.output}" if args.output else "")
    )
    for row in shown:
        print("  " + json.dumps(row, default=str, ensure_ascii=False)[:220])
    return 0


def compact(args: argparse.Namespace) -> int:
    """Fold a Delta table's pending windows into it with one MERGE (deferred apply)."""
    from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

    lake = DeltaLakeTarget(args.lake_root, json.loads(args.storage_options) if args.storage_options else None)
    result = lake.compact(args.table, args.pipeline)
    print(json.dumps(result.to_dict(), sort_keys=True))
    return 0


def spark_connect(args: argparse.Namespace) -> int:
    """Start, inspect or stop a local Spark Connect server (a warm Spark for every window's merge)."""
    from airflow_provider_cdc.spark_connect.server import (
        LocalSparkConnectServer,
        SparkConnectServerError,
        warm_up,
    )

    server = LocalSparkConnectServer(args.state_dir) if args.state_dir else LocalSparkConnectServer()
    if args.action == "start":
        try:
            state = server.start(args.port, master=args.master)
        except SparkConnectServerError as error:
            print(f"spark-connect: {error}", file=sys.stderr)
            return 1
        print(f"Spark Connect server {state.url} (pid {state.pid}, log {state.log})")
        if not args.no_warm_up:
            print(f"warmed up in {warm_up(state.url, server.state_dir):.1f}s")
        print(
            "connection: AIRFLOW_CONN_SPARK_DEFAULT="
            + json.dumps({"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": state.port})
        )
        return 0
    if args.action == "stop":
        print("stopped" if server.stop() else "no Spark Connect server was running")
        return 0
    state = server.state()
    print(f"running: {state.url} (pid {state.pid})" if state else "not running")
    return 0 if state else 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_provider_cdc", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("status", help=status.__doc__)
    p.add_argument("--pipeline", required=True, help="pipeline id (the DAG id by default)")
    p.add_argument(
        "--stream", action="append", help="also show this stream (projects/…/databases/<db>/<stream>)"
    )
    p.add_argument("--metastore-url", help="SQLAlchemy URL (default: the cdc_metastore_default connection)")
    p.add_argument("--limit", type=int, default=40, help="partitions shown per stream (newest)")
    p.set_defaults(run=status)
    p = commands.add_parser("tables", help=tables.__doc__)
    p.add_argument("--lake-root", required=True)
    p.add_argument("--rows", type=int, default=3)
    p.add_argument("--storage-options", help="delta-rs storage options as JSON (for gs:// and other stores)")
    p.set_defaults(run=tables)
    p = commands.add_parser("timings", help=timings.__doc__)
    p.add_argument("--dag-id", required=True)
    p.set_defaults(run=timings)
    p = commands.add_parser("compare", help=compare.__doc__)
    p.add_argument("--lake-root", required=True)
    p.add_argument("--truth", required=True)
    p.add_argument(
        "--windows", type=int, help="compare with the history of the first N windows (default: all)"
    )
    p.add_argument("--storage-options", help="delta-rs storage options as JSON (for gs:// and other stores)")
    p.set_defaults(run=compare)
    p = commands.add_parser("repair", help=repair.__doc__)
    p.add_argument("--pipeline", required=True, help="pipeline id (the DAG id by default)")
    p.add_argument("--lake-root", required=True, help="root of the Delta tables")
    p.add_argument("--changeset-root", required=True, help="root of the windows' change sets")
    p.add_argument("--metastore-url", help="SQLAlchemy URL (default: the cdc_metastore_default connection)")
    p.add_argument("--storage-options", help="delta-rs storage options as JSON (for gs:// and other stores)")
    p.add_argument("--dry-run", action="store_true", help="say what would be re-applied, change nothing")
    p.set_defaults(run=repair)
    p = commands.add_parser("migrate", help=migrate.__doc__)
    p.add_argument("--metastore-url", help="SQLAlchemy URL (default: the cdc_metastore_default connection)")
    p.set_defaults(run=migrate)
    p = commands.add_parser("latest", help=latest.__doc__)
    p.add_argument("--lake-root", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--pipeline", help="pipeline id (default: the one that last appended pending changes)")
    p.add_argument("--rows", type=int, default=3, help="rows shown")
    p.add_argument("--output", help="also write the rows to this Parquet file")
    p.add_argument("--storage-options", help="delta-rs storage options as JSON (for gs:// and other stores)")
    p.set_defaults(run=latest)
    p = commands.add_parser("compact", help=compact.__doc__)
    p.add_argument("--lake-root", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--pipeline", required=True, help="pipeline id (names the Delta app transaction)")
    p.add_argument("--storage-options", help="delta-rs storage options as JSON (for gs:// and other stores)")
    p.set_defaults(run=compact)
    p = commands.add_parser("spark-connect", help=spark_connect.__doc__)
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--port", type=int, default=15002, help="loopback port of the server (default 15002)")
    p.add_argument("--master", default="local[*]", help="the server's Spark master (default local[*])")
    p.add_argument("--no-warm-up", action="store_true",
                   help="skip the small job run after the start (it spares the first window the warm-up)")
    p.add_argument("--state-dir", help="where the server's pid, port and log are kept "
                   "(default ~/.cache/cdc-spark-connect, or CDC_SPARK_CONNECT_HOME)")
    p.set_defaults(run=spark_connect)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
