"""Which shards a window reads, in which lineage stage, from where, and whether it reads them (pure).

A window ``[start, end)`` reads every shard a ``DescribeStream`` taken after ``end`` lists, except the
shards drained (``SHARD_END``) at its start. A shard's **stage** is 0 when none of its parents is read in
the window, else one more than its deepest parent's; a child is read after its parents (the window's
partitions are claimed in lineage order) and its records get greater sequence numbers.

Where a shard's reading starts (:func:`start_position`): at its checkpoint at the window start; with
none, from its oldest record when its lineage is already being read (a parent is read in this window
or was read by an earlier one), else — the first sight of the shard — at a seek to ``start`` minus a
margin, skipping the leading records written before ``start``.

Whether a child is read at all (:func:`skips`, DataX's ``SKIP``): when a parent read in the window did
not reach ``SHARD_END`` in it (it stopped at the boundary or caught up), the child's records all lie
after the window's end, so the child stages nothing and keeps its start for the next window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from airflow_provider_cdc.sources.tablestore.checkpoints import ITERATOR, TRIM_HORIZON, Checkpoint

__all__ = ["SEEK", "StartPosition", "shard_stages", "skips", "start_position", "window_shards"]

#: A start found by seeking to a time.
SEEK = "SEEK"


def window_shards(listed: Iterable[str], at_start: Mapping[str, Checkpoint]) -> list[str]:
    """The shards a window reads: those listed, except the ones drained at its start."""
    return [shard for shard in listed if not (shard in at_start and at_start[shard].drained)]


def shard_stages(units: Iterable[str], parents: Mapping[str, Iterable[str]]) -> dict[str, int]:
    """Each unit's lineage stage within the window (parents that are not units do not count)."""
    wanted = list(units)
    unit_set = set(wanted)
    stages: dict[str, int] = {}

    def stage(shard: str, path: tuple[str, ...]) -> int:
        if shard in stages:
            return stages[shard]
        if shard in path:
            raise ValueError(f"shard lineage has a cycle: {' -> '.join((*path, shard))}")
        within = [p for p in parents.get(shard, ()) if p in unit_set]
        stages[shard] = 0 if not within else 1 + max(stage(p, (*path, shard)) for p in within)
        return stages[shard]

    for shard in wanted:
        stage(shard, ())
    return stages


@dataclass(frozen=True)
class StartPosition:
    """Where a shard's reading in a window starts: ``ITERATOR`` (``iterator``), ``TRIM_HORIZON`` or
    ``SEEK`` (to ``seek_us``); ``skip_before_us``: leading records written before it are skipped."""

    kind: str
    iterator: str | None = None
    seek_us: int | None = None
    skip_before_us: int | None = None

    def checkpoint(self, records: int = 0) -> Checkpoint:
        """This start as a checkpoint (a skipped child keeps it for the next window)."""
        if self.kind == ITERATOR:
            return Checkpoint(ITERATOR, self.iterator, records)
        return Checkpoint(TRIM_HORIZON, None, records)


def start_position(
    shard: str,
    parents: Iterable[str],
    at_start: Checkpoint | None,
    *,
    units: Iterable[str],
    read_before: Iterable[str],
    window_start_us: int,
    seek_margin_us: int,
) -> StartPosition:
    """Where ``shard``'s reading of the window starts (see the module). ``read_before``: shards with
    a checkpoint at or before the window start."""
    if at_start is not None:
        if at_start.kind == ITERATOR:
            return StartPosition(ITERATOR, at_start.iterator)
        return StartPosition(TRIM_HORIZON)
    lineage = set(units) | set(read_before)
    if any(parent in lineage for parent in parents):
        return StartPosition(TRIM_HORIZON)
    return StartPosition(
        SEEK, seek_us=max(window_start_us - seek_margin_us, 0), skip_before_us=window_start_us
    )


def skips(parents: Iterable[str], units: Iterable[str], at_end: Mapping[str, Checkpoint]) -> list[str]:
    """The parents, read in the window, that did not reach ``SHARD_END`` in it (non-empty: the child
    is skipped). A parent without a checkpoint at the end counts as not drained."""
    unit_set = set(units)
    return [p for p in parents if p in unit_set and not (p in at_end and at_end[p].drained)]
