"""Read timestamps: transactions and their timestamp bounds, the wait for a future timestamp, the
version-retention check, and partition tokens.

A read-only transaction reads at one timestamp: strong (now), ``read_timestamp`` or ``exact_staleness``
(``min_read_timestamp`` and ``max_staleness`` only in single-use transactions, where the emulator reads
at now, which both allow). A transaction belongs to the session that began it. A read at a timestamp
later than now waits for the clock; one older than the database's version retention period fails.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from google.cloud.spanner_v1.types import transaction as transaction_types
from google.protobuf import timestamp_pb2

from airflow_provider_cdc.core.timestamps import from_micros

from .model import EmulatorError
from .values import display_timestamp

if TYPE_CHECKING:
    from .database import Database

INVALID = grpc.StatusCode.INVALID_ARGUMENT


@dataclass(frozen=True)
class TransactionInfo:
    """A transaction the emulator began: its session, kind and (read-only) read timestamp."""

    id: bytes
    session: str
    database: str
    mode: str  # read_only, read_write, partitioned_dml
    read_us: int | None = None


def timestamp_us(value: timestamp_pb2.Timestamp) -> int:
    return value.seconds * 1_000_000 + value.nanos // 1000


def strong_now(database: Database) -> int:
    """Now, taken under the database lock: every commit so far is at or before it, later ones after."""
    with database.lock:
        return database.clock.now_us()


def read_timestamp(database: Database, read_only: Any, single_use: bool) -> int:
    """The timestamp a ``TransactionOptions.ReadOnly`` bound reads at (µs)."""
    bound = read_only.WhichOneof("timestamp_bound")
    if bound in ("min_read_timestamp", "max_staleness"):
        if not single_use:
            raise EmulatorError(
                INVALID,
                f"Timestamp bound: {bound} for read can be only be used for a single use transaction.",
            )
        if bound == "max_staleness" and read_only.max_staleness.ToMicroseconds() < 0:
            raise EmulatorError(INVALID, "Staleness must be non-negative.")
        return strong_now(database)
    if bound == "read_timestamp":
        return timestamp_us(read_only.read_timestamp)
    if bound == "exact_staleness":
        staleness = read_only.exact_staleness.ToMicroseconds()
        if staleness < 0:
            raise EmulatorError(INVALID, "Staleness must be non-negative.")
        return strong_now(database) - staleness
    return strong_now(database)


def await_readable(database: Database, read_us: int, is_active: Callable[[], bool]) -> None:
    """Wait until ``read_us`` is not in the future; fail if it is older than the retention period."""
    clock = database.clock
    while clock.now_us() < read_us:
        if not is_active():
            raise EmulatorError(grpc.StatusCode.CANCELLED, "the client cancelled the read")
        clock.wait(0.5)
    if read_us < database.oldest_readable_us():
        raise EmulatorError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"Read-only transaction timestamp {display_timestamp(read_us)} has exceeded the maximum "
            "timestamp staleness",
        )


def transaction_pb(info: TransactionInfo | None, read_us: int | None, with_timestamp: bool) -> Any:
    """The ``Transaction`` a response carries: the id of one begun, the read timestamp if asked."""
    result = transaction_types.Transaction()
    if info is not None:
        result.id = info.id
    if with_timestamp and read_us is not None:
        result.read_timestamp = from_micros(read_us)
    return result


class Transactions:
    """The transactions begun so far (the latest ``limit``), by id."""

    def __init__(self, ids: itertools.count, limit: int = 100_000) -> None:
        self._ids = ids
        self._limit = limit
        self._lock = threading.Lock()
        self._by_id: OrderedDict[bytes, TransactionInfo] = OrderedDict()

    def begin(self, session: str, database: Database, options: Any) -> TransactionInfo:
        """Begin a transaction with ``TransactionOptions`` (protobuf); read-only ones take their timestamp."""
        mode = options.WhichOneof("mode") or "read_write"
        read_us = (
            read_timestamp(database, options.read_only, single_use=False) if mode == "read_only" else None
        )
        info = TransactionInfo(str(next(self._ids)).encode(), session, database.path, mode, read_us)
        with self._lock:
            self._by_id[info.id] = info
            while len(self._by_id) > self._limit:
                self._by_id.popitem(last=False)
        return info

    def find(self, transaction_id: bytes) -> TransactionInfo | None:
        with self._lock:
            return self._by_id.get(bytes(transaction_id))

    def get(self, session: str, transaction_id: bytes) -> TransactionInfo:
        """The transaction ``transaction_id`` of ``session``, or NOT_FOUND."""
        info = self.find(transaction_id)
        if info is None or info.session != session:
            shown = bytes(transaction_id).decode("utf-8", "replace")
            raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Transaction not found: {shown}")
        return info


# ----- partition tokens ------------------------------------------------------------------------------
def request_digest(*parts: bytes | str) -> str:
    """A digest of what a partitioned request asked (SQL and parameters, or table, columns and keys)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\x00")
    return digest.hexdigest()[:32]


def make_token(info: TransactionInfo, digest: str, low: list | None, high: list | None) -> bytes:
    """A partition token: the session, transaction and request it belongs to and its key range."""
    payload = {"s": info.session, "t": info.id.decode(), "d": digest, "lo": low, "hi": high}
    return base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).rstrip(b"=")


def open_token(token: bytes, session: str, transaction_id: bytes | None, digest: str) -> tuple[Any, Any]:
    """The key range ``[low, high)`` of a partition token used by ``session`` in ``transaction_id`` for a
    request with ``digest``, or Spanner's INVALID_ARGUMENT for a token of another request."""
    try:
        padded = bytes(token) + b"=" * (-len(token) % 4)
        payload = json.loads(base64.urlsafe_b64decode(padded))
        owner, begun, asked = payload["s"], payload["t"].encode(), payload["d"]
    except (binascii.Error, ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        raise EmulatorError(INVALID, "Invalid partition token.") from None
    if owner != session:
        raise EmulatorError(INVALID, "Partitioned request was created for a different session.")
    if transaction_id is None or bytes(transaction_id) != begun:
        raise EmulatorError(INVALID, "Partitioned request was created for a different transaction.")
    if asked != digest:
        raise EmulatorError(INVALID, "Partitioned request was created for different read or sql parameters.")
    return payload["lo"], payload["hi"]
