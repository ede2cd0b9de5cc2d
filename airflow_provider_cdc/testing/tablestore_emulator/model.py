"""The in-memory Tablestore Stream behind the emulator: tables, their rows, shards, records and iterators.

Each table has one stream. A row's shard is the open shard whose hash range holds the hash of its key;
every write appends one record (a PlainBuffer row with the sequence extension) to that shard, stamped
with the clock's time. Splitting closes a shard and opens two children over the halves of its range;
merging closes two adjacent shards and opens one child over their union. A closed shard's records stay
readable until retention (``expiration_hours`` on the clock) trims them.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import random
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_cdc.sources.tablestore.protocol import messages
from airflow_provider_cdc.sources.tablestore.protocol.plainbuffer import (
    Cell,
    PlainBufferRow,
    SequenceInfo,
    encode_row,
)

HASH_SPACE = 2**32
DEFAULT_READ_LIMIT = 100
MAX_READ_LIMIT = 1000
DEFAULT_SHARD_LIMIT = 100
EPOCH = 1
KEY_TYPES: dict[str, tuple[type, ...]] = {"INTEGER": (int,), "STRING": (str,), "BINARY": (bytes,)}
VALUE_TYPES = (int, float, bool, str, bytes)


class OtsError(Exception):
    """A service error: the ``Error`` body's code and message, and the HTTP status it comes with."""

    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status


def parameter_invalid(message: str) -> OtsError:
    return OtsError("OTSParameterInvalid", message, 400)


def not_exist(message: str) -> OtsError:
    return OtsError("OTSObjectNotExist", message, 404)


@dataclass
class StoredRecord:
    """One stream record as it is served."""

    timestamp_us: int
    action: int
    record: bytes


@dataclass
class Shard:
    shard_id: str
    parent_id: str | None
    parent_sibling_id: str | None
    low: int
    high: int
    closed_us: int | None = None
    records: list[StoredRecord] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    last_timestamp_us: int | None = None
    next_row_index: int = 0

    @property
    def closed(self) -> bool:
        return self.closed_us is not None


@dataclass
class Table:
    name: str
    primary_key: tuple[tuple[str, str], ...]
    expiration_hours: int
    stream_id: str
    creation_us: int
    shards: list[Shard] = field(default_factory=list)
    rows: dict[tuple, dict[str, tuple[Any, int]]] = field(default_factory=dict)


def encode_iterator(stream_id: str, shard_id: str, index: int) -> str:
    """An opaque iterator: the shard and the record index it points at."""
    return base64.urlsafe_b64encode(f"{stream_id}\t{shard_id}\t{index}".encode()).decode("ascii")


def decode_iterator(iterator: str) -> tuple[str, str, int]:
    try:
        stream_id, shard_id, index = base64.urlsafe_b64decode(iterator.encode("ascii")).decode().split("\t")
        return stream_id, shard_id, int(index)
    except (ValueError, UnicodeError, binascii.Error):
        raise parameter_invalid(f"shard iterator {iterator[:40]!r} is not valid") from None


def key_hash(key: tuple) -> int:
    """Where a key falls in the shards' hash space."""
    return int.from_bytes(hashlib.md5(repr(key).encode("utf-8")).digest()[:4], "big")


class StreamModel:
    """Tables and their streams; every method is safe to call from the server's threads."""

    def __init__(self, clock: Callable[[], int], *, shards: int = 1, seed: int = 0) -> None:
        if shards < 1:
            raise ValueError(f"a table needs at least one shard, not {shards}")
        self._clock = clock
        self._initial_shards = shards
        self._random = random.Random(seed)
        self._lock = threading.RLock()
        self._tables: dict[str, Table] = {}

    # --- writes (the tests' side) -------------------------------------------------------------------

    def _new_id(self) -> str:
        return str(uuid.UUID(int=self._random.getrandbits(128), version=4))

    def create_table(
        self, table: str, primary_key: Sequence[tuple[str, str]], *, expiration_hours: int = 24
    ) -> str:
        if not primary_key:
            raise ValueError(f"table {table!r} needs a primary key")
        for name, type_ in primary_key:
            if type_ not in KEY_TYPES:
                raise ValueError(
                    f"table {table!r}: primary key column {name!r} has type {type_!r}, "
                    f"expected one of {', '.join(KEY_TYPES)}"
                )
        if expiration_hours < 1:
            raise ValueError(f"table {table!r}: expiration_hours must be at least 1, not {expiration_hours}")
        with self._lock:
            if table in self._tables:
                raise ValueError(f"table {table!r} already exists")
            now = self._clock()
            entry = Table(table, tuple(primary_key), expiration_hours, self._new_id(), now)
            width = HASH_SPACE // self._initial_shards
            for position in range(self._initial_shards):
                high = HASH_SPACE if position == self._initial_shards - 1 else (position + 1) * width
                entry.shards.append(Shard(self._new_id(), None, None, position * width, high))
            self._tables[table] = entry
            return entry.stream_id

    def _table(self, table: str) -> Table:
        try:
            return self._tables[table]
        except KeyError:
            raise ValueError(f"table {table!r} does not exist") from None

    def _key(self, table: Table, key: Mapping[str, Any]) -> tuple:
        names = [name for name, _ in table.primary_key]
        if set(key) != set(names):
            raise ValueError(f"table {table.name!r}: the key has columns {sorted(key)}, expected {names}")
        for name, type_ in table.primary_key:
            value = key[name]
            if isinstance(value, bool) or not isinstance(value, KEY_TYPES[type_]):
                raise ValueError(
                    f"table {table.name!r}: key column {name!r} is {type_}, not {type(value).__name__}"
                )
        return tuple(key[name] for name in names)

    def _check_column(self, table: Table, name: str, value: Any = None, *, with_value: bool) -> None:
        if name in {key for key, _ in table.primary_key}:
            raise ValueError(f"table {table.name!r}: {name!r} is a primary key column, not an attribute")
        if with_value and not isinstance(value, VALUE_TYPES):
            raise ValueError(
                f"table {table.name!r}: column {name!r} has a value of type {type(value).__name__}; "
                "Tablestore stores int, float, bool, str or bytes"
            )

    def _shard_of(self, table: Table, key: tuple) -> Shard:
        point = key_hash(key)
        for shard in table.shards:
            if not shard.closed and shard.low <= point < shard.high:
                return shard
        raise AssertionError(f"table {table.name!r}: no open shard holds hash {point}")

    def _append(
        self, table: Table, key: tuple, action: int, cells: tuple[Cell, ...], *, deleted: bool = False
    ) -> None:
        shard = self._shard_of(table, key)
        now = self._clock()
        if shard.last_timestamp_us != now:
            shard.last_timestamp_us, shard.next_row_index = now, 0
        sequence = SequenceInfo(EPOCH, now, shard.next_row_index)
        shard.next_row_index += 1
        primary_key = tuple(zip([name for name, _ in table.primary_key], key, strict=True))
        record = encode_row(PlainBufferRow(primary_key, cells, deleted, sequence))
        shard.records.append(StoredRecord(now, action, record))
        shard.timestamps.append(now)

    def put_row(self, table: str, key: Mapping[str, Any], columns: Mapping[str, Any]) -> None:
        with self._lock:
            entry = self._table(table)
            row_key = self._key(entry, key)
            version_ms = self._clock() // 1000
            for name, value in columns.items():
                self._check_column(entry, name, value, with_value=True)
            cells = tuple(Cell(name, value, "PUT", version_ms) for name, value in columns.items())
            self._append(entry, row_key, messages.PUT_ROW, cells)
            entry.rows[row_key] = {name: (value, version_ms) for name, value in columns.items()}

    def update_row(
        self,
        table: str,
        key: Mapping[str, Any],
        *,
        put: Mapping[str, Any],
        delete_all: Sequence[str],
        delete_one: Mapping[str, int],
    ) -> None:
        with self._lock:
            entry = self._table(table)
            row_key = self._key(entry, key)
            named = [*put, *delete_all, *delete_one]
            if not named:
                raise ValueError(f"table {table!r}: an update needs at least one column")
            repeated = sorted({name for name in named if named.count(name) > 1})
            if repeated:
                raise ValueError(f"table {table!r}: an update names {repeated} more than once")
            version_ms = self._clock() // 1000
            for name, value in put.items():
                self._check_column(entry, name, value, with_value=True)
            for name in [*delete_all, *delete_one]:
                self._check_column(entry, name, with_value=False)
            cells = (
                *(Cell(name, value, "PUT", version_ms) for name, value in put.items()),
                *(Cell(name, None, "DELETE_ALL_VERSION") for name in delete_all),
                *(Cell(name, None, "DELETE_ONE_VERSION", int(ts)) for name, ts in delete_one.items()),
            )
            self._append(entry, row_key, messages.UPDATE_ROW, cells)
            row = entry.rows.setdefault(row_key, {})
            row.update({name: (value, version_ms) for name, value in put.items()})
            for name in delete_all:
                row.pop(name, None)
            for name, ts in delete_one.items():
                if name in row and row[name][1] == ts:
                    del row[name]

    def delete_row(self, table: str, key: Mapping[str, Any]) -> None:
        with self._lock:
            entry = self._table(table)
            row_key = self._key(entry, key)
            self._append(entry, row_key, messages.DELETE_ROW, (), deleted=True)
            entry.rows.pop(row_key, None)

    def _open_shard(self, table: Table, shard_id: str) -> Shard:
        for shard in table.shards:
            if shard.shard_id == shard_id:
                if shard.closed:
                    raise ValueError(f"table {table.name!r}: shard {shard_id!r} is closed")
                return shard
        raise ValueError(f"table {table.name!r} has no shard {shard_id!r}")

    def split_shard(self, table: str, shard_id: str) -> tuple[str, str]:
        with self._lock:
            entry = self._table(table)
            parent = self._open_shard(entry, shard_id)
            if parent.high - parent.low < 2:
                raise ValueError(f"table {table!r}: shard {shard_id!r} is too narrow to split")
            middle = (parent.low + parent.high) // 2
            parent.closed_us = self._clock()
            left = Shard(self._new_id(), parent.shard_id, None, parent.low, middle)
            right = Shard(self._new_id(), parent.shard_id, None, middle, parent.high)
            entry.shards += [left, right]
            return left.shard_id, right.shard_id

    def merge_shards(self, table: str, shard_id: str, sibling_id: str) -> str:
        with self._lock:
            entry = self._table(table)
            parent = self._open_shard(entry, shard_id)
            sibling = self._open_shard(entry, sibling_id)
            if parent is sibling or (parent.high != sibling.low and sibling.high != parent.low):
                raise ValueError(f"table {table!r}: shards {shard_id!r} and {sibling_id!r} are not adjacent")
            now = self._clock()
            parent.closed_us = sibling.closed_us = now
            child = Shard(
                self._new_id(),
                parent.shard_id,
                sibling.shard_id,
                min(parent.low, sibling.low),
                max(parent.high, sibling.high),
            )
            entry.shards.append(child)
            return child.shard_id

    def shards(self, table: str) -> list[dict[str, Any]]:
        with self._lock:
            return [
                {
                    "shard_id": shard.shard_id,
                    "parent_id": shard.parent_id,
                    "parent_sibling_id": shard.parent_sibling_id,
                    "closed": shard.closed,
                }
                for shard in self._table(table).shards
            ]

    def rows(self, table: str) -> dict[tuple, dict[str, Any]]:
        with self._lock:
            return {
                key: {name: value for name, (value, _) in row.items()}
                for key, row in self._table(table).rows.items()
            }

    # --- the stream (the server's side) ------------------------------------------------------------

    def _retention_cutoff_us(self, table: Table) -> int:
        return self._clock() - table.expiration_hours * 3600 * 1_000_000

    def _trimmed_start(self, table: Table, shard: Shard) -> int:
        return bisect.bisect_left(shard.timestamps, self._retention_cutoff_us(table))

    def _by_stream(self, stream_id: str) -> Table:
        for table in self._tables.values():
            if table.stream_id == stream_id:
                return table
        raise not_exist(f"stream {stream_id!r} does not exist")

    def _shard(self, table: Table, shard_id: str) -> Shard:
        for shard in table.shards:
            if shard.shard_id == shard_id:
                return shard
        raise not_exist(f"stream {table.stream_id!r} has no shard {shard_id!r}")

    def list_streams(self, table_name: str | None) -> list[Table]:
        with self._lock:
            if table_name is None:
                return list(self._tables.values())
            if table_name not in self._tables:
                raise not_exist(f"table {table_name!r} does not exist")
            return [self._tables[table_name]]

    def describe(
        self, stream_id: str, start_shard_id: str | None, limit: int | None
    ) -> tuple[Table, list[Shard], str | None]:
        """The stream's live shards (parents before children) from ``start_shard_id``, at most ``limit``."""
        if limit is not None and limit <= 0:
            raise parameter_invalid(f"shard_limit must be positive, not {limit}")
        with self._lock:
            table = self._by_stream(stream_id)
            cutoff = self._retention_cutoff_us(table)
            live = [shard for shard in table.shards if shard.closed_us is None or shard.closed_us >= cutoff]
            start = 0
            if start_shard_id is not None:
                ids = [shard.shard_id for shard in live]
                if start_shard_id not in ids:
                    message = f"inclusive_start_shard_id {start_shard_id!r} is not a live shard"
                    raise parameter_invalid(message)
                start = ids.index(start_shard_id)
            end = start + (limit or DEFAULT_SHARD_LIMIT)
            next_id = live[end].shard_id if end < len(live) else None
            return table, live[start:end], next_id

    def shard_iterator(self, stream_id: str, shard_id: str, timestamp_us: int | None) -> str:
        """An iterator at the shard's retained start, or at its first record at or after ``timestamp_us``."""
        with self._lock:
            table = self._by_stream(stream_id)
            shard = self._shard(table, shard_id)
            index = self._trimmed_start(table, shard)
            if timestamp_us is not None:
                index = max(index, bisect.bisect_left(shard.timestamps, timestamp_us))
            return encode_iterator(stream_id, shard_id, index)

    def read(self, iterator: str, limit: int | None) -> tuple[list[StoredRecord], str | None, bool]:
        """Records from ``iterator``: (records, next iterator or None when closed and drained, more?)."""
        if limit is not None and limit <= 0:
            raise parameter_invalid(f"limit must be positive, not {limit}")
        stream_id, shard_id, index = decode_iterator(iterator)
        with self._lock:
            table = self._by_stream(stream_id)
            shard = self._shard(table, shard_id)
            if index < 0 or index > len(shard.records):
                raise parameter_invalid(f"shard iterator points outside shard {shard_id!r}")
            if index < self._trimmed_start(table, shard):
                raise OtsError(
                    "OTSTrimmedDataAccess", "Requested stream data is already trimmed or does not exist.", 404
                )
            end = min(len(shard.records), index + min(limit or DEFAULT_READ_LIMIT, MAX_READ_LIMIT))
            records = shard.records[index:end]
            more = end < len(shard.records)
            if shard.closed and not more:
                return records, None, False
            return records, encode_iterator(stream_id, shard_id, end), more
