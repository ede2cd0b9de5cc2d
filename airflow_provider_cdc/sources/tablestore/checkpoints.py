"""Shard checkpoints: where each shard's reading stands at a window boundary, in the metastore's database.

A checkpoint of ``(source, shard, boundary)`` says where the shard's records at and after the window
boundary begin: an ``ITERATOR`` (the service's iterator at the first record of the next window),
``SHARD_END`` (the shard is closed and every record was read before the boundary) or ``TRIM_HORIZON``
(nothing was read yet: the shard is read from its oldest record). It also keeps how many records the
shard gave the window ending at the boundary, so a re-read of that window reads exactly those records.

Checkpoints are written once (insert unless present): the first complete reading of a window fixes
its end for every later reading, and the next window starts where it says. They live in the table
``cdc_tablestore_checkpoints`` of the metastore's database, created on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import sqlalchemy as sa

from airflow_provider_cdc.metastore import Metastore

__all__ = ["SHARD_END", "TRIM_HORIZON", "Checkpoint", "ShardCheckpoints"]

ITERATOR = "ITERATOR"
SHARD_END = "SHARD_END"
TRIM_HORIZON = "TRIM_HORIZON"
KINDS = (ITERATOR, SHARD_END, TRIM_HORIZON)

_metadata = sa.MetaData()
checkpoints_table = sa.Table(
    "cdc_tablestore_checkpoints",
    _metadata,
    sa.Column("source", sa.String(512), primary_key=True),
    sa.Column("shard_id", sa.String(1024), primary_key=True),
    sa.Column("boundary_us", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("iterator", sa.Text, nullable=True),
    sa.Column("records", sa.BigInteger, nullable=False),
)


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
    """The checkpoints of the shards of one source (its metastore key) in the metastore's database."""

    _created: ClassVar[set[str]] = set()

    def __init__(self, metastore: Metastore, source: str) -> None:
        self.metastore = metastore
        self.source = source
        url = repr(metastore)
        if url not in self._created:
            checkpoints_table.create(metastore.engine, checkfirst=True)
            self._created.add(url)

    def at(self, boundary_us: int) -> dict[str, Checkpoint]:
        """Every shard's checkpoint at ``boundary_us``, by shard id."""
        t = checkpoints_table
        with self.metastore._tx() as conn:
            rows = conn.execute(
                sa.select(t.c.shard_id, t.c.kind, t.c.iterator, t.c.records).where(
                    (t.c.source == self.source) & (t.c.boundary_us == boundary_us)
                )
            ).all()
        return {shard: Checkpoint(kind, iterator, records) for shard, kind, iterator, records in rows}

    def get(self, shard_id: str, boundary_us: int) -> Checkpoint | None:
        """The shard's checkpoint at ``boundary_us`` (``None``: none recorded)."""
        t = checkpoints_table
        with self.metastore._tx() as conn:
            row = conn.execute(
                sa.select(t.c.kind, t.c.iterator, t.c.records).where(
                    (t.c.source == self.source)
                    & (t.c.shard_id == shard_id)
                    & (t.c.boundary_us == boundary_us)
                )
            ).first()
        return None if row is None else Checkpoint(row[0], row[1], row[2])

    def shards_with_any(self, shard_ids: list[str], before_us: int) -> set[str]:
        """Which of ``shard_ids`` have a checkpoint at a boundary at or before ``before_us`` (were read)."""
        t = checkpoints_table
        if not shard_ids:
            return set()
        with self.metastore._tx() as conn:
            return set(
                conn.execute(
                    sa.select(t.c.shard_id)
                    .where(
                        (t.c.source == self.source)
                        & t.c.shard_id.in_(shard_ids)
                        & (t.c.boundary_us <= before_us)
                    )
                    .distinct()
                ).scalars()
            )

    def record(self, shard_id: str, boundary_us: int, checkpoint: Checkpoint) -> Checkpoint:
        """Write the checkpoint unless one is recorded; return the recorded one (the first wins)."""
        values = {
            "source": self.source,
            "shard_id": shard_id,
            "boundary_us": boundary_us,
            "kind": checkpoint.kind,
            "iterator": checkpoint.iterator,
            "records": checkpoint.records,
        }
        with self.metastore._tx(write=True) as conn:
            if self.metastore._insert_if_absent(conn, checkpoints_table, values):
                return checkpoint
        recorded = self.get(shard_id, boundary_us)
        assert recorded is not None
        return recorded

    def record_many(self, boundary_us: int, checkpoints: Mapping[str, Checkpoint]) -> None:
        """Write several shards' checkpoints at one boundary (each unless present)."""
        for shard_id, checkpoint in sorted(checkpoints.items()):
            self.record(shard_id, boundary_us, checkpoint)
