"""Operator's command line: what the metastore and the targets hold, for diagnosing a pipeline.

python -m airflow_provider_cdc pipelines
python -m airflow_provider_cdc explain --pipeline orders --window latest
python -m airflow_provider_cdc status --pipeline orders
python -m airflow_provider_cdc tables --lake-root /path/to/lake
python -m airflow_provider_cdc timings --dag-id orders
python -m airflow_provider_cdc compare --lake-root /path/to/lake --truth demo-truth.json
python -m airflow_provider_cdc repair --pipeline orders --lake-root /path/to/lake \
    --changeset-root /path/to/changesets
python -m airflow_provider_cdc migrate
python -m airflow_provider_cdc latest --lake-root /path/to/lake --table Orders --output orders.parquet
python -m airflow_provider_cdc compact --lake-root /path/to/lake --table Orders --pipeline orders
python -m airflow_provider_cdc check --dag orders --conf '{"stream": "Orders"}'

Each target adds its own commands (its ``TargetKind.cli`` module's ``register``), such as ``tables``,
``compare``, ``repair``, ``latest`` and ``compact`` above.

A command that takes a pipeline (``--pipeline``, ``--dag-id``, ``--dag``) accepts a pipeline id or the id
of the DAG that runs it (its ``pipeline_id`` param, else the DAG id), and says so when neither is known.
Durations read as people read them (``850 ms``, ``2 min 13 s``, ``331 d``:
:func:`~airflow_provider_cdc.core.durations.human_duration`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from datetime import datetime, timezone
from typing import Any

from airflow_provider_cdc.cli import common
from airflow_provider_cdc.core.durations import human_duration


def _window_and_length(start: datetime, end: datetime) -> str:
    return f"{common.ts(start)} + {human_duration(end - start)}"


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

    store = common.metastore(args.metastore_url)
    now = datetime.now(timezone.utc)
    names = store.pipeline_ids()
    runs: dict[str, list[str]] = {}
    for dag in [] if args.no_dags else common.dags():
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
    print(common.table(headers, rows))
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
            raise common.UnknownPipeline(
                f"pipeline {pipeline} has recorded no window yet: give --window START"
            )
        return newest.window
    if re.fullmatch(r"[0-9]+-[0-9]+", text):
        try:
            return Window.from_window_id(text)
        except ValueError as error:
            raise common.UnknownPipeline(f"--window {given!r}: {error}") from None
    try:
        start = parse_timestamp(text)
    except ValueError:
        raise common.UnknownPipeline(
            f"--window {given!r} is neither 'latest', a window id ({{start_us}}-{{end_us}}) nor an RFC 3339 "
            "start"
        ) from None
    recorded = store.windows_starting_at(pipeline, start)
    if recorded:
        return recorded[0].window
    if newest is None:
        raise common.UnknownPipeline(
            f"pipeline {pipeline} recorded no window starting at {common.ts(start)}, nor any other to "
            "take the length from: give the window id ({start_us}-{end_us})"
        )
    return Window(start, start + (newest.end - newest.start))


def explain(args: argparse.Namespace) -> int:
    """Why a window failed or is waiting, and what to do (exit 0: it is applied; 1: it is not)."""
    from airflow_provider_cdc.explain import APPLIED, as_dict, explain_window, explanation_lines

    store = common.metastore(args.metastore_url)
    pipeline, dag = common.resolve_pipeline(args.pipeline, store.pipeline_ids(), "in the metastore")
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
    store = common.metastore(args.metastore_url)
    now = datetime.now(timezone.utc)
    pipeline = args.pipeline = common.store_pipeline(store, args.pipeline)
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
        [common.ts(w.start), common.ts(w.end), w.state.value, w.attempt, common.count(w.record_count),
         common.count(w.transaction_count), common.seconds(w.opened_at, w.applied_at)]
        for w in windows
    ]  # fmt: skip
    print(common.table(headers, rows))
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
            [common.short(p.token), p.state.value, common.ts(p.start_timestamp), common.ts(p.end_timestamp),
             common.ts(p.watermark),
             ",".join(common.short(t, 8) for t in p.parent_tokens) or "-", p.lease_owner or "-",
             common.ts(p.lease_expires_at), p.record_count]
            for p in partitions[-args.limit :]
        ]  # fmt: skip
        print(common.table(headers, rows))
        last = windows[-1].end if windows else None
        if last is not None:
            lagging = store.lagging_partitions(stream, last)
            for p in lagging:
                print(f"  holding back {common.ts(last)}: {p.token} drained to {common.ts(p.watermark)}")
    recorded = _recorded_watermarks(store, args.pipeline)
    if not recorded:
        print(f"\nApply watermarks of {args.pipeline}: none recorded")
        return 0
    named = " and ".join(f"the {kind.title} tables' ({kind.watermark})" for kind, _marks in recorded)
    print(f"\nApply watermarks of {args.pipeline}: {named}, as the commit recorded them")
    headers = ["table"]
    for kind, _marks in recorded:
        headers += [f"{kind.title} watermark", "lag behind now"]
    tables = sorted(set().union(*(set(m) for _kind, m in recorded)))
    rows = []
    for t in tables:
        row = [t]
        for _kind, target_marks in recorded:
            row += [common.ts(target_marks.get(t)), _lag(now, target_marks.get(t))]
        rows.append(row)
    print(common.table(headers, rows))
    return 0


def _lag(now: datetime, mark: datetime | None) -> str:
    return human_duration(now - mark) if mark else "-"


def _recorded_watermarks(store: Any, pipeline: str) -> list[tuple[Any, dict[str, datetime]]]:
    """Per registered target, the apply watermarks the commit recorded for the pipeline (targets without
    any left out): first the targets whose watermarks are their committed window ends, then those that
    report their own."""
    from airflow_provider_cdc.plugins import target_kinds

    found = [(kind, store.table_watermarks(pipeline, target=kind.name)) for kind in target_kinds()]
    found.sort(key=lambda entry: (not entry[0].watermark_is_window_end, entry[0].name))
    return [(kind, marks) for kind, marks in found if marks]


def timings(args: argparse.Namespace) -> int:
    """Per DAG run (window): each task's duration, from Airflow's own records."""
    from airflow.models import DagModel, DagRun, TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        known = sorted(dag_id for (dag_id,) in session.query(DagModel.dag_id))
    if args.dag_id not in known:
        dags = common.dags()
        found = common.named_dag(args.dag_id, dags)
        if found is None:
            raise common.unknown(args.dag_id, [], dags, "run by the DAGs")
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
        common.table(
            ["window start", "state", *order, "sum of tasks"],
            [
                [common.ts(run.data_interval_start), run.state,
                 *[human_duration(d.get(t, 0.0)) for t in order], human_duration(total)]
                for run, d, total in rows
            ],
        )
    )  # fmt: skip
    return 0


def migrate(args: argparse.Namespace) -> int:
    """Create or upgrade the metastore's tables to this provider's schema version."""
    from airflow_provider_cdc.metastore import CURRENT_VERSION

    store = common.metastore_without_schema(args.metastore_url)
    applied = store.create_schema()
    print(f"metastore at schema version {CURRENT_VERSION}" + (f" (applied {applied})" if applied else ""))
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
        found = common.named_dag(args.dag, common.dags())
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
    from airflow_provider_cdc.placement.connect.server import (
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
    from airflow_provider_cdc.plugins import target_kinds

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
    p.set_defaults(run=common.pipeline_command(explain))
    p = commands.add_parser("status", help=status.__doc__)
    p.add_argument("--pipeline", required=True, help="pipeline id, or the id of the DAG that runs it")
    p.add_argument(
        "--stream", action="append", help="also show this stream (projects/…/databases/<db>/<stream>)"
    )
    p.add_argument("--metastore-url", help="SQLAlchemy URL (default: the cdc_metastore_default connection)")
    p.add_argument("--limit", type=int, default=40, help="partitions shown per stream (newest)")
    p.set_defaults(run=common.pipeline_command(status))
    p = commands.add_parser("timings", help=timings.__doc__)
    p.add_argument("--dag-id", "--pipeline", dest="dag_id", required=True,
                   help="DAG id, or the id of a pipeline a DAG runs")  # fmt: skip
    p.set_defaults(run=common.pipeline_command(timings))
    p = commands.add_parser("migrate", help=migrate.__doc__)
    p.add_argument("--metastore-url", help="SQLAlchemy URL (default: the cdc_metastore_default connection)")
    p.set_defaults(run=migrate)
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
    p.add_argument(
        "--no-warm-up",
        action="store_true",
        help="skip the small job run after the start (it spares the first window the warm-up)",
    )
    p.add_argument(
        "--state-dir",
        help="where the server's pid, port and log are kept "
        "(default ~/.cache/cdc-spark-connect, or CDC_SPARK_CONNECT_HOME)",
    )
    p.set_defaults(run=spark_connect)
    for kind in target_kinds():  # each target's own commands
        if kind.cli:
            importlib.import_module(kind.cli).register(commands, common.pipeline_command)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
