"""A seeded source database history as Datastream reports it, with its truth.

:func:`generate_history` runs a small shop database (tables ``shop.customers`` and ``shop.orders``) of
one kind (``mysql``, ``oracle``, ``postgresql``, ``sqlserver``) and records every change as the
Datastream event the database's CDC reader emits: inserts, updates, deletes, primary-key changes,
re-inserts of deleted keys, bursts of changes of one key within a second, a column added to
``shop_customers`` part-way through, and a backfill (a consistent read of every row at the backfill
start ``B``) running concurrently with CDC. Ordering fields (binlog file and position, SCN and
``rs_id``, LSN) follow the true order; every event also carries the ``ordinal`` of its place in the
true order (a backfill event's place is ``B``), which only :func:`truth` reads.

Row values are Python values: ``int``, ``Decimal``, aware UTC ``datetime``, ``str``, ``bool``,
``float``, ``None`` and JSON text for JSON columns. MySQL and Oracle have no boolean column type, so
their ``active`` column holds ``0``/``1`` (``TINYINT(1)``, ``NUMBER(1)``), as their files carry it.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

DATABASES = ("mysql", "oracle", "postgresql", "sqlserver")

CDC_READ_METHODS = {
    "mysql": "mysql-cdc-binlog",
    "oracle": "oracle-cdc-logminer",
    "postgresql": "postgresql-cdc",
    "sqlserver": "sqlserver-cdc",
}
BACKFILL_READ_METHODS = {
    "mysql": "mysql-backfill-fulldump",
    "oracle": "oracle-backfill",
    "postgresql": "postgresql-backfill",
    "sqlserver": "sqlserver-backfill",
}
POSTGRES_WAL_READ_METHOD = "postgres-cdc-wal"
DEFAULT_STREAM_NAME = "projects/cdc-test/locations/us-central1/streams/shop-stream"
REGIONS = ("amer", "apac", "emea", "latam")
CHANNELS = ("web", "store", "phone", "partner")


@dataclass(frozen=True)
class Column:
    """A source column: ``kind`` is ``int``, ``long``, ``varchar``, ``decimal``, ``bool``, ``timestamp``,
    ``double`` or ``json``."""

    name: str
    kind: str
    length: int | None = None
    precision: int | None = None
    scale: int | None = None


@dataclass(frozen=True)
class TableSpec:
    """A source table with its primary key and columns in table order."""

    schema: str
    table: str
    key: tuple[str, ...]
    columns: tuple[Column, ...]

    @property
    def object_name(self) -> str:
        """Datastream's object name: the schema name, an underscore, the table name."""
        return f"{self.schema}_{self.table}"

    def key_of(self, row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(row[name] for name in self.key)


_CUSTOMER_COLUMNS = (
    Column("id", "int"),
    Column("name", "varchar", length=64),
    Column("balance", "decimal", precision=12, scale=2),
    Column("active", "bool"),
    Column("updated_at", "timestamp"),
    Column("notes", "varchar", length=200),
)
CUSTOMERS = TableSpec("shop", "customers", ("id",), _CUSTOMER_COLUMNS)
CUSTOMERS_WITH_TIER = TableSpec(
    "shop", "customers", ("id",), (*_CUSTOMER_COLUMNS, Column("tier", "varchar", 16))
)
ORDERS = TableSpec(
    "shop",
    "orders",
    ("region", "order_id"),
    (
        Column("region", "varchar", length=8),
        Column("order_id", "long"),
        Column("amount", "double"),
        Column("attributes", "json"),
    ),
)
ADDED_COLUMN = "tier"


@dataclass(frozen=True, slots=True)
class DatastreamEvent:
    """One Datastream event (the fields of a file's record) plus its place in the true history.

    ``columns`` is the payload schema the event was read with (one tuple per table version);
    ``task`` is the Datastream writer task that delivers it (the second number of a file name).
    """

    ordinal: int
    object_name: str
    columns: tuple[Column, ...]
    key: tuple[Any, ...]
    uuid: str
    read_method: str
    stream_name: str
    read_timestamp: datetime
    source_timestamp: datetime
    sort_keys: tuple[Any, ...]
    source_metadata: dict[str, Any]
    payload: dict[str, Any]
    task: int = 0

    @property
    def is_backfill(self) -> bool:
        return "-backfill" in self.read_method

    @property
    def removes_key(self) -> bool:
        """The event removes its key: a delete, or the old-key half of a primary-key change."""
        change_type = self.source_metadata.get("change_type")
        return change_type in ("DELETE", "UPDATE-DELETE") or bool(self.source_metadata.get("is_deleted"))


Truth = dict[str, dict[tuple[Any, ...], dict[str, Any]]]


def truth(events: Iterable[DatastreamEvent], *, backfill_below_log_events: bool = False) -> Truth:
    """Table state after applying ``events`` in their true order: the latest change of a key wins and a
    delete removes it. Re-delivered events (same ``uuid``) count once. Every row has every column any
    applied event of its object carried (a column added later is ``None`` in rows written before).

    ``backfill_below_log_events``: apply backfill events before every log event (Datastream's rule for
    consumers: backfill events "can be consumed in any order", below the log). Both orders give the
    source's state once every event arrived; they differ while a log event older than a backfill read
    of its row has not arrived yet (the backfill's newer image waits for it)."""
    unique: dict[str, DatastreamEvent] = {}
    for event in events:
        unique.setdefault(event.uuid, event)
    state: Truth = {}
    columns: dict[str, dict[str, None]] = {}

    def order(event: DatastreamEvent) -> tuple[bool, int]:
        return (backfill_below_log_events and not event.is_backfill, event.ordinal)

    for event in sorted(unique.values(), key=order):
        rows = state.setdefault(event.object_name, {})
        seen = columns.setdefault(event.object_name, {})
        for column in event.columns:
            seen.setdefault(column.name, None)
        if event.removes_key:
            rows.pop(event.key, None)
        else:
            rows[event.key] = dict(event.payload)
    for object_name, rows in state.items():
        names = columns[object_name]
        for key, row in rows.items():
            rows[key] = {name: row.get(name) for name in names}
    return state


@dataclass
class SourceHistory:
    """The events of one stream's source in true order, and the source's own final table state."""

    database: str
    stream_name: str
    events: list[DatastreamEvent]
    backfill_start: datetime
    schema_change_at: datetime
    tables: tuple[TableSpec, ...]
    _final: Truth = field(repr=False, default_factory=dict)

    def final_state(self) -> Truth:
        """Every table's rows at the end of the history (columns in table order)."""
        return {name: {key: dict(row) for key, row in rows.items()} for name, rows in self._final.items()}


def generate_history(
    database: str,
    seed: int,
    *,
    start: datetime,
    cdc_seconds: float,
    cdc_events: int,
    initial_rows: int,
    backfill_at: datetime,
    backfill_read_seconds: float,
    schema_change_at: datetime,
    stream_name: str = DEFAULT_STREAM_NAME,
    mysql_gtid: bool = False,
    postgres_read_method: str = CDC_READ_METHODS["postgresql"],
    max_read_lag_seconds: float = 3.0,
) -> SourceHistory:
    """A seeded history: ``initial_rows`` rows exist before the stream starts at ``start``; about
    ``cdc_events`` changes follow over ``cdc_seconds``; the backfill reads every row at ``backfill_at``
    and delivers them over ``backfill_read_seconds``; ``shop_customers`` gains the column ``tier`` at
    ``schema_change_at``."""
    if database not in DATABASES:
        raise ValueError(f"unknown source database {database!r}; expected one of {', '.join(DATABASES)}")
    if postgres_read_method not in (CDC_READ_METHODS["postgresql"], POSTGRES_WAL_READ_METHOD):
        raise ValueError(f"unknown PostgreSQL CDC read method {postgres_read_method!r}")
    builder = _HistoryBuilder(
        database, seed, stream_name, mysql_gtid, postgres_read_method, max_read_lag_seconds
    )
    return builder.run(
        _utc(start), cdc_seconds, cdc_events, initial_rows, _utc(backfill_at), backfill_read_seconds,
        _utc(schema_change_at),
    )  # fmt: skip


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"timestamp {value.isoformat()} has no time zone; pass an aware UTC datetime")
    return value.astimezone(timezone.utc)


def _millis(value: datetime) -> int:
    return (value - _EPOCH) // timedelta(milliseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _floor_ms(value: datetime) -> datetime:
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def _floor_s(value: datetime) -> datetime:
    return value.replace(microsecond=0)


class _Positions:
    """The database's log position fields, advanced event by event in true order."""

    def __init__(self, database: str, rng: random.Random, gtid: bool, rollover_events: int) -> None:
        self.database = database
        self.rng = rng
        self.file_field, self.position_field = (
            ("binlog_file", "binlog_position") if gtid else ("log_file", "log_position")
        )
        self.rollover_events = max(50, rollover_events)
        self.binlog_index, self.binlog_position, self.in_file = 3, 4, 0
        self.scn = 7_040_000 + rng.randrange(10_000)
        self.redo_sequence, self.redo_block, self.redo_offset = 0xD4, 0x91BE, 0x10
        self.lsn = (0x16 << 32) | 0xCB002DB0
        self.txid = 363_000 + rng.randrange(1_000)
        self.mssql_lsn = [0x2A, 0x1F0, 1]
        self.page = 300 + rng.randrange(100)

    def next_transaction(self) -> Any:
        self.txid += self.rng.randint(1, 4)
        if self.database == "oracle":
            return base64.b64encode(self.rng.randbytes(8)).decode("ascii")
        if self.database == "sqlserver":
            return f"0000:{self.txid:08x}"
        return self.txid

    def advance(self) -> None:
        """Move every position past the next logged change."""
        rng = self.rng
        if self.database == "mysql":
            self.in_file += 1
            if self.in_file >= self.rollover_events:
                self.binlog_index, self.binlog_position, self.in_file = self.binlog_index + 1, 4, 0
            self.binlog_position += rng.randint(180, 640)
        elif self.database == "oracle":
            self.scn += rng.randint(1, 6)
            self.redo_offset += 0x10 * rng.randint(1, 3)
            if self.redo_offset > 0x1F0:
                self.redo_block, self.redo_offset = self.redo_block + rng.randint(1, 3), 0x10
        elif self.database == "postgresql":
            self.lsn += rng.randint(48, 480)
        else:
            self.mssql_lsn[2] += 1
            if self.mssql_lsn[2] > 0x40:
                self.mssql_lsn[1], self.mssql_lsn[2] = self.mssql_lsn[1] + rng.randint(1, 8), 1

    def rs_id(self) -> str:
        return f" 0x{self.redo_sequence:06x}.{self.redo_block:08x}.{self.redo_offset:04x} "

    def pg_lsn(self) -> str:
        return f"{self.lsn >> 32:X}/{self.lsn & 0xFFFFFFFF:08X}"

    def sqlserver_lsn(self) -> str:
        a, b, c = self.mssql_lsn
        return f"{a:08x}:{b:08x}:{c:04x}"


class _HistoryBuilder:
    def __init__(
        self, database: str, seed: int, stream_name: str, gtid: bool, pg_method: str, read_lag: float
    ) -> None:
        self.database = database
        self.rng = random.Random(f"datastream-history:{database}:{seed}")
        self.stream_name = stream_name
        self.gtid = gtid
        self.cdc_method = pg_method if database == "postgresql" else CDC_READ_METHODS[database]
        self.read_lag = read_lag
        self.specs = {"customers": CUSTOMERS, "orders": ORDERS}
        self.rows: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {"customers": {}, "orders": {}}
        self.row_ids: dict[str, dict[tuple[Any, ...], str]] = {"customers": {}, "orders": {}}
        self.deleted: dict[str, list[tuple[Any, ...]]] = {"customers": [], "orders": []}
        self.keys: dict[str, list[tuple[Any, ...]]] = {"customers": [], "orders": []}
        self.index: dict[str, dict[tuple[Any, ...], int]] = {"customers": {}, "orders": {}}
        self.next_customer, self.next_order = 1, 10_000_000_001
        self.events: list[DatastreamEvent] = []
        self.ordinal = 0
        self.uuid_prefix, self.uuid_counter = "", 0
        self.last_read = datetime(1970, 1, 1, tzinfo=timezone.utc)

    # --- values ----------------------------------------------------------------------------------

    def _bool(self) -> Any:
        value = self.rng.random() < 0.7
        return int(value) if self.database in ("mysql", "oracle") else value

    def _customer(self, key: int, at: datetime, tier: bool) -> dict[str, Any]:
        rng = self.rng
        row = {
            "id": key,
            "name": f"customer {key} {rng.choice('abcdefghij') * rng.randint(1, 12)}",
            "balance": Decimal(rng.randint(-50_000_00, 9_999_999_999)).scaleb(-2),
            "active": self._bool(),
            "updated_at": at.replace(microsecond=rng.randrange(1_000_000)),
            "notes": None if rng.random() < 0.4 else f'note {rng.randrange(10**6)} "q" é',
        }
        if tier:
            row["tier"] = rng.choice(("gold", "silver", None))
        return row

    def _order_values(self) -> dict[str, Any]:
        rng = self.rng
        gift = "true" if rng.random() < 0.2 else "false"
        attributes = (
            f'{{"channel":"{CHANNELS[rng.getrandbits(2)]}","gift":{gift},"items":{1 + rng.getrandbits(3)}}}'
        )
        return {"amount": round(rng.uniform(0.5, 5000.0), rng.getrandbits(1) * 2), "attributes": attributes}

    def _row_id(self) -> str:
        return "AAAE5X" + base64.b64encode(self.rng.randbytes(9)).decode("ascii")

    def _uuid(self) -> str:
        if self.uuid_counter % 4096 == 0:
            digits = f"{self.rng.getrandbits(112):028x}"
            self.uuid_prefix = f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:24]}"
        self.uuid_counter += 1
        return f"{self.uuid_prefix}{self.uuid_counter - 1:08x}"

    # --- events ----------------------------------------------------------------------------------

    def _metadata(
        self, spec: TableSpec, change_type: str | None, is_deleted: bool, txid: Any, row_id: str | None,
        backfill: bool,
    ) -> tuple[dict[str, Any], tuple[Any, ...]]:  # fmt: skip
        """``source_metadata`` in the database's field order, and the sort keys without the timestamp."""
        p = self.positions
        if self.database == "mysql":
            log_file = "" if backfill else f"mysql-bin.{p.binlog_index:06d}"
            position = 0 if backfill else p.binlog_position
            metadata = {
                "table": spec.table,
                "database": spec.schema,
                "primary_keys": list(spec.key),
                p.file_field: log_file,
                p.position_field: position,
                "change_type": change_type,
                "is_deleted": is_deleted,
            }
            return metadata, (log_file, position)
        if self.database == "oracle":
            rs_id = None if backfill else p.rs_id()
            metadata = {
                "schema": spec.schema,
                "table": spec.table,
                "database": "SHOPDB",
                "row_id": row_id,
                "scn": p.scn,
                "is_deleted": is_deleted,
                "change_type": change_type,
                "ssn": 0,
                "rs_id": rs_id,
                "tx_id": txid,
                "log_file": None
                if backfill
                else f"/u01/app/oracle/archivelog/o1_mf_1_{p.redo_sequence}_.arc",
                "primary_keys": list(spec.key),
            }
            return metadata, (p.scn, rs_id or "", 0)
        if self.database == "postgresql":
            lsn = None if backfill else p.pg_lsn()
            metadata = {
                "schema": spec.schema,
                "table": spec.table,
                "is_deleted": is_deleted,
                "change_type": change_type,
                "tx_id": txid,
                "lsn": lsn,
                "primary_keys": list(spec.key),
            }
            return metadata, (lsn or "",)
        lsn = None if backfill else p.sqlserver_lsn()
        metadata = {
            "table": spec.table,
            "database": "shopdb",
            "schema": spec.schema,
            "is_deleted": is_deleted,
            "lsn": lsn,
            "tx_id": txid,
            "physical_location": [1, p.page + self.rng.randrange(40), self.rng.randrange(60)],
            "replication_index": list(spec.key),
            "change_type": change_type,
        }
        return metadata, (lsn or "",)

    def _emit(
        self, table: str, row: dict[str, Any], change_type: str | None, is_deleted: bool, *,
        source_ts: datetime, read_ts: datetime, txid: Any, backfill: bool = False, ordinal: int | None = None,
    ) -> None:  # fmt: skip
        spec = self.specs[table]
        key = spec.key_of(row)
        metadata, sort_tail = self._metadata(
            spec, change_type, is_deleted, txid, self.row_ids[table].get(key), backfill
        )
        if ordinal is None:
            ordinal, self.ordinal = self.ordinal, self.ordinal + 1
        self.events.append(
            DatastreamEvent(
                ordinal=ordinal,
                object_name=spec.object_name,
                columns=spec.columns,
                key=key,
                uuid=self._uuid(),
                read_method=BACKFILL_READ_METHODS[self.database] if backfill else self.cdc_method,
                stream_name=self.stream_name,
                read_timestamp=_floor_ms(read_ts),
                source_timestamp=source_ts,
                sort_keys=(_millis(source_ts), *sort_tail),
                source_metadata=metadata,
                payload=dict(row),
            )
        )

    def _change_types(self) -> dict[str, str]:
        update = "UPDATE-INSERT" if self.database == "mysql" else "UPDATE"
        return {"insert": "INSERT", "update": update, "delete": "DELETE"}

    # --- the run -----------------------------------------------------------------------------------

    def run(
        self, start: datetime, cdc_seconds: float, cdc_events: int, initial_rows: int, backfill_at: datetime,
        backfill_read_seconds: float, schema_change_at: datetime,
    ) -> SourceHistory:  # fmt: skip
        rng = self.rng
        self.positions = _Positions(self.database, rng, self.gtid, rollover_events=cdc_events // 3)
        before = start - timedelta(days=1)
        for n in range(initial_rows):
            if n % 2 == 0:
                self._insert_customer(before, emit=False)
            else:
                self._insert_order(emit=False)
        step = timedelta(seconds=cdc_seconds / max(1, cdc_events))
        now = start + timedelta(milliseconds=300)
        end = start + timedelta(seconds=cdc_seconds)
        backfilled = altered = False
        while now < end or not (backfilled and altered):
            if not backfilled and now >= backfill_at:
                self._backfill(backfill_at, backfill_read_seconds)
                backfilled = True
                continue
            if not altered and now >= schema_change_at:
                self.specs["customers"] = CUSTOMERS_WITH_TIER
                for row in self.rows["customers"].values():
                    row.setdefault(ADDED_COLUMN, None)
                altered = True
                continue
            self._transaction(now)
            now += step * rng.uniform(0.5, 1.5) * 2
        final = {
            spec.object_name: {key: dict(row) for key, row in self.rows[table].items()}
            for table, spec in self.specs.items()
        }
        return SourceHistory(
            self.database, self.stream_name, self.events, backfill_at, schema_change_at,
            tuple(self.specs.values()), final,
        )  # fmt: skip

    def _backfill(self, at: datetime, read_seconds: float) -> None:
        source_ts = _floor_s(at) if self.database == "mysql" else _floor_ms(at)
        ordinal, self.ordinal = self.ordinal, self.ordinal + 1
        rows = [(table, row) for table in ("customers", "orders") for row in self.rows[table].values()]
        self.rng.shuffle(rows)  # a backfill reads in no particular order
        for table, row in rows:
            read_ts = at + timedelta(seconds=self.rng.uniform(1.0, max(1.0, read_seconds)))
            change_type = None if self.database == "oracle" else "INSERT"
            self._emit(
                table, row, change_type, False, source_ts=source_ts, read_ts=read_ts, txid=None,
                backfill=True, ordinal=ordinal,
            )  # fmt: skip

    def _transaction(self, commit: datetime) -> None:
        """One transaction of one to three changes (or a burst of changes of one key) committed at
        ``commit``."""
        rng = self.rng
        txid = self.positions.next_transaction()
        statement_start = commit - timedelta(seconds=rng.choice((0, 0, 0, 0, 1.2, 2.5)))
        changes = 1 if rng.random() < 0.6 else rng.randint(2, 3)
        for index in range(changes):
            at = commit + timedelta(milliseconds=index)
            source_ts = _floor_s(statement_start + timedelta(milliseconds=10 * index))
            if self.database in ("postgresql", "sqlserver"):
                source_ts = _floor_ms(at)
            elif self.database == "oracle":
                source_ts = _floor_s(at)
            # the CDC reader follows the log: reads keep its order
            read_ts = max(self.last_read, at + timedelta(seconds=rng.uniform(0.4, self.read_lag)))
            self.last_read = read_ts
            self._operation(source_ts, read_ts, txid, at)

    def _operation(self, source_ts: datetime, read_ts: datetime, txid: Any, at: datetime) -> None:
        rng = self.rng
        table = "customers" if rng.random() < 0.55 else "orders"
        rows = self.rows[table]
        choice = rng.random()
        emit = {"source_ts": source_ts, "read_ts": read_ts, "txid": txid}
        types = self._change_types()
        if not rows or choice < 0.30:
            self._insert_customer(at, emit=emit) if table == "customers" else self._insert_order(emit=emit)
        elif choice < 0.58:
            key = self._some_key(table)
            self._update(table, key, at)
            self._log(table, rows[key], types["update"], False, emit)
        elif choice < 0.68:
            key = self._some_key(table)
            row = self._pop(table, key)
            self.deleted[table].append(key)
            self._log(table, row, types["delete"], True, emit)
            self.row_ids[table].pop(key, None)
        elif choice < 0.76:
            self._change_key(table, self._some_key(table), at, emit)
        elif choice < 0.84 and self.deleted[table]:
            key = self.deleted[table].pop(rng.randrange(len(self.deleted[table])))
            if key in rows:
                return
            if table == "customers":
                self._insert_customer(at, emit=emit, key=key[0])
            else:
                self._insert_order(emit=emit, key=key)
        else:  # a burst: several changes of one key within the same second
            key = self._some_key(table)
            for n in range(rng.randint(2, 4)):
                self._update(table, key, at)
                burst = dict(emit, read_ts=read_ts + timedelta(milliseconds=n))
                self._log(table, rows[key], types["update"], False, burst)

    def _some_key(self, table: str) -> tuple[Any, ...]:
        return self.rng.choice(self.keys[table])

    def _put(self, table: str, key: tuple[Any, ...], row: dict[str, Any]) -> None:
        if key not in self.rows[table]:
            self.index[table][key] = len(self.keys[table])
            self.keys[table].append(key)
        self.rows[table][key] = row

    def _pop(self, table: str, key: tuple[Any, ...]) -> dict[str, Any]:
        keys, index = self.keys[table], self.index[table]
        position = index.pop(key)
        last = keys.pop()
        if last != key:
            keys[position], index[last] = last, position
        return self.rows[table].pop(key)

    def _log(self, table: str, row: dict[str, Any], change_type: str, is_deleted: bool, emit: dict) -> None:
        self.positions.advance()
        self._emit(table, row, change_type, is_deleted, **emit)

    def _insert_customer(self, at: datetime, emit: Any, key: int | None = None) -> None:
        if key is None:
            key, self.next_customer = self.next_customer, self.next_customer + 1
        row = self._customer(key, at, tier=self.specs["customers"] is CUSTOMERS_WITH_TIER)
        self._put("customers", (key,), row)
        self.row_ids["customers"][(key,)] = self._row_id()
        if emit:
            self._log("customers", row, "INSERT", False, emit)

    def _insert_order(self, emit: Any, key: tuple[Any, ...] | None = None) -> None:
        if key is None:
            key, self.next_order = (self.rng.choice(REGIONS), self.next_order), self.next_order + 1
        row = {"region": key[0], "order_id": key[1], **self._order_values()}
        self._put("orders", key, row)
        self.row_ids["orders"][key] = self._row_id()
        if emit:
            self._log("orders", row, "INSERT", False, emit)

    def _update(self, table: str, key: tuple[Any, ...], at: datetime) -> None:
        row = self.rows[table][key]
        if table == "orders":
            row.update(self._order_values())
            return
        fresh = self._customer(key[0], at, tier=ADDED_COLUMN in row)
        for name in self.rng.sample(["name", "balance", "active", "notes", "tier"], 2):
            if name in row:
                row[name] = fresh[name]
        row["updated_at"] = fresh["updated_at"]

    def _change_key(self, table: str, old: tuple[Any, ...], at: datetime, emit: dict) -> None:
        """A primary-key change: MySQL and Oracle log ``UPDATE-DELETE`` of the old key and ``UPDATE-INSERT``
        of the new key at one position; PostgreSQL and SQL Server a ``DELETE`` and an ``INSERT``."""
        rows = self.rows[table]
        if table == "customers":
            new = (self.next_customer,)
            self.next_customer += 1
        else:
            regions = [region for region in REGIONS if (region, old[1]) not in rows]
            if not regions:
                return
            new = (self.rng.choice(regions), old[1])
        row = self._pop(table, old)
        moved = dict(row, **dict(zip(self.specs[table].key, new, strict=True)))
        if table == "customers":
            moved["updated_at"] = at.replace(microsecond=self.rng.randrange(1_000_000))
        self._put(table, new, moved)
        self.deleted[table].append(old)
        self.row_ids[table][new] = self.row_ids[table].pop(old, None) or self._row_id()
        if self.database in ("mysql", "oracle"):
            self.positions.advance()
            # MySQL marks the delete half deleted, Oracle does not (as their files show)
            self.row_ids[table][old] = self.row_ids[table][new]
            self._emit(table, row, "UPDATE-DELETE", self.database == "mysql", **emit)
            self.row_ids[table].pop(old, None)
            self._emit(table, moved, "UPDATE-INSERT", False, **emit)
        else:
            self._log(table, row, "DELETE", True, emit)
            self._log(table, moved, "INSERT", False, emit)
