"""Shard checkpoints: where each shard's reading stands at a window boundary, in the metastore's database.

A checkpoint of ``(source, shard, boundary)`` says where the shard's records at and after the window
boundary begin: an ``ITERATOR`` (the service's iterator at the first record of the next window),
``SHARD_END`` (the shard is closed and every record was read before the boundary) or ``TRIM_HORIZON``
(nothing was read yet: the shard is read from its oldest record). It also keeps how many records the
shard gave the window ending at the boundary, so a re-read of that window reads exactly those records.

Checkpoints are written once (insert unless present): the first complete reading of a window fixes
its end for every later reading, and the next window starts where it says. They are the metastore's
unit checkpoints (``cdc_unit_checkpoints``, :mod:`airflow_provider_cdc.metastore.unit_checkpoints`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from airflow_provider_cdc.metastore import Metastore

__all__ = ["SHARD_END", "TRIM_HORIZON", "Checkpoint", "ShardCheckpoints"]

ITERATOR = "ITERATOR"
SHARD_END = "SHARD_END"
TRIM_HORIZON = "TRIM_HORIZON"
KINDS = (ITERATOR, SHARD_END, TRIM_HORIZON)


@dataclass(frozen=True)
class Checkpoint:
    """A shard's position at a window boundary (see the module); ``records``: how many records the
    shard gave the window that ends there."""

    kind: str
    iterator: str | None = None
    records: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"invalid checkpoint kind {self.kind!r}: expected one of {', '.join(KINDS)}")
        if (self.kind == ITERATOR) != bool(self.iterator):
            raise ValueError(
                f"a {self.kind} checkpoint {'needs' if self.kind == ITERATOR else 'has no'} iterator"
            )

    @classmethod
    def at(cls, iterator: str, records: int) -> Checkpoint:
        return cls(ITERATOR, iterator, records)

    @property
    def drained(self) -> bool:
        """The shard is closed and fully read."""
        return self.kind == SHARD_END


class ShardCheckpoints:
    """The checkpoints of the shards of one source (its metastore key): the metastore's unit
    checkpoints, a shard's iterator as the position."""

    def __init__(self, metastore: Metastore, source: str) -> None:
        self.metastore = metastore
        self.source = source

    def at(self, boundary_us: int) -> dict[str, Checkpoint]:
        """Every shard's checkpoint at ``boundary_us``, by shard id."""
        found = self.metastore.unit_checkpoints_at(self.source, boundary_us)
        return {shard: Checkpoint(*recorded) for shard, recorded in found.items()}

    def get(self, shard_id: str, boundary_us: int) -> Checkpoint | None:
        """The shard's checkpoint at ``boundary_us`` (``None``: none recorded)."""
        recorded = self.metastore.unit_checkpoint(self.source, shard_id, boundary_us)
        return None if recorded is None else Checkpoint(*recorded)

    def shards_with_any(self, shard_ids: list[str], before_us: int) -> set[str]:
        """Which of ``shard_ids`` have a checkpoint at a boundary at or before ``before_us`` (were read)."""
        return self.metastore.units_checkpointed_by(self.source, shard_ids, before_us)

    def record(self, shard_id: str, boundary_us: int, checkpoint: Checkpoint) -> Checkpoint:
        """Write the checkpoint unless one is recorded; return the recorded one (the first wins)."""
        recorded = self.metastore.record_unit_checkpoint(
            self.source, shard_id, boundary_us, checkpoint.kind, checkpoint.iterator, checkpoint.records
        )
        return Checkpoint(*recorded)

    def record_many(self, boundary_us: int, checkpoints: Mapping[str, Checkpoint]) -> None:
        """Write several shards' checkpoints at one boundary (each unless present)."""
        for shard_id, checkpoint in sorted(checkpoints.items()):
            self.record(shard_id, boundary_us, checkpoint)
