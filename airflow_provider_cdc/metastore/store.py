"""The metastore: partitions, windows and apply watermarks in SQLite or PostgreSQL (SQLAlchemy Core).

Every public operation is one transaction. Every state change is a compare-and-set ``UPDATE …
WHERE <expected state>`` whose row count decides success, so concurrent readers on one or many
hosts never both win. Leases and timings use the database clock. Runs unchanged on SQLAlchemy 1.4
and 2.x.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.expression import ColumnElement

from airflow_provider_cdc.domain.identifiers import validate_identifier
from airflow_provider_cdc.domain.timestamps import from_micros
from airflow_provider_cdc.metastore import migrations
from airflow_provider_cdc.metastore.errors import (
    LeaseLostError,
    MetastoreError,
    PartitionNotFoundError,
    PartitionStateError,
    UnknownStreamError,
    WindowConflictError,
    WindowNotFoundError,
)
from airflow_provider_cdc.metastore.model import (
    PartitionRecord,
    PartitionSpec,
    PartitionState,
    WindowPartitionRecord,
    WindowPartitionState,
    WindowRecord,
    WindowState,
    coerce_partition_spec,
    decode_tokens,
    encode_tokens,
    is_forward_window_transition,
    lease_micros,
    parents_drained,
    timestamp_micros,
    validate_claim_id,
    validate_count,
    validate_owner,
    validate_pipeline,
    validate_stream,
    validate_token,
    validate_transactions,
    window_parents_to_wait_for,
    window_state,
)
from airflow_provider_cdc.metastore.pipelines import PipelineLedger
from airflow_provider_cdc.metastore.schema import partitions as P
from airflow_provider_cdc.metastore.schema import table_watermarks as TW
from airflow_provider_cdc.metastore.schema import utc_now_micros
from airflow_provider_cdc.metastore.schema import window_partitions as WP
from airflow_provider_cdc.metastore.schema import windows as W

SUPPORTED_BACKENDS = ("postgresql", "sqlite")
_SQLITE_BEGIN = "airflow_provider_cdc.metastore.begin"
_IN_CHUNK = 500
_STATE_TIMING = {
    WindowState.DRAINED: "drained_us",
    WindowState.MERGED: "merged_us",
    WindowState.APPLIED: "applied_us",
}


def _opt_dt(micros: int | None) -> datetime | None:
    return None if micros is None else from_micros(micros)


def _partition(row: Mapping[str, Any]) -> PartitionRecord:
    return PartitionRecord(
        stream=row["stream"],
        token=row["token"],
        parent_tokens=decode_tokens(row["parent_tokens"]),
        start_timestamp=from_micros(row["start_us"]),
        end_timestamp=_opt_dt(row["end_us"]),
        state=PartitionState(row["state"]),
        watermark=from_micros(row["watermark_us"]),
        heartbeat_ms=row["heartbeat_ms"],
        lease_owner=row["lease_owner"],
        lease_expires_at=_opt_dt(row["lease_expires_us"]),
        attempts=row["attempts"],
        record_count=row["record_count"],
        created_at=from_micros(row["created_us"]),
        updated_at=from_micros(row["updated_us"]),
        finished_at=_opt_dt(row["finished_us"]),
        progress_at=_opt_dt(row["progress_us"]),
    )


def _window(row: Mapping[str, Any]) -> WindowRecord:
    return WindowRecord(
        pipeline=row["pipeline"],
        stream=row["stream"],
        start=from_micros(row["start_us"]),
        end=from_micros(row["end_us"]),
        state=WindowState(row["state"]),
        attempt=row["attempt"],
        staging_uri=row["staging_uri"],
        change_set_uri=row["change_set_uri"],
        record_count=row["record_count"],
        transaction_count=row["transaction_count"],
        key_count=row["key_count"],
        error=row["error"],
        opened_at=from_micros(row["opened_us"]),
        updated_at=from_micros(row["updated_us"]),
        drained_at=_opt_dt(row["drained_us"]),
        merged_at=_opt_dt(row["merged_us"]),
        applied_at=_opt_dt(row["applied_us"]),
    )


def _window_partition(row: Mapping[str, Any]) -> WindowPartitionRecord:
    transactions = row["transactions"]
    return WindowPartitionRecord(
        stream=row["stream"],
        window_start=from_micros(row["window_start_us"]),
        window_end=from_micros(row["window_end_us"]),
        token=row["token"],
        state=WindowPartitionState(row["state"]),
        lease_owner=row["lease_owner"],
        lease_expires_at=_opt_dt(row["lease_expires_us"]),
        attempts=row["attempts"],
        rows=row["rows"],
        transactions=None if transactions is None else float(transactions),
        created_at=from_micros(row["created_us"]),
        updated_at=from_micros(row["updated_us"]),
        done_at=_opt_dt(row["done_us"]),
        claim_id=row["claim_id"],
        output_files=row["output_files"],
    )


def _window_bounds(start: datetime | str, end: datetime | str, of: str) -> tuple[int, int]:
    """Start and end in microseconds; ``ValueError`` (naming it ``of``) unless end > start."""
    start_us, end_us = timestamp_micros(start, "window start"), timestamp_micros(end, "window end")
    if end_us <= start_us:
        raise ValueError(
            f"window of {of}: end {from_micros(end_us)} is not after start {from_micros(start_us)}"
        )
    return start_us, end_us


def _chunks(items: list[str], size: int = _IN_CHUNK) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class Metastore(PipelineLedger):
    """Partition lineage, leases and watermarks, window states and per-table apply watermarks.

    ``url`` is a SQLAlchemy URL of a PostgreSQL or SQLite database (``sqlite:////path/cdc.db``;
    SQLite must be a file for several processes to share it). ``engine_kwargs`` go to
    ``sqlalchemy.create_engine``. Call ``create_schema()`` once per deployment (it is idempotent).
    """

    def __init__(self, url: str, *, engine_kwargs: Mapping[str, Any] | None = None) -> None:
        if not isinstance(url, str) or not url.strip():
            raise ValueError("metastore URL must be a non-empty SQLAlchemy URL string")
        try:
            parsed = sa.engine.make_url(url)
        except sa.exc.ArgumentError:
            raise ValueError(
                "metastore URL is not a SQLAlchemy URL (expected e.g. postgresql+psycopg2://user@host/db "
                "or sqlite:////path/to/cdc.db)"
            ) from None
        backend = parsed.get_backend_name()
        if backend not in SUPPORTED_BACKENDS:
            raise MetastoreError(f"metastore database {backend!r} is not supported; use PostgreSQL or SQLite")
        kwargs = dict(engine_kwargs or {})
        if backend == "sqlite":
            kwargs["connect_args"] = {"timeout": 30.0, **dict(kwargs.get("connect_args") or {})}
        else:
            kwargs.setdefault("pool_pre_ping", True)
        self._url = parsed
        self._backend = backend
        self._engine: Engine = sa.create_engine(parsed, **kwargs)
        if backend == "sqlite":
            database = parsed.database or ""
            in_memory = database in ("", ":memory:") or "mode=memory" in str(parsed.query)
            busy_timeout = float(kwargs["connect_args"].get("timeout", 30.0))
            _use_explicit_sqlite_transactions(self._engine, wal=not in_memory, busy_timeout=busy_timeout)

    # ------------------------------------------------------------------------------------------
    # Plumbing.

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def dialect_name(self) -> str:
        return self._backend

    def dispose(self) -> None:
        """Close all pooled connections."""
        self._engine.dispose()

    def __enter__(self) -> Metastore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.dispose()

    def __repr__(self) -> str:
        return f"Metastore({self._url.render_as_string(hide_password=True)!r})"

    @contextmanager
    def _tx(self, *, write: bool = False) -> Iterator[Connection]:
        with self._engine.connect() as conn:
            if self._backend == "sqlite":
                # Writers take SQLite's write lock up front: no lock upgrade, so no deadlock.
                conn.info[_SQLITE_BEGIN] = "BEGIN IMMEDIATE" if write else "BEGIN"
            with conn.begin():
                yield conn

    def _insert_if_absent(self, conn: Connection, table: sa.Table, values: dict[str, Any]) -> bool:
        keys = [c.name for c in table.primary_key.columns]
        dialect = postgresql if self._backend == "postgresql" else sqlite
        stmt = dialect.insert(table).values(**values).on_conflict_do_nothing(index_elements=keys)
        return conn.execute(stmt).rowcount == 1

    @staticmethod
    def _update_one(conn: Connection, table: sa.Table, cond: ColumnElement, /, **values: Any) -> bool:
        """Compare-and-set: write ``values`` to the row matching ``cond``; True if one row changed."""
        return conn.execute(sa.update(table).where(cond).values(**values)).rowcount == 1

    # ------------------------------------------------------------------------------------------
    # Schema.

    def create_schema(self) -> list[int]:
        """Create or upgrade the tables to the current version; return the versions applied now."""
        with self._tx(write=True) as conn:
            return migrations.upgrade(conn)

    def schema_version(self) -> int | None:
        """The installed schema version (None before ``create_schema``)."""
        with self._tx() as conn:
            return migrations.installed_version(conn)

    # ------------------------------------------------------------------------------------------
    # Partitions: lineage.

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
            updated_us=utc_now_micros(),
        )

    def _insert_partition(self, conn: Connection, stream: str, spec: PartitionSpec) -> bool:
        start_us = timestamp_micros(spec.start_timestamp, "start_timestamp")
        now = utc_now_micros()
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
            row = self._partition_row(conn, stream, token)
            if end_us < row["start_us"]:
                raise PartitionStateError(
                    stream,
                    token,
                    f"end_timestamp {from_micros(end_us)} is before its start {from_micros(row['start_us'])}",
                )
            now = utc_now_micros()
            finished = self._update_one(
                conn,
                P,
                self._partition_cond(stream, token, unfinished=True, holder=owner),
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
                current = self._partition_row(conn, stream, token)
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

    def advance_watermark(
        self,
        stream: str,
        token: str,
        timestamp: datetime | str,
        *,
        owner: str | None = None,
        records: int = 0,
    ) -> bool:
        """Raise the partition's drained-up-to watermark to ``timestamp`` if that moves it forward.

        The watermark is exclusive: every change the partition holds that was committed before it
        has been read (after a heartbeat at ``t`` or a window read up to ``end - 1µs`` it is
        ``t + 1µs`` or ``end``). A new partition starts with its watermark at its start timestamp.
        The watermark never moves backwards (``WHERE watermark < :ts``); ``records`` read since the
        last advance are added to the partition's record count only when it moves. With ``owner``
        the caller must still hold the lease (else ``LeaseLostError``). Returns True if it moved.
        """
        stream, token = validate_stream(stream), validate_token(token, stream)
        owner = validate_owner(owner) if owner is not None else None
        ts_us = timestamp_micros(timestamp, f"watermark of partition token {token!r}")
        records = validate_count("records", records) or 0
        cond = self._partition_cond(stream, token, unfinished=True, holder=owner) & (P.c.watermark_us < ts_us)
        with self._tx(write=True) as conn:
            now = utc_now_micros()
            moved = self._update_one(
                conn,
                P,
                cond,
                watermark_us=ts_us,
                record_count=P.c.record_count + records,
                progress_us=now,
                updated_us=now,
            )
            if not moved:
                row = self._partition_row(conn, stream, token)
                if owner is not None and row["lease_owner"] != owner:
                    raise LeaseLostError(stream, token, owner, row["lease_owner"])
            return moved

    # ------------------------------------------------------------------------------------------
    # Partitions: leases.

    @staticmethod
    def _partition_cond(
        stream: str, token: str, *, unfinished: bool = False, holder: str | None = None
    ) -> ColumnElement:
        """The partition's row; ``unfinished``: unless finished; ``holder``: only while it holds the lease."""
        cond = (P.c.stream == stream) & (P.c.token == token)
        if unfinished:
            cond = cond & (P.c.state != PartitionState.FINISHED.value)
        if holder is not None:
            cond = cond & (P.c.lease_owner == holder)
        return cond

    @staticmethod
    def _claimable(now: ColumnElement) -> ColumnElement:
        return P.c.lease_owner.is_(None) | (P.c.lease_expires_us < now)

    def _claim(
        self, conn: Connection, stream: str, token: str, cond: ColumnElement, owner: str, lease_us: int
    ) -> bool:
        now = utc_now_micros()
        return self._update_one(
            conn,
            P,
            self._partition_cond(stream, token, unfinished=True) & cond,
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
            record = _partition(self._partition_row(conn, stream, token))
            if record.is_finished or not parents_drained(
                record, self._parents(conn, stream, [record]).values()
            ):
                return None
            cond = self._claimable(utc_now_micros()) | (P.c.lease_owner == owner)
            if not self._claim(conn, stream, token, cond, owner, lease_us):
                return None
            return _partition(self._partition_row(conn, stream, token))

    def claim_next(
        self,
        stream: str,
        owner: str,
        lease_seconds: float,
        *,
        drain_to: datetime | str | None = None,
        eligible: Callable[[PartitionRecord], bool] | None = None,
    ) -> PartitionRecord | None:
        """Claim the earliest unfinished partition nobody holds whose parents are drained; None if none.

        ``drain_to`` (a window's end) restricts to partitions that start before it and are not
        drained to it; ``eligible`` is an extra filter. Partitions are tried in (start, token) order,
        each with a compare-and-set, so concurrent callers end up with different partitions.
        """
        stream, owner = validate_stream(stream), validate_owner(owner)
        lease_us = lease_micros(lease_seconds)
        with self._tx(write=True) as conn:
            self._require_stream(conn, stream)
            query = sa.select(P).where(
                (P.c.stream == stream)
                & (P.c.state != PartitionState.FINISHED.value)
                & self._claimable(utc_now_micros())
            )
            if drain_to is not None:
                bound = timestamp_micros(drain_to, "drain_to")
                query = query.where((P.c.start_us < bound) & (P.c.watermark_us < bound))
            candidates = [
                _partition(r._mapping) for r in conn.execute(query.order_by(P.c.start_us, P.c.token))
            ]
            parents = self._parents(conn, stream, candidates)
            for record in candidates:
                known = [parents[t] for t in record.parent_tokens if t in parents]
                if not parents_drained(record, known) or (eligible is not None and not eligible(record)):
                    continue
                if self._claim(
                    conn, stream, record.token, self._claimable(utc_now_micros()), owner, lease_us
                ):
                    return _partition(self._partition_row(conn, stream, record.token))
            return None

    def renew_lease(self, stream: str, token: str, owner: str, lease_seconds: float) -> bool:
        """Extend ``owner``'s lease to now + ``lease_seconds``; False if ``owner`` no longer holds it."""
        stream, token, owner = validate_stream(stream), validate_token(token, stream), validate_owner(owner)
        lease_us = lease_micros(lease_seconds)
        with self._tx(write=True) as conn:
            now = utc_now_micros()
            renewed = self._update_one(
                conn,
                P,
                self._partition_cond(stream, token, unfinished=True, holder=owner),
                lease_expires_us=now + lease_us,
                updated_us=now,
            )
            if not renewed:
                self._partition_row(conn, stream, token)
            return renewed

    def release(self, stream: str, token: str, owner: str) -> bool:
        """Give up ``owner``'s lease so another reader may claim the partition; False if not held."""
        stream, token, owner = validate_stream(stream), validate_token(token, stream), validate_owner(owner)
        with self._tx(write=True) as conn:
            released = self._update_one(
                conn,
                P,
                self._partition_cond(stream, token, holder=owner),
                lease_owner=None,
                lease_expires_us=None,
                updated_us=utc_now_micros(),
            )
            if not released:
                self._partition_row(conn, stream, token)
            return released

    # ------------------------------------------------------------------------------------------
    # Partitions: queries.

    def _partition_row(self, conn: Connection, stream: str, token: str) -> Mapping[str, Any]:
        row = conn.execute(sa.select(P).where(self._partition_cond(stream, token))).first()
        if row is None:
            raise PartitionNotFoundError(stream, token)
        return row._mapping

    def _require_stream(self, conn: Connection, stream: str) -> None:
        if conn.execute(sa.select(P.c.token).where(P.c.stream == stream).limit(1)).first() is None:
            raise UnknownStreamError(stream)

    def _select(
        self, conn: Connection, stream: str, cond: ColumnElement | None = None
    ) -> list[PartitionRecord]:
        query = sa.select(P).where(P.c.stream == stream)
        if cond is not None:
            query = query.where(cond)
        return [_partition(r._mapping) for r in conn.execute(query.order_by(P.c.start_us, P.c.token))]

    def _parents(
        self, conn: Connection, stream: str, records: Iterable[PartitionRecord]
    ) -> dict[str, PartitionRecord]:
        tokens = sorted({t for r in records for t in r.parent_tokens})
        found: dict[str, PartitionRecord] = {}
        for chunk in _chunks(tokens):
            for record in self._select(conn, stream, P.c.token.in_(chunk)):
                found[record.token] = record
        return found

    def get_partition(self, stream: str, token: str) -> PartitionRecord:
        """The recorded partition (``PartitionNotFoundError`` if unknown)."""
        stream, token = validate_stream(stream), validate_token(token, stream)
        with self._tx() as conn:
            return _partition(self._partition_row(conn, stream, token))

    def is_known_stream(self, stream: str) -> bool:
        """Whether any partition of the stream is recorded."""
        stream = validate_stream(stream)
        with self._tx() as conn:
            try:
                self._require_stream(conn, stream)
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
            self._require_stream(conn, stream)
            return self._select(conn, stream, cond)

    def partitions_alive_at(self, stream: str, timestamp: datetime | str) -> list[PartitionRecord]:
        """Partitions holding changes committed at ``timestamp``: start ≤ ts and (end unknown or end > ts)."""
        stream = validate_stream(stream)
        ts = timestamp_micros(timestamp, "timestamp")
        with self._tx() as conn:
            self._require_stream(conn, stream)
            return self._select(
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
            self._require_stream(conn, stream)
            return self._select(
                conn, stream, (P.c.start_us < end_us) & (P.c.end_us.is_(None) | (P.c.end_us > start_us))
            )

    def children_of(self, stream: str, token: str) -> list[PartitionRecord]:
        """Recorded partitions that name ``token`` among their parents."""
        stream, token = validate_stream(stream), validate_token(token, stream)
        with self._tx() as conn:
            self._partition_row(conn, stream, token)
            # Narrow with a text match on the JSON array, then decide on the decoded tokens.
            like = P.c.parent_tokens.contains(encode_tokens([token])[1:-1], autoescape=True)
            return [r for r in self._select(conn, stream, like) if token in r.parent_tokens]

    def parents_of(self, stream: str, token: str) -> list[PartitionRecord]:
        """The recorded parents of a partition, in the order the partition names them."""
        stream, token = validate_stream(stream), validate_token(token, stream)
        with self._tx() as conn:
            record = _partition(self._partition_row(conn, stream, token))
            found = self._parents(conn, stream, [record])
            return [found[t] for t in record.parent_tokens if t in found]

    def waiting_on_parents(self, stream: str, token: str) -> list[PartitionRecord]:
        """Parents not yet drained through the partition's start (empty: it may be read)."""
        stream, token = validate_stream(stream), validate_token(token, stream)
        with self._tx() as conn:
            record = _partition(self._partition_row(conn, stream, token))
            found = self._parents(conn, stream, [record])
            return [
                found[t]
                for t in record.parent_tokens
                if t in found and found[t].watermark < record.start_timestamp
            ]

    def lagging_partitions(self, stream: str, timestamp: datetime | str) -> list[PartitionRecord]:
        """Partitions alive at ``timestamp`` that are not drained to it (each with its watermark).

        Empty means every change committed before ``timestamp`` has been read, given that the
        partitions alive at the first window's start were recorded.
        """
        stream = validate_stream(stream)
        ts = timestamp_micros(timestamp, "timestamp")
        with self._tx() as conn:
            self._require_stream(conn, stream)
            return self._select(
                conn,
                stream,
                (P.c.start_us <= ts) & (P.c.end_us.is_(None) | (P.c.end_us > ts)) & (P.c.watermark_us < ts),
            )

    def global_watermark(self, stream: str) -> datetime | None:
        """The lowest watermark over unfinished partitions (None when every partition is finished)."""
        stream = validate_stream(stream)
        with self._tx() as conn:
            self._require_stream(conn, stream)
            low = conn.execute(
                sa.select(sa.func.min(P.c.watermark_us)).where(
                    (P.c.stream == stream) & (P.c.state != PartitionState.FINISHED.value)
                )
            ).scalar()
            return _opt_dt(low)

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
            self._require_stream(conn, stream)
            since = sa.func.coalesce(P.c.progress_us, P.c.updated_us)
            return self._select(
                conn,
                stream,
                (P.c.state == PartitionState.RUNNING.value)
                & P.c.lease_owner.is_not(None)
                & P.c.heartbeat_ms.is_not(None)
                & (since + P.c.heartbeat_ms * (1000 * missed_heartbeats) < utc_now_micros()),
            )

    # ------------------------------------------------------------------------------------------
    # Windows.

    @staticmethod
    def _window_key(pipeline: str, start: datetime | str, end: datetime | str) -> tuple[str, int, int]:
        pipeline = validate_pipeline(pipeline)
        return pipeline, *_window_bounds(start, end, f"pipeline {pipeline!r}")

    @staticmethod
    def _window_cond(pipeline: str, start_us: int, end_us: int) -> ColumnElement:
        return (W.c.pipeline == pipeline) & (W.c.start_us == start_us) & (W.c.end_us == end_us)

    def _window_row(self, conn: Connection, pipeline: str, start_us: int, end_us: int) -> Mapping[str, Any]:
        row = conn.execute(sa.select(W).where(self._window_cond(pipeline, start_us, end_us))).first()
        if row is None:
            raise WindowNotFoundError(pipeline, f"{start_us}-{end_us}")
        return row._mapping

    def open_window(
        self,
        pipeline: str,
        stream: str,
        start: datetime | str,
        end: datetime | str,
        *,
        staging_uri: str | None = None,
    ) -> WindowRecord:
        """Record the window in state ``reading`` unless it exists; return the recorded window.

        An existing window is returned as it is (its state tells a retry what is left to do);
        one recorded for another stream raises ``WindowConflictError``.
        """
        pipeline, start_us, end_us = self._window_key(pipeline, start, end)
        stream = validate_stream(stream)
        with self._tx(write=True) as conn:
            now = utc_now_micros()
            self._insert_if_absent(
                conn,
                W,
                {
                    "pipeline": pipeline,
                    "start_us": start_us,
                    "end_us": end_us,
                    "stream": stream,
                    "state": WindowState.READING.value,
                    "attempt": 1,
                    "staging_uri": staging_uri,
                    "opened_us": now,
                    "updated_us": now,
                },
            )
            record = _window(self._window_row(conn, pipeline, start_us, end_us))
            if record.stream != stream:
                raise WindowConflictError(
                    pipeline,
                    record.window_id,
                    f"recorded for change stream {record.stream!r}, not {stream!r}",
                )
            return record

    def transition_window(
        self,
        pipeline: str,
        start: datetime | str,
        end: datetime | str,
        expected: WindowState | str,
        new: WindowState | str,
        *,
        attempt: int | None = None,
        staging_uri: str | None = None,
        change_set_uri: str | None = None,
        record_count: int | None = None,
        transaction_count: int | None = None,
        key_count: int | None = None,
        error: str | None = None,
    ) -> bool:
        """Move the window from ``expected`` forward to ``new``; False if it is not in ``expected``.

        ``attempt`` fences a stale run out after ``reopen_window``. Given fields are stored with the
        transition; the state's timing is set and the error cleared unless ``error`` is given.
        """
        pipeline, start_us, end_us = self._window_key(pipeline, start, end)
        expected, new = window_state(expected, "expected window state"), window_state(new, "new window state")
        if not is_forward_window_transition(expected, new):
            raise WindowConflictError(
                pipeline,
                f"{start_us}-{end_us}",
                f"a window only moves forward (reading → drained → merged → applied), not {expected.value} → "
                f"{new.value}",
            )
        now = utc_now_micros()
        values: dict[str, Any] = {"state": new.value, "updated_us": now, "error": error}
        values[_STATE_TIMING[new]] = now
        for name, value in (
            ("record_count", record_count),
            ("transaction_count", transaction_count),
            ("key_count", key_count),
        ):
            if validate_count(name, value) is not None:
                values[name] = value
        if staging_uri is not None:
            values["staging_uri"] = staging_uri
        if change_set_uri is not None:
            values["change_set_uri"] = change_set_uri
        cond = self._window_cond(pipeline, start_us, end_us) & (W.c.state == expected.value)
        if attempt is not None:
            cond = cond & (W.c.attempt == validate_count("attempt", attempt))
        with self._tx(write=True) as conn:
            moved = self._update_one(conn, W, cond, **values)
            if not moved:
                self._window_row(conn, pipeline, start_us, end_us)
            return moved

    def reopen_window(
        self,
        pipeline: str,
        start: datetime | str,
        end: datetime | str,
        *,
        expected: WindowState | str | None = None,
    ) -> WindowRecord:
        """Re-open a window for a re-run: back to ``reading`` with the next attempt number.

        Counts, change set, error and later-state timings of the previous attempt are cleared.
        With ``expected`` the window must be in that state (else ``WindowConflictError``).
        """
        pipeline, start_us, end_us = self._window_key(pipeline, start, end)
        cond = self._window_cond(pipeline, start_us, end_us)
        if expected is not None:
            expected = window_state(expected, "expected window state")
            cond = cond & (W.c.state == expected.value)
        now = utc_now_micros()
        with self._tx(write=True) as conn:
            reopened = self._update_one(
                conn,
                W,
                cond,
                state=WindowState.READING.value,
                attempt=W.c.attempt + 1,
                opened_us=now,
                updated_us=now,
                drained_us=None,
                merged_us=None,
                applied_us=None,
                change_set_uri=None,
                record_count=None,
                transaction_count=None,
                key_count=None,
                error=None,
            )
            record = _window(self._window_row(conn, pipeline, start_us, end_us))
            if not reopened:
                raise WindowConflictError(
                    pipeline,
                    record.window_id,
                    f"is {record.state.value}, not {expected.value if expected else ''}",
                )
            return record

    def record_window_error(
        self, pipeline: str, start: datetime | str, end: datetime | str, error: str
    ) -> None:
        """Store the error of a failed step without changing the window's state."""
        pipeline, start_us, end_us = self._window_key(pipeline, start, end)
        with self._tx(write=True) as conn:
            updated = conn.execute(
                sa.update(W)
                .where(self._window_cond(pipeline, start_us, end_us))
                .values(error=str(error), updated_us=utc_now_micros())
            ).rowcount
            if not updated:
                raise WindowNotFoundError(pipeline, f"{start_us}-{end_us}")

    def get_window(self, pipeline: str, start: datetime | str, end: datetime | str) -> WindowRecord:
        """The recorded window (``WindowNotFoundError`` if unknown)."""
        pipeline, start_us, end_us = self._window_key(pipeline, start, end)
        with self._tx() as conn:
            return _window(self._window_row(conn, pipeline, start_us, end_us))

    def list_windows(self, pipeline: str, *, state: WindowState | str | None = None) -> list[WindowRecord]:
        """The pipeline's windows in start order, optionally only those in ``state``."""
        pipeline = validate_pipeline(pipeline)
        query = sa.select(W).where(W.c.pipeline == pipeline)
        if state is not None:
            query = query.where(W.c.state == window_state(state).value)
        with self._tx() as conn:
            return [_window(r._mapping) for r in conn.execute(query.order_by(W.c.start_us, W.c.end_us))]

    # ------------------------------------------------------------------------------------------
    # Windows: the partitions each window of a stream must read, claimed with leases.

    @staticmethod
    def _window_partition_key(
        stream: str, start: datetime | str, end: datetime | str
    ) -> tuple[str, int, int]:
        stream = validate_stream(stream)
        return stream, *_window_bounds(start, end, f"change stream {stream!r}")

    @staticmethod
    def _window_partitions_cond(
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
            cond = (
                cond & (table.c.state == WindowPartitionState.RUNNING.value) & (table.c.lease_owner == holder)
            )
        return cond

    @staticmethod
    def _window_partition_claimable(owner: str, now_us: int) -> ColumnElement:
        running = WP.c.state == WindowPartitionState.RUNNING.value
        return (WP.c.state == WindowPartitionState.PENDING.value) | (
            running & ((WP.c.lease_expires_us < now_us) | (WP.c.lease_owner == owner))
        )

    @staticmethod
    def _now(conn: Connection) -> int:
        """The database clock, read once so that every timing one call writes is the same instant."""
        return int(conn.execute(sa.select(utc_now_micros())).scalar_one())

    def add_window_partitions(
        self, stream: str, start: datetime | str, end: datetime | str, tokens: Iterable[str]
    ) -> list[str]:
        """Record partitions the window must read, in state ``pending``, unless already recorded.

        Every token must be a recorded partition of the stream (else ``PartitionNotFoundError``).
        Items already recorded (a retry, another reader, a child reported twice) are left as they
        are. Returns the tokens this call added, in the given order.
        """
        stream, start_us, end_us = self._window_partition_key(stream, start, end)
        wanted = list(dict.fromkeys(validate_token(t, stream) for t in tokens))
        with self._tx(write=True) as conn:
            known: set[str] = set()
            for chunk in _chunks(wanted):
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
        stream, start_us, end_us = self._window_partition_key(stream, start, end)
        owner, claim_id = validate_owner(owner), validate_claim_id(claim_id)
        lease_us = lease_micros(lease_seconds)
        in_window = self._window_partitions_cond(stream, start_us, end_us)
        with self._tx(write=True) as conn:
            now = self._now(conn)
            claimable = self._window_partition_claimable(owner, now)
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
            for chunk in _chunks(parent_tokens):
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
                cond = self._window_partitions_cond(stream, start_us, end_us, token) & claimable
                for parent in waits:
                    # Re-checked in the update itself: a concurrent reset may have removed the parent's item.
                    cond = cond & sa.exists().where(
                        self._window_partitions_cond(stream, start_us, end_us, parent, table=done_item)
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
        stream, start_us, end_us = self._window_partition_key(stream, start, end)
        token, owner = validate_token(token, stream), validate_owner(owner)
        lease_us = lease_micros(lease_seconds)
        with self._tx(write=True) as conn:
            now = self._now(conn)
            return self._update_one(
                conn,
                WP,
                self._window_partitions_cond(stream, start_us, end_us, token, holder=owner),
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
    ) -> bool:
        """Mark the window's partition ``done`` with its counts and output, and drop the lease.

        Only ``owner``, holding it in state ``running`` (under ``claim_id`` when given), may; False
        when it lost the partition (its lease expired and another reader took it, it claimed it
        again, or the window was reset) — its reading then does not count. The claim id and
        ``output_files`` recorded here name the partition's output: the staged files of that claim.
        """
        stream, start_us, end_us = self._window_partition_key(stream, start, end)
        token, owner = validate_token(token, stream), validate_owner(owner)
        rows = validate_count("rows", rows)
        if rows is None:
            raise ValueError("invalid rows None: expected a non-negative integer")
        transactions = validate_transactions(transactions)
        cond = self._window_partitions_cond(stream, start_us, end_us, token, holder=owner)
        if claim_id is not None:
            cond = cond & (WP.c.claim_id == validate_claim_id(claim_id))
        with self._tx(write=True) as conn:
            now = self._now(conn)
            return self._update_one(
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

    def window_partitions(
        self, stream: str, start: datetime | str, end: datetime | str
    ) -> list[WindowPartitionRecord]:
        """The window's partitions in (partition start, token) order; empty if none are recorded."""
        stream, start_us, end_us = self._window_partition_key(stream, start, end)
        with self._tx() as conn:
            rows = conn.execute(
                sa.select(WP)
                .select_from(WP.outerjoin(P, (P.c.stream == WP.c.stream) & (P.c.token == WP.c.token)))
                .where(self._window_partitions_cond(stream, start_us, end_us))
                .order_by(P.c.start_us, WP.c.token)
            )
            return [_window_partition(r._mapping) for r in rows]

    def reset_window_partitions(self, stream: str, start: datetime | str, end: datetime | str) -> int:
        """Forget the window's partitions so that a re-run reads all of them again; return how many.

        Readers still holding one of them lose it: their renewals and completions return False.
        """
        stream, start_us, end_us = self._window_partition_key(stream, start, end)
        with self._tx(write=True) as conn:
            return conn.execute(
                sa.delete(WP).where(self._window_partitions_cond(stream, start_us, end_us))
            ).rowcount

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
            for chunk in _chunks(wanted):
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

    # ------------------------------------------------------------------------------------------
    # Per-table apply watermarks (BigQuery's upsert_stream_apply_watermark, per pipeline).

    def advance_table_watermark(self, pipeline: str, table: str, timestamp: datetime | str) -> bool:
        """Raise the table's apply watermark to ``timestamp`` if that moves it forward; True if it moved."""
        pipeline, table = validate_pipeline(pipeline), validate_identifier(table, "table")
        ts_us = timestamp_micros(timestamp, f"apply watermark of table {table!r}")
        with self._tx(write=True) as conn:
            now = utc_now_micros()
            key = {"pipeline": pipeline, "table_name": table}
            if self._insert_if_absent(conn, TW, {**key, "watermark_us": ts_us, "updated_us": now}):
                return True
            return self._update_one(
                conn,
                TW,
                (TW.c.pipeline == pipeline) & (TW.c.table_name == table) & (TW.c.watermark_us < ts_us),
                watermark_us=ts_us,
                updated_us=now,
            )

    def table_watermarks(self, pipeline: str) -> dict[str, datetime]:
        """Apply watermark of each table of the pipeline: changes committed before it are applied."""
        pipeline = validate_pipeline(pipeline)
        with self._tx() as conn:
            rows = conn.execute(
                sa.select(TW.c.table_name, TW.c.watermark_us)
                .where(TW.c.pipeline == pipeline)
                .order_by(TW.c.table_name)
            )
            return {name: from_micros(us) for name, us in rows}


def _use_explicit_sqlite_transactions(engine: Engine, *, wal: bool, busy_timeout: float) -> None:
    """Let SQLAlchemy, not the sqlite3 module, begin transactions, with ``BEGIN IMMEDIATE`` for writers."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, connection_record: Any) -> None:
        dbapi_connection.isolation_level = None
        if wal:
            _enable_wal(dbapi_connection, busy_timeout)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(conn.info.get(_SQLITE_BEGIN, "BEGIN"))


def _enable_wal(dbapi_connection: Any, busy_timeout: float) -> None:
    """Switch a SQLite file to write-ahead logging (readers do not block the writer).

    The switch needs a moment of exclusive access and SQLite does not wait for it, so processes
    opening a new file together retry until one of them has switched it.
    """
    deadline = time.monotonic() + busy_timeout
    cursor = dbapi_connection.cursor()
    try:
        while True:
            try:
                if str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                    # Where WAL is impossible SQLite answers with the mode it keeps; that is accepted.
                    cursor.execute("PRAGMA journal_mode=WAL").fetchall()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
    finally:
        cursor.close()
