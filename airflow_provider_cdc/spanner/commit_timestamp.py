"""Tables read by their commit-timestamp column, and what such a read cannot see, made visible.

A window ``[start, end)`` reads each table's rows with ``start <= ts < end`` at the read timestamp
``end`` (or later), once the database's clock has passed it: every commit before ``end`` is then
visible, and reading again at the same timestamp returns the same rows. A row written later with an
explicit *past* timestamp (``ts < start``) falls into a window already read and would be missed:
:func:`check_late_rows` compares, at each window, the rows with ``first <= ts < start`` at the
previous window's read timestamp (``start``) with those at this window's, accounting for the rows
this window read that moved out of that range (updated since), and names the late rows it finds.
A fall in the count means rows were deleted: deletes are invisible to this source (use a
soft-delete column).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_provider_cdc.domain.table_rows import CommitTimestampTable
from airflow_provider_cdc.domain.timestamps import format_timestamp, parse_timestamp, to_micros
from airflow_provider_cdc.domain.window import Window
from airflow_provider_cdc.spanner.table_batches import PlannedTable, quoted
from airflow_provider_cdc.spanner.table_schema import TableSchema, TableSchemaError
from airflow_provider_cdc.spanner.wire_values import wire_rows

#: Keys looked up at once at the previous read timestamp.
LOOKUP_KEYS = 500


def commit_timestamp_table(
    schema: TableSchema, config: CommitTimestampTable, page_rows: int | None = None
) -> PlannedTable:
    """What a window reads of a commit-timestamp table: every column of it, the changes' columns
    from the configuration (entity key, dropped soft-delete and change-type columns)."""
    if config.table != schema.table:
        raise ValueError(f"schema of {schema.table!r} given for table {config.table!r}")
    if config.timestamp_column not in schema.column_names:
        raise TableSchemaError(f"table {config.table!r} has no column {config.timestamp_column!r}")
    if config.timestamp_column not in schema.commit_timestamp_columns:
        raise TableSchemaError(
            f"column {config.timestamp_column!r} of table {config.table!r} is not a commit-timestamp column "
            "(OPTIONS (allow_commit_timestamp=true)): only the commit timestamp orders changes"
        )
    return PlannedTable(
        table=config.table,
        target=config.target,
        select=schema.column_names,
        columns=tuple(config.change_columns(schema.columns)),
        primary_key=schema.key,
        config=config,
        page_rows=page_rows,
    )


@dataclass(frozen=True)
class LateRow:
    """A row whose commit timestamp falls into a window already read."""

    key_json: str
    timestamp: str


@dataclass(frozen=True)
class LateRowsCheck:
    """One table's check at one window: counts of rows with ``first <= ts < start`` before and now,
    the rows this window read that were in that range before, the late rows and some of them."""

    table: str
    window: Window
    before: int
    after: int
    moved: int
    rows: tuple[LateRow, ...] = ()

    @property
    def late(self) -> int:
        return max(self.after - self.before + self.moved, 0)

    @property
    def deleted(self) -> int:
        return max(self.before - self.moved - self.after, 0)

    def describe(self) -> str:
        shown = "; ".join(f"key {r.key_json} at {r.timestamp}" for r in self.rows)
        more = f" and {self.late - len(self.rows)} more" if self.late > len(self.rows) else ""
        return (
            f"table {self.table!r}: {self.late} row(s) were written, before window {self.window} was read, "
            f"with a commit timestamp before the window, which earlier windows have read already: "
            f"{shown}{more}. Commit-timestamp windows never read them: write them again with "
            "PENDING_COMMIT_TIMESTAMP() so a later window reads them, or pass on_late_rows='warn' to go on"
        )


def _count(database: Any, table: PlannedTable, at: datetime, first: datetime, start: datetime) -> int:
    from google.cloud.spanner_v1 import param_types

    assert table.config is not None
    ts = quoted(table.config.timestamp_column)
    # Identifiers are validated and quoted by ``quoted``; values are parameters.
    sql = f"SELECT COUNT(*) FROM {quoted(table.table, 'table')} WHERE {ts} >= @first AND {ts} < @start"  # noqa: S608
    with database.snapshot(read_timestamp=at) as snapshot:
        rows = list(
            snapshot.execute_sql(
                sql,
                params={"first": first, "start": start},
                param_types={"first": param_types.TIMESTAMP, "start": param_types.TIMESTAMP},
            )
        )
    return int(rows[0][0])


def _keyed_rows(
    database: Any, table: PlannedTable, at: datetime, low: datetime, high: datetime
) -> Iterator[list[Any]]:
    """``[*primary key, ts]`` (encoded) of the rows with ``low <= ts < high`` at ``at``."""
    from google.cloud.spanner_v1 import param_types

    assert table.config is not None
    ts = quoted(table.config.timestamp_column)
    columns = ", ".join(quoted(c) for c in (*table.primary_key, table.config.timestamp_column))
    sql = f"SELECT {columns} FROM {quoted(table.table, 'table')} WHERE {ts} >= @low AND {ts} < @high"  # noqa: S608
    with database.snapshot(read_timestamp=at) as snapshot:
        found = snapshot.execute_sql(
            sql,
            params={"low": low, "high": high},
            param_types={"low": param_types.TIMESTAMP, "high": param_types.TIMESTAMP},
            lazy_decode=True,
        )
        yield from wire_rows(found)


def _timestamps_at(
    database: Any, table: PlannedTable, at: datetime, keys: Sequence[Sequence[Any]]
) -> dict[tuple, int | None]:
    """Each key's commit timestamp (µs) at ``at``; absent keys are missing from the result."""
    from google.cloud.spanner_v1 import KeySet

    assert table.config is not None
    width = len(table.primary_key)
    columns = [*table.primary_key, table.config.timestamp_column]
    with database.snapshot(read_timestamp=at) as snapshot:
        found = snapshot.read(table.table, columns, KeySet(keys=[list(k) for k in keys]), lazy_decode=True)
        result: dict[tuple, int | None] = {}
        for row in wire_rows(found):
            result[_key_of(row[:width])] = (
                None if row[width] is None else to_micros(parse_timestamp(row[width]))
            )
    return result


def _key_of(values: Sequence[Any]) -> tuple:
    return tuple(values)


def _chunks(rows: Iterator[list[Any]], size: int) -> Iterator[list[list[Any]]]:
    chunk: list[list[Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def check_late_rows(
    database: Any,
    table: PlannedTable,
    first: datetime,
    window: Window,
    read_timestamp: datetime,
    *,
    limit: int = 10,
) -> LateRowsCheck:
    """Compare the rows with ``first <= ts < window.start`` at ``window.start`` (the previous
    window's read timestamp) and at ``read_timestamp``; name up to ``limit`` late rows."""
    import json

    before = _count(database, table, window.start, first, window.start)
    after = _count(database, table, read_timestamp, first, window.start)
    moved = 0
    width = len(table.primary_key)
    if table.config is not None and not table.config.is_changelog:
        for chunk in _chunks(
            _keyed_rows(database, table, read_timestamp, window.start, window.end), LOOKUP_KEYS
        ):
            earlier = _timestamps_at(database, table, window.start, [row[:width] for row in chunk])
            low, high = to_micros(first), window.start_micros
            moved += sum(1 for ts in earlier.values() if ts is not None and low <= ts < high)
    check = LateRowsCheck(table.table, window, before, after, moved)
    if check.late == 0:
        return check
    late: list[LateRow] = []
    wanted = min(check.late, limit)
    for chunk in _chunks(_keyed_rows(database, table, read_timestamp, first, window.start), LOOKUP_KEYS):
        earlier = _timestamps_at(database, table, window.start, [row[:width] for row in chunk])
        for row in chunk:
            ts = to_micros(parse_timestamp(row[width]))
            if earlier.get(_key_of(row[:width]), -1) != ts:
                keys = dict(zip(table.primary_key, row[:width], strict=True))
                late.append(
                    LateRow(
                        json.dumps(keys, sort_keys=True, separators=(",", ":")),
                        format_timestamp(parse_timestamp(row[width])),
                    )
                )
                if len(late) >= wanted:
                    return LateRowsCheck(table.table, window, before, after, moved, tuple(late))
    return LateRowsCheck(table.table, window, before, after, moved, tuple(late))
