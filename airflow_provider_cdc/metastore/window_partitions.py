"""Partitions of a window: which partitions each window of a stream must read, claimed with leases.

An item is ``pending`` → ``running`` (claimed, with a lease) → ``done``. Items are claimed in
lineage order (a child only once every parent holding earlier changes of the window is done),
each claim a compare-and-set, so concurrent readers never read one partition at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.sql.expression import ColumnElement

from airflow_provider_cdc.metastore.engine import MetastoreEngine, chunks
from airflow_provider_cdc.metastore.errors import PartitionNotFoundError
from airflow_provider_cdc.metastore.mappers import to_window_partition, window_bounds
from airflow_provider_cdc.metastore.model import (
    WindowPartitionRecord,
    WindowPartitionState,
    decode_tokens,
    lease_micros,
    validate_claim_id,
    validate_count,
    validate_owner,
    validate_stream,
    validate_token,
    validate_transactions,
    window_parents_to_wait_for,
)
from airflow_provider_cdc.metastore.schema import partitions as P
from airflow_provider_cdc.metastore.schema import window_partitions as WP


def window_partition_key(stream: str, start: datetime | str, end: datetime | str) -> tuple[str, int, int]:
    """The validated stream name and the window's start and end in microseconds."""
    stream = validate_stream(stream)
    return stream, *window_bounds(start, end, f"change stream {stream!r}")


def window_partitions_cond(
    stream: str,
    start_us: int,
    end_us: int,
    token: str | None = None,
    *,
    holder: str | None = None,
    table: sa.FromClause = WP,
) -> ColumnElement:
    """The window's partitions (only ``token``'s if given) in ``table`` (window partitions or an alias).

    ``holder``: only while it holds the partition ``running``.
    """
    cond = (
        (table.c.stream == stream)
        & (table.c.window_start_us == start_us)
        & (table.c.window_end_us == end_us)
    )
    if token is not None:
        cond = cond & (table.c.token == token)
    if holder is not None:
        cond = cond & (table.c.state == WindowPartitionState.RUNNING.value) & (table.c.lease_owner == holder)
    return cond


def _claimable(owner: str, now_us: int) -> ColumnElement:
    running = WP.c.state == WindowPartitionState.RUNNING.value
    return (WP.c.state == WindowPartitionState.PENDING.value) | (
        running & ((WP.c.lease_expires_us < now_us) | (WP.c.lease_owner == owner))
    )


class WindowPartitionAccess(MetastoreEngine):
    """Record, claim, renew, complete, list and reset the partitions of a window."""

    def add_window_partitions(
        self, stream: str, start: datetime | str, end: datetime | str, tokens: Iterable[str]
    ) -> list[str]:
        """Record partitions the window must read, in state ``pending``, unless already recorded.

        Every token must be a recorded partition of the stream (else ``PartitionNotFoundError``).
        Items already recorded (a retry, another reader, a child reported twice) are left as they
        are. Returns the tokens this call added, in the given order.
        """
        stream, start_us, end_us = window_partition_key(stream, start, end)
        wanted = list(dict.fromkeys(validate_token(t, stream) for t in tokens))
        with self._tx(write=True) as conn:
            known: set[str] = set()
            for chunk in chunks(wanted):
                known.update(
                    conn.execute(
                        sa.select(P.c.token).where((P.c.stream == stream) & P.c.token.in_(chunk))
                    ).scalars()
                )
            for token in wanted:
                if token not in known:
                    raise PartitionNotFoundError(stream, token)
            now = self._now(conn)
            created = set()
            # Token order: concurrent transactions lock the same rows in the same order (no deadlock).
            for token in sorted(wanted):
                values = {
                    "stream": stream,
                    "window_start_us": start_us,
                    "window_end_us": end_us,
                    "token": token,
                    "state": WindowPartitionState.PENDING.value,
                    "lease_owner": None,
                    "lease_expires_us": None,
                    "attempts": 0,
                    "rows": None,
                    "transactions": None,
                    "created_us": now,
                    "updated_us": now,
                    "done_us": None,
                }
                if self._insert_if_absent(conn, WP, values):
                    created.add(token)
        return [token for token in wanted if token in created]

    def claim_window_partition(
        self,
        stream: str,
        start: datetime | str,
        end: datetime | str,
        owner: str,
        lease_seconds: float,
        *,
        claim_id: str | None = None,
    ) -> str | None:
        """Claim one partition of the window for ``owner``; return its token, or None if none is ready.

        Claimable: ``pending``; ``running`` with an expired lease (its reader died); or ``running``
        under ``owner`` itself (a retried reader takes its own partition back at once). Ready in
        lineage order: every parent of the partition ended at or before the window start, is
        unknown to the metastore, or is ``done`` in this window. Candidates are tried in
        (partition start, token) order, each with a compare-and-set that also re-checks the parents,
        so concurrent readers never get the same partition. The claim sets the state to
        ``running``, the lease to now + ``lease_seconds``, counts one attempt and records
        ``claim_id``, which names this reading's output and fences every earlier claim out of
        :meth:`complete_window_partition`.
        """
        stream, start_us, end_us = window_partition_key(stream, start, end)
        owner, claim_id = validate_owner(owner), validate_claim_id(claim_id)
        lease_us = lease_micros(lease_seconds)
        in_window = window_partitions_cond(stream, start_us, end_us)
        with self._tx(write=True) as conn:
            now = self._now(conn)
            claimable = _claimable(owner, now)
            candidates = conn.execute(
                sa.select(WP.c.token, P.c.parent_tokens)
                .select_from(WP.join(P, (P.c.stream == WP.c.stream) & (P.c.token == WP.c.token)))
                .where(in_window & claimable)
                .order_by(P.c.start_us, WP.c.token)
            ).all()
            if not candidates:
                return None
            parents = {token: decode_tokens(text) for token, text in candidates}
            parent_tokens = sorted({t for ts in parents.values() for t in ts})
            parent_ends: dict[str, int | None] = {}
            done: set[str] = set()
            for chunk in chunks(parent_tokens):
                parent_ends.update(
                    conn.execute(
                        sa.select(P.c.token, P.c.end_us).where((P.c.stream == stream) & P.c.token.in_(chunk))
                    ).all()
                )
                done.update(
                    conn.execute(
                        sa.select(WP.c.token).where(
                            in_window
                            & (WP.c.state == WindowPartitionState.DONE.value)
                            & WP.c.token.in_(chunk)
                        )
                    ).scalars()
                )
            done_item = WP.alias("done_item")
            for token, _ in candidates:
                waits = window_parents_to_wait_for(parents[token], parent_ends, start_us)
                if any(parent not in done for parent in waits):
                    continue
                cond = window_partitions_cond(stream, start_us, end_us, token) & claimable
                for parent in waits:
                    # Re-checked in the update itself: a concurrent reset may have removed the parent's item.
                    cond = cond & sa.exists().where(
                        window_partitions_cond(stream, start_us, end_us, parent, table=done_item)
                        & (done_item.c.state == WindowPartitionState.DONE.value)
                    )
                if self._update_one(
                    conn,
                    WP,
                    cond,
                    state=WindowPartitionState.RUNNING.value,
                    lease_owner=owner,
                    lease_expires_us=now + lease_us,
                    attempts=WP.c.attempts + 1,
                    claim_id=claim_id,
                    updated_us=now,
                ):
                    return token
            return None

    def renew_window_partition_lease(
        self,
        stream: str,
        start: datetime | str,
        end: datetime | str,
        token: str,
        owner: str,
        lease_seconds: float,
    ) -> bool:
        """Extend ``owner``'s lease on the window's partition to now + ``lease_seconds``.

        False when ``owner`` no longer holds it (another reader took it, it is done, or the window
        was reset).
        """
        stream, start_us, end_us = window_partition_key(stream, start, end)
        token, owner = validate_token(token, stream), validate_owner(owner)
        lease_us = lease_micros(lease_seconds)
        with self._tx(write=True) as conn:
            now = self._now(conn)
            return self._update_one(
                conn,
                WP,
                window_partitions_cond(stream, start_us, end_us, token, holder=owner),
                lease_expires_us=now + lease_us,
                updated_us=now,
            )

    def complete_window_partition(
        self,
        stream: str,
        start: datetime | str,
        end: datetime | str,
        token: str,
        owner: str,
        *,
        rows: int,
        transactions: float,
        claim_id: str | None = None,
        output_files: int | None = None,
        partition_rows: bool = False,
    ) -> bool:
        """Mark the window's partition ``done`` with its counts and output, and drop the lease.

        Only ``owner``, holding it in state ``running`` (under ``claim_id`` when given), may; False
        when it lost the partition (its lease expired and another reader took it, it claimed it
        again, or the window was reset) — its reading then does not count. The claim id and
        ``output_files`` recorded here name the partition's output: the staged files of that claim.
        With ``partition_rows`` the same transaction records ``rows`` as the partition's record count
        (a table batch, read whole for one window, has no watermark whose advance counts them).
        """
        stream, start_us, end_us = window_partition_key(stream, start, end)
        token, owner = validate_token(token, stream), validate_owner(owner)
        rows = validate_count("rows", rows)
        if rows is None:
            raise ValueError("invalid rows None: expected a non-negative integer")
        transactions = validate_transactions(transactions)
        cond = window_partitions_cond(stream, start_us, end_us, token, holder=owner)
        if claim_id is not None:
            cond = cond & (WP.c.claim_id == validate_claim_id(claim_id))
        with self._tx(write=True) as conn:
            now = self._now(conn)
            done = self._update_one(
                conn,
                WP,
                cond,
                output_files=validate_count("output_files", output_files),
                state=WindowPartitionState.DONE.value,
                rows=rows,
                transactions=transactions,
                lease_owner=None,
                lease_expires_us=None,
                done_us=now,
                updated_us=now,
            )
            if done and partition_rows:
                conn.execute(
                    sa.update(P)
                    .where((P.c.stream == stream) & (P.c.token == token))
                    .values(record_count=rows, updated_us=now)
                )
            return done

    def window_partitions(
        self, stream: str, start: datetime | str, end: datetime | str
    ) -> list[WindowPartitionRecord]:
        """The window's partitions in (partition start, token) order; empty if none are recorded."""
        stream, start_us, end_us = window_partition_key(stream, start, end)
        with self._tx() as conn:
            rows = conn.execute(
                sa.select(WP)
                .select_from(WP.outerjoin(P, (P.c.stream == WP.c.stream) & (P.c.token == WP.c.token)))
                .where(window_partitions_cond(stream, start_us, end_us))
                .order_by(P.c.start_us, WP.c.token)
            )
            return [to_window_partition(r._mapping) for r in rows]

    def reset_window_partitions(self, stream: str, start: datetime | str, end: datetime | str) -> int:
        """Forget the window's partitions so that a re-run reads all of them again; return how many.

        Readers still holding one of them lose it: their renewals and completions return False.
        """
        stream, start_us, end_us = window_partition_key(stream, start, end)
        with self._tx(write=True) as conn:
            return conn.execute(
                sa.delete(WP).where(window_partitions_cond(stream, start_us, end_us))
            ).rowcount
