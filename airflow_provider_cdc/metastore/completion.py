"""When a window of a source is complete, read from the metastore alone.

A window is complete once every unit the metastore records for the source (its partitions) is read up
to the timestamp asked for (the window's end) and every unit of the window is done. Every source records
its units there, so sensors and triggers check completion without the source's connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from airflow_provider_cdc.core.timestamps import ensure_utc, format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore, PartitionRecord

__all__ = ["STALLED_AFTER_HEARTBEATS", "LaggingPartition", "describe_lagging", "lagging_units"]

#: A held unit whose reader has reported nothing for this many heartbeat intervals is stalled.
STALLED_AFTER_HEARTBEATS = 3


@dataclass(frozen=True)
class LaggingPartition:
    """A unit (partition) that holds back a completion check: how far its watermark is behind."""

    token: str
    watermark: datetime
    behind_seconds: float
    reason: str


def describe_lagging(lagging: list[LaggingPartition], limit: int = 10) -> str:
    """``N partition(s) hold it back: <token> (<reason>, <s>s behind); …`` for a completion check's log."""
    shown = "; ".join(f"{p.token} ({p.reason}, {p.behind_seconds:.1f}s behind)" for p in lagging[:limit])
    more = f"; and {len(lagging) - limit} more" if len(lagging) > limit else ""
    return f"{len(lagging)} partition(s) hold it back: {shown}{more}"


def _stall_detail(partition: PartitionRecord | None) -> str:
    """Why a stalled unit waits (empty for a unit that is not stalled)."""
    if partition is None:
        return ""
    expiry = partition.lease_expires_at
    return (
        f"; its reader {partition.lease_owner} has reported no progress for {STALLED_AFTER_HEARTBEATS} "
        f"heartbeat intervals of {partition.heartbeat_ms} ms and may have died"
        + (f" (another reader takes it over when the lease expires at {format_timestamp(expiry)})"
           if expiry is not None else "")
    )


def lagging_units(
    store: Metastore,
    source_key: str,
    timestamp: datetime,
    window: Window | None = None,
    *,
    unopened: str = "<initial query>",
) -> list[LaggingPartition]:
    """The units of ``source_key`` alive at ``timestamp`` not read up to it, then the units of
    ``window`` not done (``[]``: complete). A source the metastore does not know yet holds a window back
    as ``unopened`` (what would find its first units)."""
    timestamp = ensure_utc(timestamp)
    if not store.is_known_stream(source_key):
        if window is not None:
            return [LaggingPartition(unopened, timestamp, 0.0, "the window has not been opened")]
        return []
    behind = store.lagging_partitions(source_key, timestamp)
    stalled = {}
    if behind:
        found = store.stalled_partitions(source_key, missed_heartbeats=STALLED_AFTER_HEARTBEATS)
        stalled = {p.token: p for p in found}
    lagging = [
        LaggingPartition(
            p.token,
            p.watermark,
            (timestamp - p.watermark).total_seconds(),
            f"drained to {format_timestamp(p.watermark)}" + _stall_detail(stalled.get(p.token)),
        )
        for p in behind
    ]
    if window is not None:
        items = store.window_partitions(source_key, window.start, window.end)
        if not items:
            lagging.append(LaggingPartition("<window>", timestamp, 0.0, "the window has not been opened"))
        for item in items:
            if item.state != "done":
                lagging.append(
                    LaggingPartition(
                        item.token,
                        window.start,
                        (window.end - window.start).total_seconds(),
                        f"not yet read for window {window} (state {item.state}, reader {item.lease_owner})",
                    )
                )
    return lagging
