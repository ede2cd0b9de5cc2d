"""What Airflow's own database tells the pipeline pages (Airflow 2.11 and 3): which DAG runs which
pipeline on which metastore, and what the DAG run of a window did (its state, each task's seconds, the
task that failed).

A DAG's pipelines are read from its serialized form, as the cli's ``--pipeline`` reads them from the
DAG: the ``pipeline_id`` its tasks are given (a literal or ``{{ params.x }}``), else its
``pipeline_id`` param, else its id. Deserialized DAGs are kept per DAG version (its hash), so a page
reads only the hashes of the DAGs it shows, and a DAG again only when it changed.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_provider_cdc.core.identifiers import validate_pipeline_id
from airflow_provider_cdc.core.timestamps import to_micros
from airflow_provider_cdc.core.window import Window

#: The metastore connection of a DAG whose tasks name none.
DEFAULT_METASTORE_CONN_ID = "cdc_metastore_default"
_PARAM_TEMPLATE = re.compile(r"^\{\{\s*params\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")
_IN_CHUNK = 500


@dataclass(frozen=True)
class DagPipeline:
    """A pipeline a DAG runs, on the metastore of ``metastore_conn_id``.

    ``named``: the DAG names the pipeline (a task's ``pipeline_id`` or its ``pipeline_id`` param); a
    pipeline only named by the DAG's id is one only when the metastore knows it.
    """

    dag_id: str
    pipeline: str
    metastore_conn_id: str
    named: bool


def _resolved(raw: Any, params: Mapping[str, Any]) -> Any:
    """``raw`` with a plain ``{{ params.x }}`` resolved from ``params``; other templates: None."""
    if not isinstance(raw, str) or "{{" not in raw:
        return raw
    match = _PARAM_TEMPLATE.match(raw.strip())
    return params.get(match.group(1)) if match else None


def _argument(task: Any, name: str) -> Any:
    value = getattr(task, name, None)
    if value is None:
        partial = getattr(task, "partial_kwargs", None)
        if isinstance(partial, Mapping):
            value = partial.get(name)
    return value


def _pipeline_id(value: Any) -> str | None:
    try:
        return validate_pipeline_id(value)
    except ValueError:
        return None


def _conn_id(value: Any) -> str:
    return value if isinstance(value, str) and value and "{{" not in value else DEFAULT_METASTORE_CONN_ID


def pipelines_of_dag(dag: Any) -> list[DagPipeline]:
    """The pipelines a (serialized or parsed) DAG runs, each with its metastore connection."""
    params_obj = getattr(dag, "params", None) or {}
    params = dict(params_obj.dump() if hasattr(params_obj, "dump") else params_obj)
    found: dict[str, str] = {}
    for task in getattr(dag, "tasks", ()):
        pipeline = _pipeline_id(_resolved(_argument(task, "pipeline_id"), params))
        if pipeline is not None and pipeline not in found:
            found[pipeline] = _conn_id(_resolved(_argument(task, "metastore_conn_id"), params))
    if not found and _pipeline_id(params.get("pipeline_id")):
        found[params["pipeline_id"]] = _conn_id(_resolved(params.get("metastore_conn_id"), params))
    if found:
        return [DagPipeline(dag.dag_id, name, conn, True) for name, conn in found.items()]
    own = _pipeline_id(dag.dag_id)
    return [] if own is None else [DagPipeline(dag.dag_id, own, DEFAULT_METASTORE_CONN_ID, False)]


class DagIndex:
    """The pipelines of serialized DAGs, kept per DAG hash (thread-safe; one per web server process)."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[str, list[DagPipeline]]] = {}
        self._lock = threading.Lock()

    def pipelines(self, dag_ids: Collection[str], session: Any) -> list[DagPipeline]:
        """The pipelines of the DAGs ``dag_ids`` that Airflow has serialized, by DAG id."""
        from airflow.models.serialized_dag import SerializedDagModel as SDM
        from sqlalchemy import select

        newest = SDM.created_at if hasattr(SDM, "created_at") else SDM.last_updated
        hashes: dict[str, tuple[Any, str]] = {}
        wanted = sorted(dag_ids)
        for start in range(0, len(wanted), _IN_CHUNK):
            part = wanted[start : start + _IN_CHUNK]
            for dag_id, dag_hash, when in session.execute(
                select(SDM.dag_id, SDM.dag_hash, newest).where(SDM.dag_id.in_(part))
            ):
                if dag_id not in hashes or when > hashes[dag_id][0]:
                    hashes[dag_id] = (when, dag_hash)
        found: list[DagPipeline] = []
        for dag_id, (_when, dag_hash) in sorted(hashes.items()):
            with self._lock:
                known = self._known.get(dag_id)
            if known is None or known[0] != dag_hash:
                version = (SDM.dag_id == dag_id) & (SDM.dag_hash == dag_hash)
                row = session.scalar(select(SDM).where(version).limit(1))
                if row is None:
                    continue
                known = (dag_hash, pipelines_of_dag(row.dag))
                with self._lock:
                    self._known[dag_id] = known
            found.extend(known[1])
        return found


@dataclass(frozen=True)
class TaskRecord:
    """One task of a run (a mapped task: its instances together)."""

    task_id: str
    state: str | None
    seconds: float
    try_number: int
    #: the map index of the instance that failed (-1: not mapped, or none failed)
    map_index: int
    started: datetime | None


@dataclass(frozen=True)
class RunRecord:
    """The DAG run of a window: its state and tasks in the order they started."""

    dag_id: str
    run_id: str
    state: str | None
    tasks: tuple[TaskRecord, ...]

    @property
    def failed_task(self) -> TaskRecord | None:
        """The first task that failed (not those that never ran because it did)."""
        return next((task for task in self.tasks if task.state == "failed"), None)


_FAILED = ("failed",)


def _merge(tasks: Iterable[Any]) -> tuple[TaskRecord, ...]:
    """Task instances of one run as one record per task: durations summed, failures kept."""
    merged: dict[str, dict[str, Any]] = {}
    for task_id, map_index, state, duration, try_number, started in tasks:
        held = merged.setdefault(
            task_id,
            {"state": state, "seconds": 0.0, "try": 0, "map_index": -1, "started": started},
        )
        held["seconds"] += float(duration or 0.0)
        held["try"] = max(held["try"], int(try_number or 0))
        if started is not None and (held["started"] is None or started < held["started"]):
            held["started"] = started
        if state in _FAILED and held["state"] not in _FAILED:
            held["state"], held["map_index"] = state, int(map_index)
        elif held["state"] not in _FAILED and state != held["state"]:
            held["state"] = state if state in ("running", "up_for_retry", "queued") else held["state"]
    records = [
        TaskRecord(task_id, held["state"], held["seconds"], held["try"], held["map_index"], held["started"])
        for task_id, held in merged.items()
    ]
    records.sort(key=lambda t: (t.started is None, to_micros(t.started) if t.started else 0, t.task_id))
    return tuple(records)


def _state(value: Any) -> str | None:
    """A task or run state as its text (Airflow's state enums, or text)."""
    return None if value is None else str(getattr(value, "value", value))


def window_runs(session: Any, dag_id: str, windows: Sequence[Window]) -> dict[str, RunRecord]:
    """By window id, the newest DAG run of ``dag_id`` whose data interval is the window (two queries)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance as TI
    from sqlalchemy import select

    if not windows:
        return {}
    wanted = {window.window_id for window in windows}
    starts = sorted({window.start for window in windows})
    runs: dict[str, tuple[int, str, str | None]] = {}
    for run_pk, run_id, state, start, end in session.execute(
        select(DagRun.id, DagRun.run_id, DagRun.state, DagRun.data_interval_start, DagRun.data_interval_end)
        .where(DagRun.dag_id == dag_id, DagRun.data_interval_start.in_(starts))
    ):
        if start is None or end is None:
            continue
        window_id = f"{to_micros(start)}-{to_micros(end)}"
        if window_id in wanted and (window_id not in runs or run_pk > runs[window_id][0]):
            runs[window_id] = (run_pk, run_id, _state(state))
    if not runs:
        return {}
    by_run: dict[str, list[Any]] = {}
    for run_id, *task in session.execute(
        select(TI.run_id, TI.task_id, TI.map_index, TI.state, TI.duration, TI.try_number, TI.start_date)
        .where(TI.dag_id == dag_id, TI.run_id.in_([run_id for _pk, run_id, _state in runs.values()]))
    ):
        task[2] = _state(task[2])
        by_run.setdefault(run_id, []).append(task)
    return {
        window_id: RunRecord(dag_id, run_id, state, _merge(by_run.get(run_id, ())))
        for window_id, (_pk, run_id, state) in runs.items()
    }
