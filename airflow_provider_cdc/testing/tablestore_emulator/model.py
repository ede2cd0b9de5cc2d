"""The in-memory Table Store behind the emulator: tables, their rows, shards, stream records and iterators.

A table has a primary key (1 to 4 columns: INTEGER, STRING or BINARY) and rows of attribute columns,
one version each (the table's ``max_versions`` is 1). A table created with a stream has one: a row's
shard is the open shard whose hash range holds the hash of its key, and every write (``PutRow`` →
``PUT_ROW``, ``UpdateRow`` → ``UPDATE_ROW``, ``DeleteRow`` → ``DELETE_ROW``) appends one record (a
PlainBuffer row with the sequence extension) to that shard, stamped with the clock's time. Splitting
closes a shard and opens two children over the halves of its range; merging closes two adjacent shards
and opens one child over their union. A closed shard's records stay readable until retention
(``expiration_hours`` on the clock) trims them. Errors are :class:`OtsError` with the service's codes.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import random
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_cdc.sources.tablestore.protocol import messages
from airflow_provider_cdc.sources.tablestore.protocol.plainbuffer import (
    Cell,
    Infinity,
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
#: The PlainBuffer value type names the service's primary-key errors use.
_VALUE_TYPE_NAMES = {
    int: "VT_INTEGER",
    str: "VT_STRING",
    bytes: "VT_BLOB",
    float: "VT_DOUBLE",
    bool: "VT_BOOLEAN",
}
_KEY_VALUE_TYPES = {"INTEGER": "VT_INTEGER", "STRING": "VT_STRING", "BINARY": "VT_BLOB"}
MAX_KEY_COLUMNS = 4
MAX_EXPIRATION_HOURS = 168
#: At most this many rows per ``GetRange`` answer (the service's cap), whatever the limit.
MAX_RANGE_ROWS = 5000
#: At most this many rows per ``BatchWriteRow``.
MAX_BATCH_WRITE_ROWS = 200
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
_INT64 = (-(2**63), 2**63 - 1)
CONDITIONS = {
    messages.IGNORE: "IGNORE",
    messages.EXPECT_EXIST: "EXPECT_EXIST",
    messages.EXPECT_NOT_EXIST: "EXPECT_NOT_EXIST",
}


class OtsError(ValueError):
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


def invalid_pk(message: str) -> OtsError:
    return OtsError("OTSInvalidPK", message, 400)


def condition_failed() -> OtsError:
    return OtsError("OTSConditionCheckFail", "Condition check failed.", 403)


def table_not_exist() -> OtsError:
    return not_exist("Requested table does not exist.")


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


@dataclass(frozen=True)
class TableOptions:
    """The options a table keeps and ``DescribeTable`` returns."""

    time_to_live: int = -1
    max_versions: int = 1
    deviation_seconds: int = 86400
    allow_update: bool = True


@dataclass
class Table:
    """A table: its key schema, its rows (key values in key order → column → (value, version in ms))
    and, when it has a stream (``stream_id`` set), its shards."""

    name: str
    primary_key: tuple[tuple[str, str], ...]
    expiration_hours: int
    stream_id: str | None
    creation_us: int
    shards: list[Shard] = field(default_factory=list)
    rows: dict[tuple, dict[str, tuple[Any, int]]] = field(default_factory=dict)
    defined_columns: tuple[tuple[str, int], ...] = ()
    reserved: tuple[int, int] = (0, 0)
    options: TableOptions = field(default_factory=TableOptions)

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.primary_key)


@dataclass(frozen=True)
class WriteResult:
    """What a write left: the row's key (key order) and its columns afterwards (``None``: no row)."""

    key: tuple[tuple[str, Any], ...]
    columns: dict[str, tuple[Any, int]] | None
    size: int


@dataclass(frozen=True)
class ReadRow:
    """A row as a read returns it: key (key order) and the selected columns, sorted by name."""

    key: tuple[tuple[str, Any], ...]
    cells: tuple[Cell, ...]


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


def key_order(values: Iterable[Any]) -> tuple:
    """A sort key for key values in key order: integers signed, strings and binaries by their bytes,
    ``INF_MIN`` below and ``INF_MAX`` above every value."""
    order: list[tuple[int, Any]] = []
    for value in values:
        if isinstance(value, Infinity):
            order.append((0, 0) if value.name == "INF_MIN" else (2, 0))
        else:
            order.append((1, value.encode("utf-8") if isinstance(value, str) else value))
    return tuple(order)


def _value_size(value: Any) -> int:
    if isinstance(value, (str, bytes)):
        return len(value.encode("utf-8") if isinstance(value, str) else value)
    return 1 if isinstance(value, bool) else 8


def row_size(key: Iterable[tuple[str, Any]], cells: Iterable[Cell]) -> int:
    """Bytes of a row as the service meters it: names and values of its key and cells."""
    size = sum(len(name.encode("utf-8")) + _value_size(value) for name, value in key)
    for cell in cells:
        size += len(cell.name.encode("utf-8")) + (_value_size(cell.value) if cell.value is not None else 0)
    return size


def capacity_units(size: int) -> int:
    """Capacity units of ``size`` bytes: one per 4 KB started, at least one."""
    return max(1, -(-size // 4096))


class StreamModel:
    """Tables, their rows and their streams; every method is safe to call from the server's threads."""

    def __init__(self, clock: Callable[[], int], *, shards: int = 1, seed: int = 0) -> None:
        if shards < 1:
            raise ValueError(f"a table needs at least one shard, not {shards}")
        self._clock = clock
        self._initial_shards = shards
        self._random = random.Random(seed)
        self._lock = threading.RLock()
        self._tables: dict[str, Table] = {}

    # --- tables -------------------------------------------------------------------------------------

    def _new_id(self) -> str:
        return str(uuid.UUID(int=self._random.getrandbits(128), version=4))

    def create_table(
        self, table: str, primary_key: Sequence[tuple[str, str]], *, expiration_hours: int = 24
    ) -> str:
        """Create a table with a stream; return the stream id."""
        stream_id = self.define_table(table, primary_key, stream_hours=expiration_hours).stream_id
        assert stream_id is not None
        return stream_id

    def define_table(
        self,
        table: str,
        primary_key: Sequence[tuple[str, str]],
        *,
        stream_hours: int | None,
        defined_columns: Sequence[tuple[str, int]] = (),
        reserved: tuple[int, int] = (0, 0),
        options: TableOptions | None = None,
    ) -> Table:
        """Create a table (``CreateTable``): with a stream kept ``stream_hours`` hours, or none."""
        if not _TABLE_NAME.fullmatch(table):
            raise parameter_invalid(f"Invalid table name: '{table}'.")
        if not 1 <= len(primary_key) <= MAX_KEY_COLUMNS:
            raise parameter_invalid(
                f"The number of primary key columns must be in range: [1, {MAX_KEY_COLUMNS}]."
            )
        names = [name for name, _ in primary_key]
        for name, type_ in primary_key:
            if not name:
                raise parameter_invalid("The name of primary key column can not be empty.")
            if names.count(name) > 1:
                raise parameter_invalid(f"Duplicated primary key name: '{name}'.")
            if type_ not in KEY_TYPES:
                raise parameter_invalid(
                    f"Primary key column '{name}' has type {type_!r}; expected one of {', '.join(KEY_TYPES)}."
                )
        if stream_hours is not None and not 1 <= stream_hours <= MAX_EXPIRATION_HOURS:
            raise parameter_invalid(
                f"The stream expiration time must be in range: [1, {MAX_EXPIRATION_HOURS}] hours, "
                f"not {stream_hours}."
            )
        with self._lock:
            if table in self._tables:
                raise OtsError("OTSObjectAlreadyExist", "Requested table already exists.", 409)
            entry = Table(
                table,
                tuple(primary_key),
                stream_hours or 0,
                self._new_id() if stream_hours is not None else None,
                self._clock(),
                defined_columns=tuple(defined_columns),
                reserved=reserved,
                options=options or TableOptions(),
            )
            width = HASH_SPACE // self._initial_shards
            for position in range(self._initial_shards):
                high = HASH_SPACE if position == self._initial_shards - 1 else (position + 1) * width
                entry.shards.append(Shard(self._new_id(), None, None, position * width, high))
            self._tables[table] = entry
            return entry

    def describe_table(self, table: str) -> Table:
        with self._lock:
            return self._table(table)

    def list_tables(self) -> list[str]:
        with self._lock:
            return sorted(self._tables)

    def delete_table(self, table: str) -> None:
        """Drop a table, its rows and its stream."""
        with self._lock:
            self._table(table)
            del self._tables[table]

    def _table(self, table: str) -> Table:
        try:
            return self._tables[table]
        except KeyError:
            raise table_not_exist() from None

    # --- keys and cells ------------------------------------------------------------------------------

    def _validate_key(
        self, table: Table, primary_key: Sequence[tuple[str, Any]], *, bounds: bool = False
    ) -> tuple:
        """The key values (key order) of ``primary_key`` checked against the schema, as the service
        checks them; ``bounds``: a value may be ``INF_MIN`` or ``INF_MAX``."""
        if len(primary_key) != len(table.primary_key):
            raise invalid_pk(
                f"Validate PK size fail. Input: {len(primary_key)}, Meta: {len(table.primary_key)}."
            )
        for (name, value), (meta_name, meta_type) in zip(primary_key, table.primary_key, strict=True):
            if name != meta_name:
                raise invalid_pk(f"Validate PK name fail. Input: {name}, Meta: {meta_name}.")
            if isinstance(value, Infinity):
                if bounds:
                    continue
                raise parameter_invalid(f"{value!r} is an invalid type for the primary key.")
            if isinstance(value, bool) or not isinstance(value, KEY_TYPES[meta_type]):
                found = _VALUE_TYPE_NAMES.get(type(value), type(value).__name__)
                raise invalid_pk(
                    f"Validate PK type fail. Input: {found}, Meta: {_KEY_VALUE_TYPES[meta_type]}."
                )
        return tuple(value for _, value in primary_key)

    def _key(self, table: Table, key: Mapping[str, Any]) -> tuple:
        """The key values of a test's key mapping (any column order)."""
        names = table.key_names
        if set(key) != set(names):
            raise ValueError(
                f"table {table.name!r}: the key has columns {sorted(key)}, expected {list(names)}"
            )
        return self._validate_key(table, [(name, key[name]) for name in names])

    def _check_cells(self, table: Table, cells: Sequence[Cell], *, update: bool, where: str) -> None:
        """Refuse what the service refuses in a row's cells; ``where`` ends the message."""
        keys = set(table.key_names)
        seen: set[str] = set()
        for cell in cells:
            if not cell.name:
                raise parameter_invalid(f"The name of attribute column can not be empty {where}.")
            if cell.name in keys:
                raise parameter_invalid(
                    f"Duplicated attribute column name with primary key column: '{cell.name}' {where}."
                )
            if cell.name in seen:
                raise parameter_invalid(f"Duplicated attribute column name: '{cell.name}' {where}.")
            seen.add(cell.name)
            problem = _cell_problem(cell, update=update)
            if problem:
                raise parameter_invalid(f"Column '{cell.name}': {problem} {where}.")

    def _check_condition(self, table: Table, key: tuple, condition: int) -> None:
        exists = key in table.rows
        if (condition == messages.EXPECT_EXIST and not exists) or (
            condition == messages.EXPECT_NOT_EXIST and exists
        ):
            raise condition_failed()

    # --- writes -------------------------------------------------------------------------------------

    def _append(
        self,
        table: Table,
        key: tuple,
        action: int,
        cells: tuple[Cell, ...],
        now: int,
        *,
        deleted: bool = False,
    ) -> None:
        """The write's stream record, when the table has a stream."""
        if table.stream_id is None:
            return
        shard = self._shard_of(table, key)
        if shard.last_timestamp_us != now:
            shard.last_timestamp_us, shard.next_row_index = now, 0
        sequence = SequenceInfo(EPOCH, now, shard.next_row_index)
        shard.next_row_index += 1
        primary_key = tuple(zip(table.key_names, key, strict=True))
        record = encode_row(PlainBufferRow(primary_key, cells, deleted, sequence))
        shard.records.append(StoredRecord(now, action, record))
        shard.timestamps.append(now)

    def _checked_key(
        self, table: Table, operation: str, row: PlainBufferRow, condition: int, where: str
    ) -> tuple:
        """The key values of a write's row, after the checks the service makes before it looks at the
        row (key, cells, condition)."""
        key = self._validate_key(table, row.primary_key)
        verb = {"PUT": "putting", "UPDATE": "updating", "DELETE": "deleting"}[operation]
        place = f"while {verb} row{where}"
        if operation == "DELETE":
            if row.cells:
                raise parameter_invalid(f"A row to delete carries no attribute columns ({place}).")
            if condition == messages.EXPECT_NOT_EXIST:
                raise parameter_invalid(f"Invalid condition: EXPECT_NOT_EXIST {place}.")
        elif row.deleted:
            raise parameter_invalid(f"A row to write carries no delete marker ({place}).")
        if operation == "UPDATE" and not row.cells:
            raise parameter_invalid("Attribute column is missing.")
        if condition not in CONDITIONS:
            raise parameter_invalid(f"Invalid condition: {condition} {place}.")
        self._check_cells(table, row.cells, update=operation == "UPDATE", where=place)
        if operation == "UPDATE" and not table.options.allow_update:
            raise parameter_invalid(f"Table '{table.name}' does not allow UpdateRow.")
        return key

    def check_write(
        self,
        table: str,
        operation: str,
        row: PlainBufferRow,
        *,
        condition: int = messages.IGNORE,
        where: str = "",
    ) -> None:
        """Make the checks of :meth:`write` that do not depend on the table's rows; write nothing."""
        with self._lock:
            self._checked_key(self._table(table), operation, row, condition, where)

    def write(
        self,
        table: str,
        operation: str,
        row: PlainBufferRow,
        *,
        condition: int = messages.IGNORE,
        where: str = "",
    ) -> WriteResult:
        """One ``PUT``, ``UPDATE`` or ``DELETE`` of a row as a client sent it (key and cells in wire
        order), its row condition checked; the write goes to the stream as the matching record.
        ``where`` names the row in a batch (`` #1 in table: 'orders'``)."""
        with self._lock:
            entry = self._table(table)
            key = self._checked_key(entry, operation, row, condition, where)
            self._check_condition(entry, key, condition)
            if operation == "PUT":
                columns: dict[str, tuple[Any, int]] | None = self._put(entry, key, row.cells)
            elif operation == "UPDATE":
                columns = self._update(entry, key, row.cells)
            else:
                columns = self._delete(entry, key)
            pairs = tuple(zip(entry.key_names, key, strict=True))
            return WriteResult(pairs, columns, row_size(row.primary_key, row.cells))

    def _put(self, table: Table, key: tuple, cells: Sequence[Cell]) -> dict[str, tuple[Any, int]]:
        now = self._clock()
        version = now // 1000
        stored = {cell.name: (cell.value, _version(cell, version)) for cell in cells}
        record = tuple(Cell(name, value, "PUT", ts) for name, (value, ts) in stored.items())
        self._append(table, key, messages.PUT_ROW, record, now)
        table.rows[key] = stored
        return dict(stored)

    def _update(self, table: Table, key: tuple, cells: Sequence[Cell]) -> dict[str, tuple[Any, int]] | None:
        now = self._clock()
        version = now // 1000
        existed = key in table.rows
        row = dict(table.rows.get(key, {}))
        record: list[Cell] = []
        for cell in cells:
            if cell.op == "PUT":
                ts = _version(cell, version)
                if cell.name not in row or ts >= row[cell.name][1]:
                    row[cell.name] = (cell.value, ts)
                record.append(Cell(cell.name, cell.value, "PUT", ts))
            elif cell.op == "INCREMENT":
                current = row.get(cell.name, (0, version))[0]
                if isinstance(current, bool) or not isinstance(current, int):
                    raise parameter_invalid(
                        f"Column '{cell.name}' holds a {type(current).__name__}: only an integer "
                        "can be incremented."
                    )
                total = current + cell.value
                if not _INT64[0] <= total <= _INT64[1]:
                    raise parameter_invalid(f"Column '{cell.name}': the increment overflows int64.")
                row[cell.name] = (total, version)
                record.append(Cell(cell.name, total, "PUT", version))
            elif cell.op == "DELETE_ALL_VERSION":
                row.pop(cell.name, None)
                record.append(Cell(cell.name, None, "DELETE_ALL_VERSION"))
            else:
                if cell.name in row and row[cell.name][1] == cell.timestamp_ms:
                    del row[cell.name]
                record.append(Cell(cell.name, None, "DELETE_ONE_VERSION", cell.timestamp_ms))
        self._append(table, key, messages.UPDATE_ROW, tuple(record), now)
        if existed or row:
            table.rows[key] = row
            return dict(row)
        return None

    def _delete(self, table: Table, key: tuple) -> None:
        self._append(table, key, messages.DELETE_ROW, (), self._clock(), deleted=True)
        table.rows.pop(key, None)
        return None

    # --- writes (the tests' side) -------------------------------------------------------------------

    def put_row(self, table: str, key: Mapping[str, Any], columns: Mapping[str, Any]) -> None:
        with self._lock:
            entry = self._table(table)
            pairs = tuple(zip(entry.key_names, self._key(entry, key), strict=True))
            for name, value in columns.items():
                _check_test_value(table, name, value)
            cells = tuple(Cell(name, value) for name, value in columns.items())
            self.write(table, "PUT", PlainBufferRow(pairs, cells))

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
            pairs = tuple(zip(entry.key_names, self._key(entry, key), strict=True))
            if not (put or delete_all or delete_one):
                raise ValueError(f"table {table!r}: an update needs at least one column")
            for name, value in put.items():
                _check_test_value(table, name, value)
            cells = (
                *(Cell(name, value) for name, value in put.items()),
                *(Cell(name, None, "DELETE_ALL_VERSION") for name in delete_all),
                *(Cell(name, None, "DELETE_ONE_VERSION", int(ts)) for name, ts in delete_one.items()),
            )
            self.write(table, "UPDATE", PlainBufferRow(pairs, cells))

    def delete_row(self, table: str, key: Mapping[str, Any]) -> None:
        with self._lock:
            entry = self._table(table)
            pairs = tuple(zip(entry.key_names, self._key(entry, key), strict=True))
            self.write(table, "DELETE", PlainBufferRow(pairs))

    # --- reads --------------------------------------------------------------------------------------

    def get_row(
        self,
        table: str,
        primary_key: Sequence[tuple[str, Any]],
        *,
        columns: Sequence[str] = (),
        time_range: tuple[int, int] | None = None,
        column_range: tuple[str | None, str | None] = (None, None),
    ) -> ReadRow | None:
        """The row of ``primary_key`` with the selected columns (``GetRow``); ``None`` when there is none."""
        with self._lock:
            entry = self._table(table)
            key = self._validate_key(entry, primary_key)
            row = entry.rows.get(key)
            if row is None:
                return None
            return _select(entry, key, row, columns, time_range, column_range)

    def get_range(
        self,
        table: str,
        start: Sequence[tuple[str, Any]],
        end: Sequence[tuple[str, Any]],
        *,
        forward: bool = True,
        limit: int | None = None,
        columns: Sequence[str] = (),
        time_range: tuple[int, int] | None = None,
        column_range: tuple[str | None, str | None] = (None, None),
    ) -> tuple[list[ReadRow], tuple[tuple[str, Any], ...] | None]:
        """Rows from ``start`` (inclusive) to ``end`` (exclusive) in key order, backwards when not
        ``forward`` (``GetRange``), at most ``limit``; and the key to go on from, when rows remain."""
        with self._lock:
            entry = self._table(table)
            low = key_order(self._validate_key(entry, start, bounds=True))
            high = key_order(self._validate_key(entry, end, bounds=True))
            if forward and not low < high:
                raise parameter_invalid("Begin key must less than end key in FORWARD")
            if not forward and not low > high:
                raise parameter_invalid("Begin key must more than end key in BACKWARD")
            if limit is not None and limit <= 0:
                raise parameter_invalid("The limit must be greater than 0.")
            if forward:
                keys = [key for key in entry.rows if low <= key_order(key) < high]
            else:
                keys = [key for key in entry.rows if high < key_order(key) <= low]
            keys.sort(key=key_order, reverse=not forward)
            most = min(limit or MAX_RANGE_ROWS, MAX_RANGE_ROWS)
            rows: list[ReadRow] = []
            for key in keys:
                if len(rows) == most:
                    return rows, tuple(zip(entry.key_names, key, strict=True))
                found = _select(entry, key, entry.rows[key], columns, time_range, column_range)
                if found is not None:
                    rows.append(found)
            return rows, None

    # --- shards and truth (the tests' side) ---------------------------------------------------------

    def _shard_of(self, table: Table, key: tuple) -> Shard:
        point = key_hash(key)
        for shard in table.shards:
            if not shard.closed and shard.low <= point < shard.high:
                return shard
        raise AssertionError(f"table {table.name!r}: no open shard holds hash {point}")

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
        """The tables with a stream (``table_name``'s only, when given)."""
        with self._lock:
            if table_name is None:
                tables = list(self._tables.values())
            elif table_name in self._tables:
                tables = [self._tables[table_name]]
            else:
                raise not_exist(f"table {table_name!r} does not exist")
            return [table for table in tables if table.stream_id is not None]

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


def _version(cell: Cell, default_ms: int) -> int:
    return default_ms if cell.timestamp_ms is None else cell.timestamp_ms


def _cell_problem(cell: Cell, *, update: bool) -> str | None:
    """Why the service refuses a cell of a written row (``None``: it does not)."""
    if not update and cell.op != "PUT":
        return f"a row to put carries values, not {cell.op}"
    if cell.op in ("PUT", "INCREMENT"):
        if cell.value is None:
            return f"a {cell.op} needs a value"
        if isinstance(cell.value, Infinity):
            return f"{cell.value!r} is an invalid type for the attribute column"
        if cell.op == "INCREMENT" and (isinstance(cell.value, bool) or not isinstance(cell.value, int)):
            return "an INCREMENT needs an integer"
        if cell.op == "INCREMENT" and cell.timestamp_ms is not None:
            return "an INCREMENT takes no timestamp"
    elif cell.value is not None:
        return f"a {cell.op} carries no value"
    elif cell.op == "DELETE_ONE_VERSION" and cell.timestamp_ms is None:
        return "a DELETE_ONE_VERSION needs the version's timestamp"
    elif cell.op == "DELETE_ALL_VERSION" and cell.timestamp_ms is not None:
        return "a DELETE_ALL_VERSION takes no timestamp"
    return None


def _check_test_value(table: str, name: str, value: Any) -> None:
    if isinstance(value, Infinity) or not isinstance(value, VALUE_TYPES):
        raise ValueError(
            f"table {table!r}: column {name!r} has a value of type {type(value).__name__}; "
            "Tablestore stores int, float, bool, str or bytes"
        )


def _select(
    table: Table,
    key: tuple,
    row: Mapping[str, tuple[Any, int]],
    columns: Sequence[str],
    time_range: tuple[int, int] | None,
    column_range: tuple[str | None, str | None],
) -> ReadRow | None:
    """A stored row as a read returns it: the key and the wanted columns (all when ``columns`` is
    empty) whose version lies in ``time_range`` ([start, end) ms) and whose name lies in
    ``column_range`` ([start, end)), sorted by name; ``None`` when nothing of it is wanted."""
    wanted = set(columns)
    low, high = column_range
    cells = [
        Cell(name, value, "PUT", version)
        for name, (value, version) in row.items()
        if (not wanted or name in wanted)
        and (time_range is None or time_range[0] <= version < time_range[1])
        and (low is None or name >= low)
        and (high is None or name < high)
    ]
    cells.sort(key=lambda cell: cell.name.encode("utf-8"))
    if not cells:
        if wanted and not wanted & set(table.key_names):
            return None  # none of the wanted columns is in the row
        if not wanted and row:
            return None  # every column is outside the time or column range
    return ReadRow(tuple(zip(table.key_names, key, strict=True)), tuple(cells))
