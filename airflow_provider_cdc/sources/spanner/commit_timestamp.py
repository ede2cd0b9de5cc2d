"""Tables read by their commit-timestamp column, and what such a read cannot see, made visible.

A window ``[start, end)`` reads each table's rows with ``start <= ts < end`` at the read timestamp
``end`` (or later), once the database's clock has passed it: every commit before ``end`` is then
visible, and reading again at the same timestamp returns the same rows. A row written later with an
explicit *past* timestamp (``ts < start``) falls into a window already read and would be missed.
:func:`check_late_rows` therefore takes, at each window, a digest of the rows with ``first <= ts < start``
(their count and the ``BIT_XOR`` of ``FARM_FINGERPRINT`` of each row's key and timestamp, computed by
Spanner in one query) at the previous window's read timestamp (``start``) and at this window's. Rows
that moved out of that range since (updated into this window or later) are folded out of the earlier
digest; any other difference is a write into the read range: a new row, a row rewritten with another
past timestamp, or a delete. Only then are the rows compared one by one, and the late rows named.
A rewrite that keeps a row's timestamp leaves the digest as it was and cannot be seen; deletes are
invisible to the windows themselves (use a soft-delete column) and are only reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_provider_cdc.core.timestamps import format_timestamp, from_micros, parse_timestamp, to_micros
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.sources.spanner.farmhash import farm_fingerprint
from airflow_provider_cdc.sources.spanner.table_batches import PlannedTable, quoted
from airflow_provider_cdc.sources.spanner.table_rows import CommitTimestampTable
from airflow_provider_cdc.sources.spanner.table_schema import TableSchema, TableSchemaError
from airflow_provider_cdc.sources.spanner.wire_values import wire_rows

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
    """A row of a range already read: written late into it (``previous`` is its timestamp at the
    earlier read, ``None`` for a new row), or deleted from it (``timestamp`` is the one it had)."""

    key_json: str
    timestamp: str
    previous: str | None = None

    def describe(self) -> str:
        was = f" (was {self.previous})" if self.previous else ""
        return f"key {self.key_json} at {self.timestamp}{was}"


@dataclass(frozen=True)
class RangeDigest:
    """The rows with ``first <= ts < start`` at one read timestamp: their count and the ``BIT_XOR`` of
    the fingerprints of their ``(timestamp, key)`` (0 for no rows)."""

    rows: int
    fingerprint: int

    def without(self, fingerprints: Iterable[int]) -> RangeDigest:
        """This digest without the rows of ``fingerprints`` (each in it once)."""
        rows, folded = self.rows, self.fingerprint
        for fingerprint in fingerprints:
            rows -= 1
            folded ^= fingerprint
        return RangeDigest(rows, folded)


def row_fingerprint(micros: int, key_text: str) -> int:
    """The fingerprint Spanner computes for a row (:func:`digest_sql`) from its timestamp in µs and the
    text of its key (:func:`key_text_sql`)."""
    return farm_fingerprint(f"{micros}/{key_text}")


def key_text_sql(primary_key: Sequence[str]) -> str:
    """SQL of a key's canonical text: each key column as a GoogleSQL literal (``FORMAT('%T')``:
    strings quoted and escaped, NULL as ``NULL``), comma-separated."""
    pattern = ",".join("%T" for _ in primary_key)
    return f"FORMAT('{pattern}', {', '.join(quoted(c) for c in primary_key)})"


def digest_sql(table: PlannedTable) -> str:
    """SQL of a range's :class:`RangeDigest` (parameters ``@first`` and ``@start``)."""
    assert table.config is not None
    ts = quoted(table.config.timestamp_column)
    pattern = "%d/" + ",".join("%T" for _ in table.primary_key)
    keys = ", ".join(quoted(c) for c in table.primary_key)
    fingerprint = f"FARM_FINGERPRINT(FORMAT('{pattern}', UNIX_MICROS({ts}), {keys}))"
    # Identifiers are validated and quoted by ``quoted``; values are parameters.
    return (
        f"SELECT COUNT(*), BIT_XOR({fingerprint}) FROM {quoted(table.table, 'table')} "  # noqa: S608
        f"WHERE {ts} >= @first AND {ts} < @start"
    )


@dataclass(frozen=True)
class LateRowsCheck:
    """One table's check at one window: the digest of the rows with ``first <= ts < start`` before,
    the digest expected now (``before`` without the rows that moved out of the range since), the digest
    now, and, where they differ, the late and deleted rows (up to a limit named, all counted)."""

    table: str
    window: Window
    before: RangeDigest
    expected: RangeDigest
    after: RangeDigest
    moved: int = 0
    late: int = 0
    late_rows: tuple[LateRow, ...] = ()
    deleted: int = 0
    deleted_rows: tuple[LateRow, ...] = ()

    @property
    def changed(self) -> bool:
        """The range holds other rows than those read before (less those that moved out of it)."""
        return self.after != self.expected

    @property
    def unexplained(self) -> bool:
        """The digest changed, yet no row could be named late or deleted."""
        return self.changed and not (self.late or self.deleted)

    def describe(self) -> str:
        """The late rows, for :class:`LateRowsError` or the warning."""
        if self.unexplained:
            return (
                f"table {self.table!r}: the rows with a commit timestamp before window {self.window}, which "
                f"earlier windows have read already, changed since they were read ({self.after.rows} row(s) "
                f"now, {self.expected.rows} expected), but no row could be named. Commit-timestamp windows "
                "never read such writes: write them again with PENDING_COMMIT_TIMESTAMP() so a later window "
                "reads them, or pass on_late_rows='warn' to go on"
            )
        shown = "; ".join(r.describe() for r in self.late_rows)
        more = f" and {self.late - len(self.late_rows)} more" if self.late > len(self.late_rows) else ""
        return (
            f"table {self.table!r}: {self.late} row(s) were written, before window {self.window} was read, "
            f"with a commit timestamp before the window, which earlier windows have read already: "
            f"{shown}{more}. Commit-timestamp windows never read them: write them again with "
            "PENDING_COMMIT_TIMESTAMP() so a later window reads them, or pass on_late_rows='warn' to go on"
        )

    def describe_deleted(self) -> str:
        """The rows deleted from the range, for the warning."""
        shown = "; ".join(r.describe() for r in self.deleted_rows)
        more = (
            f" and {self.deleted - len(self.deleted_rows)} more"
            if self.deleted > len(self.deleted_rows)
            else ""
        )
        return f"{shown}{more}"


def _digest(
    database: Any, table: PlannedTable, at: datetime, first: datetime, start: datetime
) -> RangeDigest:
    from google.cloud.spanner_v1 import param_types

    with database.snapshot(read_timestamp=at) as snapshot:
        rows = list(
            snapshot.execute_sql(
                digest_sql(table),
                params={"first": first, "start": start},
                param_types={"first": param_types.TIMESTAMP, "start": param_types.TIMESTAMP},
            )
        )
    count, fingerprint = rows[0]
    return RangeDigest(int(count), int(fingerprint or 0))


def _keyed_rows(
    database: Any,
    table: PlannedTable,
    at: datetime,
    low: datetime,
    high: datetime | None,
    *,
    key_text: bool = False,
) -> Iterator[list[Any]]:
    """``[*primary key, ts]`` (encoded) of the rows with ``low <= ts < high`` (no upper bound for
    ``None``) at ``at``; with ``key_text`` also the key's canonical text (:func:`key_text_sql`)."""
    from google.cloud.spanner_v1 import param_types

    assert table.config is not None
    ts = quoted(table.config.timestamp_column)
    selected = [quoted(c) for c in (*table.primary_key, table.config.timestamp_column)]
    if key_text:
        selected.append(key_text_sql(table.primary_key))
    params: dict[str, Any] = {"low": low}
    types: dict[str, Any] = {"low": param_types.TIMESTAMP}
    bounds = f"{ts} >= @low"
    if high is not None:
        bounds += f" AND {ts} < @high"
        params["high"], types["high"] = high, param_types.TIMESTAMP
    # Identifiers are validated and quoted by ``quoted``; values are parameters.
    sql = f"SELECT {', '.join(selected)} FROM {quoted(table.table, 'table')} WHERE {bounds}"  # noqa: S608
    with database.snapshot(read_timestamp=at) as snapshot:
        found = snapshot.execute_sql(sql, params=params, param_types=types, lazy_decode=True)
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
            result[_key_of(row[:width])] = _micros(row[width])
    return result


def _micros(value: Any) -> int | None:
    return None if value is None else to_micros(parse_timestamp(value))


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


def _moved_fingerprints(
    database: Any, table: PlannedTable, first: datetime, window: Window, read_timestamp: datetime
) -> list[int]:
    """Fingerprints, as of ``window.start``, of the rows that were in ``[first, start)`` then and have a
    timestamp ``>= start`` now (updated since: this window, or a later one, reads them)."""
    assert table.config is not None
    if table.config.timestamp_column in table.primary_key:
        return []  # a row keeps its timestamp: a new timestamp is a new row
    width = len(table.primary_key)
    low, high = to_micros(first), window.start_micros
    moved: list[int] = []
    for chunk in _chunks(
        _keyed_rows(database, table, read_timestamp, window.start, None, key_text=True), LOOKUP_KEYS
    ):
        earlier = _timestamps_at(database, table, window.start, [row[:width] for row in chunk])
        for row in chunk:
            ts = earlier.get(_key_of(row[:width]))
            if ts is not None and low <= ts < high:
                moved.append(row_fingerprint(ts, row[width + 1]))
    return moved


class _Found:
    """Late or deleted rows: all counted, the first ``limit`` kept."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self.rows: list[LateRow] = []

    def add(self, row: LateRow) -> None:
        self.count += 1
        if len(self.rows) < self.limit:
            self.rows.append(row)


def _key_json(table: PlannedTable, values: Sequence[Any]) -> str:
    import json

    return json.dumps(
        dict(zip(table.primary_key, values, strict=True)), sort_keys=True, separators=(",", ":")
    )


def _shown(micros: int | None) -> str | None:
    return None if micros is None else format_timestamp(from_micros(micros))


def _name_rows(
    database: Any,
    table: PlannedTable,
    first: datetime,
    window: Window,
    read_timestamp: datetime,
    limit: int,
) -> tuple[_Found, _Found]:
    """The late and the deleted rows of ``[first, start)``: each row now compared with its key at
    ``window.start``, and each row then with its key now."""
    width = len(table.primary_key)
    low = to_micros(first)
    late, deleted = _Found(limit), _Found(limit)
    for chunk in _chunks(_keyed_rows(database, table, read_timestamp, first, window.start), LOOKUP_KEYS):
        earlier = _timestamps_at(database, table, window.start, [row[:width] for row in chunk])
        for row in chunk:
            ts, key = _micros(row[width]), _key_of(row[:width])
            if key not in earlier or earlier[key] != ts:
                late.add(LateRow(_key_json(table, row[:width]), _shown(ts) or "", _shown(earlier.get(key))))
    for chunk in _chunks(_keyed_rows(database, table, window.start, first, window.start), LOOKUP_KEYS):
        now = _timestamps_at(database, table, read_timestamp, [row[:width] for row in chunk])
        for row in chunk:
            ts, key = _micros(row[width]), _key_of(row[:width])
            if key not in now:
                deleted.add(LateRow(_key_json(table, row[:width]), _shown(ts) or ""))
                continue
            current = now[key]
            if current is None or current < low:
                # rewritten to a timestamp before the range (or none): no window reads it again
                late.add(LateRow(_key_json(table, row[:width]), _shown(current) or "NULL", _shown(ts)))
            # otherwise still in the range (the pass above compared it) or moved past ``high``: this
            # window, or a later one, reads it
    return late, deleted


def check_late_rows(
    database: Any,
    table: PlannedTable,
    first: datetime,
    window: Window,
    read_timestamp: datetime,
    *,
    limit: int = 10,
) -> LateRowsCheck:
    """Compare the digests of the rows with ``first <= ts < window.start`` at ``window.start`` (the
    previous window's read timestamp) and at ``read_timestamp``; where they differ beyond the rows that
    moved out of the range, name up to ``limit`` late and deleted rows."""
    before = _digest(database, table, window.start, first, window.start)
    after = _digest(database, table, read_timestamp, first, window.start)
    moved = _moved_fingerprints(database, table, first, window, read_timestamp)
    expected = before.without(moved)
    check = LateRowsCheck(table.table, window, before, expected, after, moved=len(moved))
    if not check.changed:
        return check
    late, deleted = _name_rows(database, table, first, window, read_timestamp, limit)
    return LateRowsCheck(
        table.table,
        window,
        before,
        expected,
        after,
        moved=len(moved),
        late=late.count,
        late_rows=tuple(late.rows),
        deleted=deleted.count,
        deleted_rows=tuple(deleted.rows),
    )
