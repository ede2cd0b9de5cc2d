"""The fake's tables: schema, primary key, options, and rows applied by BigQuery CDC's rules.

Per primary key, a row modification with a greater ``_CHANGE_SEQUENCE_NUMBER`` (sections compared
as unsigned integers) wins; equal sequence numbers, or rows without one, are ordered by arrival.
``UPSERT`` replaces the whole row (columns the row does not set become NULL); ``DELETE`` removes
it and is kept as a tombstone with its sequence number, so an older ``UPSERT`` arriving later does
not bring the row back (BigQuery keeps deletes for a retention period for the same reason).
"""

from __future__ import annotations

import base64
import threading
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from airflow_provider_cdc.bigquery.schema import normalize_type

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
EPOCH_DATE = date(1970, 1, 1)
KNOWN_TYPES = frozenset(
    {"BOOL", "INT64", "FLOAT64", "NUMERIC", "BIGNUMERIC", "STRING", "JSON", "BYTES", "DATE", "TIMESTAMP"}
)


class FakeError(Exception):
    """An error the fake reports to the client (HTTP status and reason, gRPC code in the server)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


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
    #: key → (sequence sections or None, row dict or None for a tombstone)
    state: dict[tuple, tuple[tuple[int, ...] | None, dict[str, Any] | None]] = field(default_factory=dict)
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

    def resource(self) -> dict[str, Any]:
        resource: dict[str, Any] = {
            "kind": "bigquery#table",
            "id": f"{self.project}:{self.dataset}.{self.table}",
            "etag": str(self.modified_ms),
            "tableReference": {"projectId": self.project, "datasetId": self.dataset, "tableId": self.table},
            "schema": {"fields": [dict(f) for f in self.fields]},
            "creationTime": str(self.created_ms),
            "lastModifiedTime": str(self.modified_ms),
            "type": "TABLE",
            "numRows": str(sum(row is not None for _seq, row in self.state.values()) + len(self.plain_rows)),
        }
        if self.primary_key:
            resource["tableConstraints"] = {"primaryKey": {"columns": list(self.primary_key)}}
        if self.clustering:
            resource["clustering"] = {"fields": list(self.clustering)}
        if self.max_staleness is not None:
            resource["maxStaleness"] = self.max_staleness
        return resource

    def rows(self) -> list[dict[str, Any]]:
        """The table as a query sees it (every modification applied), key columns first."""
        live = [row for _seq, row in self.state.values() if row is not None] + list(self.plain_rows)
        # Columns added after a row was written read as NULL (empty for REPEATED) for it.
        blank = {f["name"]: ([] if f["mode"] == "REPEATED" else None) for f in self.fields}
        return [{**blank, **row} for row in live]


def _now_ms() -> int:
    return int(time.time() * 1000)


def check_fields(fields: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(fields, list) or not fields:
        raise FakeError(400, "invalid", f"{where}: a table needs a schema with at least one field")
    seen: set[str] = set()
    checked = []
    for entry in fields:
        name, kind = entry.get("name"), normalize_type(str(entry.get("type", "")))
        mode = (entry.get("mode") or "NULLABLE").upper()
        if not isinstance(name, str) or not name or name.lower() in seen:
            raise FakeError(400, "invalid", f"{where}: duplicate or missing field name {name!r}")
        if name.startswith("_CHANGE_"):
            raise FakeError(400, "invalid", f"{where}: field name {name!r} is reserved")
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

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.datasets: set[tuple[str, str]] = set()
        self.tables: dict[tuple[str, str, str], FakeTable] = {}

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
            table = FakeTable(project, dataset, name, fields, created_ms=_now_ms(), modified_ms=_now_ms())
            self._set_options(table, body, where)
            self.tables[(project, dataset, name)] = table
            return table

    def patch_table(self, project: str, dataset: str, name: str, body: dict[str, Any]) -> FakeTable:
        where = f"table {project}:{dataset}.{name}"
        with self.lock:
            table = self.table(project, dataset, name)
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
                if len(fields) != len(table.fields):
                    table.previous_fields, table.schema_changed_s = table.fields, time.monotonic()
                table.fields = fields
            self._set_options(table, body, where)
            table.modified_ms = _now_ms()
            return table

    @staticmethod
    def _set_options(table: FakeTable, body: dict[str, Any], where: str) -> None:
        names = {f["name"].lower(): f for f in table.fields}
        if "tableConstraints" in body:
            key = ((body.get("tableConstraints") or {}).get("primaryKey") or {}).get("columns") or []
            for column in key:
                found = names.get(str(column).lower())
                if found is None:
                    raise FakeError(
                        400, "invalid", f"{where}: primary key column {column!r} is not in the schema"
                    )
                if found["mode"] == "REPEATED" or found["type"] == "JSON":
                    raise FakeError(400, "invalid", f"{where}: column {column!r} cannot be in a primary key")
            table.primary_key = [str(c) for c in key]
        if "clustering" in body:
            clustering = ((body.get("clustering") or {}).get("fields")) or []
            if len(clustering) > 4:
                raise FakeError(
                    400, "invalid", f"{where}: too many clustering fields: {len(clustering)}, max 4"
                )
            for column in clustering:
                found = names.get(str(column).lower())
                if (
                    found is None
                    or found["mode"] == "REPEATED"
                    or found["type"] in ("FLOAT64", "JSON", "BYTES")
                ):
                    raise FakeError(400, "invalid", f"{where}: cannot cluster on field {column!r}")
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
    """A decoded proto value as a query would return it (TIMESTAMP → datetime, DATE → date …)."""
    if kind == "TIMESTAMP":
        return EPOCH + timedelta(microseconds=value)
    if kind == "DATE":
        return EPOCH_DATE + timedelta(days=value)
    if kind in ("NUMERIC", "BIGNUMERIC"):
        return Decimal(value)
    return value


def bytes_text(value: bytes) -> str:
    return base64.b64encode(value).decode()
