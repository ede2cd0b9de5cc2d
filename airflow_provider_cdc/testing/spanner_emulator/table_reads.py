"""Reads of tables: ExecuteStreamingSql over a table or view, StreamingRead by key set, and their
partitioned forms, PartitionQuery and PartitionRead, at a transaction's read timestamp.

Partitions split the primary-key space at keys of the table (``max_partitions``, else
:data:`DEFAULT_PARTITIONS`; ``partition_size_bytes`` is not used), so they are disjoint and cover it; a
partition token runs its request on its key range only. Rows stream in batches
(:func:`.results.stream_rows`); a resume token carries the rows sent and the read timestamp, so a resumed
single-use read sees the same snapshot.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from google.cloud.spanner_v1.types import spanner
from google.protobuf import text_format

from . import wire
from .model import EmulatorError, Table, find_column, find_table
from .results import simple_query, stream_rows
from .snapshots import (
    INVALID,
    TransactionInfo,
    Transactions,
    await_readable,
    make_token,
    open_token,
    read_timestamp,
    request_digest,
    strong_now,
    transaction_pb,
)
from .sql_engine import PARTITION_CHECK_HINT, prepare
from .sql_values import typed_param
from .storage import Scan, in_bounds

if TYPE_CHECKING:
    from .database import Database

DEFAULT_PARTITIONS = 4
NOT_PARTITIONABLE = (
    "The emulator is not able to determine whether this query is partitionable. Please test this query "
    "against Cloud Spanner and obtain a query execution plan to confirm it is partitionable. A query is "
    "partitionable only if the first operator in the query execution plan is a Distributed Union. If you "
    f"confirm it is partitionable, set the hint @{{{PARTITION_CHECK_HINT}=true}} on the query statement to "
    "bypass this check in the emulator. This hint will be ignored by the production Cloud Spanner service "
    "and the emulator will accept the query and return a valid result when it is run with the check "
    "disabled. Possible reason why the query may not be partitionable: Query is not a simple table scan."
)
FAILED = grpc.StatusCode.FAILED_PRECONDITION


@dataclass
class ReadAt:
    """Where a request reads: its timestamp and the transaction to report in its first response."""

    read_us: int
    transaction: Any = None  # a ``Transaction`` for the response metadata, or None
    info: TransactionInfo | None = None


class TableReads:
    """The table-reading RPCs of one emulator, over its transactions."""

    def __init__(self, transactions: Transactions) -> None:
        self.transactions = transactions

    # ----- transactions ---------------------------------------------------------------------------
    def read_at(
        self, session: str, database: Database, selector: Any, resume_us: int | None = None
    ) -> ReadAt:
        """The read timestamp a ``TransactionSelector`` gives (absent: a strong single-use read)."""
        which = selector.WhichOneof("selector")
        if which == "id":
            info = self.transactions.get(session, selector.id)
            return ReadAt(info.read_us if info.read_us is not None else strong_now(database), None, info)
        if which == "begin":
            info = self.transactions.begin(session, database, selector.begin)
            returned = info.mode == "read_only" and selector.begin.read_only.return_read_timestamp
            read_us = info.read_us if info.read_us is not None else strong_now(database)
            return ReadAt(read_us, transaction_pb(info, read_us, returned), info)
        if resume_us is not None:
            return ReadAt(resume_us)
        if which == "single_use" and selector.single_use.WhichOneof("mode") == "read_only":
            read_only = selector.single_use.read_only
            read_us = read_timestamp(database, read_only, single_use=True)
            returned = read_only.return_read_timestamp
            return ReadAt(read_us, transaction_pb(None, read_us, True) if returned else None)
        return ReadAt(strong_now(database))

    def partition_transaction(self, session: str, database: Database, selector: Any) -> ReadAt:
        """The read-only transaction a partition request runs in, as Spanner checks it."""
        which = selector.WhichOneof("selector")
        if which is None:
            raise EmulatorError(INVALID, "No value provided for required field: TransactionSelector.selector")
        if which == "single_use":
            raise EmulatorError(
                INVALID,
                "Partition reads may not be performed in single-use transactions, since the response needs "
                "to be reused.",
            )
        mode = selector.begin.WhichOneof("mode") if which == "begin" else None
        if which == "id":
            mode = self.transactions.get(session, selector.id).mode
        if mode != "read_only":
            raise EmulatorError(
                INVALID, "Partitioned reads can only be performed in a read-only transaction."
            )
        return self.read_at(session, database, selector)

    # ----- queries --------------------------------------------------------------------------------
    def query(self, database: Database, request: Any, context: grpc.ServicerContext) -> Iterator[bytes]:
        """A query other than a change-stream query: a simple one, or one over a table or view."""
        at = None
        if request.transaction.WhichOneof("selector") == "begin" and not request.partition_token:
            at = self.read_at(request.session, database, request.transaction)
        simple = simple_query(database, database.clock, request.sql, request.params, at and at.transaction)
        if simple is not None:
            yield from simple
            return
        yield from self.execute_sql(database, request, context, at)

    def execute_sql(
        self, database: Database, request: Any, context: grpc.ServicerContext, at: ReadAt | None = None
    ) -> Iterator[bytes]:
        """Stream the rows of a query over a table or ``INFORMATION_SCHEMA`` view (in ``at``'s
        transaction, when one began for it)."""
        query = prepare(request.sql, database.tables, request.params, request.param_types)
        low = high = None
        if request.partition_token:
            digest = _query_digest(request)
            selected = request.transaction.id if request.transaction.WhichOneof("selector") == "id" else None
            low, high = open_token(request.partition_token, request.session, selected, digest)
        skip, resume_us = _resume(request.resume_token)
        if at is None:
            at = self.read_at(request.session, database, request.transaction, resume_us)
        await_readable(database, at.read_us, context.is_active)
        source: Iterable[dict[str, Any]]
        with database.lock:
            if query.table is not None:
                history = query.table.history
                source = Scan(history, at.read_us, _order(history, low), _order(history, high))
            elif query.view is not None:
                source = query.view(database)
            else:
                source = [{}]
        rows = (wire.encode_row(cells) for cells in query.rows(source))
        metadata = wire.result_metadata(query.fields, at.transaction)
        yield from stream_rows(rows, skip, context, None, metadata, f":{at.read_us}".encode())

    def partition_query(self, database: Database, request: Any) -> spanner.PartitionResponse:
        at = self.partition_transaction(request.session, database, request.transaction)
        query = prepare(request.sql, database.tables, request.params, request.param_types)
        if (
            query.not_partitionable in ("LIMIT", "COUNT", "BIT_XOR")
            and query.hints.get(PARTITION_CHECK_HINT) == "true"
        ):
            raise EmulatorError(
                INVALID, f"Unsupported by the emulator: {query.not_partitionable} in a partitioned query"
            )
        if query.not_partitionable:
            raise EmulatorError(INVALID, NOT_PARTITIONABLE)
        return self._partitions(database, at, query.table, _query_digest(request), request.partition_options)

    # ----- reads ----------------------------------------------------------------------------------
    def streaming_read(
        self, database: Database, request: Any, context: grpc.ServicerContext
    ) -> Iterator[bytes]:
        """Stream the rows of a table read: the key set's rows in key order, the columns asked."""
        table, columns = _read_target(database, request)
        points, ranges = _key_set(table, request.key_set)
        low = high = None
        if request.partition_token:
            if request.limit:
                raise EmulatorError(INVALID, "A limit cannot be used when a partition_token is specified.")
            selected = request.transaction.id if request.transaction.WhichOneof("selector") == "id" else None
            low, high = open_token(request.partition_token, request.session, selected, _read_digest(request))
        skip, resume_us = _resume(request.resume_token)
        at = self.read_at(request.session, database, request.transaction, resume_us)
        await_readable(database, at.read_us, context.is_active)
        history = table.history
        low_order, high_order = _order(history, low), _order(history, high)
        with database.lock:
            keys = history.keys()
            if request.key_set.all_:
                keys = Scan(history, at.read_us, low_order, high_order).keys
                low_order = high_order = None
        selected = keys if request.key_set.all_ else _select(history, keys, points, ranges)
        names = [c.name for c in columns]

        def rows() -> Iterator[bytes]:
            sent = 0
            for key in selected:
                if (low_order or high_order) and not in_bounds(history.order(key), low_order, high_order):
                    continue
                row = history.at(key, at.read_us)
                if row is None:
                    continue
                yield wire.encode_row([row.get(name) for name in names])
                sent += 1
                if request.limit and sent >= request.limit:
                    return

        metadata = wire.result_metadata([(c.name, c.type) for c in columns], at.transaction)
        yield from stream_rows(rows(), skip, context, None, metadata, f":{at.read_us}".encode())

    def partition_read(self, database: Database, request: Any) -> spanner.PartitionResponse:
        at = self.partition_transaction(request.session, database, request.transaction)
        table, _ = _read_target(database, request)
        _key_set(table, request.key_set)
        return self._partitions(database, at, table, _read_digest(request), request.partition_options)

    def _partitions(
        self, database: Database, at: ReadAt, table: Table | None, digest: str, options: Any
    ) -> spanner.PartitionResponse:
        assert at.info is not None
        bounds: list[Any] = [None]
        if table is not None:
            wanted = options.max_partitions if options.max_partitions > 0 else DEFAULT_PARTITIONS
            with database.lock:
                bounds += [list(key) for key in table.history.split_points(wanted)]
        bounds.append(None)
        tokens = [
            make_token(at.info, digest, low, high) for low, high in zip(bounds, bounds[1:], strict=False)
        ]
        response = spanner.PartitionResponse(
            partitions=[spanner.Partition(partition_token=t) for t in tokens]
        )
        if at.transaction is not None:
            response.transaction = at.transaction
        return response


def _resume(token: bytes) -> tuple[int, int | None]:
    if not token:
        return 0, None
    count, _, read_us = bytes(token).decode().partition(":")
    return int(count or 0), int(read_us) if read_us else None


def _query_digest(request: Any) -> str:
    types = b"".join(
        name.encode() + b"=" + type_pb.SerializeToString(deterministic=True)
        for name, type_pb in sorted(request.param_types.items())
    )
    return request_digest(request.sql, request.params.SerializeToString(deterministic=True), types)


def _read_digest(request: Any) -> str:
    key_set = request.key_set.SerializeToString(deterministic=True)
    return request_digest(request.table, "\x01".join(request.columns), key_set, request.index)


def _order(history: Any, key: list | None) -> tuple | None:
    return None if key is None else history.order(tuple(key))


def _read_target(database: Database, request: Any) -> tuple[Table, list[Any]]:
    """The table and columns a read names (NOT_FOUND as Spanner words it), its key set required."""
    not_found = grpc.StatusCode.NOT_FOUND
    table = find_table(database.tables, request.table)
    if table is None:
        raise EmulatorError(not_found, f"Table not found: {request.table}")
    columns = []
    for name in request.columns:
        column = find_column(table, name)
        if column is None:
            raise EmulatorError(not_found, f"Column not found in table {table.name}: {name}")
        columns.append(column)
    if request.index:
        index = database.indexes.get(request.index)
        if index is None or index.table != table.name:
            raise EmulatorError(not_found, f"No index '{request.index}' was found for table '{table.name}'.")
        raise EmulatorError(
            INVALID,
            f"Unsupported by the emulator: reading through index {index.name} (secondary indexes are part "
            "of the schema, but the emulator serves reads from the base table only)",
        )
    if not request.HasField("key_set"):
        raise EmulatorError(INVALID, "No value provided for required field: ReadRequest.key_set")
    return table, columns


def _key(table: Table, values: Any, partial: bool) -> tuple:
    """A key (or, for a range bound, a key prefix) as stored cells; FAILED_PRECONDITION if it does not fit."""
    count = len(table.primary_key)
    if len(values.values) > count or (not partial and len(values.values) != count):
        shown = text_format.MessageToString(values, as_one_line=True)
        raise EmulatorError(
            FAILED,
            f"Wrong number of key parts for {table.name}. Expected {count} key parts, found "
            f"{len(values.values)} key parts. Supplied key: {shown}",
        )
    types = [table.column(name).type for name in table.primary_key]
    return tuple(typed_param("key", value, t.code) for value, t in zip(values.values, types, strict=False))


Bound = tuple[tuple, bool]  # (order prefix, inclusive)


def _key_set(table: Table, key_set: Any) -> tuple[list[tuple], list[tuple[Bound | None, Bound | None]]]:
    """The key set's keys and its ranges as order bounds."""
    points = [_key(table, key, partial=False) for key in key_set.keys]
    ranges = []
    for key_range in key_set.ranges:
        bounds = []
        for closed, opened in (("start_closed", "start_open"), ("end_closed", "end_open")):
            if key_range.HasField(closed):
                bounds.append((table.history.order(_key(table, getattr(key_range, closed), True)), True))
            elif key_range.HasField(opened):
                bounds.append((table.history.order(_key(table, getattr(key_range, opened), True)), False))
            else:
                bounds.append(None)
        ranges.append((bounds[0], bounds[1]))
    return points, ranges


def _select(history: Any, keys: list[tuple], points: list[tuple], ranges: list) -> list[tuple]:
    """The keys a key set's keys and ranges select, once each, in index order."""
    chosen: dict[tuple, tuple] = {}
    for key in points:
        chosen[history.order(key)] = key
    for start, end in ranges:
        begin = 0 if start is None else bisect_left(keys, start[0], key=history.order)
        for key in keys[begin:]:
            order = history.order(key)
            if start is not None and not _after(order, start):
                continue
            if end is not None and not _before(order, end):
                break
            chosen[order] = key
    return [chosen[order] for order in sorted(chosen)]


def _after(order: tuple, bound: Bound) -> bool:
    prefix, inclusive = bound
    head = order[: len(prefix)]
    return head >= prefix if inclusive else head > prefix


def _before(order: tuple, bound: Bound) -> bool:
    prefix, inclusive = bound
    head = order[: len(prefix)]
    return head <= prefix if inclusive else head < prefix
