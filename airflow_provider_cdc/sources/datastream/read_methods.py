"""Datastream ``read_method`` values: the source database kind and whether an event is backfill.

Real files use more spellings than the documentation lists (``postgresql-cdc`` next to the
documented ``postgres-cdc-wal``; the pre-GA ``oracle_dump``), so the database is the first
``-``/``_``-separated word of the read method and backfill is any read method naming
``backfill`` or ``dump``. A stream whose read methods name no known database sets the kind in
``DatastreamSettings.source_database``.
"""

from __future__ import annotations

import re
from functools import lru_cache

MYSQL = "mysql"
ORACLE = "oracle"
POSTGRESQL = "postgresql"
SQLSERVER = "sqlserver"
#: The source database kinds.
DATABASE_KINDS: tuple[str, ...] = (MYSQL, ORACLE, POSTGRESQL, SQLSERVER)
#: Names of the database kinds as read methods and settings spell them.
_ALIASES = {
    "mysql": MYSQL,
    "oracle": ORACLE,
    "postgres": POSTGRESQL,
    "postgresql": POSTGRESQL,
    "sqlserver": SQLSERVER,
}
_FIRST_WORD = re.compile(r"^([A-Za-z]+)")


class UnknownDatabaseError(ValueError):
    """A read method (or setting) that names no source database kind."""


def database_kind(name: str) -> str:
    """The database kind of a name (``postgres`` and ``postgresql`` are one), else an error."""
    kind = _ALIASES.get(name.strip().lower()) if isinstance(name, str) else None
    if kind is None:
        raise UnknownDatabaseError(
            f"unknown source database {name!r}: expected one of {', '.join(DATABASE_KINDS)}"
        )
    return kind


@lru_cache(maxsize=256)
def database_of(read_method: str, override: str | None = None) -> str:
    """The database kind of events with ``read_method`` (``override`` wins when given)."""
    if override is not None:
        return database_kind(override)
    match = _FIRST_WORD.match(read_method) if isinstance(read_method, str) else None
    kind = _ALIASES.get(match.group(1).lower()) if match else None
    if kind is None:
        raise UnknownDatabaseError(
            f"read_method {read_method!r} names no known source database "
            f"({', '.join(DATABASE_KINDS)}); set source_database in the Datastream settings"
        )
    return kind


@lru_cache(maxsize=256)
def is_backfill(read_method: str) -> bool:
    """Whether ``read_method`` reads a backfill (``*-backfill*``, ``*dump*``) rather than the log."""
    method = read_method.lower() if isinstance(read_method, str) else ""
    return "backfill" in method or "dump" in method
