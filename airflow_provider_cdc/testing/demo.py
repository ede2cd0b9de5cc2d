"""The demo database: a change-stream workload laid out over consecutive windows on the emulator.

Used by the example DAG's embedded defaults (``python -m airflow_provider_cdc.testing.spanner_emulator
--demo``), the end-to-end tests and the latency benchmark. The history has splits, merges, partial
updates, deletes, transactions spanning partitions and transactions that write one row several times;
its final state is written as ground truth.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from airflow_provider_cdc.domain.timestamps import format_timestamp
from airflow_provider_cdc.testing.workload import ALL_CHANGES_STREAM, TABLES_BY_NAME, Workload, schema_ddl

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
    from google.cloud.spanner_v1 import Client

    previous = os.environ.get("SPANNER_EMULATOR_HOST")
    os.environ["SPANNER_EMULATOR_HOST"] = emulator.host
    try:
        client = Client(project=settings.project, disable_builtin_metrics=True)
    finally:
        if previous is None:
            os.environ.pop("SPANNER_EMULATOR_HOST", None)
        else:
            os.environ["SPANNER_EMULATOR_HOST"] = previous
    instance = client.instance(
        settings.instance,
        configuration_name=f"projects/{settings.project}/instanceConfigs/emulator-config",
        node_count=1,
    )
    instance.create().result(60)
    database = instance.database(settings.database, ddl_statements=schema_ddl(retention="30d"))
    database.create().result(60)
    workload = Workload(
        database, emulator, seed=settings.seed, progress_every=10**9,
        max_writes_per_row=settings.max_writes_per_row,
    )
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
            # the tables as they must be once windows 0..i are applied
            "state_after_window": [
                encoded_state(workload, settings.window_bounds(i)[1] - timedelta(microseconds=1))
                for i in range(settings.windows)
            ],
        }
        Path(truth_path).write_text(json.dumps(payload, sort_keys=True))
    return workload
