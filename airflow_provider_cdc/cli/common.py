"""What the operator commands share: the metastore they read, the DAGs that name pipelines, and how
they print (tables, timestamps, durations). Each target's commands (``TargetKind.cli``) use it too."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any

from airflow_provider_cdc.core.durations import human_duration
from airflow_provider_cdc.core.timestamps import format_timestamp


def short(token: str, width: int = 14) -> str:
    return token if len(token) <= width else token[: width - 1] + "…"


def ts(value: datetime | None) -> str:
    return format_timestamp(value)[:-4] + "Z" if value else "-"


def seconds(a: datetime | None, b: datetime | None) -> str:
    return human_duration(b - a) if a and b else "-"


def count(value: int | None) -> str:
    return "-" if value is None else str(value)


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def metastore_without_schema(url: str | None) -> Any:
    from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
    from airflow_provider_cdc.metastore import Metastore

    return Metastore(url or CdcMetastoreHook().get_url())


def metastore(url: str | None) -> Any:
    if url:
        from airflow_provider_cdc.metastore import Metastore

        store = Metastore(url)
        store.create_schema()
        return store
    from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook

    return CdcMetastoreHook().metastore


class UnknownPipeline(LookupError):
    """Neither a pipeline nor a DAG has the name given (the message lists the known ones)."""


def dags() -> list[Any]:
    """Every DAG of Airflow's DAG folder (none when it cannot be read)."""
    from airflow_provider_cdc.preflight import dag_bag

    try:
        return list(dag_bag().dags.values())
    except Exception as error:  # no Airflow home, an unreadable folder: pipelines by id only
        print(f"(the DAG folder cannot be read: {type(error).__name__}: {error})", file=sys.stderr)
        return []


def named_dag(name: str, dags: list[Any]) -> tuple[Any, str] | None:
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


def unknown(name: str, pipelines: list[str], dags: list[Any], where: str) -> UnknownPipeline:
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
    every_dag = dags()
    found = named_dag(name, every_dag)
    if found is None:
        raise unknown(name, known, every_dag, where)
    dag, pipeline = found
    if dag.dag_id == name and pipeline != name:
        print(f"DAG {name} runs pipeline {pipeline}")
    return pipeline, dag


def pipeline_command(run: Any) -> Any:
    """``run(args)`` printing an :class:`UnknownPipeline` and returning 2 for it."""

    def command(args: argparse.Namespace) -> int:
        try:
            return int(run(args))
        except UnknownPipeline as error:
            print(f"{args.command}: {error}", file=sys.stderr)
            return 2

    command.__doc__ = run.__doc__
    return command


def store_pipeline(store: Any, name: str) -> str:
    """The metastore's pipeline ``name`` names (a pipeline id or a DAG id)."""
    pipeline, _dag = resolve_pipeline(name, store.pipeline_ids(), "in the metastore")
    if pipeline not in store.pipeline_ids():
        print(f"Pipeline {pipeline} has recorded no window yet")
    return pipeline
