"""Engine and transaction plumbing every data-access part of the metastore builds on.

One SQLAlchemy engine per :class:`MetastoreEngine`; every public operation runs in one transaction
from :meth:`MetastoreEngine._tx`. SQLite runs in write-ahead-log mode with explicit transactions
(``BEGIN IMMEDIATE`` for writers, so a reader never has to upgrade its lock). The schema is created
or upgraded by ``create_schema``; ``ensure_schema`` does that at most once per process and database.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.expression import ColumnElement

from airflow_provider_cdc.metastore import migrations
from airflow_provider_cdc.metastore.errors import MetastoreError
from airflow_provider_cdc.metastore.schema import utc_now_micros

SUPPORTED_BACKENDS = ("postgresql", "sqlite")
_SQLITE_BEGIN = "airflow_provider_cdc.metastore.begin"
#: Largest number of values one ``IN (…)`` list binds.
IN_CHUNK = 500

_Self = TypeVar("_Self", bound="MetastoreEngine")

# Databases whose schema this process has already created or upgraded (see ``ensure_schema``).
_ensured_schemas: set[str] = set()
_ensure_locks: dict[str, threading.Lock] = {}
_registry_lock = threading.Lock()


def chunks(items: list[str], size: int = IN_CHUNK) -> Iterator[list[str]]:
    """``items`` in consecutive slices of at most ``size``."""
    for i in range(0, len(items), size):
        yield items[i : i + size]


class MetastoreEngine:
    """A metastore database: its engine, transactions, compare-and-set writes and schema.

    ``url`` is a SQLAlchemy URL of a PostgreSQL or SQLite database (``sqlite:////path/cdc.db``;
    SQLite must be a file for several processes to share it). ``engine_kwargs`` go to
    ``sqlalchemy.create_engine``. ``clock`` (microseconds since the epoch) replaces the database's
    clock for leases and timings, so that a caller can move time instead of waiting for it; every
    process sharing the database must then use the same clock.
    """

    def __init__(
        self,
        url: str,
        *,
        engine_kwargs: Mapping[str, Any] | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
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
        self._clock = clock
        self._engine: Engine = sa.create_engine(parsed, **kwargs)
        database = parsed.database or ""
        self._in_memory = backend == "sqlite" and (
            database in ("", ":memory:") or "mode=memory" in str(parsed.query)
        )
        if backend == "sqlite":
            busy_timeout = float(kwargs["connect_args"].get("timeout", 30.0))
            wal = not self._in_memory
            _use_explicit_sqlite_transactions(self._engine, wal=wal, busy_timeout=busy_timeout)

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def dialect_name(self) -> str:
        return self._backend

    def dispose(self) -> None:
        """Close all pooled connections (a later operation opens new ones)."""
        self._engine.dispose()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.dispose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._url.render_as_string(hide_password=True)!r})"

    # ------------------------------------------------------------------------------------------
    # Transactions and compare-and-set writes.

    @contextmanager
    def _tx(self, *, write: bool = False) -> Iterator[Connection]:
        with self._engine.connect() as conn:
            if self._backend == "sqlite":
                # Writers take SQLite's write lock up front: no lock upgrade, so no deadlock.
                conn.info[_SQLITE_BEGIN] = "BEGIN IMMEDIATE" if write else "BEGIN"
            with conn.begin():
                yield conn

    def _insert_if_absent(self, conn: Connection, table: sa.Table, values: dict[str, Any]) -> bool:
        """Insert the row unless its primary key exists; True if this call inserted it."""
        keys = [c.name for c in table.primary_key.columns]
        dialect = postgresql if self._backend == "postgresql" else sqlite
        stmt = dialect.insert(table).values(**values).on_conflict_do_nothing(index_elements=keys)
        return conn.execute(stmt).rowcount == 1

    @staticmethod
    def _update_one(conn: Connection, table: sa.Table, cond: ColumnElement, /, **values: Any) -> bool:
        """Compare-and-set: write ``values`` to the row matching ``cond``; True if one row changed."""
        return conn.execute(sa.update(table).where(cond).values(**values)).rowcount == 1

    def _clock_now(self) -> ColumnElement:
        """The current time as a SQL expression: the database's clock, or the injected ``clock``."""
        if self._clock is None:
            return utc_now_micros()
        return sa.literal(int(self._clock()), sa.BigInteger())

    def _now(self, conn: Connection) -> int:
        """The clock, read once so that every timing one call writes is the same instant."""
        return int(conn.execute(sa.select(self._clock_now())).scalar_one())

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

    def ensure_schema(self) -> list[int]:
        """``create_schema`` unless this process already did it for this database; the versions applied.

        Remembered per database URL (and, for a SQLite file, per file: one deleted and created
        anew is a new database). An in-memory SQLite database is never remembered.
        """
        url = self._url.render_as_string(hide_password=True)
        with _registry_lock:
            lock = _ensure_locks.setdefault(url, threading.Lock())
        with lock:
            key = self._schema_key(url)
            if key is not None and key in _ensured_schemas:
                return []
            applied = self.create_schema()
            key = self._schema_key(url)  # a SQLite file exists now
            if key is not None:
                with _registry_lock:
                    _ensured_schemas.add(key)
            return applied

    def _schema_key(self, url: str) -> str | None:
        if self._backend != "sqlite":
            return url
        if self._in_memory:
            return None
        try:
            stat = os.stat(self._url.database or "")
        except OSError:
            return None
        return f"{url}#{stat.st_dev}:{stat.st_ino}"


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
                if str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
                    # In WAL mode NORMAL syncs at checkpoints, not at every commit: a commit still
                    # survives the process that made it being killed (the failures the steps are
                    # built for) and the file stays consistent; only a power loss can roll back
                    # the last commits, which re-running their windows repairs.
                    cursor.execute("PRAGMA synchronous=NORMAL").fetchall()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
    finally:
        cursor.close()
