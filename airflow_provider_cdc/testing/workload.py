"""Seeded change workloads that write through ``google-cloud-spanner`` and keep their own ground truth.

:class:`Workload` writes a reproducible mix of multi-table, multi-row transactions (inserts, partial
updates, insert-or-update, replace, deletes and re-inserts of deleted keys) to the tables of
:data:`WORKLOAD_TABLES`. With a :class:`~airflow_provider_cdc.testing.spanner_emulator.SpannerEmulator`
it also moves the emulator's clock between commits, so the history spans many windows, and splits and
merges change-stream partitions at chosen points. It records, per committed transaction, the commit
timestamp and the mods a change stream watching everything must report (``OLD_AND_NEW_VALUES``), and
the final state of every table.

:class:`BulkWorkload` writes many rows per commit to :data:`BULK_TABLE` for benchmarks; its ground
truth is compact (one revision number per row), so it reaches millions of changes.

Python values in the ground truth: INT64 ``int``, FLOAT64 ``float``, BOOL ``bool``, STRING ``str``,
NUMERIC ``Decimal``, DATE ``date``, TIMESTAMP aware UTC ``datetime``, BYTES ``bytes``, JSON a plain
``dict``, ARRAY ``list``. :meth:`WorkloadTable.decode_values` turns a mod's JSON-encoded values (as a
change stream returns them) into the same Python values, so both sides compare exactly.

The workload writes every column on an insert and only values that differ from the current ones on
an update. By default it writes each key at most once per transaction; with ``max_writes_per_row=n``
(n > 1) a transaction may write a row up to n times (insert then update, two updates, an update that
sets a column back to its value before the transaction, delete then insert again, replace,
insert-or-update, insert then delete), its rows' mutations interleaved. The expected mods are what
Spanner reports: one mod per row per transaction, in the order a change stream lists them (tables in
the order the transaction first wrote them, each table's rows in key order). A row that did not exist
before the transaction and does not after it has no mod; one that exists after it and did not before,
or was deleted or replaced on the way, is an INSERT of its final row; one deleted is a DELETE with its
values from before the transaction; any other is an UPDATE of every column the writes set, changed or
not, old values from before the transaction. A transaction whose writes leave no mod is committed but
not recorded in the history.

``value_profile`` chooses the values: ``"full"`` (the default) or ``"google-emulator"``, only values
Google's Cloud Spanner emulator reports faithfully (see :data:`VALUE_PROFILES`), for runs against it
(``emulator=None``: the real clock, no partition control).
"""

from __future__ import annotations

import base64
import json
import logging
import math
import random
import re
import time
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Protocol

from google.cloud.spanner_v1 import COMMIT_TIMESTAMP, JsonObject, KeySet

from airflow_provider_cdc.domain.identifiers import validate_identifier
from airflow_provider_cdc.domain.timestamps import (
    ONE_MICROSECOND,
    coerce_timestamp,
    format_timestamp,
    parse_timestamp,
    to_micros,
)

log = logging.getLogger(__name__)

INSERT = "INSERT"
UPDATE = "UPDATE"
DELETE = "DELETE"

ALL_CHANGES_STREAM = "WorkloadChanges"
ORDER_STATUS_STREAM = "OrderStatusChanges"
ORDER_STATUS_COLUMNS = ("Status", "Amount")

FULL_PROFILE = "full"
GOOGLE_EMULATOR_PROFILE = "google-emulator"
#: ``full``: every value the schema allows the generator to draw (microsecond TIMESTAMPs, NULL array
#: elements, commit-timestamp columns written with ``spanner.commit_timestamp()``).
#: ``google-emulator``: only values Google's Cloud Spanner emulator reports faithfully in change
#: records: whole-second TIMESTAMPs and DATEs from year 1000 on, no FLOAT64 NaN or infinities, no NULL
#: array elements, and commit-timestamp columns written with an explicit whole-second timestamp in the
#: past; NUMERICs include values with all 29 integer and 9 fractional digits.
VALUE_PROFILES = (FULL_PROFILE, GOOGLE_EMULATOR_PROFILE)


# ---------------------------------------------------------------------------------------------
# Schema
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkloadColumn:
    """One column: DDL type text (``INT64``, ``STRING(MAX)``, ``ARRAY<STRING(MAX)>``) and flags."""

    name: str
    ddl_type: str
    primary_key: bool = False
    commit_timestamp: bool = False  # OPTIONS (allow_commit_timestamp=true), written as COMMIT_TIMESTAMP

    def __post_init__(self) -> None:
        validate_identifier(self.name, "column")

    @property
    def code(self) -> str:
        """Spanner type code (``ARRAY`` for arrays)."""
        return _type_code(self.ddl_type)

    @property
    def type_json(self) -> dict[str, Any]:
        """The column's type as the Spanner API (and a change stream's ``column_types``) writes it."""
        return _type_json(self.ddl_type)

    def ddl(self) -> str:
        text = f"{self.name} {self.ddl_type}"
        if self.primary_key:
            text += " NOT NULL"
        if self.commit_timestamp:
            text += " OPTIONS (allow_commit_timestamp=true)"
        return text


def _type_code(ddl_type: str) -> str:
    text = ddl_type.strip().upper()
    if text.startswith("ARRAY<"):
        return "ARRAY"
    return text.split("(", 1)[0].strip()


def _type_json(ddl_type: str) -> dict[str, Any]:
    text = ddl_type.strip()
    if text.upper().startswith("ARRAY<") and text.endswith(">"):
        return {"code": "ARRAY", "array_element_type": _type_json(text[6:-1])}
    return {"code": _type_code(text)}


@dataclass(frozen=True)
class WorkloadTable:
    """A table of the workload schema."""

    name: str
    columns: tuple[WorkloadColumn, ...]

    def __post_init__(self) -> None:
        validate_identifier(self.name, "table")
        if not any(column.primary_key for column in self.columns):
            raise ValueError(f"table {self.name} needs at least one primary-key column")

    @property
    def key_columns(self) -> tuple[WorkloadColumn, ...]:
        return tuple(column for column in self.columns if column.primary_key)

    @property
    def value_columns(self) -> tuple[WorkloadColumn, ...]:
        return tuple(column for column in self.columns if not column.primary_key)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    def column(self, name: str) -> WorkloadColumn:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(f"table {self.name} has no column {name!r}")

    def ddl(self) -> str:
        body = ",\n  ".join(column.ddl() for column in self.columns)
        keys = ", ".join(column.name for column in self.key_columns)
        return f"CREATE TABLE {self.name} (\n  {body}\n) PRIMARY KEY ({keys})"

    def column_types(self) -> list[dict[str, Any]]:
        """``column_types`` of a data change record for this table (stream watching all columns)."""
        return [
            {
                "name": column.name,
                "type": column.type_json,
                "is_primary_key": column.primary_key,
                "ordinal_position": position,
            }
            for position, column in enumerate(self.columns, start=1)
        ]

    def key_of(self, keys: Mapping[str, Any]) -> tuple[Any, ...]:
        """Primary-key tuple (in key order) of a ``{column: value}`` mapping."""
        return tuple(keys[column.name] for column in self.key_columns)

    def decode_values(self, encoded: Mapping[str, Any]) -> dict[str, Any]:
        """Python values of a mod's ``keys``/``new_values``/``old_values`` (Spanner JSON encoding)."""
        result: dict[str, Any] = {}
        for name, value in encoded.items():
            try:
                column = self.column(name)
            except KeyError:
                raise ValueError(f"table {self.name} has no column {name!r} (value {value!r})") from None
            result[name] = decode_json_value(value, column.type_json, f"{self.name}.{name}")
        return result

    def encode_values(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Spanner JSON encoding of ``{column: Python value}``."""
        return {name: encode_json_value(value, self.column(name).type_json) for name, value in values.items()}


WORKLOAD_TABLES: tuple[WorkloadTable, ...] = (
    WorkloadTable(
        "Customers",
        (
            WorkloadColumn("Region", "STRING(8)", primary_key=True),
            WorkloadColumn("CustomerId", "INT64", primary_key=True),
            WorkloadColumn("Name", "STRING(MAX)"),
            WorkloadColumn("Active", "BOOL"),
            WorkloadColumn("Score", "FLOAT64"),
            WorkloadColumn("Balance", "NUMERIC"),
            WorkloadColumn("SignupDate", "DATE"),
            WorkloadColumn("Avatar", "BYTES(MAX)"),
            WorkloadColumn("Profile", "JSON"),
            WorkloadColumn("Tags", "ARRAY<STRING(MAX)>"),
            WorkloadColumn("UpdatedAt", "TIMESTAMP", commit_timestamp=True),
        ),
    ),
    WorkloadTable(
        "Orders",
        (
            WorkloadColumn("CustomerId", "INT64", primary_key=True),
            WorkloadColumn("OrderId", "STRING(36)", primary_key=True),
            WorkloadColumn("Status", "STRING(16)"),
            WorkloadColumn("Amount", "NUMERIC"),
            WorkloadColumn("Quantity", "INT64"),
            WorkloadColumn("Discount", "FLOAT64"),
            WorkloadColumn("Paid", "BOOL"),
            WorkloadColumn("PlacedAt", "TIMESTAMP"),
            WorkloadColumn("Notes", "JSON"),
        ),
    ),
    WorkloadTable(
        "Readings",
        (
            WorkloadColumn("SensorId", "STRING(16)", primary_key=True),
            WorkloadColumn("Day", "DATE", primary_key=True),
            WorkloadColumn("Seq", "INT64", primary_key=True),
            WorkloadColumn("Value", "FLOAT64"),
            WorkloadColumn("Valid", "BOOL"),
            WorkloadColumn("Raw", "BYTES(256)"),
            WorkloadColumn("Labels", "ARRAY<STRING(32)>"),
            WorkloadColumn("RecordedAt", "TIMESTAMP"),
        ),
    ),
)

BULK_TABLE = WorkloadTable(
    "Ledger",
    (
        WorkloadColumn("Shard", "INT64", primary_key=True),
        WorkloadColumn("EntryId", "INT64", primary_key=True),
        WorkloadColumn("Amount", "NUMERIC"),
        WorkloadColumn("Kind", "STRING(16)"),
        WorkloadColumn("Revision", "INT64"),
        WorkloadColumn("Memo", "STRING(MAX)"),
    ),
)

TABLES_BY_NAME: dict[str, WorkloadTable] = {table.name: table for table in (*WORKLOAD_TABLES, BULK_TABLE)}


def schema_ddl(
    *, streams: bool = True, retention: str = "7d", tables: Sequence[WorkloadTable] | None = None
) -> list[str]:
    """DDL of the workload tables (and the bulk table) plus, with ``streams``, the two change streams.

    :data:`ALL_CHANGES_STREAM` watches everything; :data:`ORDER_STATUS_STREAM` watches
    ``Orders(Status, Amount)`` only.
    """
    if not re.fullmatch(r"[1-9][0-9]*[smhd]", retention):
        raise ValueError(f"invalid retention period {retention!r}: expected a duration such as '7d' or '36h'")
    chosen = list(tables) if tables is not None else [*WORKLOAD_TABLES, BULK_TABLE]
    statements = [table.ddl() for table in chosen]
    if streams:
        options = f"OPTIONS (retention_period = '{retention}')"
        statements.append(f"CREATE CHANGE STREAM {ALL_CHANGES_STREAM} FOR ALL {options}")
        if any(table.name == "Orders" for table in chosen):
            columns = ", ".join(ORDER_STATUS_COLUMNS)
            statements.append(f"CREATE CHANGE STREAM {ORDER_STATUS_STREAM} FOR Orders({columns}) {options}")
    return statements


# ---------------------------------------------------------------------------------------------
# Spanner JSON encoding of values (what a change stream's mods carry)
# ---------------------------------------------------------------------------------------------


def encode_json_value(value: Any, type_json: Mapping[str, Any]) -> Any:
    """Spanner's JSON encoding of a Python value of the given type (``{"code": ...}``)."""
    if value is None:
        return None
    code = type_json["code"]
    if code == "ARRAY":
        return [encode_json_value(item, type_json["array_element_type"]) for item in value]
    if code in ("INT64", "ENUM"):
        return str(int(value))
    if code == "NUMERIC":
        return format(Decimal(value), "f")
    if code in ("FLOAT64", "FLOAT32"):
        number = float(value)
        if math.isnan(number):
            return "NaN"
        if math.isinf(number):
            return "Infinity" if number > 0 else "-Infinity"
        return number
    if code == "BYTES":
        return base64.b64encode(bytes(value)).decode("ascii")
    if code == "DATE":
        return value.isoformat()
    if code == "TIMESTAMP":
        return format_timestamp(value)
    if code == "JSON":
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if code == "BOOL":
        return bool(value)
    return value


def decode_json_value(value: Any, type_json: Mapping[str, Any], where: str = "value") -> Any:
    """Python value of a Spanner-JSON-encoded value; ``where`` names the column in errors."""
    if value is None:
        return None
    code = type_json.get("code")
    try:
        if code == "ARRAY":
            if not isinstance(value, list):
                raise TypeError(f"expected a JSON array, got {type(value).__name__}")
            element = type_json["array_element_type"]
            return [decode_json_value(item, element, f"{where}[]") for item in value]
        if code == "INT64":
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise TypeError(f"expected an INT64 as text, got {type(value).__name__}")
            return int(value)
        if code == "NUMERIC":
            if not isinstance(value, str):
                raise TypeError(f"expected a NUMERIC as text, got {type(value).__name__}")
            return Decimal(value)
        if code in ("FLOAT64", "FLOAT32"):
            if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
                return float(value.replace("Infinity", "inf"))
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"expected a number, got {type(value).__name__}")
            return float(value)
        if code == "BOOL":
            if not isinstance(value, bool):
                raise TypeError(f"expected a boolean, got {type(value).__name__}")
            return value
        if code == "STRING":
            if not isinstance(value, str):
                raise TypeError(f"expected a string, got {type(value).__name__}")
            return value
        if code == "BYTES":
            return base64.b64decode(value, validate=True)
        if code == "DATE":
            return date.fromisoformat(value)
        if code == "TIMESTAMP":
            return parse_timestamp(value)
        if code == "JSON":
            if not isinstance(value, str):
                raise TypeError(f"expected JSON text, got {type(value).__name__}")
            return json.loads(value)
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"{where}: cannot decode {value!r} as {type_json}: {exc}") from None
    raise ValueError(f"{where}: unsupported type {type_json}")


def _client_value(value: Any, column: WorkloadColumn) -> Any:
    """The value as ``google-cloud-spanner`` mutations take it."""
    if value is _COMMIT_TS:
        return COMMIT_TIMESTAMP
    if value is None:
        return None
    code = column.code
    if code == "BYTES":
        return base64.b64encode(value)
    if code == "JSON":
        return JsonObject(value)
    return value


# ---------------------------------------------------------------------------------------------
# Ground truth
# ---------------------------------------------------------------------------------------------


class _CommitTimestampPlaceholder:
    def __repr__(self) -> str:
        return "COMMIT_TIMESTAMP"


_COMMIT_TS: Any = _CommitTimestampPlaceholder()


@dataclass(frozen=True)
class ExpectedMod:
    """A mod a change stream watching every column reports for one row of one transaction."""

    table: str
    mod_type: str
    keys: dict[str, Any]
    new_values: dict[str, Any]
    old_values: dict[str, Any]

    @property
    def key(self) -> tuple[Any, ...]:
        return TABLES_BY_NAME[self.table].key_of(self.keys)

    def project(self, columns: Sequence[str] | None) -> ExpectedMod | None:
        """The mod as a stream watching only ``columns`` of its table reports it (``None``: no mod).

        An UPDATE that changes none of the watched columns is not reported.
        """
        if columns is None:
            return self
        watched = set(columns)
        new_values = {name: value for name, value in self.new_values.items() if name in watched}
        old_values = {name: value for name, value in self.old_values.items() if name in watched}
        if self.mod_type == UPDATE and not new_values:
            return None
        return ExpectedMod(self.table, self.mod_type, dict(self.keys), new_values, old_values)


@dataclass(frozen=True)
class CommittedTransaction:
    """One committed transaction: its position in the history, commit timestamp and mods."""

    index: int
    commit_timestamp: datetime
    mods: tuple[ExpectedMod, ...]


@dataclass(frozen=True)
class PartitionEvent:
    """A split or merge the workload asked the emulator for, at emulator time ``at``."""

    kind: str  # "split" or "merge"
    at: datetime


@dataclass(frozen=True)
class WorkloadSummary:
    """What one ``run``/``run_bulk`` call wrote."""

    changes: int
    transactions: int
    splits: int
    merges: int
    first_commit: datetime | None
    last_commit: datetime | None
    elapsed_seconds: float


class EmulatorControl(Protocol):
    """The parts of the emulator a workload drives: its clock and partition splits/merges."""

    clock: Any

    def split_partition(self, database_path: str) -> Any: ...

    def merge_partitions(self, database_path: str) -> Any: ...


State = dict[str, dict[tuple[Any, ...], dict[str, Any]]]


def apply_mod(state: State, mod: ExpectedMod) -> None:
    """Apply one mod to a ``{table: {key: row}}`` state (rows hold key and non-key columns).

    An INSERT of an existing key replaces the row: Spanner reports a row that a transaction replaced,
    or deleted and wrote again, as an INSERT of its new values.
    """
    rows = state.setdefault(mod.table, {})
    key = mod.key
    if mod.mod_type == INSERT:
        rows[key] = {**mod.keys, **mod.new_values}
    elif mod.mod_type == UPDATE:
        if key not in rows:
            raise ValueError(f"UPDATE of missing key {key} in {mod.table}")
        rows[key].update(mod.new_values)
    elif mod.mod_type == DELETE:
        if rows.pop(key, None) is None:
            raise ValueError(f"DELETE of missing key {key} in {mod.table}")
    else:
        raise ValueError(f"unknown mod type {mod.mod_type!r}")


class _History:
    """Committed transactions in commit order with a timestamp index."""

    def __init__(self) -> None:
        self.transactions: list[CommittedTransaction] = []
        self._micros: list[int] = []

    def append(self, transaction: CommittedTransaction) -> None:
        micros = to_micros(transaction.commit_timestamp)
        if self._micros and micros <= self._micros[-1]:
            raise AssertionError(
                f"commit timestamp {format_timestamp(transaction.commit_timestamp)} is not after the "
                f"previous commit {format_timestamp(self.transactions[-1].commit_timestamp)}"
            )
        self.transactions.append(transaction)
        self._micros.append(micros)

    def between(self, start: datetime, end: datetime) -> list[CommittedTransaction]:
        low = bisect_left(self._micros, to_micros(start))
        high = bisect_left(self._micros, to_micros(end))
        return self.transactions[low:high]


# ---------------------------------------------------------------------------------------------
# Random values
# ---------------------------------------------------------------------------------------------

_WORDS = (
    "alpha", "bravo", "delta", "echo", "kilo", "lima", "oscar", "tango", "zulu", "Zoë", "Łódź",
    "東京", "São Paulo", "naïve", "quote'd", 'dq"x', "back\\slash", "tab\tstop", "🎵 tune",
)  # fmt: skip
_REGIONS = ("us", "eu", "ap", "sa", "af")
_STATUSES = ("new", "paid", "packed", "shipped", "returned", "closed")
_TIERS = ("free", "pro", "team", "enterprise")


def _random_scalar(
    rng: random.Random, code: str, max_length: int | None = None, profile: str = FULL_PROFILE
) -> Any:
    if code == "INT64":
        if rng.random() < 0.1:
            return rng.choice((0, -1, 2**63 - 1, -(2**63), rng.randint(-(2**63), 2**63 - 1)))
        return rng.randint(-1_000_000, 1_000_000)
    if code == "FLOAT64":
        roll = rng.random()
        if roll < 0.05:
            return rng.choice((1e-300, -2.5e300, 1.7976931348623157e308, 5e-324))
        return round(rng.uniform(-1e6, 1e6), rng.randint(0, 9)) or 0.5
    if code == "BOOL":
        return rng.random() < 0.5
    if code == "STRING":
        text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3)))
        return text[:max_length] if max_length else text
    if code == "NUMERIC":
        if profile == GOOGLE_EMULATOR_PROFILE and rng.random() < 0.05:  # NUMERIC's full 29.9 digits
            whole = rng.randrange(10**28, 10**29) * rng.choice((1, -1))
            return Decimal(f"{whole}.{rng.randrange(10**9):09d}")
        whole = rng.randint(1, 10**12) * rng.choice((1, -1))
        scale = rng.randint(0, 9)
        if scale == 0:
            return Decimal(whole)
        return Decimal(f"{whole}.{rng.randrange(10**scale):0{scale}d}")
    if code == "DATE":
        return date(1990, 1, 1) + timedelta(days=rng.randrange(20_000))
    if code == "TIMESTAMP":
        base = datetime(2000, 1, 1, tzinfo=timezone.utc)
        if profile == GOOGLE_EMULATOR_PROFILE:  # whole seconds
            return base + timedelta(seconds=rng.randrange(30 * 365 * 86_400))
        return base + timedelta(microseconds=rng.randrange(30 * 365 * 86_400 * 10**6))
    if code == "BYTES":
        size = rng.randint(0, min(max_length or 24, 24))
        return bytes(rng.getrandbits(8) for _ in range(size))
    if code == "JSON":
        value: dict[str, Any] = {"tier": rng.choice(_TIERS), "visits": rng.randint(0, 10_000)}
        if rng.random() < 0.5:
            value["flags"] = [rng.random() < 0.5 for _ in range(rng.randint(0, 3))]
        if rng.random() < 0.3:
            value["address"] = {"city": rng.choice(_WORDS), "zip": f"{rng.randrange(100000):05d}"}
        if rng.random() < 0.1:
            value["note"] = None
        return value
    raise ValueError(f"no generator for type {code}")


def _max_length(ddl_type: str) -> int | None:
    inner = ddl_type.rsplit("(", 1)
    if len(inner) == 2 and inner[1].rstrip(">").rstrip(")").isdigit():
        return int(inner[1].rstrip(">").rstrip(")"))
    return None


def _random_value(rng: random.Random, column: WorkloadColumn, profile: str = FULL_PROFILE) -> Any:
    """A value for ``column`` under ``profile`` (see :data:`VALUE_PROFILES`)."""
    google = profile == GOOGLE_EMULATOR_PROFILE
    if column.commit_timestamp and not google:
        return _COMMIT_TS
    if rng.random() < 0.1:
        return None
    if column.commit_timestamp:  # an explicit whole-second timestamp in the past
        return datetime(2000, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=rng.randrange(20 * 365 * 86_400))
    if column.code == "ARRAY":
        element = _type_code(column.ddl_type[6:-1])
        size = rng.randint(0, 4)
        return [
            None
            if not google and rng.random() < 0.1
            else _random_scalar(rng, element, _max_length(column.ddl_type), profile)
            for _ in range(size)
        ]
    return _random_scalar(rng, column.code, _max_length(column.ddl_type), profile)


def _different_value(
    rng: random.Random, column: WorkloadColumn, current: Any, profile: str = FULL_PROFILE
) -> Any:
    """A value for ``column`` that differs from ``current`` (commit timestamps always differ)."""
    for _ in range(50):
        value = _random_value(rng, column, profile)
        if value is _COMMIT_TS or not _same(value, current):
            return value
    raise RuntimeError(f"could not draw a new value for column {column.name}")


def _same(left: Any, right: Any) -> bool:
    if left is None or right is None:
        return left is right
    return type(left) is type(right) and left == right


# ---------------------------------------------------------------------------------------------
# The scripted workload
# ---------------------------------------------------------------------------------------------


@dataclass
class _Planned:
    """One mutation of a transaction (``values`` is the key for a delete)."""

    table: WorkloadTable
    operation: str  # insert, update, insert_or_update, replace, delete
    columns: tuple[str, ...]
    values: tuple[Any, ...]

    def given(self) -> dict[str, Any]:
        """The non-key columns the mutation writes, with their values."""
        if self.operation == "delete":
            return {}
        keys = {column.name for column in self.table.key_columns}
        return {
            name: value for name, value in zip(self.columns, self.values, strict=True) if name not in keys
        }


@dataclass
class _RowWrites:
    """The writes of one row in one transaction and the one mod Spanner reports for them."""

    table: WorkloadTable
    key: tuple[Any, ...]
    before: dict[str, Any] | None  # non-key columns before the transaction (None: no row)
    after: dict[str, Any] | None = None
    writes: list[_Planned] = field(default_factory=list)
    recreated: bool = False  # deleted or replaced while it existed
    written: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.after = None if self.before is None else dict(self.before)

    @property
    def keys(self) -> dict[str, Any]:
        return {column.name: value for column, value in zip(self.table.key_columns, self.key, strict=True)}

    def add(self, change: _Planned) -> None:
        """Apply one mutation to the row's state inside the transaction."""
        self.writes.append(change)
        given = change.given()
        if change.operation == "delete":
            self.recreated = self.recreated or self.after is not None
            self.after = None
            return
        if change.operation == "replace" and self.after is not None:
            self.recreated = True
        if self.after is None or change.operation == "replace":
            self.after = {column.name: None for column in self.table.value_columns}
        self.after.update(given)
        self.written.update(given)

    def mod(self) -> ExpectedMod | None:
        """The mod a change stream watching every column reports (``None``: insert then delete).

        A row created, or deleted or replaced and written again, is an INSERT of its final row; a
        deleted row a DELETE with its values from before the transaction; otherwise an UPDATE of the
        columns the writes set (changed or not), old values from before the transaction.
        """
        if self.after is None:
            if self.before is None:
                return None
            return ExpectedMod(self.table.name, DELETE, self.keys, {}, dict(self.before))
        if self.before is None or self.recreated:
            return ExpectedMod(self.table.name, INSERT, self.keys, dict(self.after), {})
        columns = [column.name for column in self.table.value_columns if column.name in self.written]
        new = {name: self.after[name] for name in columns}
        return ExpectedMod(
            self.table.name, UPDATE, self.keys, new, {name: self.before[name] for name in columns}
        )


@dataclass
class _TableState:
    rows: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    deleted: list[tuple[Any, ...]] = field(default_factory=list)
    next_id: int = 1


class Workload:
    """Seeded multi-table change workload with ground truth; see the module docstring.

    ``database`` is a ``google.cloud.spanner_v1.database.Database`` whose schema holds
    :data:`WORKLOAD_TABLES` (see :func:`schema_ddl`). ``emulator`` (optional) is the emulator serving
    it: the workload then advances its clock between commits and can split and merge partitions.
    """

    def __init__(
        self,
        database: Any,
        emulator: EmulatorControl | None = None,
        seed: int = 0,
        *,
        tables: Sequence[WorkloadTable] = WORKLOAD_TABLES,
        max_mods_per_transaction: int = 10,
        max_rows_per_table: int = 300,
        read_write_share: float = 0.1,
        progress_every: int = 5_000,
        max_writes_per_row: int = 1,
        value_profile: str = FULL_PROFILE,
    ) -> None:
        if max_mods_per_transaction < 1:
            raise ValueError("max_mods_per_transaction must be at least 1")
        if max_writes_per_row < 1:
            raise ValueError("max_writes_per_row must be at least 1")
        if value_profile not in VALUE_PROFILES:
            raise ValueError(f"value_profile must be one of {VALUE_PROFILES}, got {value_profile!r}")
        if not tables:
            raise ValueError("a workload needs at least one table")
        self.database = database
        self.emulator = emulator
        self.seed = seed
        self.tables = tuple(tables)
        self.max_mods_per_transaction = max_mods_per_transaction
        self.max_writes_per_row = max_writes_per_row
        self.value_profile = value_profile
        self.max_rows_per_table = max_rows_per_table
        self.read_write_share = read_write_share
        self.progress_every = progress_every
        self._rng = random.Random(seed)
        self._tables: dict[str, _TableState] = {table.name: _TableState() for table in self.tables}
        self._history = _History()
        self.partition_events: list[PartitionEvent] = []
        self.change_count = 0
        self.write_count = 0  # mutations sent; more than change_count when rows are written repeatedly

    # -- ground truth ------------------------------------------------------------------------

    @property
    def transactions(self) -> list[CommittedTransaction]:
        """Every committed transaction, in commit order."""
        return self._history.transactions

    @property
    def state(self) -> State:
        """Current rows per table: ``{table: {key tuple: {column: value}}}`` (a copy)."""
        return {
            name: {key: dict(row) for key, row in table.rows.items()} for name, table in self._tables.items()
        }

    @property
    def splits(self) -> list[PartitionEvent]:
        return [event for event in self.partition_events if event.kind == "split"]

    @property
    def merges(self) -> list[PartitionEvent]:
        return [event for event in self.partition_events if event.kind == "merge"]

    def history_between(self, start: datetime, end: datetime) -> list[CommittedTransaction]:
        """Transactions committed in the window ``[start, end)``."""
        return self._history.between(coerce_timestamp(start), coerce_timestamp(end))

    def state_at(self, timestamp: datetime) -> State:
        """Rows per table as of ``timestamp`` (every transaction committed at or before it applied)."""
        state: State = {table.name: {} for table in self.tables}
        for transaction in self._history.between(
            datetime.min.replace(tzinfo=timezone.utc), coerce_timestamp(timestamp) + ONE_MICROSECOND
        ):
            for mod in transaction.mods:
                apply_mod(state, mod)
        return state

    def mods_by_key(self) -> dict[tuple[str, tuple[Any, ...]], list[tuple[datetime, ExpectedMod]]]:
        """Per ``(table, key)``: its changes in commit order with their commit timestamps."""
        result: dict[tuple[str, tuple[Any, ...]], list[tuple[datetime, ExpectedMod]]] = {}
        for transaction in self.transactions:
            for mod in transaction.mods:
                result.setdefault((mod.table, mod.key), []).append((transaction.commit_timestamp, mod))
        return result

    # -- running -------------------------------------------------------------------------------

    def run(
        self,
        changes: int,
        step: timedelta = timedelta(seconds=1),
        split_every: int | None = None,
        merge_every: int | None = None,
    ) -> WorkloadSummary:
        """Commit transactions until ``changes`` more mods are committed.

        ``step`` is the mean emulator-clock advance between commits (some commits share a clock
        reading and get consecutive microseconds). ``split_every``/``merge_every`` split or merge a
        partition each time that many more changes have been committed (merges are offset by half
        an interval so they interleave with splits).
        """
        if changes < 1:
            raise ValueError("changes must be at least 1")
        self._check_partition_control(split_every, merge_every)
        started = time.monotonic()
        first_index = len(self.transactions)
        base = self.change_count
        target = base + changes
        next_split = base + split_every if split_every else None
        next_merge = base + merge_every + merge_every // 2 if merge_every else None
        next_progress = base + self.progress_every
        events_before = len(self.partition_events)
        while self.change_count < target:
            self._advance_clock(step)
            planned = self._plan_transaction(target - self.change_count)
            if not planned:
                continue
            self._commit(planned)
            while next_split is not None and self.change_count >= next_split:
                self._partition_event("split", step)
                next_split += split_every or 0
            while next_merge is not None and self.change_count >= next_merge:
                self._partition_event("merge", step)
                next_merge += merge_every or 0
            if self.change_count >= next_progress:
                next_progress += self.progress_every
                self._log_progress(base, target, started)
        new = self.transactions[first_index:]
        events = self.partition_events[events_before:]
        summary = WorkloadSummary(
            changes=self.change_count - base,
            transactions=len(new),
            splits=sum(1 for event in events if event.kind == "split"),
            merges=sum(1 for event in events if event.kind == "merge"),
            first_commit=new[0].commit_timestamp if new else None,
            last_commit=new[-1].commit_timestamp if new else None,
            elapsed_seconds=time.monotonic() - started,
        )
        log.info(
            "workload committed %d changes in %d transactions (%d splits, %d merges) in %.1f s",
            summary.changes, summary.transactions, summary.splits, summary.merges, summary.elapsed_seconds,
        )  # fmt: skip
        return summary

    def split(self) -> PartitionEvent:
        """Split a partition now (one microsecond after the clock's current reading)."""
        self._check_partition_control(1, None)
        return self._partition_event("split", None)

    def merge(self) -> PartitionEvent:
        """Merge two adjacent partitions now (one microsecond after the clock's current reading)."""
        self._check_partition_control(None, 1)
        return self._partition_event("merge", None)

    def _check_partition_control(self, split_every: int | None, merge_every: int | None) -> None:
        for name, value in (("split_every", split_every), ("merge_every", merge_every)):
            if value is None:
                continue
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
            if self.emulator is None:
                raise ValueError(f"{name} needs an emulator to split or merge partitions")

    def _advance_clock(self, step: timedelta) -> None:
        clock = getattr(self.emulator, "clock", None)
        if clock is None or not hasattr(clock, "advance") or step <= timedelta(0):
            return
        if self._rng.random() < 0.15:
            return  # several commits at one clock reading
        micros = int(step / ONE_MICROSECOND)
        clock.advance(timedelta(microseconds=self._rng.randint(1, max(1, 2 * micros))))

    def _partition_event(self, kind: str, step: timedelta | None) -> PartitionEvent:
        assert self.emulator is not None
        clock = self.emulator.clock
        if hasattr(clock, "advance"):
            clock.advance(ONE_MICROSECOND)  # strictly after the last commit
        if kind == "split":
            self.emulator.split_partition(self.database.name)
        else:
            self.emulator.merge_partitions(self.database.name)
        event = PartitionEvent(kind, coerce_timestamp(clock.now()))
        self.partition_events.append(event)
        log.debug("workload %s at %s", kind, format_timestamp(event.at))
        return event

    def _log_progress(self, base: int, target: int, started: float) -> None:
        elapsed = max(time.monotonic() - started, 1e-9)
        done = self.change_count - base
        log.info(
            "workload: %d/%d changes, %d transactions, %d partition events, %.0f changes/s",
            done, target - base, len(self.transactions), len(self.partition_events), done / elapsed,
        )  # fmt: skip

    # -- planning ------------------------------------------------------------------------------

    def _plan_transaction(self, remaining: int) -> list[_RowWrites]:
        """Rows to write in one transaction (at most ``remaining``), each with its mutations."""
        rng = self._rng
        size = min(remaining, rng.randint(1, self.max_mods_per_transaction))
        rows: dict[tuple[str, tuple[Any, ...]], _RowWrites] = {}
        for _ in range(size * 3):
            if len(rows) >= size:
                break
            table = rng.choice(self.tables)
            change = self._plan_change(table, rows)
            if change is None:
                continue
            key = self._key_of(change)
            before = self._tables[table.name].rows.get(key)
            row = _RowWrites(
                table, key, None if before is None else {c.name: before[c.name] for c in table.value_columns}
            )
            row.add(change)
            rows[(table.name, key)] = row
            if self.max_writes_per_row > 1 and rng.random() < 0.5:
                for _ in range(rng.randint(1, self.max_writes_per_row - 1)):
                    row.add(self._plan_follow_up(row))
        return list(rows.values())

    @staticmethod
    def _key_of(change: _Planned) -> tuple[Any, ...]:
        if change.operation == "delete":
            return tuple(change.values)
        by_name = dict(zip(change.columns, change.values, strict=True))
        return tuple(by_name[column.name] for column in change.table.key_columns)

    def _plan_change(
        self, table: WorkloadTable, touched: Mapping[tuple[str, tuple[Any, ...]], Any]
    ) -> _Planned | None:
        """The first write of a row in a transaction: a new or deleted key, or a live row not touched yet."""
        rng = self._rng
        state = self._tables[table.name]
        live = len(state.rows)
        crowded = live >= self.max_rows_per_table
        weights = {
            "insert": 5 if crowded else 30,
            "update": 30 if live else 0,
            "upsert_existing": 8 if live else 0,
            "upsert_new": 2 if crowded else 5,
            "replace": 7 if live else 0,
            "delete": (25 if crowded else 10) if live else 0,
            "reinsert": 8 if state.deleted else 0,
        }
        choice = rng.choices(list(weights), weights=list(weights.values()))[0]
        if choice in ("insert", "upsert_new"):
            key = self._new_key(table)
            return self._plan_insert(table, key, "insert" if choice == "insert" else "insert_or_update")
        if choice == "reinsert":
            index = rng.randrange(len(state.deleted))
            key = state.deleted[index]
            if (table.name, key) in touched or key in state.rows:
                return None
            state.deleted[index] = state.deleted[-1]
            state.deleted.pop()
            return self._plan_insert(table, key, "insert")
        key = rng.choice(list(state.rows))
        if (table.name, key) in touched:
            return None
        row = state.rows[key]
        if choice == "delete":
            return _Planned(table, "delete", (), key)
        if choice == "replace":
            chosen = list(table.value_columns)
        else:
            count = rng.randint(1, max(1, len(table.value_columns) - 1))
            chosen = sorted(rng.sample(list(table.value_columns), count), key=table.columns.index)
        profile = self.value_profile
        new = {column.name: _different_value(rng, column, row[column.name], profile) for column in chosen}
        operation = {"update": "update", "upsert_existing": "insert_or_update", "replace": "replace"}[choice]
        columns = tuple(column.name for column in table.key_columns) + tuple(new)
        return _Planned(table, operation, columns, tuple(key) + tuple(new.values()))

    def _plan_insert(self, table: WorkloadTable, key: tuple[Any, ...], operation: str) -> _Planned:
        new = {
            column.name: _random_value(self._rng, column, self.value_profile)
            for column in table.value_columns
        }
        return _Planned(table, operation, table.column_names, tuple(key) + tuple(new.values()))

    def _plan_follow_up(self, row: _RowWrites) -> _Planned:
        """Another write of a row the transaction already wrote: insert, insert-or-update or replace
        of a missing row; update (a new value, or a column set back to its value before the
        transaction), insert-or-update, replace or delete of a present one."""
        rng, table, profile = self._rng, row.table, self.value_profile
        key_names = tuple(column.name for column in table.key_columns)
        current = row.after
        if current is None:
            operation = rng.choice(("insert", "insert_or_update", "replace"))
            count = (
                len(table.value_columns)
                if operation == "insert"
                else rng.randint(1, len(table.value_columns))
            )
            chosen = sorted(rng.sample(list(table.value_columns), count), key=table.columns.index)
            new = {column.name: _random_value(rng, column, profile) for column in chosen}
            return _Planned(table, operation, key_names + tuple(new), tuple(row.key) + tuple(new.values()))
        before = row.before or {}
        revertible = [
            column
            for column in table.value_columns
            if not column.commit_timestamp
            and column.name in row.written
            and column.name in before
            and not _same(current[column.name], before[column.name])
        ]
        weights = {
            "update": 30,
            "revert": 20 if revertible else 0,
            "insert_or_update": 15,
            "replace": 15,
            "delete": 20,
        }
        choice = rng.choices(list(weights), weights=list(weights.values()))[0]
        if choice == "delete":
            return _Planned(table, "delete", (), tuple(row.key))
        # Google's emulator refuses an update of a row deleted and then replaced in the transaction;
        # insert-or-update of the existing row writes the same
        operations = [change.operation for change in row.writes]
        replaced_after_delete = ("delete", "replace") in zip(operations, operations[1:], strict=False)
        update = "insert_or_update" if replaced_after_delete else "update"
        if choice == "revert":
            chosen = sorted(rng.sample(revertible, rng.randint(1, len(revertible))), key=table.columns.index)
            new = {column.name: before[column.name] for column in chosen}
            return _Planned(table, update, key_names + tuple(new), tuple(row.key) + tuple(new.values()))
        count = rng.randint(1, len(table.value_columns))
        chosen = sorted(rng.sample(list(table.value_columns), count), key=table.columns.index)
        new = {column.name: _different_value(rng, column, current[column.name], profile) for column in chosen}
        operation = update if choice == "update" else choice
        return _Planned(table, operation, key_names + tuple(new), tuple(row.key) + tuple(new.values()))

    def _new_key(self, table: WorkloadTable) -> tuple[Any, ...]:
        """A key never used before in ``table``: random leading parts, a counter in the last part."""
        rng = self._rng
        state = self._tables[table.name]
        serial = state.next_id
        state.next_id += 1
        parts: list[Any] = []
        key_columns = table.key_columns
        for position, column in enumerate(key_columns):
            last = position == len(key_columns) - 1
            code = column.code
            if code == "INT64":
                parts.append(serial * 1_000 + rng.randrange(1_000) if last else rng.randrange(1, 200))
            elif code == "STRING":
                limit = _max_length(column.ddl_type) or 36
                if table.name == "Customers":
                    prefix = rng.choice(_REGIONS)
                else:
                    prefix = f"{column.name[:1].lower()}{rng.randrange(40):02d}"
                parts.append((f"{prefix}-{serial:x}" if last else prefix)[:limit])
            elif code == "DATE":
                parts.append(date(2026, 1, 1) + timedelta(days=rng.randrange(30)))
            else:
                parts.append(_random_scalar(rng, code))
        return tuple(parts)

    # -- committing ----------------------------------------------------------------------------

    def _commit(self, rows: list[_RowWrites]) -> None:
        planned = self._mutation_order(rows)
        if self._rng.random() < self.read_write_share:
            holder: dict[str, Any] = {}

            def work(transaction: Any) -> None:
                holder["transaction"] = transaction
                _write_mutations(transaction, planned)

            self.database.run_in_transaction(work)
            committed = holder["transaction"].committed
        else:
            with self.database.batch() as batch:
                _write_mutations(batch, planned)
            committed = batch.committed
        if committed is None:
            raise RuntimeError("the commit returned no commit timestamp")
        self.write_count += len(planned)
        commit_timestamp = coerce_timestamp(committed)
        mods = tuple(
            self._resolve(mod, commit_timestamp)
            for row in _spanner_order(rows)
            if (mod := row.mod()) is not None
        )
        for row in rows:
            if row.after is None and row.before is None:  # inserted and deleted: free to insert again
                self._tables[row.table.name].deleted.append(row.key)
        if not mods:
            return
        self._history.append(CommittedTransaction(len(self.transactions), commit_timestamp, mods))
        for mod in mods:
            state = self._tables[mod.table]
            if mod.mod_type == DELETE:
                del state.rows[mod.key]
                state.deleted.append(mod.key)
            elif mod.mod_type == INSERT:
                state.rows[mod.key] = {**mod.keys, **mod.new_values}
            else:
                state.rows[mod.key].update(mod.new_values)
        self.change_count += len(mods)

    def _mutation_order(self, rows: list[_RowWrites]) -> list[_Planned]:
        """The transaction's mutations: each row's in order; with several writes per row, the rows'
        writes interleaved at random."""
        if self.max_writes_per_row == 1:
            return [change for row in rows for change in row.writes]
        queues = [list(row.writes) for row in rows]
        order: list[_Planned] = []
        while queues:
            index = self._rng.randrange(len(queues))
            order.append(queues[index].pop(0))
            if not queues[index]:
                queues.pop(index)
        return order

    @staticmethod
    def _resolve(mod: ExpectedMod, commit_timestamp: datetime) -> ExpectedMod:
        if not any(value is _COMMIT_TS for value in mod.new_values.values()):
            return mod
        new = {
            name: commit_timestamp if value is _COMMIT_TS else value for name, value in mod.new_values.items()
        }
        return ExpectedMod(mod.table, mod.mod_type, mod.keys, new, mod.old_values)


def _spanner_order(rows: Sequence[_RowWrites]) -> list[_RowWrites]:
    """Rows in the order a change stream lists a transaction's mods: tables in the order the
    transaction first wrote them, each table's rows in key order."""
    tables: dict[str, list[_RowWrites]] = {}
    for row in rows:
        tables.setdefault(row.table.name, []).append(row)
    return [row for group in tables.values() for row in sorted(group, key=lambda r: r.key)]


def _write_mutations(target: Any, planned: Sequence[_Planned]) -> None:
    """Send the planned changes as mutations on a batch or a read-write transaction."""
    for change in planned:
        table = change.table
        if change.operation == "delete":
            target.delete(table.name, KeySet(keys=[list(change.values)]))
            continue
        values = [
            _client_value(value, table.column(name))
            for name, value in zip(change.columns, change.values, strict=True)
        ]
        write: Callable[..., Any] = getattr(target, change.operation)
        write(table.name, columns=list(change.columns), values=[values])


# ---------------------------------------------------------------------------------------------
# Bulk workload
# ---------------------------------------------------------------------------------------------

_BULK_KINDS = ("debit", "credit", "fee", "refund")
_BULK_SHARDS = 64


@dataclass(frozen=True)
class BulkCommit:
    """One bulk commit: its timestamp and how many rows it inserted, updated and deleted."""

    commit_timestamp: datetime
    inserts: int
    updates: int
    deletes: int

    @property
    def changes(self) -> int:
        return self.inserts + self.updates + self.deletes


class BulkWorkload:
    """Many rows per commit into :data:`BULK_TABLE`, for benchmarks (millions of changes).

    Row ``n`` at revision ``r`` has values derived from ``(n, r)`` (:meth:`row`), so the ground
    truth is one revision number per entry; inserts write every column, updates write ``Amount``,
    ``Kind``, ``Revision`` and ``Memo`` (all of which change with the revision), deletes remove rows.
    """

    def __init__(
        self,
        database: Any,
        emulator: EmulatorControl | None = None,
        seed: int = 0,
        *,
        update_share: float = 0.25,
        delete_share: float = 0.05,
        progress_every: int = 100_000,
    ) -> None:
        if update_share < 0 or delete_share < 0 or update_share + delete_share >= 1:
            raise ValueError("update_share and delete_share must be non-negative and sum to less than 1")
        self.database = database
        self.emulator = emulator
        self.seed = seed
        self.update_share = update_share
        self.delete_share = delete_share
        self.progress_every = progress_every
        self._rng = random.Random(seed)
        self._revisions = array("q")  # per entry: revision, or -1 once deleted
        self._live = 0
        self.commits: list[BulkCommit] = []
        self.partition_events: list[PartitionEvent] = []
        self.change_count = 0

    @staticmethod
    def key(entry: int) -> tuple[int, int]:
        return (entry % _BULK_SHARDS, entry)

    @staticmethod
    def row(entry: int, revision: int) -> dict[str, Any]:
        """The full row of entry ``entry`` at ``revision``."""
        cents = entry * 7 + revision * 13 + 1
        return {
            "Shard": entry % _BULK_SHARDS,
            "EntryId": entry,
            "Amount": Decimal(cents).scaleb(-2),
            "Kind": _BULK_KINDS[(entry + revision) % len(_BULK_KINDS)],
            "Revision": revision,
            "Memo": f"entry {entry} revision {revision}",
        }

    @property
    def row_count(self) -> int:
        return self._live

    def rows(self) -> Iterator[dict[str, Any]]:
        """Current rows, in entry order (generated lazily)."""
        for entry, revision in enumerate(self._revisions):
            if revision >= 0:
                yield self.row(entry, revision)

    def changes_between(self, start: datetime, end: datetime) -> int:
        """Number of mods committed in ``[start, end)``."""
        low, high = to_micros(coerce_timestamp(start)), to_micros(coerce_timestamp(end))
        return sum(c.changes for c in self.commits if low <= to_micros(c.commit_timestamp) < high)

    def run(
        self,
        changes: int,
        rows_per_commit: int = 1_000,
        step: timedelta = timedelta(seconds=1),
        split_every: int | None = None,
        merge_every: int | None = None,
    ) -> WorkloadSummary:
        """Commit ``changes`` mods, ``rows_per_commit`` per commit; splits/merges as in :class:`Workload`."""
        if changes < 1 or rows_per_commit < 1:
            raise ValueError("changes and rows_per_commit must be at least 1")
        for name, value in (("split_every", split_every), ("merge_every", merge_every)):
            if value is not None and (value < 1 or self.emulator is None):
                raise ValueError(f"{name} must be at least 1 and needs an emulator")
        started = time.monotonic()
        base = self.change_count
        target = base + changes
        first_index = len(self.commits)
        next_split = base + split_every if split_every else None
        next_merge = base + merge_every + merge_every // 2 if merge_every else None
        next_progress = base + self.progress_every
        events_before = len(self.partition_events)
        clock = getattr(self.emulator, "clock", None)
        while self.change_count < target:
            if clock is not None and hasattr(clock, "advance"):
                clock.advance(step)
            self._commit_bulk(min(rows_per_commit, target - self.change_count))
            while next_split is not None and self.change_count >= next_split:
                self._partition_event("split")
                next_split += split_every or 0
            while next_merge is not None and self.change_count >= next_merge:
                self._partition_event("merge")
                next_merge += merge_every or 0
            if self.change_count >= next_progress:
                next_progress += self.progress_every
                elapsed = max(time.monotonic() - started, 1e-9)
                done = self.change_count - base
                log.info("bulk workload: %d/%d changes, %.0f changes/s", done, changes, done / elapsed)
        new = self.commits[first_index:]
        events = self.partition_events[events_before:]
        return WorkloadSummary(
            changes=self.change_count - base,
            transactions=len(new),
            splits=sum(1 for event in events if event.kind == "split"),
            merges=sum(1 for event in events if event.kind == "merge"),
            first_commit=new[0].commit_timestamp if new else None,
            last_commit=new[-1].commit_timestamp if new else None,
            elapsed_seconds=time.monotonic() - started,
        )

    def _partition_event(self, kind: str) -> None:
        assert self.emulator is not None
        clock = self.emulator.clock
        if hasattr(clock, "advance"):
            clock.advance(ONE_MICROSECOND)
        if kind == "split":
            self.emulator.split_partition(self.database.name)
        else:
            self.emulator.merge_partitions(self.database.name)
        self.partition_events.append(PartitionEvent(kind, coerce_timestamp(clock.now())))

    def _pick_live(self, taken: set[int]) -> int | None:
        total = len(self._revisions)
        for _ in range(8):
            entry = self._rng.randrange(total)
            if self._revisions[entry] >= 0 and entry not in taken:
                return entry
        return None

    def _commit_bulk(self, size: int) -> None:
        rng = self._rng
        inserts: list[int] = []
        updates: list[int] = []
        deletes: list[int] = []
        taken: set[int] = set()
        next_entry = len(self._revisions)
        for _ in range(size):
            roll = rng.random()
            entry = None
            if self._live > len(taken) + 1 and roll < self.update_share + self.delete_share:
                entry = self._pick_live(taken)
            if entry is None:
                inserts.append(next_entry)
                next_entry += 1
                continue
            taken.add(entry)
            (updates if roll < self.update_share else deletes).append(entry)
        table = BULK_TABLE
        with self.database.batch() as batch:
            if inserts:
                rows = [self.row(entry, 0) for entry in inserts]
                batch.insert(
                    table.name, columns=list(table.column_names), values=[list(r.values()) for r in rows]
                )
            if updates:
                columns = ["Shard", "EntryId", "Amount", "Kind", "Revision", "Memo"]
                values = []
                for entry in updates:
                    row = self.row(entry, self._revisions[entry] + 1)
                    values.append([row[name] for name in columns])
                batch.update(table.name, columns=columns, values=values)
            if deletes:
                batch.delete(table.name, KeySet(keys=[list(self.key(entry)) for entry in deletes]))
        if batch.committed is None:
            raise RuntimeError("the bulk commit returned no commit timestamp")
        for _ in inserts:
            self._revisions.append(0)
        for entry in updates:
            self._revisions[entry] += 1
        for entry in deletes:
            self._revisions[entry] = -1
        self._live += len(inserts) - len(deletes)
        commit = BulkCommit(coerce_timestamp(batch.committed), len(inserts), len(updates), len(deletes))
        self.commits.append(commit)
        self.change_count += commit.changes
