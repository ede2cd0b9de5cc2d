"""Operator's command line: what the metastore and the lake hold, for diagnosing a pipeline.

python -m airflow_provider_cdc pipelines
python -m airflow_provider_cdc explain --pipeline spanner_change_stream_to_lake --window latest
python -m airflow_provider_cdc status --pipeline spanner_change_stream_to_lake
python -m airflow_provider_cdc tables --lake-root /path/to/lake
python -m airflow_provider_cdc timings --dag-id spanner_change_stream_to_lake
python -m airflow_provider_cdc compare --lake-root /path/to/lake --truth demo-truth.json
python -m airflow_provider_cdc repair --pipeline spanner_change_stream_to_lake --lake-root /path/to/lake \
    --changeset-root /path/to/changesets
python -m airflow_provider_cdc migrate
python -m airflow_provider_cdc latest --lake-root /path/to/lake --table Orders --output orders.parquet
python -m airflow_provider_cdc compact --lake-root /path/to/lake --table Orders --pipeline orders
python -m airflow_provider_cdc check --dag spanner_change_stream_to_lake --conf '{"stream": "Orders"}'

A command that takes a pipeline (``--pipeline``, ``--dag-id``, ``--dag``) accepts a pipeline id or the id
of the DAG that runs it (its ``pipeline_id`` param, else the DAG id), and says so when neither is known.
Durations read as people read them (``850 ms``, ``2 min 13 s``, ``331 d``:
:func:`~airflow_provider_cdc.core.durations.human_duration`).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from typing import Any

from airflow_provider_cdc.core.durations import human_duration
from airflow_provider_cdc.core.timestamps import format_timestamp


def _short(token: str, width: int = 14) -> str:
    return token if len(token) <= width else token[: width - 1] + "…"


def _ts(value: datetime | None) -> str:
    return format_timestamp(value)[:-4] + "Z" if value else "-"


def _seconds(a: datetime | None, b: datetime | None) -> str:
    return human_duration(b - a) if a and b else "-"


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


# ----- pipelines named by a pipeline id or a DAG id --------------------------------------------------
class UnknownPipeline(LookupError):
    """Neither a pipeline nor a DAG has the name given (the message lists the known ones)."""


def _dags() -> list[Any]:
    """Every DAG of Airflow's DAG folder (none when it cannot be read)."""
    from airflow_provider_cdc.preflight import dag_bag

    try:
        return list(dag_bag().dags.values())
    except Exception as error:  # no Airflow home, an unreadable folder: pipelines by id only
        print(f"(the DAG folder cannot be read: {type(error).__name__}: {error})", file=sys.stderr)
        return []


def _named_dag(name: str, dags: list[Any]) -> tuple[Any, str] | None:
    """The DAG named ``name``, or whose pipeline is ``name``, with its pipeline id."""
    from airflow_provider_cdc.preflight import dag_pipeline_id

    found = None
    for dag in dags:
        pipeline = dag_pipeline_id(dag)
        if dag.dag_id == name:
            return dag, pipeline
        if pipeline == name and found is None:
            found = (dag, pipeline)
    return found


def _unknown(name: str, pipelines: list[str], dags: list[Any], where: str) -> UnknownPipeline:
    from airflow_provider_cdc.core.findings import suggest

    dag_ids = sorted(dag.dag_id for dag in dags)
    close = suggest(name, [*pipelines, *dag_ids])
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return UnknownPipeline(
        f"no pipeline or DAG is named {name!r}{hint}\n"
        f"pipelines {where}: {', '.join(pipelines) or 'none'}\n"
        f"DAGs: {', '.join(dag_ids) or 'none'}"
    )


def resolve_pipeline(name: str, known: list[str], where: str) -> tuple[str, Any]:
    """The pipeline ``name`` names: itself when it is one of ``known`` (the pipelines ``where``
    holds), else the pipeline of the DAG ``name`` (or of the DAG whose pipeline it is); the DAG too
    (``None``: not looked up). Neither: :class:`UnknownPipeline`."""
    if name in known:
        return name, None
    dags = _dags()
    found = _named_dag(name, dags)
    if found is None:
        raise _unknown(name, known, dags, where)
    dag, pipeline = found
    if dag.dag_id == name and pipeline != name:
        print(f"DAG {name} runs pipeline {pipeline}")
    return pipeline, dag


def _pipeline_command(run: Any) -> Any:
    """``run(args)`` printing an :class:`UnknownPipeline` and returning 2 for it."""

    def command(args: argparse.Namespace) -> int:
        try:
            return int(run(args))
        except UnknownPipeline as error:
            print(f"{args.command}: {error}", file=sys.stderr)
            return 2

    command.__doc__ = run.__doc__
    return command


def _store_pipeline(store: Any, name: str) -> str:
    """The metastore's pipeline ``name`` names (a pipeline id or a DAG id)."""
    pipeline, _dag = resolve_pipeline(name, store.pipeline_ids(), "in the metastore")
    if pipeline not in store.pipeline_ids():
        print(f"Pipeline {pipeline} has recorded no window yet")
    return pipeline


def _dag_lake_root(name: str) -> str:
    """The lake root of the DAG ``name`` names (a DAG id or its pipeline id): its ``lake_root``."""
    from airflow_provider_cdc.preflight import dag_params

    dags = _dags()
    found = _named_dag(name, dags)
    if found is None:
        raise _unknown(name, [], dags, "of the DAGs")
    dag, _pipeline = found
    root = dag_params(dag, None).get("lake_root")
    for task in dag.tasks:
        locations = getattr(task, "locations", None)
        if root is None and isinstance(locations, dict) and isinstance(locations.get("lake_root"), str):
            root = locations["lake_root"] if "{{" not in locations["lake_root"] else None
    if not root:
        raise UnknownPipeline(f"DAG {dag.dag_id} names no lake_root: give --lake-root")
    print(f"Lake of DAG {dag.dag_id}: {root}")
    return str(root)


def _lake_root(args: argparse.Namespace) -> str:
    if args.lake_root:
        return str(args.lake_root)
    if args.pipeline:
        return _dag_lake_root(args.pipeline)
    raise UnknownPipeline("give --lake-root, or --pipeline (a pipeline or DAG id) to take its lake_root")


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
    return resolve_pipeline(name, _table_pipelines(lake, table), f"in table {table}")[0]


def _window_and_length(start: datetime, end: datetime) -> str:
    return f"{_ts(start)} + {human_duration(end - start)}"


def _pipeline_state(store: Any, standing: Any) -> str:
    """``failed`` (a window's current epoch recorded a failure), ``waiting`` (its oldest window not
    applied waits for an earlier one), ``running`` (windows in flight), ``idle`` (every window applied)
    or ``no windows``."""
    if standing.failed:
        return "failed"
    oldest = standing.oldest_unapplied
    if oldest is not None:
        waits = store.predecessor_error(standing.pipeline, oldest.start, oldest.end)
        return "waiting" if waits is not None else "running"
    return "idle" if standing.applied else "no windows"


def pipelines(args: argparse.Namespace) -> int:
    """Every pipeline the metastore knows: its DAGs, source, targets, windows applied, failed and in
    flight, its last applied window, its lag and its state."""
    from airflow_provider_cdc.core.contract.locations import staging_folder
    from airflow_provider_cdc.preflight import dag_pipeline_id

    store = _metastore(args.metastore_url)
    now = datetime.now(timezone.utc)
    names = store.pipeline_ids()
    runs: dict[str, list[str]] = {}
    for dag in [] if args.no_dags else _dags():
        try:
            runs.setdefault(dag_pipeline_id(dag), []).append(dag.dag_id)
        except Exception as error:  # a DAG whose pipeline cannot be told is listed under none
            print(f"(DAG {dag.dag_id}: {type(error).__name__}: {error})", file=sys.stderr)
    if not names:
        print("The metastore knows no pipeline yet" + (
            f"; DAGs of pipelines: {', '.join(sorted(d for ds in runs.values() for d in ds))}" if runs else ""
        ))  # fmt: skip
        return 0
    headers = ["pipeline", "DAG", "source", "targets", "applied", "failed", "in flight",
               "last applied window", "lag", "state"]  # fmt: skip
    rows = []
    for name in names:
        standing = store.pipeline_standing(name)
        newest, last = standing.newest, standing.last_applied
        try:
            source = staging_folder(newest.stream) if newest is not None else "-"
        except ValueError:
            source = newest.stream if newest is not None else "-"
        rows.append([
            name, ", ".join(sorted(runs.get(name, []))) or "-", source, ", ".join(standing.targets) or "-",
            standing.applied, standing.failed, standing.in_flight,
            _window_and_length(last.start, last.end) if last is not None else "-",
            _lag(now, last.end if last is not None else None), _pipeline_state(store, standing),
        ])  # fmt: skip
    print(_table(headers, rows))
    failed = [name for name, row in zip(names, rows, strict=True) if row[-1] in ("failed", "waiting")]
    if failed:
        print(f"\nwhy: python -m airflow_provider_cdc explain --pipeline {failed[0]}")
    return 0


def _explained_window(store: Any, pipeline: str, given: str) -> Any:
    """The window ``--window`` names: ``latest`` (the pipeline's newest), a window id
    (``{start_us}-{end_us}``) or a start (RFC 3339; a window not recorded there is as long as the
    pipeline's newest)."""
    import re

    from airflow_provider_cdc.core.timestamps import parse_timestamp
    from airflow_provider_cdc.core.window import Window

    text = given.strip()
    newest = store.newest_window(pipeline)
    if text == "latest":
        if newest is None:
            raise UnknownPipeline(f"pipeline {pipeline} has recorded no window yet: give --window START")
        return newest.window
    if re.fullmatch(r"[0-9]+-[0-9]+", text):
        try:
            return Window.from_window_id(text)
        except ValueError as error:
            raise UnknownPipeline(f"--window {given!r}: {error}") from None
    try:
        start = parse_timestamp(text)
    except ValueError:
        raise UnknownPipeline(
            f"--window {given!r} is neither 'latest', a window id ({{start_us}}-{{end_us}}) nor an RFC 3339 "
            "start"
        ) from None
    recorded = store.windows_starting_at(pipeline, start)
    if recorded:
        return recorded[0].window
    if newest is None:
        raise UnknownPipeline(
            f"pipeline {pipeline} recorded no window starting at {_ts(start)}, nor any other to take the "
            "length from: give the window id ({start_us}-{end_us})"
        )
    return Window(start, start + (newest.end - newest.start))


def explain(args: argparse.Namespace) -> int:
    """Why a window failed or is waiting, and what to do (exit 0: it is applied; 1: it is not)."""
    from airflow_provider_cdc.explain import APPLIED, as_dict, explain_window, explanation_lines

    store = _metastore(args.metastore_url)
    pipeline, dag = resolve_pipeline(args.pipeline, store.pipeline_ids(), "in the metastore")
    if pipeline not in store.pipeline_ids():
        print(f"Pipeline {pipeline} has recorded no window yet")
    window = _explained_window(store, pipeline, args.window)
    found = explain_window(store, pipeline, window, dag_id=dag.dag_id if dag is not None else None)
    if args.json:
        print(json.dumps(as_dict(found), indent=2))
    else:
        print("\n".join(explanation_lines(found)))
    return 0 if found.verdict == APPLIED else 1


def status(args: argparse.Namespace) -> int:
    """Windows, partitions (state, watermark, lease, lag) and apply watermarks of a pipeline."""
    store = _metastore(args.metastore_url)
    now = datetime.now(timezone.utc)
    pipeline = args.pipeline = _store_pipeline(store, args.pipeline)
    windows = store.list_windows(pipeline)
    print(f"Windows of pipeline {pipeline}: {len(windows)}")
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
    return human_duration(now - mark) if mark else "-"


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
    lake_root = _lake_root(args)
    lake: Any = open_target(DELTA_TARGET, lake_root, options)
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


def timings(args: argparse.Namespace) -> int:
    """Per DAG run (window): each task's duration, from Airflow's own records."""
    from airflow.models import DagModel, DagRun, TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        known = sorted(dag_id for (dag_id,) in session.query(DagModel.dag_id))
    if args.dag_id not in known:
        dags = _dags()
        found = _named_dag(args.dag_id, dags)
        if found is None:
            raise _unknown(args.dag_id, [], dags, "run by the DAGs")
        print(f"Pipeline {args.dag_id} is run by DAG {found[0].dag_id}")
        args.dag_id = found[0].dag_id
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
                [_ts(run.data_interval_start), run.state, *[human_duration(d.get(t, 0.0)) for t in order],
                 human_duration(total)]
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
    lake: Any = open_target(DELTA_TARGET, _lake_root(args), _storage_options_argument(args))
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
    args.pipeline = _store_pipeline(store, args.pipeline)
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
    if not lake.exists(args.table):
        print(f"No Delta table {args.table} under {args.lake_root}")
        return 1
    result = lake.compact(args.table, _table_pipeline(lake, args.table, args.pipeline))
    print(json.dumps(result.to_dict(), sort_keys=True))
    return 0


def check(args: argparse.Namespace) -> int:
    """Preflight a pipeline DAG before a run: params, connections, source, roots, Spark, the window."""
    from airflow_provider_cdc.core.findings import did_you_mean
    from airflow_provider_cdc.core.timestamps import parse_timestamp
    from airflow_provider_cdc.preflight import check_dag, conf_argument, describe, load_dag, window_of_dag

    try:
        conf = conf_argument(args.conf)
        start = parse_timestamp(args.window_start) if args.window_start else None
        end = parse_timestamp(args.window_end) if args.window_end else None
    except ValueError as error:
        print(f"check: {error}", file=sys.stderr)
        return 2
    dag, dag_ids = load_dag(args.dag)
    if dag is None:  # a pipeline id names the DAG that runs it
        found = _named_dag(args.dag, _dags())
        dag = found[0] if found is not None else None
        if dag is not None:
            print(f"Pipeline {args.dag} is run by DAG {dag.dag_id}")
    if dag is None:
        print(f"check: no DAG {args.dag!r} in the DAG folder: {did_you_mean(args.dag, dag_ids, 'DAG')}",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        window = window_of_dag(dag, start, end) if start is not None else None
    except ValueError as error:
        print(f"check: {error}", file=sys.stderr)
        return 2
    result, window = check_dag(dag, conf, window)
    errors, warnings = len(result.errors), sum(1 for f in result.findings if f.level == "warning")
    shown = f", window {describe(window)}" if window is not None else ""
    print(f"Preflight of DAG {dag.dag_id}{shown}: {errors} error(s), {warnings} warning(s)")
    for line in result.lines():
        print(line)
    return 1 if errors else 0


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
            print(
                "warming it up: a small job of the merge's shape starts its Python workers and compiles "
                "the plan, so that the first window does not pay for it (about 10-45 s)",
                flush=True,
            )
            print(f"warmed up in {human_duration(warm_up(state.url, server.state_dir))}")
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
    p = commands.add_parser("pipelines", help=pipelines.__doc__)
    p.add_argument("--metastore-url", help="SQLAlchemy URL (default: the cdc_metastore_default connection)")
    p.add_argument("--no-dags", action="store_true", help="do not read the DAG folder for the DAG ids")
    p.set_defaults(run=pipelines)
    p = commands.add_parser("explain", help=explain.__doc__)
    p.add_argument("--pipeline", "--dag-id", dest="pipeline", required=True,
                   help="pipeline id, or the id of the DAG that runs it")  # fmt: skip
    p.add_argument("--window", default="latest",
                   help="its START (RFC 3339), its id ({start_us}-{end_us}) or latest (default)")  # fmt: skip
    p.add_argument("--metastore-url", help="SQLAlchemy URL (default: the cdc_metastore_default connection)")
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    p.set_defaults(run=_pipeline_command(explain))
    p = commands.add_parser("status", help=status.__doc__)
    p.add_argument("--pipeline", required=True, help="pipeline id, or the id of the DAG that runs it")
    p.add_argument(
        "--stream", action="append", help="also show this stream (projects/…/databases/<db>/<stream>)"
    )
    p.add_argument("--metastore-url", help="SQLAlchemy URL (default: the cdc_metastore_default connection)")
    p.add_argument("--limit", type=int, default=40, help="partitions shown per stream (newest)")
    p.set_defaults(run=_pipeline_command(status))
    p = commands.add_parser("tables", help=tables.__doc__)
    p.add_argument("--lake-root", help="root of the Delta tables (default: --pipeline's lake_root)")
    p.add_argument("--pipeline", help="a pipeline or DAG id whose DAG names the lake_root")
    p.add_argument("--rows", type=int, default=3)
    p.add_argument("--storage-options", help="delta-rs storage options as JSON (for gs:// and other stores)")
    p.set_defaults(run=_pipeline_command(tables))
    p = commands.add_parser("timings", help=timings.__doc__)
    p.add_argument("--dag-id", "--pipeline", dest="dag_id", required=True,
                   help="DAG id, or the id of a pipeline a DAG runs")  # fmt: skip
    p.set_defaults(run=_pipeline_command(timings))
    p = commands.add_parser("compare", help=compare.__doc__)
    p.add_argument("--lake-root", help="root of the Delta tables (default: --pipeline's lake_root)")
    p.add_argument("--pipeline", help="a pipeline or DAG id whose DAG names the lake_root")
    p.add_argument("--truth", required=True)
    p.add_argument(
        "--windows", type=int, help="compare with the history of the first N windows (default: all)"
    )
    p.add_argument("--storage-options", help="delta-rs storage options as JSON (for gs:// and other stores)")
    p.set_defaults(run=_pipeline_command(compare))
    p = commands.add_parser("repair", help=repair.__doc__)
    p.add_argument("--pipeline", required=True, help="pipeline id, or the id of the DAG that runs it")
    p.add_argument("--lake-root", required=True, help="root of the Delta tables")
    p.add_argument("--changeset-root", required=True, help="root of the windows' change sets")
    p.add_argument("--metastore-url", help="SQLAlchemy URL (default: the cdc_metastore_default connection)")
    p.add_argument("--storage-options", help="delta-rs storage options as JSON (for gs:// and other stores)")
    p.add_argument("--dry-run", action="store_true", help="say what would be re-applied, change nothing")
    p.set_defaults(run=_pipeline_command(repair))
    p = commands.add_parser("migrate", help=migrate.__doc__)
    p.add_argument("--metastore-url", help="SQLAlchemy URL (default: the cdc_metastore_default connection)")
    p.set_defaults(run=migrate)
    p = commands.add_parser("latest", help=latest.__doc__)
    p.add_argument("--lake-root", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--pipeline", help="pipeline or DAG id (default: the last to append pending changes)")
    p.add_argument("--rows", type=int, default=3, help="rows shown")
    p.add_argument("--output", help="also write the rows to this Parquet file")
    p.add_argument("--storage-options", help="delta-rs storage options as JSON (for gs:// and other stores)")
    p.set_defaults(run=_pipeline_command(latest))
    p = commands.add_parser("compact", help=compact.__doc__)
    p.add_argument("--lake-root", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--pipeline", required=True, help="pipeline or DAG id (names the Delta app transaction)")
    p.add_argument("--storage-options", help="delta-rs storage options as JSON (for gs:// and other stores)")
    p.set_defaults(run=_pipeline_command(compact))
    p = commands.add_parser("check", help=check.__doc__)
    p.add_argument("--dag", "--pipeline", dest="dag", required=True,
                   help="the pipeline DAG's id, or the id of the pipeline it runs")  # fmt: skip
    p.add_argument("--conf", help="the run's dag_run.conf, a JSON object (checked against the params)")
    p.add_argument("--window-start", help="check this window (RFC 3339; default: the next window to run)")
    p.add_argument("--window-end", help="its end (default: the start plus the DAG's schedule interval)")
    p.set_defaults(run=check)
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
