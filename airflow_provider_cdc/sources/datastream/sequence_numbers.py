"""The change sequence number of a Datastream event (``_CHANGE_SEQUENCE_NUMBER``, 4 sections).

Datastream states per database which fields order its log events; this maps them to four
unsigned 64-bit sections (:mod:`airflow_provider_cdc.core.sequence_number`):

- MySQL log: ``1 / binlog file index / log_position / kind``; backfill ``0 / ts ms / 0 / kind``.
- Oracle log: ``1 / scn / rs_seq<<32 | rs_block / rs_offset<<32 | ssn<<1 | kind``; backfill
  ``0 / scn (or 0) / 0 / kind``.
- PostgreSQL log: ``1 / ts ms / lsn (hi<<32 | lo) / kind``; backfill ``0 / ts ms / 0 / kind``.
- SQL Server log: ``1 / ts ms / lsn a<<32 | b / lsn c<<1 | kind``; backfill ``0 / ts ms / 0 / kind``.

(``ts ms``: ``source_timestamp`` in epoch milliseconds.)

- Section 1 is ``0`` for backfill (``read_method`` naming ``backfill`` or ``dump``, or a MySQL
  event without a binlog file) and ``1`` for log events, so a backfill image sorts below every log
  event of its row: it is only a starting point for the log that runs alongside it.
- The last bit is the change kind: ``1`` upsert, ``0`` delete. One statement that moves keys
  (``UPDATE t SET id = id + 1``) logs an ``UPDATE-DELETE`` of key 2 and an ``UPDATE-INSERT`` of
  key 2 at one position; the upsert wins, as Datastream's own BigQuery merge does
  (``_metadata_deleted ASC``).
- MySQL: the binlog file index is the numeric suffix of ``log_file`` (``binlog_file`` in GTID
  mode), e.g. ``mysql-bin.000014`` → 14, then ``log_position`` (``binlog_position``). The
  ``source_timestamp`` is not used: it has second resolution and a transaction's row events carry
  its statement's start, which can be older than earlier events.
- Oracle: ``rs_id`` (``" 0x0073c9.000a4e4c.01d0 "``) is trimmed and its three ``.``-separated hex
  parts are the redo sequence, block and offset; with ``ssn`` they order events of one SCN.
- PostgreSQL: ``lsn`` ``"16/CB002DB0"`` is ``0x16 << 32 | 0xCB002DB0``.
- SQL Server: ``lsn`` ``"0000002a:00000248:0003"`` (also ``0x`` + 20 hex digits, or 20 hex digits)
  is the VLF sequence, the log block and the slot; the format is taken from SQL Server's own LSN
  text since no Datastream sample was seen, and any other form is refused.

Limits: a backfill never replaces a log image (a backfill started again after log events for its
rows is ordered below them); MySQL binlog numbering restarting after a failover or restore, and
Oracle RAC threads whose redo is not globally ordered, break the order (SCN comes first for that
reason); ranges that do not fit (``ssn`` ≥ 2**31, an ``rs_id`` part ≥ 2**32) are refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from airflow_provider_cdc.core.sequence_number import MAX_SECTION_VALUE
from airflow_provider_cdc.sources.datastream.read_methods import MYSQL, ORACLE, POSTGRESQL, SQLSERVER

UPSERT_BIT = 1
DELETE_BIT = 0
_LOG, _BACKFILL = 1, 0
_U32 = (1 << 32) - 1
_FILE_INDEX = re.compile(r"(\d+)\s*$")
_HEX = re.compile(r"^[0-9A-Fa-f]+$")
_PG_LSN = re.compile(r"^([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})$")
_SQLSERVER_LSN = (
    re.compile(r"^([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{1,4})$"),
    re.compile(r"^(?:0[xX])?([0-9A-Fa-f]{8})([0-9A-Fa-f]{8})([0-9A-Fa-f]{4})$"),
)


class SequenceFieldError(ValueError):
    """An ordering field of an event that is missing or malformed (names field, object, uuid)."""


def _problem(field: str, value: Any, expected: str, object_name: str, uuid: str) -> SequenceFieldError:
    return SequenceFieldError(
        f"object {object_name!r}, event {uuid!r}: source_metadata.{field} is {value!r}; expected {expected}"
    )


def _count(value: Any, field: str, object_name: str, uuid: str, limit: int = MAX_SECTION_VALUE) -> int:
    """A non-negative integer field (an int, or decimal digits as text)."""
    if type(value) is int:
        number = value
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value)
    else:
        raise _problem(field, value, "a non-negative integer", object_name, uuid)
    if not 0 <= number <= limit:
        raise _problem(field, value, f"an integer in [0, {limit}]", object_name, uuid)
    return number


def _first(metadata: Mapping[str, Any], *fields: str) -> tuple[str, Any]:
    """The first of ``fields`` that is present and not empty (else the first field and ``None``)."""
    for field in fields:
        value = metadata.get(field)
        if value is not None and value != "":
            return field, value
    return fields[0], None


@lru_cache(maxsize=1024)
def _binlog_index(log_file: str) -> int | None:
    """The number a binlog file name ends in (``mysql-bin.000014`` → 14), ``None`` if none fits."""
    match = _FILE_INDEX.search(log_file)
    index = int(match.group(1)) if match else None
    return index if index is not None and index <= MAX_SECTION_VALUE else None


def is_mysql_backfill(metadata: Mapping[str, Any]) -> bool:
    """Whether a MySQL event has no binlog file (backfill events leave it absent or empty)."""
    return _first(metadata, "log_file", "binlog_file")[1] is None


def mysql_sections(
    metadata: Mapping[str, Any], backfill: bool, upsert: bool, timestamp_ms: int, object_name: str, uuid: str
) -> tuple[int, int, int, int]:
    """MySQL: ``1 / file index / position / kind``, backfill ``0 / ts ms / 0 / kind``."""
    kind = UPSERT_BIT if upsert else DELETE_BIT
    file_field, log_file = _first(metadata, "log_file", "binlog_file")
    if backfill or log_file is None:
        return _BACKFILL, timestamp_ms, 0, kind
    index = _binlog_index(log_file) if isinstance(log_file, str) else None
    if index is None:
        raise _problem(file_field, log_file, "a binlog file name ending in its number", object_name, uuid)
    position_field, position = _first(metadata, "log_position", "binlog_position")
    return _LOG, index, _count(position, position_field, object_name, uuid), kind


def parse_rs_id(rs_id: Any, object_name: str = "?", uuid: str = "?") -> tuple[int, int, int]:
    """Oracle's ``rs_id`` (``" 0x0073c9.000a4e4c.01d0 "``) as (redo sequence, block, offset)."""
    text = rs_id.strip() if isinstance(rs_id, str) else ""
    if text[:2] in ("0x", "0X"):
        text = text[2:]
    parts = text.split(".")
    if len(parts) != 3 or not all(_HEX.match(part) for part in parts):
        raise _problem(
            "rs_id", rs_id, "three '.'-separated hex numbers (0xSSSSSS.BBBBBBBB.OOOO)", object_name, uuid
        )
    numbers = tuple(int(part, 16) for part in parts)
    if any(number > _U32 for number in numbers):
        raise _problem("rs_id", rs_id, "parts below 2**32", object_name, uuid)
    return numbers  # type: ignore[return-value]


def oracle_sections(
    metadata: Mapping[str, Any], backfill: bool, upsert: bool, timestamp_ms: int, object_name: str, uuid: str
) -> tuple[int, int, int, int]:
    """Oracle log and backfill sections (see the module docstring)."""
    kind = UPSERT_BIT if upsert else DELETE_BIT
    if backfill:
        scn = metadata.get("scn")
        return _BACKFILL, 0 if scn is None else _count(scn, "scn", object_name, uuid), 0, kind
    scn = _count(metadata.get("scn"), "scn", object_name, uuid)
    sequence, block, offset = parse_rs_id(metadata.get("rs_id"), object_name, uuid)
    ssn = _count(metadata.get("ssn"), "ssn", object_name, uuid, (1 << 31) - 1)
    return _LOG, scn, sequence << 32 | block, offset << 32 | ssn << 1 | kind


def parse_postgresql_lsn(lsn: Any, object_name: str = "?", uuid: str = "?") -> int:
    """PostgreSQL's ``lsn`` text ``"16/CB002DB0"`` as a 64-bit number."""
    match = _PG_LSN.match(lsn.strip()) if isinstance(lsn, str) else None
    if match is None:
        raise _problem("lsn", lsn, "'HI/LO' with 1 to 8 hex digits each", object_name, uuid)
    return int(match.group(1), 16) << 32 | int(match.group(2), 16)


def postgresql_sections(
    metadata: Mapping[str, Any], backfill: bool, upsert: bool, timestamp_ms: int, object_name: str, uuid: str
) -> tuple[int, int, int, int]:
    """PostgreSQL: ``1 / ts ms / lsn / kind``; backfill ``0 / ts ms / 0 / kind``."""
    kind = UPSERT_BIT if upsert else DELETE_BIT
    if backfill:
        return _BACKFILL, timestamp_ms, 0, kind
    return _LOG, timestamp_ms, parse_postgresql_lsn(metadata.get("lsn"), object_name, uuid), kind


def parse_sqlserver_lsn(lsn: Any, object_name: str = "?", uuid: str = "?") -> tuple[int, int, int]:
    """SQL Server's ``lsn`` (``"0000002a:00000248:0003"``, ``0x`` + 20 hex, 20 hex) as its parts."""
    text = lsn.strip() if isinstance(lsn, str) else None
    for pattern in _SQLSERVER_LSN:
        match = pattern.match(text) if text is not None else None
        if match is not None:
            return int(match.group(1), 16), int(match.group(2), 16), int(match.group(3), 16)
    raise _problem(
        "lsn", lsn, "'xxxxxxxx:xxxxxxxx:xxxx', '0x' + 20 hex digits or 20 hex digits", object_name, uuid
    )


def sqlserver_sections(
    metadata: Mapping[str, Any], backfill: bool, upsert: bool, timestamp_ms: int, object_name: str, uuid: str
) -> tuple[int, int, int, int]:
    """SQL Server: ``1 / ts ms / a<<32|b / c<<1|kind``; backfill ``0 / ts ms / 0 / kind``."""
    kind = UPSERT_BIT if upsert else DELETE_BIT
    if backfill:
        return _BACKFILL, timestamp_ms, 0, kind
    vlf, block, slot = parse_sqlserver_lsn(metadata.get("lsn"), object_name, uuid)
    return _LOG, timestamp_ms, vlf << 32 | block, slot << 1 | kind


#: Each database's sections function.
SECTIONS = {
    MYSQL: mysql_sections,
    ORACLE: oracle_sections,
    POSTGRESQL: postgresql_sections,
    SQLSERVER: sqlserver_sections,
}


def event_sections(
    database: str,
    metadata: Mapping[str, Any] | None,
    *,
    backfill: bool,
    upsert: bool,
    source_timestamp_ms: int,
    object_name: str = "?",
    uuid: str = "?",
) -> tuple[int, int, int, int]:
    """The four sections of an event's sequence number (see the module docstring)."""
    if type(source_timestamp_ms) is not int or not 0 <= source_timestamp_ms <= MAX_SECTION_VALUE:
        raise SequenceFieldError(
            f"object {object_name!r}, event {uuid!r}: source_timestamp {source_timestamp_ms!r} ms is "
            "not a non-negative integer"
        )
    return SECTIONS[database](metadata or {}, backfill, upsert, source_timestamp_ms, object_name, uuid)


def event_sequence_number(
    database: str,
    metadata: Mapping[str, Any] | None,
    *,
    backfill: bool,
    upsert: bool,
    source_timestamp_ms: int,
    object_name: str = "?",
    uuid: str = "?",
) -> str:
    """The event's ``_CHANGE_SEQUENCE_NUMBER`` as BigQuery CDC text (``1/E/E8A0/1``)."""
    sections = event_sections(
        database,
        metadata,
        backfill=backfill,
        upsert=upsert,
        source_timestamp_ms=source_timestamp_ms,
        object_name=object_name,
        uuid=uuid,
    )
    return "/".join(format(section, "X") for section in sections)


def sortable(sections: tuple[int, int, int, int]) -> str:
    """The sortable form of four sections (each padded to 16 upper-case hex digits)."""
    return "%016X/%016X/%016X/%016X" % sections  # noqa: UP031
