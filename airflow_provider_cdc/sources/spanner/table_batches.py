"""The batches a window of a table source reads, planned once when the window opens.

A window of a table source (a snapshot, or tables read by their commit-timestamp column) is read
at one timestamp in parallel batches: the partitions Spanner's PartitionQuery gives for each
table's query, all in one read-only transaction at that timestamp, or, for a table read in pages,
one batch that pages by keyset on ``(commit timestamp, key)``. The plan holds every batch's
serialized descriptor (the partition token, the transaction it belongs to) and is written once,
under the window's staging folder, as ``_plans/{plan_id}.json``; the batches are registered as the
window's partitions in the metastore under stable tokens ``{table}#{index}@{plan_id}``, so readers
claim them with leases and fenced claims like change-stream partitions, a retried reader reads
exactly the batch it claimed, and a window opened again gets a new plan whose tokens replace the
old ones.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow.fs as pafs

from airflow_provider_cdc import filesystems
from airflow_provider_cdc.core.columns import ColumnType, column_types_json, parse_column_types
from airflow_provider_cdc.core.contract.locations import PARTITION_DIR_PREFIX
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.timestamps import format_timestamp, parse_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.sources.spanner.table_rows import CommitTimestampTable
from airflow_provider_cdc.staging.files import (
    delete_quietly,
    is_local,
    list_files,
    open_root,
    window_directory,
)

SNAPSHOT = "snapshot"
COMMIT_TIMESTAMP = "commit_timestamp"
MODES = (SNAPSHOT, COMMIT_TIMESTAMP)
PLAN_FORMAT = 1
PLANS_FOLDER = "_plans"


class BatchPlanError(RuntimeError):
    """A plan that cannot be written, found or used (the message names the window and the plan)."""


def quoted(name: str, kind: str = "column") -> str:
    """A validated identifier in backquotes, for SQL text."""
    return f"`{validate_identifier(name, kind)}`"


@dataclass(frozen=True)
class PlannedTable:
    """One table a window reads: the columns selected (in order), the change's columns (keys
    flagged), the table the changes land in, its commit-timestamp configuration (``None`` for a
    snapshot) and, for a table read in pages, the page size."""

    table: str
    target: str
    select: tuple[str, ...]
    columns: tuple[ColumnType, ...]
    primary_key: tuple[str, ...]
    config: CommitTimestampTable | None = None
    page_rows: int | None = None

    def __post_init__(self) -> None:
        validate_identifier(self.table, "table")
        validate_identifier(self.target, "target table")
        for name in (*self.select, *self.primary_key):
            validate_identifier(name, "column")
        if self.page_rows is not None and (self.config is None or int(self.page_rows) < 1):
            raise ValueError(
                f"table {self.table!r}: page_rows applies to commit-timestamp tables, at least 1"
            )

    def sql(self) -> str:
        """The query of the table's rows in the window (partitionable: no ORDER BY, no LIMIT)."""
        columns = ", ".join(quoted(c) for c in self.select)  # validated identifiers, quoted
        text = f"SELECT {columns} FROM {quoted(self.table, 'table')}"  # noqa: S608
        if self.config is not None:
            ts = quoted(self.config.timestamp_column)
            text += f" WHERE {ts} >= @window_start AND {ts} < @window_end"
        return text

    def params(self, window: Window) -> tuple[dict[str, Any], dict[str, Any]]:
        """The query's parameters and their types."""
        if self.config is None:
            return {}, {}
        from google.cloud.spanner_v1 import param_types

        return (
            {"window_start": window.start, "window_end": window.end},
            {"window_start": param_types.TIMESTAMP, "window_end": param_types.TIMESTAMP},
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "target": self.target,
            "select": list(self.select),
            "column_types": json.loads(column_types_json(self.columns)),
            "primary_key": list(self.primary_key),
            "config": self.config.to_dict() if self.config is not None else None,
            "page_rows": self.page_rows,
            "sql": self.sql(),
        }

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> PlannedTable:
        config = value.get("config")
        planned = cls(
            table=value["table"],
            target=value["target"],
            select=tuple(value["select"]),
            columns=tuple(parse_column_types(value["column_types"])),
            primary_key=tuple(value["primary_key"]),
            config=CommitTimestampTable.of(config) if config is not None else None,
            page_rows=value.get("page_rows"),
        )
        if value.get("sql") != planned.sql():
            raise BatchPlanError(
                f"the plan's query of table {planned.table!r} is not the one this version builds; "
                "open the window again to plan it anew"
            )
        return planned


@dataclass(frozen=True)
class TableBatch:
    """One batch: a table's partition (``partition`` is PartitionQuery's token), or the whole table
    read in keyset pages (``partition`` is ``None``)."""

    token: str
    table: str
    index: int
    partition: bytes | None = None


def batch_token(table: str, index: int, plan_id: str) -> str:
    """The stable token a batch is claimed by: ``{table}#{index}@{plan_id}``."""
    return f"{validate_identifier(table, 'table')}#{int(index)}@{plan_id}"


def plan_id_of(token: str) -> str:
    """The plan a batch token belongs to."""
    head, _, plan_id = token.rpartition("@")
    if not head or not plan_id.isalnum():
        raise BatchPlanError(f"{token!r} is not a table batch token ({{table}}#{{index}}@{{plan_id}})")
    return plan_id


@dataclass(frozen=True)
class BatchPlan:
    """A window's batches: every table's batches at one read timestamp, in one read-only transaction
    (``session_id``/``transaction_id``, as ``BatchSnapshot.to_dict`` gives them)."""

    plan_id: str
    source: str
    mode: str
    window: Window
    read_timestamp: datetime
    tables: dict[str, PlannedTable]
    batches: tuple[TableBatch, ...]
    session_id: str | None = None
    transaction_id: bytes | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> list[str]:
        return [batch.token for batch in self.batches]

    def batch(self, token: str) -> TableBatch:
        for batch in self.batches:
            if batch.token == token:
                return batch
        raise BatchPlanError(f"plan {self.plan_id} of window {self.window} has no batch {token!r}")

    def snapshot_state(self) -> dict[str, Any]:
        """What ``BatchSnapshot.from_dict`` takes to join the plan's transaction."""
        if self.session_id is None or self.transaction_id is None:
            raise BatchPlanError(f"plan {self.plan_id} of window {self.window} has no read transaction")
        return {"session_id": self.session_id, "transaction_id": self.transaction_id}

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": PLAN_FORMAT,
                "plan_id": self.plan_id,
                "source": self.source,
                "mode": self.mode,
                "window_id": self.window.window_id,
                "read_timestamp": format_timestamp(self.read_timestamp),
                "session_id": self.session_id,
                "transaction_id": _b64(self.transaction_id),
                "tables": [table.to_dict() for table in self.tables.values()],
                "batches": [
                    {"token": b.token, "table": b.table, "index": b.index, "partition": _b64(b.partition)}
                    for b in self.batches
                ],
                "details": self.details,
            },
            indent=1,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> BatchPlan:
        value = json.loads(text)
        if value.get("format") != PLAN_FORMAT:
            raise BatchPlanError(f"plan format {value.get('format')!r} is not {PLAN_FORMAT}")
        tables = [PlannedTable.from_dict(t) for t in value["tables"]]
        plan = cls(
            plan_id=value["plan_id"],
            source=validate_identifier(value["source"], "source"),
            mode=value["mode"],
            window=Window.from_window_id(value["window_id"]),
            read_timestamp=parse_timestamp(value["read_timestamp"]),
            tables={t.table: t for t in tables},
            batches=tuple(
                TableBatch(b["token"], b["table"], int(b["index"]), _unb64(b.get("partition")))
                for b in value["batches"]
            ),
            session_id=value.get("session_id"),
            transaction_id=_unb64(value.get("transaction_id")),
            details=dict(value.get("details") or {}),
        )
        for batch in plan.batches:
            if (
                batch.token != batch_token(batch.table, batch.index, plan.plan_id)
                or batch.table not in plan.tables
            ):
                raise BatchPlanError(f"plan {plan.plan_id}: batch {batch.token!r} does not belong to it")
        return plan


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


def _unb64(value: str | None) -> bytes | None:
    return None if value is None else base64.b64decode(value)


def new_plan_id() -> str:
    return uuid.uuid4().hex[:16]


def plan_batches(
    database: Any,
    source: str,
    mode: str,
    window: Window,
    read_timestamp: datetime,
    tables: Sequence[PlannedTable],
    *,
    max_partitions: int | None = None,
    partition_size_bytes: int | None = None,
) -> BatchPlan:
    """Plan the window: one read-only transaction at ``read_timestamp`` and each table's
    PartitionQuery partitions in it (a table read in pages is one batch)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    plan_id = new_plan_id()
    snapshot = database.batch_snapshot(read_timestamp=read_timestamp)
    batches: list[TableBatch] = []
    for table in tables:
        if table.page_rows is not None:
            batches.append(TableBatch(batch_token(table.table, 0, plan_id), table.table, 0, None))
            continue
        params, types = table.params(window)
        found = snapshot.generate_query_batches(
            table.sql(),
            params=params or None,
            param_types=types or None,
            max_partitions=max_partitions,
            partition_size_bytes=partition_size_bytes,
        )
        for index, batch in enumerate(found):
            batches.append(
                TableBatch(batch_token(table.table, index, plan_id), table.table, index, batch["partition"])
            )
    state = snapshot.to_dict() if any(b.partition is not None for b in batches) else {}
    return BatchPlan(
        plan_id=plan_id,
        source=validate_identifier(source, "source"),
        mode=mode,
        window=window,
        read_timestamp=read_timestamp,
        tables={t.table: t for t in tables},
        batches=tuple(batches),
        session_id=state.get("session_id"),
        transaction_id=state.get("transaction_id"),
    )


def _plan_path(
    staging_root: str,
    source: str,
    window: Window,
    plan_id: str,
    filesystem: pafs.FileSystem | None,
    storage_options: Mapping[str, str] | None,
) -> tuple[pafs.FileSystem, str]:
    if not plan_id.isalnum():
        raise BatchPlanError(f"invalid plan id {plan_id!r}")
    fs, base = open_root(staging_root, filesystem, storage_options)
    return fs, filesystems.join(window_directory(base, source, window), PLANS_FOLDER, f"{plan_id}.json")


def write_plan(
    plan: BatchPlan,
    staging_root: str,
    *,
    filesystem: pafs.FileSystem | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> str:
    """Write the plan once (never over an existing one); returns its path."""
    fs, path = _plan_path(staging_root, plan.source, plan.window, plan.plan_id, filesystem, storage_options)
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        raise BatchPlanError(f"plan {plan.plan_id} of window {plan.window} is already written at {path}")
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    data = plan.to_json().encode("utf-8")
    if is_local(fs):
        temporary = f"{path}.tmp"
        with fs.open_output_stream(temporary) as out:
            out.write(data)
        fs.move(temporary, path)
    else:
        with fs.open_output_stream(path) as out:  # one object write
            out.write(data)
    return path


def read_plan(
    staging_root: str,
    source: str,
    window: Window,
    plan_id: str,
    *,
    filesystem: pafs.FileSystem | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> BatchPlan:
    """The plan ``plan_id`` of the window."""
    fs, path = _plan_path(staging_root, source, window, plan_id, filesystem, storage_options)
    try:
        with fs.open_input_stream(path) as stream:
            plan = BatchPlan.from_json(stream.read())
    except FileNotFoundError:
        raise BatchPlanError(
            f"window {window} of {source}: plan {plan_id} is missing at {path}; open the window again"
        ) from None
    if plan.window != window or plan.source != source or plan.plan_id != plan_id:
        raise BatchPlanError(f"the plan at {path} belongs to another window or source")
    return plan


def clear_batches(
    staging_root: str,
    source: str,
    window: Window,
    *,
    filesystem: pafs.FileSystem | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> int:
    """Delete what earlier plans of the window staged (its ``partition=*`` folders; plans stay).

    Call after the window's partitions were reset: no reader of an earlier plan can complete a batch
    any more, and readers of the staging read recorded claims only. Returns how many files went.
    """
    fs, base = open_root(staging_root, filesystem, storage_options)
    folder = window_directory(base, source, window).rstrip("/") + "/"
    removed = 0
    for info in list_files(fs, folder.rstrip("/"), recursive=True):
        if info.path.startswith(folder) and info.path[len(folder) :].startswith(PARTITION_DIR_PREFIX):
            delete_quietly(fs, info.path)
            removed += 1
    return removed
