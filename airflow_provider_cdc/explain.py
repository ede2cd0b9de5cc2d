"""Why a window failed or is waiting, and what to do about it, from what the metastore holds.

:func:`explain_window` reads the window's record (its state, its epoch, the failure a step recorded on
it), the rule that windows apply in order (:func:`~airflow_provider_cdc.core.apply_order.
predecessor_problem`), the rule that a window is read once it is over (``future_window_problem``), the
window's units that are not read yet (their lease owners and expiry), the source partitions that hold
its end back, and the tables' apply watermarks, and returns :class:`Reason` s, each naming what was
found and what to do. The ``explain`` command prints them; other views (the pipeline pages) may too.
Times are the metastore's clock (the one leases and window times are recorded by).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from airflow_provider_cdc.core.apply_order import describe_window
from airflow_provider_cdc.core.durations import human_duration
from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore, WindowRecord, WindowState
from airflow_provider_cdc.metastore.model import (
    WindowError,
    WindowPartitionRecord,
    task_instance_parts,
)

__all__ = ["APPLIED", "FAILED", "NOT_RECORDED", "READING", "WAITING", "Reason", "WindowExplanation",
           "explain_window"]  # fmt: skip

#: What a window is, as ``explain`` words it.
APPLIED, FAILED, WAITING, READING, NOT_RECORDED = "applied", "failed", "waiting", "reading", "not recorded"
#: Units named one by one; more are counted.
UNITS_SHOWN = 10


@dataclass(frozen=True)
class Reason:
    """One thing found about a window: what it is, and what to do (empty: nothing)."""

    what: str
    fix: str = ""
    #: the error's text, when the reason is a failure a step recorded
    detail: str = ""


@dataclass
class WindowExplanation:
    """A window, what it is (:data:`APPLIED`, :data:`FAILED`, :data:`WAITING`, :data:`READING`,
    :data:`NOT_RECORDED`), its record, the facts about it and the reasons it is not applied yet."""

    pipeline: str
    window: Window
    verdict: str
    record: WindowRecord | None = None
    facts: list[str] = field(default_factory=list)
    reasons: list[Reason] = field(default_factory=list)


def _ago(now: datetime, moment: datetime) -> str:
    return f"{human_duration(now - moment)} ago"


def _task(identity: str | None) -> str:
    """A task instance name (``dag/run/task/map_index``) as people read it."""
    if not identity:
        return "an unknown task"
    dag, run, task, index = task_instance_parts(identity)
    if not dag:
        return repr(identity)
    mapped = "" if index in ("", "-1") else f"[{index}]"
    return f"task {task}{mapped} of DAG {dag} (run {run})"


def _clear(dag_id: str, window: Window) -> str:
    return f"airflow tasks clear {dag_id} -s {format_timestamp(window.start)} -y"


def _failure(error: WindowError, now: datetime, window: Window, dag_id: str) -> Reason:
    attempt = f", try {error.try_number}" if error.try_number else ""
    where = _task(error.task)
    what = f"{where[:-1]}{attempt})" if where.endswith(")") else f"{where}{attempt}"
    first = error.text.splitlines()[0] if error.text else ""
    clear = _clear(error.dag_id or dag_id, window)
    if "[not retried:" in error.text:
        fix = (
            "a retry cannot heal this error: fix what it names, then run the window again (this clears "
            f"its run and the later ones): {clear}"
        )
    else:
        fix = (
            "Airflow retries the task while it has retries left; once they are spent, fix the cause (the "
            f"task's log has the whole error), then run the window again: {clear}"
        )
    return Reason(f"{what} failed {_ago(now, error.at)}: {first}", fix, error.text)


def _unit_reasons(units: list[WindowPartitionRecord], now: datetime, stream: str) -> list[Reason]:
    """Why the window's units that are not done are not done: leased (alive or expired) or unclaimed."""
    open_units = [unit for unit in units if not unit.is_done]
    if not open_units:
        return []
    reasons = []
    for unit in open_units[:UNITS_SHOWN]:
        token = unit.token if len(unit.token) <= 40 else unit.token[:39] + "…"
        tries = f", {unit.attempts} claim(s) so far" if unit.attempts else ""
        if unit.lease_owner and unit.lease_expires_at is not None and unit.lease_expires_at > now:
            reasons.append(Reason(
                f"unit {token} of {stream} is being read ({unit.state.value}) by {_task(unit.lease_owner)}; "
                f"its lease expires in {human_duration(unit.lease_expires_at - now)} "
                f"({format_timestamp(unit.lease_expires_at)}){tries}",
                "wait for that reader; if its task is gone, a read task that runs after the lease expires "
                "takes the unit over",
            ))  # fmt: skip
        elif unit.lease_owner:
            expired = unit.lease_expires_at
            when = f" {_ago(now, expired)} ({format_timestamp(expired)})" if expired else ""
            reasons.append(Reason(
                f"unit {token} of {stream} was left {unit.state.value} by {_task(unit.lease_owner)}, whose "
                f"lease expired{when}: no reader is reading it{tries}",
                "run the window's read tasks again (clear them): a reader takes the unit over and reads it "
                "from where it was left",
            ))  # fmt: skip
        else:
            reasons.append(Reason(
                f"unit {token} of {stream} was never claimed by a reader ({unit.state.value}){tries}",
                "run the window's read tasks (clear them, or check that the run's read tasks were not "
                "skipped): each claims the units nobody holds",
            ))  # fmt: skip
    if len(open_units) > UNITS_SHOWN:
        reasons.append(Reason(f"…and {len(open_units) - UNITS_SHOWN} more unit(s) not read yet"))
    return reasons


def _lagging(store: Metastore, stream: str, window: Window, now: datetime) -> list[Reason]:
    """The source's partitions (a source whose units are partitions) not drained to the window's end."""
    if not store.is_known_stream(stream):
        return []
    lagging = store.lagging_partitions(stream, window.end)
    reasons = []
    for partition in lagging[:UNITS_SHOWN]:
        behind = human_duration(window.end - partition.watermark)
        owner = f", held by {_task(partition.lease_owner)}" if partition.lease_owner else ", held by nobody"
        reasons.append(Reason(
            f"partition {partition.token[:40]} of {stream} is read only up to "
            f"{format_timestamp(partition.watermark)}, {behind} before the window's end{owner}: the window "
            "is not drained",
            "the window's readers read it to the window's end; the drained sensor waits until they have",
        ))  # fmt: skip
    if len(lagging) > UNITS_SHOWN:
        reasons.append(Reason(f"…and {len(lagging) - UNITS_SHOWN} more partition(s) not drained"))
    return reasons


def _catch_up(target: str) -> str:
    """How a table of ``target`` catches up (its registered kind's ``catch_up``)."""
    from airflow_provider_cdc.plugins import target_kind

    try:
        hint = target_kind(target).catch_up
    except KeyError:  # a target no longer registered
        hint = ""
    return hint or f"the {target} table catches up when its target applies the pending changes"


def _stale_watermarks(store: Metastore, pipeline: str, window: Window, now: datetime) -> list[Reason]:
    """Tables of an applied window whose apply watermark is behind its end (changes still pending)."""
    reasons = []
    for target, marks in sorted(store.target_watermarks(pipeline).items()):
        for table, mark in sorted(marks.items()):
            if mark >= window.end:
                continue
            reasons.append(Reason(
                f"{target} table {table}: its apply watermark is {format_timestamp(mark)}, "
                f"{human_duration(window.end - mark)} behind this window's end (lag behind now: "
                f"{human_duration(now - mark)}): its later changes are pending",
                _catch_up(target),
            ))  # fmt: skip
    return reasons


def explain_window(
    store: Metastore, pipeline: str, window: Window, *, dag_id: str | None = None
) -> WindowExplanation:
    """Why ``window`` of ``pipeline`` is where it is, and what to do (see the module). ``dag_id``: the
    DAG that runs the pipeline, for the commands it names (default: the DAG a failure or a lease names,
    else the pipeline id)."""
    now = store.database_now()
    try:
        record: WindowRecord | None = store.get_window(pipeline, window.start, window.end)
    except LookupError:
        record = None
    recorded = store.get_pipeline(pipeline)
    dag = dag_id or (record.error.dag_id if record and record.error else None) or pipeline
    found = WindowExplanation(pipeline, window, NOT_RECORDED, record)
    if recorded is not None:
        first = format_timestamp(recorded.first_window_start)
        found.facts.append(f"the pipeline's first window starts at {first}")
    future = store.window_time_problem(pipeline, window)
    if record is None:
        problem = store.predecessor_error(pipeline, window.start, window.end)
        if future is not None:
            found.verdict = WAITING
            found.reasons.append(Reason(future, f"run it after {format_timestamp(window.end)}"))
        elif problem is not None:
            found.verdict = WAITING
            found.reasons.append(_predecessor_reason(store, pipeline, window, str(problem), now))
        else:
            found.reasons.append(Reason(
                "no step recorded this window: its open step has not run, or failed before it recorded the "
                "window (its preflight, a connection, the metastore)",
                f"run the window (trigger its run, or {_clear(dag, window)}), and see the open task's log "
                f"if it fails; python -m airflow_provider_cdc check --dag {dag} names setting errors",
            ))  # fmt: skip
        return found
    source = record.stream
    found.facts.append(
        f"state {record.state.value}, epoch {record.attempt}, opened {format_timestamp(record.opened_at)} "
        f"({_ago(now, record.opened_at)})"
    )
    found.facts.append(f"source {source}")
    if record.state is WindowState.APPLIED:
        found.verdict = APPLIED
        applied = record.applied_at or record.updated_at
        rows = "-" if record.record_count is None else str(record.record_count)
        found.facts.append(
            f"applied {format_timestamp(applied)} ({human_duration(applied - window.end)} after the window's "
            f"end), {rows} change rows"
        )
        found.reasons.extend(_stale_watermarks(store, pipeline, window, now))
        return found
    found.verdict = READING
    if record.error is not None:
        found.verdict = FAILED
        found.reasons.append(_failure(record.error, now, window, dag))
    problem = store.predecessor_error(pipeline, window.start, window.end)
    if problem is not None:
        found.verdict = WAITING if found.verdict == READING else found.verdict
        found.reasons.append(_predecessor_reason(store, pipeline, window, str(problem), now))
    if future is not None:
        found.verdict = WAITING if found.verdict == READING else found.verdict
        found.reasons.append(Reason(future, f"run it after {format_timestamp(window.end)}"))
    units = store.window_partitions(source, window.start, window.end)
    unit_reasons = _unit_reasons(units, now, source)
    found.reasons.extend(unit_reasons)
    if units and not unit_reasons:
        rows = sum(unit.rows or 0 for unit in units)
        found.facts.append(f"every unit is read: {len(units)} unit(s), {rows} staged change rows")
        found.reasons.extend(_lagging(store, source, window, now))
    elif not units:
        found.facts.append("no units are recorded for the window")
    if found.verdict == READING and not found.reasons:
        found.facts.append(
            "nothing holds the window back in the metastore: it waits for its merge, upsert and commit, "
            "or one of them failed before recording its error"
        )
        found.reasons.append(Reason(
            "the window is read but not applied",
            f"see the run's task states (python -m airflow_provider_cdc timings --dag-id {dag}); a step that "
            f"failed for good: {_clear(dag, window)}",
        ))  # fmt: skip
    elif found.verdict == READING:
        found.verdict = WAITING
    return found


def _predecessor_reason(
    store: Metastore, pipeline: str, window: Window, problem: str, now: datetime
) -> Reason:
    """The predecessor rule's message, with the predecessor's own failure when it recorded one."""
    before = store.windows_ending_at(pipeline, window.start)
    detail = ""
    for record in before:
        if record.error is not None:
            detail = f". That window failed {_ago(now, record.error.at)}: {record.error.text.splitlines()[0]}"
    fix = "run the windows before it first"
    if before:
        fix = (
            "see why that window is not applied: python -m airflow_provider_cdc explain --pipeline "
            f"{pipeline} --window {before[0].window_id}"
        )
    return Reason(problem + detail, fix)


def describe(explanation: WindowExplanation) -> str:
    """The window as people read it: ``[start, end) of pipeline P (window id …)``."""
    window = explanation.window
    return f"{describe_window(window)} of pipeline {explanation.pipeline} (window id {window.window_id})"


def explanation_lines(explanation: WindowExplanation) -> list[str]:
    """The explanation as the ``explain`` command prints it."""
    lines = [f"Window {describe(explanation)}: {explanation.verdict.upper()}"]
    lines += [f"  {fact}" for fact in explanation.facts]
    if not explanation.reasons:
        lines.append("Nothing to do." if explanation.verdict == APPLIED else "No reason found.")
        return lines
    lines.append("Why, and what to do:" if explanation.verdict != APPLIED else "Found:")
    for number, reason in enumerate(explanation.reasons, 1):
        lines.append(f"  {number}. {reason.what}")
        for extra in reason.detail.splitlines()[1:]:
            lines.append(f"       {extra}")
        if reason.fix:
            lines.append(f"     → {reason.fix}")
    return lines


def as_dict(explanation: WindowExplanation) -> dict[str, Any]:
    """The explanation as JSON-able values (for ``--json`` and other views)."""
    return {
        "pipeline": explanation.pipeline,
        "window_id": explanation.window.window_id,
        "window_start": format_timestamp(explanation.window.start),
        "window_end": format_timestamp(explanation.window.end),
        "verdict": explanation.verdict,
        "facts": list(explanation.facts),
        "reasons": [{"what": r.what, "fix": r.fix, "detail": r.detail} for r in explanation.reasons],
    }
