"""The commit-timestamp demo database: tables read by their commit-timestamp column, window by window.

Served by ``python -m airflow_provider_cdc.testing.spanner_emulator --demo --demo-kind commit-timestamp``
for the example DAG ``spanner_commit_timestamp_tables_to_lake`` (``scripts/demo.sh commit-timestamp``)
and its end-to-end test. The database ``demo-project/demo-instance/ledger`` holds:

- ``Performances``: rows updated in place; every write rewrites the full row with the commit timestamp
  in ``LastUpdateTime`` (``allow_commit_timestamp=true``); a delete is a soft delete (``Deleted`` set
  to true), and some soft-deleted rows are written live again;
- ``Documents`` and its insert-only changelog ``DocumentHistory(UserId, DocumentId, Ts, Delta)``,
  interleaved in it as in Spanner's commit-timestamp guide: every edit of a document rewrites its
  ``Documents`` row and inserts a ``DocumentHistory`` row stamped with the commit timestamp in ``Ts``.
  ``Documents`` has no commit-timestamp column and is not read; ``DocumentHistory`` maps to the entity
  key ``(UserId, DocumentId)`` in the target table ``DocumentLatest``.

Some transactions write both tables (one commit timestamp across them), and pairs of transactions write
one explicit timestamp (non-overlapping rows may share a timestamp). The history is committed window
by window on a manual clock (ten-minute windows from 2026-01-01T00:00:00Z). The ground truth is what
the lake holds once windows ``0..i`` are applied: ``Performances`` without soft-deleted rows and
without ``Deleted`` (the soft-delete column is not carried), and ``DocumentLatest`` with each
document's newest history row (``UserId``, ``DocumentId``, ``Ts``, ``Delta``); it is written as the
JSON ``python -m airflow_provider_cdc compare`` reads (``state``, ``state_after_window``).
"""

from __future__ import annotations

import json
import logging
import os
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.core.values import encode_value

log = logging.getLogger(__name__)

DDL = [
    "CREATE TABLE Performances (SingerId INT64 NOT NULL, VenueId INT64 NOT NULL, EventDate DATE NOT NULL, "
    "Revenue INT64, Deleted BOOL NOT NULL, "
    "LastUpdateTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp=true)) "
    "PRIMARY KEY (SingerId, VenueId, EventDate)",
    "CREATE TABLE Documents (UserId INT64 NOT NULL, DocumentId INT64 NOT NULL, "
    "Contents STRING(MAX) NOT NULL) PRIMARY KEY (UserId, DocumentId)",
    "CREATE TABLE DocumentHistory (UserId INT64 NOT NULL, DocumentId INT64 NOT NULL, "
    "Ts TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp=true), Delta STRING(MAX)) "
    "PRIMARY KEY (UserId, DocumentId, Ts), INTERLEAVE IN PARENT Documents ON DELETE NO ACTION",
]

#: The tables a commit-timestamp source reads (``CommitTimestampTable`` fields), as the DAG's default.
TABLES: list[dict[str, Any]] = [
    {"table": "Performances", "timestamp_column": "LastUpdateTime", "soft_delete_column": "Deleted"},
    {
        "table": "DocumentHistory",
        "timestamp_column": "Ts",
        "entity_key": ["UserId", "DocumentId"],
        "target_table": "DocumentLatest",
    },
]

#: Column types of the target tables (what the lake holds), for the ground truth's encoding.
TARGET_COLUMNS: dict[str, dict[str, str]] = {
    "Performances": {
        "SingerId": "INT64",
        "VenueId": "INT64",
        "EventDate": "DATE",
        "Revenue": "INT64",
        "LastUpdateTime": "TIMESTAMP",
    },
    "DocumentLatest": {"UserId": "INT64", "DocumentId": "INT64", "Ts": "TIMESTAMP", "Delta": "STRING"},
}
TARGET_KEYS: dict[str, tuple[str, ...]] = {
    "Performances": ("SingerId", "VenueId", "EventDate"),
    "DocumentLatest": ("UserId", "DocumentId"),
}
PERFORMANCE_COLUMNS = ["SingerId", "VenueId", "EventDate", "Revenue", "Deleted", "LastUpdateTime"]
HISTORY_COLUMNS = ["UserId", "DocumentId", "Ts", "Delta"]

PerformanceKey = tuple[int, int, date]
DocumentKey = tuple[int, int]


@dataclass
class CommitTimestampDemoSettings:
    """Where the demo lives and how its history is laid out over windows."""

    project: str = "demo-project"
    instance: str = "demo-instance"
    database: str = "ledger"
    start: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=timezone.utc))
    window: timedelta = timedelta(minutes=10)
    windows: int = 6
    #: transactions per window
    transactions_per_window: int = 120
    seed: int = 42
    #: the database's ``version_retention_period``: every window end stays readable at its own timestamp
    version_retention: str = "7d"

    def window_bounds(self, index: int) -> tuple[datetime, datetime]:
        return self.start + self.window * index, self.start + self.window * (index + 1)


@dataclass
class HistoryCounts:
    """What the committed history holds (the demo logs it; tests check the history exercises it)."""

    transactions: int = 0
    inserts: int = 0
    updates: int = 0
    soft_deletes: int = 0
    undeletes: int = 0
    history_rows: int = 0
    cross_table_transactions: int = 0
    shared_timestamp_pairs: int = 0


class LedgerHistory:
    """Commits the demo's transactions on ``database`` and keeps what the lake must hold.

    Every transaction moves the manual ``clock`` forward by ``step`` first, so the commits of a window
    stay within it.
    """

    def __init__(self, database: Any, clock: Any, seed: int) -> None:
        self.database, self.clock, self.rng = database, clock, random.Random(seed)
        self.performances: dict[PerformanceKey, dict[str, Any]] = {}
        self.documents: dict[DocumentKey, str] = {}
        self.latest: dict[DocumentKey, dict[str, Any]] = {}
        self.counts = HistoryCounts()
        self.last_commit: datetime | None = None

    # ----- transactions --------------------------------------------------------------------------
    def _commit(self, write: Callable[[Any, Any], list[Callable[[datetime], None]]], step: timedelta) -> None:
        """Commit one transaction: ``write(batch, stamp)`` adds its mutations (``stamp`` is the value
        of the commit-timestamp columns) and returns what to record once the commit timestamp is known."""
        from google.cloud.spanner_v1 import COMMIT_TIMESTAMP

        self.clock.advance(step)
        with self.database.batch() as batch:
            records = write(batch, COMMIT_TIMESTAMP)
        committed = batch.committed
        for record in records:
            record(committed)
        self.last_commit = committed
        self.counts.transactions += 1

    def _performance_write(self, batch: Any, stamp: Any, key: PerformanceKey, deleted: bool) -> Callable:
        """Write the full row of ``key`` (a new revenue; ``deleted`` its soft-delete flag)."""
        revenue = self.rng.randint(0, 500_000)
        batch.insert_or_update("Performances", PERFORMANCE_COLUMNS, [(*key, revenue, deleted, stamp)])
        known = key in self.performances
        was_deleted = known and self.performances[key]["Deleted"]
        if not known:
            self.counts.inserts += 1
        elif deleted and not was_deleted:
            self.counts.soft_deletes += 1
        elif was_deleted and not deleted:
            self.counts.undeletes += 1
        else:
            self.counts.updates += 1

        def record(committed: datetime) -> None:
            at = committed if not isinstance(stamp, datetime) else stamp
            self.performances[key] = {
                "SingerId": key[0],
                "VenueId": key[1],
                "EventDate": key[2],
                "Revenue": revenue,
                "Deleted": deleted,
                "LastUpdateTime": at,
            }

        return record

    def _document_edit(self, batch: Any, stamp: Any, key: DocumentKey) -> Callable:
        """Rewrite the document's row and append its history row, stamped ``stamp``."""
        delta = f"+{self.rng.choice(['intro', 'para', 'fix', 'table', 'note'])}-{self.rng.randint(0, 9999)}"
        contents = (self.documents.get(key, "") + " " + delta).strip()[-200:]
        batch.insert_or_update("Documents", ["UserId", "DocumentId", "Contents"], [(*key, contents)])
        batch.insert("DocumentHistory", HISTORY_COLUMNS, [(*key, stamp, delta)])
        self.documents[key] = contents
        self.counts.history_rows += 1

        def record(committed: datetime) -> None:
            at = committed if not isinstance(stamp, datetime) else stamp
            self.latest[key] = {"UserId": key[0], "DocumentId": key[1], "Ts": at, "Delta": delta}

        return record

    def _new_performance_key(self) -> PerformanceKey:
        while True:
            key = (
                self.rng.randint(1, 30),
                self.rng.randint(1, 8),
                date(2026, 3, 1) + timedelta(days=self.rng.randint(0, 60)),
            )
            if key not in self.performances:
                return key

    def _document_key(self) -> DocumentKey:
        if self.documents and self.rng.random() < 0.7:
            return self.rng.choice(sorted(self.documents))
        return (self.rng.randint(1, 12), self.rng.randint(1, 40))

    def _live(self) -> list[PerformanceKey]:
        return sorted(k for k, row in self.performances.items() if not row["Deleted"])

    def _deleted(self) -> list[PerformanceKey]:
        return sorted(k for k, row in self.performances.items() if row["Deleted"])

    def step(self, step: timedelta) -> None:
        """One transaction, drawn: an insert, a full-row update, a soft delete, an undelete, a document
        edit, or a performance write and a document edit in one transaction."""
        rng, live, deleted = self.rng, self._live(), self._deleted()
        draw = rng.random()
        if draw < 0.25 or not live:
            key = self._new_performance_key()
            self._commit(lambda b, s: [self._performance_write(b, s, key, False)], step)
        elif draw < 0.45:
            key = rng.choice(live)
            self._commit(lambda b, s: [self._performance_write(b, s, key, False)], step)
        elif draw < 0.52:
            key = rng.choice(live)
            self._commit(lambda b, s: [self._performance_write(b, s, key, True)], step)
        elif draw < 0.57 and deleted:
            key = rng.choice(deleted)
            self._commit(lambda b, s: [self._performance_write(b, s, key, False)], step)
        elif draw < 0.85:
            document = self._document_key()
            self._commit(lambda b, s: [self._document_edit(b, s, document)], step)
        else:  # both tables in one transaction: one commit timestamp across them
            key, document, soft_delete = rng.choice(live), self._document_key(), rng.random() < 0.2
            self._commit(
                lambda b, s: [
                    self._performance_write(b, s, key, soft_delete),
                    self._document_edit(b, s, document),
                ],
                step,
            )
            self.counts.cross_table_transactions += 1

    def shared_timestamp_pair(self, step: timedelta) -> None:
        """Two transactions writing one explicit (past) timestamp: a performance and a document edit."""
        self.clock.advance(step)
        shared = self.clock.now()  # after every commit so far: no history row of a document has it
        key = self.rng.choice(self._live()) if self._live() else self._new_performance_key()
        document = self._document_key()
        self._commit(lambda b, _s: [self._performance_write(b, shared, key, False)], step)
        self._commit(lambda b, _s: [self._document_edit(b, shared, document)], step)
        self.counts.shared_timestamp_pairs += 1

    # ----- what the lake must hold ----------------------------------------------------------------
    def target_state(self) -> dict[str, list[dict[str, Any]]]:
        """The target tables now, in Spanner's JSON encoding, sorted by key."""
        performances = [
            {name: row[name] for name in TARGET_COLUMNS["Performances"]}
            for _, row in sorted(self.performances.items())
            if not row["Deleted"]
        ]
        latest = [row for _, row in sorted(self.latest.items())]
        return {
            "Performances": [encode_row("Performances", row) for row in performances],
            "DocumentLatest": [encode_row("DocumentLatest", row) for row in latest],
        }


def encode_row(table: str, row: dict[str, Any]) -> dict[str, Any]:
    """A target table's row of Python values in Spanner's JSON encoding."""
    return {name: encode_value(kind, row.get(name), name) for name, kind in TARGET_COLUMNS[table].items()}


def load_commit_timestamp_demo(
    emulator: Any, settings: CommitTimestampDemoSettings, truth_path: str | os.PathLike | None = None
) -> LedgerHistory:
    """Create the demo database on ``emulator`` and commit its history window by window.

    The emulator's clock must be a ``ManualClock`` before ``settings.start``; it ends just after the last
    window, so every window is complete and readable. With ``truth_path``, the target tables after
    every window are written there as JSON.
    """
    from airflow_provider_cdc.testing.emulator_client import emulator_instance

    # another demo database may be on the same emulator
    instance = emulator_instance(emulator.host, settings.project, settings.instance, exists_ok=True)
    retention = (
        f"ALTER DATABASE `{settings.database}` SET OPTIONS "
        f"(version_retention_period = '{settings.version_retention}')"
    )
    database = instance.database(settings.database, ddl_statements=[*DDL, retention])
    database.create().result(60)
    history = LedgerHistory(database, emulator.clock, settings.seed)
    per_window = max(settings.transactions_per_window, 4)
    step = settings.window * 0.9 / (per_window + 2)
    after_window = []
    for index in range(settings.windows):
        start, end = settings.window_bounds(index)
        if emulator.clock.now() < start:
            emulator.clock.set(start)
        for number in range(per_window):
            if number == per_window // 2:
                history.shared_timestamp_pair(step)
            history.step(step)
        if history.last_commit is None or history.last_commit >= end:
            raise RuntimeError(f"demo window {index} overflowed its end {format_timestamp(end)}")
        after_window.append(history.target_state())
        log.info(
            "commit-timestamp demo window %d [%s, %s): %d transactions",
            index,
            format_timestamp(start),
            format_timestamp(end),
            per_window + 2,
        )
    emulator.clock.set(settings.window_bounds(settings.windows - 1)[1] + timedelta(seconds=1))
    if truth_path is not None:
        payload = {
            "settings": {
                **asdict(settings),
                "start": settings.start.isoformat(),
                "window": settings.window.total_seconds(),
            },
            "host": emulator.host,
            "tables": TABLES,
            "key_columns": {table: list(key) for table, key in TARGET_KEYS.items()},
            "counts": asdict(history.counts),
            "state": after_window[-1],
            # the target tables as they must be once windows 0..i are applied
            "state_after_window": after_window,
        }
        Path(truth_path).write_text(json.dumps(payload, sort_keys=True))
    return history
