"""Unit checkpoints: where a unit of a source stands at a window boundary.

A source whose units continue from window to window (a shard read through an iterator)
records, per unit and boundary, a position (``kind`` and the source's ``position`` text, e.g. an
iterator) and how many records the window ending there took from the unit. The next window starts at
the checkpoint of its start, and a re-read of a window takes exactly the recorded number of records.
Checkpoints are written once: the first write of a (stream, unit, boundary) wins, later ones read it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from airflow_provider_cdc.metastore.engine import MetastoreEngine
from airflow_provider_cdc.metastore.model import validate_count, validate_stream, validate_token
from airflow_provider_cdc.metastore.schema import unit_checkpoints as UC

#: ``(kind, position, records)`` of a unit at a boundary.
UnitCheckpoint = tuple[str, str | None, int]


class UnitCheckpointAccess(MetastoreEngine):
    """Checkpoints of a stream's units at window boundaries (see the module)."""

    def unit_checkpoints_at(self, stream: str, boundary_us: int) -> dict[str, UnitCheckpoint]:
        """Every unit's checkpoint at ``boundary_us``, by unit."""
        stream = validate_stream(stream)
        with self._tx() as conn:
            rows = conn.execute(
                sa.select(UC.c.unit, UC.c.kind, UC.c.position, UC.c.records).where(
                    (UC.c.stream == stream) & (UC.c.boundary_us == int(boundary_us))
                )
            ).all()
        return {unit: (kind, position, int(records)) for unit, kind, position, records in rows}

    def unit_checkpoint(self, stream: str, unit: str, boundary_us: int) -> UnitCheckpoint | None:
        """The unit's checkpoint at ``boundary_us`` (``None``: none recorded)."""
        stream = validate_stream(stream)
        with self._tx() as conn:
            row = conn.execute(
                sa.select(UC.c.kind, UC.c.position, UC.c.records).where(
                    (UC.c.stream == stream) & (UC.c.unit == unit) & (UC.c.boundary_us == int(boundary_us))
                )
            ).first()
        return None if row is None else (row[0], row[1], int(row[2]))

    def units_checkpointed_by(self, stream: str, units: Sequence[str], before_us: int) -> set[str]:
        """Which of ``units`` have a checkpoint at a boundary at or before ``before_us``."""
        stream = validate_stream(stream)
        if not units:
            return set()
        with self._tx() as conn:
            return set(
                conn.execute(
                    sa.select(UC.c.unit)
                    .where(
                        (UC.c.stream == stream) & UC.c.unit.in_(list(units)) & (UC.c.boundary_us <= before_us)
                    )
                    .distinct()
                ).scalars()
            )

    def record_unit_checkpoint(
        self, stream: str, unit: str, boundary_us: int, kind: str, position: str | None, records: int
    ) -> UnitCheckpoint:
        """Write the checkpoint unless one is recorded; return the recorded one (the first write wins)."""
        stream, unit = validate_stream(stream), validate_token(unit, stream)
        values = {
            "stream": stream,
            "unit": unit,
            "boundary_us": int(boundary_us),
            "kind": kind,
            "position": position,
            "records": validate_count("records", records),
        }
        with self._tx(write=True) as conn:
            values["recorded_us"] = self._now(conn)
            if self._insert_if_absent(conn, UC, values):
                return (kind, position, int(records))
        recorded = self.unit_checkpoint(stream, unit, boundary_us)
        assert recorded is not None  # inserted by another writer
        return recorded
