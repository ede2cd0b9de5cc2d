"""The Delta target's operator commands (``python -m airflow_provider_cdc …``): ``tables``, ``compare``,
``repair``, ``latest`` and ``compact`` read or mend the Delta tables under a lake root (registered by the
target's ``TargetKind.cli``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from airflow_provider_cdc.cli import common


def register(commands: Any, pipeline_command: Any) -> None:
    """Add the Delta target's commands to the ``commands`` subparsers (``pipeline_command`` wraps a
    command that names a pipeline)."""
    p = commands.add_parser("tables", help=tables.__doc__)
    p.add_argument("--lake-root", help="root of the Delta tables (default: --pipeline's lake_root)")
    p.add_argument("--pipeline", help="a pipeline or DAG id whose DAG names the lake_root")
    p.add_argument("--rows", type=int, default=3)
    p.add_argument("--storage-options", help="delta-rs storage options as JSON (for gs:// and other stores)")
    p.set_defaults(run=pipeline_command(tables))
    p = commands.add_parser("compare", help=compare.__doc__)
    p.add_argument("--lake-root", help="root of the Delta tables (default: --pipeline's lake_root)")
    p.add_argument("--pipeline", help="a pipeline or DAG id whose DAG names the lake_root")
    p.add_argument("--truth", required=True)
    p.add_argument(
        "--windows", type=int, help="compare with the history of the first N windows (default: all)"
    )
    p.add_argument("--storage-options", help="delta-rs storage options as JSON (for gs:// and other stores)")
    p.set_defaults(run=pipeline_command(compare))
    p = commands.add_parser("repair", help=repair.__doc__)
    p.add_argument("--pipeline", required=True, help="pipeline id, or the id of the DAG that runs it")
    p.add_argument("--lake-root", required=True, help="root of the Delta tables")
    p.add_argument("--changeset-root", required=True, help="root of the windows' change sets")
    p.add_argument("--metastore-url", help="SQLAlchemy URL (default: the cdc_metastore_default connection)")
    p.add_argument("--storage-options", help="delta-rs storage options as JSON (for gs:// and other stores)")
    p.add_argument("--dry-run", action="store_true", help="say what would be re-applied, change nothing")
    p.set_defaults(run=pipeline_command(repair))
    p = commands.add_parser("latest", help=latest.__doc__)
    p.add_argument("--lake-root", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--pipeline", help="pipeline or DAG id (default: the last to append pending changes)")
    p.add_argument("--rows", type=int, default=3, help="rows shown")
    p.add_argument("--output", help="also write the rows to this Parquet file")
    p.add_argument("--storage-options", help="delta-rs storage options as JSON (for gs:// and other stores)")
    p.set_defaults(run=pipeline_command(latest))
    p = commands.add_parser("compact", help=compact.__doc__)
    p.add_argument("--lake-root", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--pipeline", required=True, help="pipeline or DAG id (names the Delta app transaction)")
    p.add_argument("--storage-options", help="delta-rs storage options as JSON (for gs:// and other stores)")
    p.set_defaults(run=pipeline_command(compact))


def _dag_lake_root(name: str) -> str:
    """The lake root of the DAG ``name`` names (a DAG id or its pipeline id): its ``lake_root``."""
    from airflow_provider_cdc.preflight import dag_params

    dags = common.dags()
    found = common.named_dag(name, dags)
    if found is None:
        raise common.unknown(name, [], dags, "of the DAGs")
    dag, _pipeline = found
    root = dag_params(dag, None).get("lake_root")
    for task in dag.tasks:
        locations = getattr(task, "locations", None)
        if root is None and isinstance(locations, dict) and isinstance(locations.get("lake_root"), str):
            root = locations["lake_root"] if "{{" not in locations["lake_root"] else None
    if not root:
        raise common.UnknownPipeline(f"DAG {dag.dag_id} names no lake_root: give --lake-root")
    print(f"Lake of DAG {dag.dag_id}: {root}")
    return str(root)


def _lake_root(args: argparse.Namespace) -> str:
    if args.lake_root:
        return str(args.lake_root)
    if args.pipeline:
        return _dag_lake_root(args.pipeline)
    raise common.UnknownPipeline(
        "give --lake-root, or --pipeline (a pipeline or DAG id) to take its lake_root"
    )


def _table_pipelines(lake: Any, table: str) -> list[str]:
    """The pipelines whose windows the table (or its pending changes) records."""
    from airflow_provider_cdc.targets.delta.log import APP_ID_PREFIX, COMMIT_METADATA_APP_ID

    found: set[str] = set()
    for dt in _table_logs(lake, table):
        for entry in [] if dt is None else dt.history():
            app_id = str(entry.get(COMMIT_METADATA_APP_ID) or "")
            if app_id.startswith(APP_ID_PREFIX):
                found.add(app_id[len(APP_ID_PREFIX) :])
    return sorted(found)


def _table_logs(lake: Any, table: str) -> list[Any]:
    """The Delta tables of ``table``: itself and its pending changes, those that exist."""
    logs = [lake.open(table)] if lake.exists(table) else []
    pending = lake.pending(table).delta_table
    return logs if pending is None else [*logs, pending]


def _table_pipeline(lake: Any, table: str, name: str) -> str:
    """The pipeline ``name`` names among those the table records (a pipeline id or a DAG id)."""
    from airflow_provider_cdc.targets.delta.log import app_id_for

    try:
        app_id = app_id_for(name)
    except ValueError:
        app_id = None
    logs = _table_logs(lake, table)
    if app_id is not None and any(dt.transaction_version(app_id) is not None for dt in logs):
        return name
    return common.resolve_pipeline(name, _table_pipelines(lake, table), f"in table {table}")[0]


def _storage_options_argument(args: argparse.Namespace) -> dict[str, str] | None:
    """``--storage-options`` (delta-rs storage options as JSON), or ``None``."""
    text = getattr(args, "storage_options", None)
    return json.loads(text) if text else None


def tables(args: argparse.Namespace) -> int:
    """Each Delta table under the lake root: row count and a few rows."""
    from pyarrow import fs

    from airflow_provider_cdc.filesystems import resolve
    from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

    options = _storage_options_argument(args)
    lake_root = _lake_root(args)
    lake: Any = DeltaLakeTarget(lake_root, options)
    # the same filesystem every step opens the lake with (gs:// with the same credentials)
    filesystem, root = resolve(lake_root, options)
    names = sorted(
        info.base_name
        for info in filesystem.get_file_info(fs.FileSelector(root, allow_not_found=True))
        # folders of the lake's own (``_tombstones``) are not tables
        if info.type == fs.FileType.Directory
        and not info.base_name.startswith("_")
        and lake.exists(info.base_name)
    )
    if not names:
        print(f"No Delta tables under {lake_root}")
        return 1
    for name in names:
        table = lake.read_table(name)
        version = lake.open(name).version()
        print(f"\n{name}: {table.num_rows} rows, {table.num_columns} columns, Delta version {version}")
        keys = lake.key_columns(name)
        if keys:
            table = table.sort_by([(k, "ascending") for k in keys])
        for row in table.slice(0, args.rows).to_pylist():
            print("  " + json.dumps(row, default=str, ensure_ascii=False)[:220])
    return 0


def _keys_of(rows: list[dict[str, Any]], columns: list[str]) -> set[str]:
    """The keys of ``rows`` (values of ``columns``) as comparable text."""
    return {json.dumps([row.get(c) for c in columns]) for row in rows}


def compare(args: argparse.Namespace) -> int:
    """Do the Delta tables equal the ground truth written by the demo emulator?"""
    from airflow_provider_cdc.targets.delta.compare import compare_lake_to_rows
    from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

    with open(args.truth) as handle:
        recorded = json.load(handle)
    truth = recorded["state"] if args.windows is None else recorded["state_after_window"][args.windows - 1]
    lake: Any = DeltaLakeTarget(_lake_root(args), _storage_options_argument(args))
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
    from airflow_provider_cdc.targets.delta.repair import repair_pipeline

    store = common.metastore(args.metastore_url)
    args.pipeline = common.store_pipeline(store, args.pipeline)
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
            common.count(r.found),
            len(r.reapplied),
            ", ".join(r.missing) or "-",
            (r.problem or "")[:80],
        ]
        for r in reports
    ]
    print(
        common.table(["table", "metastore", "table held", "re-applied", "change sets gone", "problem"], rows)
    )
    return 0 if all(r.agrees for r in reports) else 1


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
    if args.pipeline:
        pipeline: str | None = _table_pipeline(lake, args.table, args.pipeline)
    else:
        pipeline = app_id.split(":", 1)[1] if app_id else None
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
        f"{common.ts(watermark)}{micros}) and {len(windows)} pending window(s)"
        + (f"; written to {args.output}" if args.output else "")
    )
    for row in shown:
        print("  " + json.dumps(row, default=str, ensure_ascii=False)[:220])
    return 0


def compact(args: argparse.Namespace) -> int:
    """Fold a Delta table's pending windows into it with one MERGE (deferred apply)."""
    from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

    lake = DeltaLakeTarget(args.lake_root, json.loads(args.storage_options) if args.storage_options else None)
    if not lake.exists(args.table):
        print(f"No Delta table {args.table} under {args.lake_root}")
        return 1
    result = lake.compact(args.table, _table_pipeline(lake, args.table, args.pipeline))
    print(json.dumps(result.to_dict(), sort_keys=True))
    return 0
