"""The fake's tables: schema, primary key, options, and rows applied by BigQuery CDC's rules.

Per primary key, a row modification with a greater ``_CHANGE_SEQUENCE_NUMBER`` (sections compared
as unsigned integers) wins; equal sequence numbers, or rows without one, are ordered by arrival.
``UPSERT`` replaces the whole row (columns the row does not set become NULL); ``DELETE`` removes
it and leaves a tombstone with its sequence number, so an older ``UPSERT`` arriving later does not
bring the row back, but only for :data:`DELETE_RETENTION` on the fake's clock: BigQuery keeps a
DELETE for its two-day delete retention, after which an older ``UPSERT`` inserts the row again.

Table definitions are checked as BigQuery's ``tables.insert``/``tables.patch`` check them: column
names of letters, digits and underscores starting with a letter or underscore, at most 300
characters, no reserved prefix, unique regardless of case; primary keys of the documented types
only; at most four distinct clusterable clustering columns; a patch carrying ``If-Match`` with a
stale etag fails with 412 ``conditionNotMet``.
"""

from __future__ import annotations

import base64
import hashlib
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
EPOCH_DATE = date(1970, 1, 1)
#: How long BigQuery keeps a DELETE to apply out-of-order modifications against it.
DELETE_RETENTION = timedelta(days=2)
KNOWN_TYPES = frozenset(
    {"BOOL", "INT64", "FLOAT64", "NUMERIC", "BIGNUMERIC", "STRING", "JSON", "BYTES", "DATE", "TIMESTAMP"}
)
#: The names the REST API also accepts for the standard SQL types.
TYPE_ALIASES = {
    "INTEGER": "INT64",
    "BOOLEAN": "BOOL",
    "FLOAT": "FLOAT64",
    "BIGDECIMAL": "BIGNUMERIC",
    "DECIMAL": "NUMERIC",
}
#: Types BigQuery accepts in a primary key constraint.
PRIMARY_KEY_TYPES = frozenset(
    {"BIGNUMERIC", "BOOL", "DATE", "DATETIME", "INT64", "NUMERIC", "STRING", "TIMESTAMP"}
)
#: Types a table can be clustered by.
CLUSTERING_TYPES = frozenset(
    {
        "BIGNUMERIC",
        "BOOL",
        "DATE",
        "DATETIME",
        "INT64",
        "NUMERIC",
        "STRING",
        "TIMESTAMP",
        "GEOGRAPHY",
        "RANGE",
    }
)
MAX_CLUSTERING_COLUMNS = 4
MAX_COLUMN_NAME_LENGTH = 300
#: Column-name prefixes BigQuery reserves (compared without regard to case).
RESERVED_PREFIXES = (
    "_PARTITION",
    "_TABLE_",
    "_FILE_",
    "_ROW_TIMESTAMP",
    "__ROOT__",
    "_COLIDENTIFIER",
    "_CHANGE_SEQUENCE_NUMBER",
    "_CHANGE_TYPE",
    "_CHANGE_TIMESTAMP",
)
_COLUMN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class FakeError(Exception):
    """An error the fake reports to the client (HTTP status and reason, gRPC code in the server)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


class FakeClock:
    """The fake's time: ``source()`` (real UTC time by default) until :meth:`advance` is called;
    then a clock that moves only when advanced (or, over a given source, the source plus the
    advances)."""

    def __init__(self, source: Callable[[], datetime] | None = None) -> None:
        self._source = source
        self._fixed: datetime | None = None
        self._offset = timedelta(0)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            if self._fixed is not None:
                return self._fixed
            current = self._source() if self._source is not None else datetime.now(tz=timezone.utc)
            if current.tzinfo is None:
                raise ValueError(f"the fake's clock must return an aware datetime, got {current!r}")
            return current.astimezone(timezone.utc) + self._offset

    def advance(self, delta: timedelta) -> datetime:
        if delta < timedelta(0):
            raise ValueError(f"the fake's clock only moves forward, got {delta}")
        now = self.now()
        with self._lock:
            if self._source is None:
                self._fixed = now + delta
            else:
                self._offset += delta
        return now + delta


@dataclass
class Modification:
    """The latest modification of one primary key: its sequence sections, the row (``None`` for
    a DELETE's tombstone) and when it was applied (fake clock)."""

    sequence: tuple[int, ...] | None
    row: dict[str, Any] | None
    at: datetime


@dataclass
class FakeTable:
    project: str
    dataset: str
    table: str
    fields: list[dict[str, Any]]
    primary_key: list[str] = field(default_factory=list)
    clustering: list[str] = field(default_factory=list)
    max_staleness: str | None = None
    created_ms: int = 0
    modified_ms: int = 0
    etag: str = ""
    #: key → its latest modification (a tombstone for a DELETE)
    state: dict[tuple, Modification] = field(default_factory=dict)
    plain_rows: list[dict[str, Any]] = field(default_factory=list)
    apply_watermark_us: int | None = None
    #: when the schema last changed (monotonic seconds) and the fields before that change
    schema_changed_s: float = field(default_factory=time.monotonic)
    previous_fields: list[dict[str, Any]] | None = None
    appended_rows: int = 0
    append_requests: int = 0

    def column(self, name: str) -> dict[str, Any] | None:
        lowered = name.lower()
        return next((f for f in self.fields if f["name"].lower() == lowered), None)

    def touch(self, now: datetime) -> None:
        """A metadata change: a new modification time and a new etag."""
        self.modified_ms = _millis(now)
        digest = hashlib.sha256(f"{self.table}/{self.modified_ms}/{time.monotonic_ns()}".encode()).digest()
        self.etag = base64.b64encode(digest[:12]).decode()

    def resource(self) -> dict[str, Any]:
        resource: dict[str, Any] = {
            "kind": "bigquery#table",
            "id": f"{self.project}:{self.dataset}.{self.table}",
            "etag": self.etag,
            "tableReference": {"projectId": self.project, "datasetId": self.dataset, "tableId": self.table},
            "schema": {"fields": [dict(f) for f in self.fields]},
            "creationTime": str(self.created_ms),
            "lastModifiedTime": str(self.modified_ms),
            "type": "TABLE",
            "numRows": str(sum(m.row is not None for m in self.state.values()) + len(self.plain_rows)),
        }
        if self.primary_key:
            resource["tableConstraints"] = {"primaryKey": {"columns": list(self.primary_key)}}
        if self.clustering:
            resource["clustering"] = {"fields": list(self.clustering)}
        if self.max_staleness is not None:
            resource["maxStaleness"] = self.max_staleness
        return resource

    def current(self, key: tuple, now: datetime) -> Modification | None:
        """The modification a new one for ``key`` is compared with: a tombstone older than the
        delete retention is forgotten (and dropped)."""
        found = self.state.get(key)
        if found is not None and found.row is None and now - found.at > DELETE_RETENTION:
            del self.state[key]
            return None
        return found

    def rows(self) -> list[dict[str, Any]]:
        """The table as a query sees it (every modification applied), key columns first."""
        live = [m.row for m in self.state.values() if m.row is not None] + list(self.plain_rows)
        # Columns added after a row was written read as NULL (empty for REPEATED) for it.
        blank = {f["name"]: ([] if f["mode"] == "REPEATED" else None) for f in self.fields}
        return [{**blank, **row} for row in live]


def _millis(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(milliseconds=1)


def normalize_type(type_name: str) -> str:
    upper = type_name.upper()
    return TYPE_ALIASES.get(upper, upper)


def check_column_name(name: Any, where: str) -> str:
    """A column name as BigQuery accepts it, or a 400 ``invalid`` naming it."""
    if not isinstance(name, str) or not name:
        raise FakeError(400, "invalid", f"{where}: a field needs a name, got {name!r}")
    if len(name) > MAX_COLUMN_NAME_LENGTH or not _COLUMN_NAME.match(name):
        raise FakeError(
            400,
            "invalid",
            f'Invalid field name "{name}". Fields must contain only letters, numbers, and underscores, '
            f"start with a letter or underscore, and be at most {MAX_COLUMN_NAME_LENGTH} characters long. "
            f"({where})",
        )
    upper = name.upper()
    reserved = next((p for p in RESERVED_PREFIXES if upper.startswith(p)), None)
    if reserved is not None:
        raise FakeError(
            400,
            "invalid",
            f'Invalid field name "{name}". Field names are not allowed to start with the (case-insensitive) '
            f"prefix {reserved} ({where})",
        )
    return name


def check_fields(fields: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(fields, list) or not fields:
        raise FakeError(400, "invalid", f"{where}: a table needs a schema with at least one field")
    seen: set[str] = set()
    checked = []
    for entry in fields:
        if not isinstance(entry, dict):
            raise FakeError(400, "invalid", f"{where}: a field must be an object, got {entry!r}")
        name = check_column_name(entry.get("name"), where)
        kind = normalize_type(str(entry.get("type", "")))
        mode = (entry.get("mode") or "NULLABLE").upper()
        if name.lower() in seen:
            raise FakeError(400, "invalid", f"Duplicate column names in the schema: {name} ({where})")
        if kind not in KNOWN_TYPES:
            raise FakeError(
                400, "invalid", f"{where}: field {name!r} has unsupported type {entry.get('type')!r}"
            )
        if mode not in ("NULLABLE", "REQUIRED", "REPEATED"):
            raise FakeError(400, "invalid", f"{where}: field {name!r} has invalid mode {mode!r}")
        seen.add(name.lower())
        checked.append({"name": name, "type": kind, "mode": mode})
    return checked


class FakeState:
    """Datasets and tables of the fake, shared by its REST and gRPC sides (thread-safe)."""

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self.lock = threading.RLock()
        self.clock = FakeClock(clock)
        self.datasets: set[tuple[str, str]] = set()
        self.tables: dict[tuple[str, str, str], FakeTable] = {}

    def now(self) -> datetime:
        return self.clock.now()

    def create_dataset(self, project: str, dataset: str) -> None:
        with self.lock:
            if (project, dataset) in self.datasets:
                raise FakeError(409, "duplicate", f"Already Exists: Dataset {project}:{dataset}")
            self.datasets.add((project, dataset))

    def table(self, project: str, dataset: str, table: str) -> FakeTable:
        with self.lock:
            found = self.tables.get((project, dataset, table))
        if found is None:
            raise FakeError(404, "notFound", f"Not found: Table {project}:{dataset}.{table}")
        return found

    def create_table(self, project: str, dataset: str, body: dict[str, Any]) -> FakeTable:
        reference = body.get("tableReference") or {}
        name = reference.get("tableId")
        where = f"table {project}:{dataset}.{name}"
        with self.lock:
            if (project, dataset) not in self.datasets:
                raise FakeError(404, "notFound", f"Not found: Dataset {project}:{dataset}")
            if (project, dataset, name) in self.tables:
                raise FakeError(409, "duplicate", f"Already Exists: Table {project}:{dataset}.{name}")
            fields = check_fields((body.get("schema") or {}).get("fields"), where)
            now = self.now()
            table = FakeTable(project, dataset, name, fields, created_ms=_millis(now))
            self._set_options(table, body, where)
            table.touch(now)
            self.tables[(project, dataset, name)] = table
            return table

    def patch_table(
        self, project: str, dataset: str, name: str, body: dict[str, Any], if_match: str | None = None
    ) -> FakeTable:
        where = f"table {project}:{dataset}.{name}"
        with self.lock:
            table = self.table(project, dataset, name)
            if if_match is not None and if_match not in ("*", table.etag):
                raise FakeError(
                    412,
                    "conditionNotMet",
                    f"Precondition check failed: the etag {if_match!r} of {where} is stale "
                    f"(current {table.etag!r})",
                )
            fields = table.fields
            if "schema" in body:
                fields = check_fields((body.get("schema") or {}).get("fields"), where)
                new = {f["name"].lower(): f for f in fields}
                for old in table.fields:
                    changed = new.get(old["name"].lower())
                    if changed is None:
                        raise FakeError(
                            400,
                            "invalid",
                            f"Provided Schema does not match Table {where}. "
                            f"Field {old['name']} is missing in new schema",
                        )
                    if changed["type"] != old["type"] or changed["mode"] != old["mode"]:
                        raise FakeError(
                            400,
                            "invalid",
                            f"Provided Schema does not match Table {where}. "
                            f"Field {old['name']} has changed type or mode",
                        )
                known = {f["name"].lower() for f in table.fields}
                for added in fields:
                    if added["name"].lower() not in known and added["mode"] == "REQUIRED":
                        raise FakeError(400, "invalid", f"{where}: cannot add REQUIRED field {added['name']}")
            # Options are checked against the new schema before anything changes.
            candidate = FakeTable(
                project,
                dataset,
                name,
                fields,
                primary_key=list(table.primary_key),
                clustering=list(table.clustering),
                max_staleness=table.max_staleness,
            )
            self._set_options(candidate, body, where)
            if len(fields) != len(table.fields):
                table.previous_fields, table.schema_changed_s = table.fields, time.monotonic()
            table.fields = fields
            table.primary_key = candidate.primary_key
            table.clustering = candidate.clustering
            table.max_staleness = candidate.max_staleness
            table.touch(self.now())
            return table

    @staticmethod
    def _set_options(table: FakeTable, body: dict[str, Any], where: str) -> None:
        names = {f["name"].lower(): f for f in table.fields}
        if "tableConstraints" in body:
            key = ((body.get("tableConstraints") or {}).get("primaryKey") or {}).get("columns") or []
            seen: set[str] = set()
            for column in key:
                found = names.get(str(column).lower())
                if found is None:
                    raise FakeError(
                        400, "invalid", f"{where}: primary key column {column!r} is not in the schema"
                    )
                if str(column).lower() in seen:
                    raise FakeError(400, "invalid", f"{where}: primary key column {column!r} is repeated")
                seen.add(str(column).lower())
                if found["mode"] == "REPEATED" or found["type"] not in PRIMARY_KEY_TYPES:
                    kind = f"ARRAY<{found['type']}>" if found["mode"] == "REPEATED" else found["type"]
                    raise FakeError(
                        400,
                        "invalid",
                        f"{where}: column {found['name']} of type {kind} cannot be in a primary key; "
                        f"allowed types are {', '.join(sorted(PRIMARY_KEY_TYPES))}",
                    )
            table.primary_key = [str(c) for c in key]
        if "clustering" in body:
            clustering = ((body.get("clustering") or {}).get("fields")) or []
            if len(clustering) > MAX_CLUSTERING_COLUMNS:
                raise FakeError(
                    400,
                    "invalid",
                    f"{where}: too many clustering fields: {len(clustering)}, max {MAX_CLUSTERING_COLUMNS}",
                )
            seen = set()
            for column in clustering:
                if str(column).lower() in seen:
                    raise FakeError(
                        400, "invalid", f"{where}: clustering field {column!r} is listed more than once"
                    )
                seen.add(str(column).lower())
                found = names.get(str(column).lower())
                if found is None:
                    raise FakeError(
                        400, "invalid", f"{where}: the clustering field {column!r} is not in the schema"
                    )
                if found["mode"] == "REPEATED" or found["type"] not in CLUSTERING_TYPES:
                    raise FakeError(
                        400,
                        "invalid",
                        f"{where}: cannot cluster on field {column!r} of type {found['type']} "
                        f"{found['mode']}",
                    )
            table.clustering = [str(c) for c in clustering]
        if "maxStaleness" in body:
            staleness = body.get("maxStaleness")
            if staleness is not None and parse_interval(staleness) is None:
                raise FakeError(400, "invalid", f"{where}: invalid max_staleness {staleness!r}")
            table.max_staleness = staleness


def parse_interval(text: Any) -> timedelta | None:
    """``Y-M D H:M:S`` interval text (the form BigQuery returns), or ``None`` when malformed."""
    try:
        years_months, days, clock = str(text).split(" ")
        years, months = (int(p) for p in years_months.split("-"))
        hours, minutes, seconds = clock.split(":")
        if years or months:
            return None
        return timedelta(days=int(days), hours=int(hours), minutes=int(minutes), seconds=float(seconds))
    except ValueError:
        return None


def python_value(kind: str, value: Any) -> Any:
    """A decoded value as a query would return it (TIMESTAMP → datetime, DATE → date …)."""
    if kind == "TIMESTAMP":
        return EPOCH + timedelta(microseconds=value)
    if kind == "DATE":
        return EPOCH_DATE + timedelta(days=value)
    if kind in ("NUMERIC", "BIGNUMERIC"):
        return Decimal(value)
    return value


def bytes_text(value: bytes) -> str:
    return base64.b64encode(value).decode()
