"""Partitions of a change stream: lineage, leases and the queries that decide what is read.

Every state change is a compare-and-set ``UPDATE … WHERE <expected state>`` whose row count
decides success, so concurrent readers on one or many hosts never both win.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql.expression import ColumnElement

from airflow_provider_cdc.core.timestamps import from_micros
from airflow_provider_cdc.metastore.engine import MetastoreEngine, chunks
from airflow_provider_cdc.metastore.errors import (
    LeaseLostError,
    PartitionNotFoundError,
    PartitionStateError,
    UnknownStreamError,
)
from airflow_provider_cdc.metastore.mappers import to_partition
from airflow_provider_cdc.metastore.model import (
    PartitionRecord,
    PartitionSpec,
    PartitionState,
    coerce_partition_spec,
    encode_tokens,
    lease_micros,
    parents_drained,
    timestamp_micros,
    validate_owner,
    validate_stream,
    validate_token,
)
from airflow_provider_cdc.metastore.schema import partitions as P


def partition_cond(
    stream: str, token: str, *, unfinished: bool = False, holder: str | None = None
) -> ColumnElement:
    """The partition's row; ``unfinished``: unless finished; ``holder``: only while it holds the lease."""
    cond = (P.c.stream == stream) & (P.c.token == token)
    if unfinished:
        cond = cond & (P.c.state != PartitionState.FINISHED.value)
    if holder is not None:
        cond = cond & (P.c.lease_owner == holder)
    return cond


def partition_row(conn: Connection, stream: str, token: str) -> Mapping[str, Any]:
    """The partition's row (``PartitionNotFoundError`` if unknown)."""
    row = conn.execute(sa.select(P).where(partition_cond(stream, token))).first()
    if row is None:
        raise PartitionNotFoundError(stream, token)
    return row._mapping


def require_stream(conn: Connection, stream: str) -> None:
    """``UnknownStreamError`` unless a partition of the stream is recorded."""
    if conn.execute(sa.select(P.c.token).where(P.c.stream == stream).limit(1)).first() is None:
        raise UnknownStreamError(stream)


def select_partitions(
    conn: Connection, stream: str, cond: ColumnElement | None = None
) -> list[PartitionRecord]:
    """The stream's partitions matching ``cond``, in (start, token) order."""
    query = sa.select(P).where(P.c.stream == stream)
    if cond is not None:
        query = query.where(cond)
    return [to_partition(r._mapping) for r in conn.execute(query.order_by(P.c.start_us, P.c.token))]


def recorded_parents(
    conn: Connection, stream: str, records: Iterable[PartitionRecord]
) -> dict[str, PartitionRecord]:
    """The recorded parents of ``records``, by token (parents the metastore does not know are absent)."""
    tokens = sorted({t for r in records for t in r.parent_tokens})
    found: dict[str, PartitionRecord] = {}
    for chunk in chunks(tokens):
        for record in select_partitions(conn, stream, P.c.token.in_(chunk)):
            found[record.token] = record
    return found


class PartitionAccess(MetastoreEngine):
    """Partition lineage (add, finish), leases (claim, release) and partition queries."""

    # ------------------------------------------------------------------------------------------
    # Lineage.

    def add_partitions(self, stream: str, partitions: Iterable[PartitionSpec | object]) -> list[str]:
        """Record partitions that are not recorded yet; return the tokens created by this call.

        Items are ``PartitionSpec``s, mappings or child-partition records (``token``,
        ``start_timestamp``, ``parent_tokens``/``parent_partition_tokens``, optional ``heartbeat_ms``).
        A token already present (a merged child reported by several parents, a retry, a concurrent
        reader) is left as it is, with one exception: a partition recorded without parents by a
        later initial query that is now reported as a child with an earlier start takes that start
        and those parents (reading an earlier window found where it really begins).
        """
        stream = validate_stream(stream)
        specs = [coerce_partition_spec(p, stream) for p in partitions]
        with self._tx(write=True) as conn:
            created = self._insert_partitions(conn, stream, specs)
        return [spec.token for spec in specs if spec.token in created]

    def _insert_partitions(self, conn: Connection, stream: str, specs: list[PartitionSpec]) -> set[str]:
        created = set()
        # Token order: concurrent transactions lock the same rows in the same order (no deadlock).
        for spec in sorted(specs, key=lambda s: s.token):
            if self._insert_partition(conn, stream, spec):
                created.add(spec.token)
            elif spec.parent_tokens:
                self._adopt_as_child(conn, stream, spec)
        return created

    def _adopt_as_child(self, conn: Connection, stream: str, spec: PartitionSpec) -> bool:
        """Give a partition recorded by a later initial query its parents and its earlier start.

        An initial query records the partitions alive at its time without parents; reading an
        earlier window (a backfill) then meets some of them as children of older partitions, which
        is where they really begin. A watermark still at the recorded start moves with it.
        """
        start_us = timestamp_micros(spec.start_timestamp, "start_timestamp")
        return self._update_one(
            conn,
            P,
            (P.c.stream == stream)
            & (P.c.token == spec.token)
            & (P.c.parent_tokens == encode_tokens(()))
            & (P.c.start_us > start_us),
            parent_tokens=encode_tokens(spec.parent_tokens),
            start_us=start_us,
            watermark_us=sa.case((P.c.watermark_us == P.c.start_us, start_us), else_=P.c.watermark_us),
            updated_us=self._clock_now(),
        )

    def _insert_partition(self, conn: Connection, stream: str, spec: PartitionSpec) -> bool:
        start_us = timestamp_micros(spec.start_timestamp, "start_timestamp")
        now = self._clock_now()
        values = {
            "stream": stream,
            "token": spec.token,
            "parent_tokens": encode_tokens(spec.parent_tokens),
            "start_us": start_us,
            "end_us": None,
            "state": PartitionState.CREATED.value,
            "watermark_us": start_us,
            "heartbeat_ms": spec.heartbeat_ms,
            "lease_owner": None,
            "lease_expires_us": None,
            "attempts": 0,
            "record_count": 0,
            "created_us": now,
            "updated_us": now,
            "finished_us": None,
            "progress_us": None,
        }
        return self._insert_if_absent(conn, P, values)

    def finish_partition(
        self,
        stream: str,
        token: str,
        end_timestamp: datetime | str,
        children: Iterable[object],
        *,
        owner: str | None = None,
    ) -> bool:
        """Record that a partition reported its children and ended at ``end_timestamp``.

        In one transaction: the partition becomes ``finished`` with its end set, its watermark
        raised to the end and its lease dropped; each child (a token, ``PartitionSpec``, mapping
        or child-partition record; start defaults to ``end_timestamp``) is created if absent (as in
        ``add_partitions``). With ``owner``, the caller must still hold the lease (else ``LeaseLostError``).
        Returns True if this call finished the partition, False if it already was (same end).
        """
        stream, token = validate_stream(stream), validate_token(token, stream)
        owner = validate_owner(owner) if owner is not None else None
        end_us = timestamp_micros(end_timestamp, f"end_timestamp of partition token {token!r}")
        specs = [
            coerce_partition_spec(c, stream, default_start=from_micros(end_us), default_parent=token)
            for c in children
        ]
        if not specs:
            raise PartitionStateError(
                stream,
                token,
                "a partition finishes only by reporting its child partitions; a query that "
                "ends without them must be retried, not finished",
            )
        for spec in specs:
            if token not in spec.parent_tokens:
                raise PartitionStateError(
                    stream,
                    token,
                    f"child partition {spec.token!r} does not name it among its parents "
                    f"{list(spec.parent_tokens)}",
                )
        with self._tx(write=True) as conn:
            row = partition_row(conn, stream, token)
            if end_us < row["start_us"]:
                raise PartitionStateError(
                    stream,
                    token,
                    f"end_timestamp {from_micros(end_us)} is before its start {from_micros(row['start_us'])}",
                )
            now = self._clock_now()
            finished = self._update_one(
                conn,
                P,
                partition_cond(stream, token, unfinished=True, holder=owner),
                state=PartitionState.FINISHED.value,
                end_us=end_us,
                watermark_us=sa.case((P.c.watermark_us < end_us, end_us), else_=P.c.watermark_us),
                lease_owner=None,
                lease_expires_us=None,
                finished_us=now,
                updated_us=now,
                progress_us=now,
            )
            if not finished:
                current = partition_row(conn, stream, token)
                if current["state"] != PartitionState.FINISHED.value:
                    raise LeaseLostError(stream, token, owner or "", current["lease_owner"])
                if current["end_us"] != end_us:
                    raise PartitionStateError(
                        stream,
                        token,
                        f"already finished at {from_micros(current['end_us'])}, "
                        f"cannot finish again at {from_micros(end_us)}",
                    )
            self._insert_partitions(conn, stream, specs)
            return finished

    def lower_initial_starts(self, stream: str, tokens: Iterable[str], start: datetime | str) -> int:
        """Move the start of initial partitions among ``tokens`` back to ``start``; return how many moved.

        An initial query at a time earlier than the recorded lineage returns partitions that are
        already recorded with a later start. Only partitions without parents and with a recorded
        start after ``start`` change; a watermark still at the old start moves with it (nothing of
        the partition has been read), a watermark past it is kept.
        """
        stream = validate_stream(stream)
        wanted = sorted({validate_token(t, stream) for t in tokens})
        start_us = timestamp_micros(start, "start")
        changed = 0
        with self._tx(write=True) as conn:
            now = self._now(conn)
            for chunk in chunks(wanted):
                changed += conn.execute(
                    sa.update(P)
                    .where(
                        (P.c.stream == stream)
                        & P.c.token.in_(chunk)
                        & (P.c.parent_tokens == encode_tokens(()))
                        & (P.c.start_us > start_us)
                    )
                    .values(
                        start_us=start_us,
                        watermark_us=sa.case(
                            (P.c.watermark_us == P.c.start_us, start_us), else_=P.c.watermark_us
                        ),
                        updated_us=now,
                    )
                ).rowcount
        return changed

    def end_partitions(self, stream: str, tokens: Iterable[str], end: datetime | str) -> int:
        """Mark partitions that have no successors (the batches of a table read) ``finished`` at ``end``,
        watermark included, so that they never count as alive or lagging; return how many changed."""
        stream = validate_stream(stream)
        wanted = sorted({validate_token(t, stream) for t in tokens})
        end_us = timestamp_micros(end, "end")
        changed = 0
        with self._tx(write=True) as conn:
            now = self._clock_now()
            for chunk in chunks(wanted):
                changed += conn.execute(
                    sa.update(P)
                    .where(
                        (P.c.stream == stream)
                        & P.c.token.in_(chunk)
                        & (P.c.state != PartitionState.FINISHED.value)
                        & (P.c.start_us <= end_us)
                    )
                    .values(state=PartitionState.FINISHED.value, end_us=end_us, watermark_us=end_us,
                            lease_owner=None, lease_expires_us=None, finished_us=now, updated_us=now)
                ).rowcount
        return changed

    # ------------------------------------------------------------------------------------------
    # Leases.

    def claim_partition(
        self, stream: str, token: str, owner: str, lease_seconds: float
    ) -> PartitionRecord | None:
        """Take the partition's lease for ``lease_seconds``; return it, or None if not claimable now.

        Claimable: not finished, every known parent drained through its start, and the lease free,
        expired, or already held by ``owner`` (a claim by the holder renews it). The first claim
        moves the partition from ``created`` to ``running``; each claim counts one attempt.
        """
        stream, token, owner = validate_stream(stream), validate_token(token, stream), validate_owner(owner)
        lease_us = lease_micros(lease_seconds)
        with self._tx(write=True) as conn:
            record = to_partition(partition_row(conn, stream, token))
            if record.is_finished or not parents_drained(
                record, recorded_parents(conn, stream, [record]).values()
            ):
                return None
            now = self._clock_now()
            free = P.c.lease_owner.is_(None) | (P.c.lease_expires_us < now) | (P.c.lease_owner == owner)
            claimed = self._update_one(
                conn,
                P,
                partition_cond(stream, token, unfinished=True) & free,
                lease_owner=owner,
                lease_expires_us=now + lease_us,
                attempts=P.c.attempts + 1,
                state=sa.case(
                    (P.c.state == PartitionState.CREATED.value, PartitionState.RUNNING.value),
                    else_=P.c.state,
                ),
                updated_us=now,
                progress_us=now,
            )
            return to_partition(partition_row(conn, stream, token)) if claimed else None

    def release(self, stream: str, token: str, owner: str) -> bool:
        """Give up ``owner``'s lease so another reader may claim the partition; False if not held."""
        stream, token, owner = validate_stream(stream), validate_token(token, stream), validate_owner(owner)
        with self._tx(write=True) as conn:
            released = self._update_one(
                conn,
                P,
                partition_cond(stream, token, holder=owner),
                lease_owner=None,
                lease_expires_us=None,
                updated_us=self._clock_now(),
            )
            if not released:
                partition_row(conn, stream, token)
            return released

    # ------------------------------------------------------------------------------------------
    # Queries.

    def get_partition(self, stream: str, token: str) -> PartitionRecord:
        """The recorded partition (``PartitionNotFoundError`` if unknown)."""
        stream, token = validate_stream(stream), validate_token(token, stream)
        with self._tx() as conn:
            return to_partition(partition_row(conn, stream, token))

    def is_known_stream(self, stream: str) -> bool:
        """Whether any partition of the stream is recorded."""
        stream = validate_stream(stream)
        with self._tx() as conn:
            try:
                require_stream(conn, stream)
            except UnknownStreamError:
                return False
            return True

    def list_partitions(
        self, stream: str, *, state: PartitionState | str | None = None
    ) -> list[PartitionRecord]:
        """All recorded partitions of the stream in (start, token) order, optionally of one state."""
        stream = validate_stream(stream)
        cond = None if state is None else P.c.state == PartitionState(state).value
        with self._tx() as conn:
            require_stream(conn, stream)
            return select_partitions(conn, stream, cond)

    def partitions_alive_at(self, stream: str, timestamp: datetime | str) -> list[PartitionRecord]:
        """Partitions holding changes committed at ``timestamp``: start ≤ ts and (end unknown or end > ts)."""
        stream = validate_stream(stream)
        ts = timestamp_micros(timestamp, "timestamp")
        with self._tx() as conn:
            require_stream(conn, stream)
            return select_partitions(
                conn, stream, (P.c.start_us <= ts) & (P.c.end_us.is_(None) | (P.c.end_us > ts))
            )

    def partitions_overlapping(
        self, stream: str, start: datetime | str, end: datetime | str
    ) -> list[PartitionRecord]:
        """Partitions whose lifetime intersects ``[start, end)``."""
        stream = validate_stream(stream)
        start_us, end_us = timestamp_micros(start, "start"), timestamp_micros(end, "end")
        if end_us <= start_us:
            raise ValueError(
                f"empty interval: end {from_micros(end_us)} is not after start {from_micros(start_us)}"
            )
        with self._tx() as conn:
            require_stream(conn, stream)
            return select_partitions(
                conn, stream, (P.c.start_us < end_us) & (P.c.end_us.is_(None) | (P.c.end_us > start_us))
            )

    def parents_of(self, stream: str, token: str) -> list[PartitionRecord]:
        """The recorded parents of a partition, in the order the partition names them."""
        stream, token = validate_stream(stream), validate_token(token, stream)
        with self._tx() as conn:
            record = to_partition(partition_row(conn, stream, token))
            found = recorded_parents(conn, stream, [record])
            return [found[t] for t in record.parent_tokens if t in found]

    def lagging_partitions(self, stream: str, timestamp: datetime | str) -> list[PartitionRecord]:
        """Partitions alive at ``timestamp`` that are not drained to it (each with its watermark).

        Empty means every change committed before ``timestamp`` has been read, given that the
        partitions alive at the first window's start were recorded.
        """
        stream = validate_stream(stream)
        ts = timestamp_micros(timestamp, "timestamp")
        with self._tx() as conn:
            require_stream(conn, stream)
            return select_partitions(
                conn,
                stream,
                (P.c.start_us <= ts) & (P.c.end_us.is_(None) | (P.c.end_us > ts)) & (P.c.watermark_us < ts),
            )

    def stalled_partitions(self, stream: str, *, missed_heartbeats: int = 3) -> list[PartitionRecord]:
        """Held, running partitions without progress for ``missed_heartbeats`` heartbeat intervals."""
        stream = validate_stream(stream)
        if (
            isinstance(missed_heartbeats, bool)
            or not isinstance(missed_heartbeats, int)
            or missed_heartbeats < 1
        ):
            raise ValueError(f"invalid missed_heartbeats {missed_heartbeats!r}: expected a positive integer")
        with self._tx() as conn:
            require_stream(conn, stream)
            since = sa.func.coalesce(P.c.progress_us, P.c.updated_us)
            return select_partitions(
                conn,
                stream,
                (P.c.state == PartitionState.RUNNING.value)
                & P.c.lease_owner.is_not(None)
                & P.c.heartbeat_ms.is_not(None)
                & (since + P.c.heartbeat_ms * (1000 * missed_heartbeats) < self._clock_now()),
            )
