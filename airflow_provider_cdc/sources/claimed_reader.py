"""What every reader of a window shares: claiming its units through the metastore, one staging
folder per claim, leases renewed while reading, completion by compare-and-set on the claim, retries.

A window's **units** (change-stream partitions, table batches, files, shards) are recorded as the
window's partitions in the metastore; several readers (mapped tasks) share a window by claiming them
with leases. Each claim writes a folder of its own and only the claim that completes the unit counts,
so a reader that lost its lease and wakes up later changes nothing.

Which errors are worth retrying is the source's to say (:attr:`ClaimedWindowReader.retryable`, or
the ``retryable`` argument); nothing here knows a source's client library.
"""

from __future__ import annotations

import gc
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore
from airflow_provider_cdc.staging.parquet import DEFAULT_ROWS_PER_FILE, StagingWriter, window_location
from airflow_provider_cdc.staging.reading import discard_other_claims

__all__ = [
    "ClaimedWindowReader",
    "UnitRead",
    "UnitReadSummary",
    "WindowReadError",
    "collector_paused",
    "describe_exception",
]


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while one unit is read and staged (restored after).

    Decoding and staging allocate a few objects per value, freed by reference counting; each
    allocation burst would otherwise start collections that walk every object the task holds (Airflow
    and the provider loaded: hundreds of thousands), costing as much as the decoding. What little
    cyclic garbage a read makes (an error's traceback) is collected once the collector resumes.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class WindowReadError(RuntimeError):
    """A window could not be read; the message names the window, the unit and the cause."""

    #: What the window's units are called in messages.
    partition_noun: ClassVar[str] = "partition"
    #: Where a failure that concerns no unit happened ("": the message names no place).
    without_partition: ClassVar[str] = ""

    def __init__(self, window: Window, token: str | None, cause: BaseException | str) -> None:
        where = self.without_partition if token is None else f"{self.partition_noun} {token}"
        super().__init__(f"reading window {window} failed{f' at {where}' if where else ''}: {cause}")
        self.window = window
        self.token = token
        self.cause = cause


def describe_exception(exc: BaseException) -> str:
    """``Type: message`` of an error, for messages and logs."""
    return f"{type(exc).__name__}: {exc}"


@dataclass
class UnitRead:
    """One unit as one reader read it: the rows it staged, the transactions they hold (a fraction
    when a transaction spans units), its retries and seconds."""

    token: str
    rows: int = 0
    transactions: float = 0.0
    retries: int = 0
    seconds: float = 0.0


@dataclass
class UnitReadSummary:
    """What one reader did for a window through :meth:`ClaimedWindowReader.read_units`."""

    window_id: str
    staging_uri: str
    units: list[UnitRead] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rows(self) -> int:
        return sum(unit.rows for unit in self.units)

    def to_dict(self) -> dict[str, Any]:
        """The summary for XCom (the keys every read operator returns)."""
        transactions = sum(unit.transactions for unit in self.units)
        return read_summary(self.window_id, self.staging_uri, self.units, self.seconds, transactions)


def read_summary(
    window_id: str, staging_uri: str, units: Sequence[Any], seconds: float, transactions: float
) -> dict[str, Any]:
    """What one reader did for a window, for XCom: the keys every read operator returns. ``units``
    have ``rows`` and ``retries``."""
    rows = sum(unit.rows for unit in units)
    return {
        "window_id": window_id,
        "staging_uri": staging_uri,
        "rows": rows,
        "transactions": round(transactions, 6),
        "partitions": len(units),
        "retries": sum(unit.retries for unit in units),
        "seconds": round(seconds, 3),
        "rows_per_second": round(rows / seconds, 1) if seconds > 0 else None,
    }


#: Stages one claimed unit: ``(window, token, writer, read)``; adds to ``read.rows``/``read.transactions``.
ReadUnit = Callable[[Window, str, StagingWriter, UnitRead], None]


class ClaimedWindowReader:
    """Claims, stages and completes the units of windows of one metastore ``key`` (a source's) under
    the staging folder ``folder``.

    A source either reads each claimed unit itself (readers that resume from where a failed read got
    to) or gives :meth:`read_units` a function that stages one unit: a failed try
    is retried from the unit's start into a cleared claim folder. ``retryable`` (default: the class's
    :attr:`retryable`) lists the errors worth retrying; :meth:`describe` words an error. The staging
    root is opened with ``storage_options`` (object-store options, such as those of a Google
    connection) unless an explicit ``filesystem`` is given.
    """

    read_error: ClassVar[type[WindowReadError]] = WindowReadError
    #: Errors worth retrying from where the read got to; a source sets its own.
    retryable: tuple[type[BaseException], ...] = ()

    def __init__(
        self,
        metastore: Metastore,
        key: str,
        folder: str,
        staging_root: str,
        *,
        owner: str,
        lease_seconds: float = 300.0,
        retries: int = 5,
        backoff_seconds: float = 1.0,
        poll_seconds: float = 1.0,
        rows_per_file: int = DEFAULT_ROWS_PER_FILE,
        filesystem: object | None = None,
        storage_options: Mapping[str, str] | None = None,
        log: logging.Logger | None = None,
        progress_seconds: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
        retryable: tuple[type[BaseException], ...] | None = None,
    ) -> None:
        self.metastore = metastore
        self.key = key
        self.folder = folder
        self.staging_root = staging_root
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.retries = retries
        self.backoff_seconds = backoff_seconds
        self.poll_seconds = poll_seconds
        self.rows_per_file = rows_per_file
        self.filesystem = filesystem
        self.storage_options = storage_options
        self.log = log or logging.getLogger(type(self).__module__)
        self.progress_seconds = progress_seconds
        self._sleep = sleep
        if retryable is not None:
            self.retryable = tuple(retryable)

    def describe(self, exc: BaseException) -> str:
        """An error as messages name it (a source words its client's errors)."""
        return describe_exception(exc)

    def claims(self, window: Window) -> Iterator[tuple[str, str]]:
        """``(token, claim_id)`` of each unit of ``window`` this reader claims, until every unit
        of the window is done (waiting while others hold the rest)."""
        while True:
            claim_id = uuid.uuid4().hex
            token = self.metastore.claim_window_partition(
                self.key, window.start, window.end, self.owner, self.lease_seconds, claim_id=claim_id
            )
            if token is not None:
                yield token, claim_id
                continue
            items = self.metastore.window_partitions(self.key, window.start, window.end)
            if all(item.state == "done" for item in items):
                return
            self._sleep(self.poll_seconds)

    def staging_writer(self, window: Window, token: str, claim_id: str) -> StagingWriter:
        """The writer of claim ``claim_id`` of unit ``token``: a folder of its own."""
        return StagingWriter(
            self.staging_root,
            self.folder,
            window,
            token,
            rows_per_file=self.rows_per_file,
            filesystem=self.filesystem,
            claim_id=claim_id,
            storage_options=self.storage_options,  # type: ignore[arg-type]
        )

    def discard_other_claims(self, writer: StagingWriter, token: str) -> None:
        """After completing unit ``token``: remove the files other claims staged beside the writer's
        (not claims marked recorded), and log how many."""
        removed = discard_other_claims(writer)
        if removed:
            self.log.info(
                "%s %s: removed %d file(s) other claims staged",
                self.read_error.partition_noun.capitalize(),
                token,
                removed,
            )

    def complete(
        self,
        window: Window,
        token: str,
        claim_id: str,
        *,
        rows: int,
        transactions: float,
        output_files: int,
        partition_rows: bool = False,
    ) -> None:
        """Record the claim as the unit's output (compare-and-set on the claim id and the lease);
        ``partition_rows``: ``rows`` is also the unit's record count (a table batch)."""
        done = self.metastore.complete_window_partition(
            self.key,
            window.start,
            window.end,
            token,
            self.owner,
            rows=rows,
            transactions=transactions,
            claim_id=claim_id,
            output_files=output_files,
            partition_rows=partition_rows,
        )
        if not done:
            raise self.read_error(
                window,
                token,
                f"the lease of reader {self.owner} expired and another reader took the "
                f"{self.read_error.partition_noun}",
            )

    def renew(self, window: Window, token: str) -> None:
        """Extend this reader's lease on the unit, or fail naming the loss."""
        if not self.metastore.renew_window_partition_lease(
            self.key, window.start, window.end, token, self.owner, self.lease_seconds
        ):
            raise self.read_error(
                window, token, f"reader {self.owner} lost its lease on the {self.read_error.partition_noun}"
            )

    def back_off(self, window: Window, token: str, exc: BaseException, retries: int) -> float:
        """After the ``retries``-th failure of a read: the error when it is not worth retrying or retries
        are used up; else the lease renewed and the delay to wait before the next try."""
        if not isinstance(exc, self.retryable):
            raise self.read_error(window, token, self.describe(exc)) from exc
        if retries > self.retries:
            raise self.read_error(
                window, token, f"{self.describe(exc)} (gave up after {self.retries} retries)"
            ) from exc
        self.renew(window, token)
        return self.backoff_seconds * (2 ** (retries - 1))

    # ----- a source that stages a unit in one go --------------------------------------------------
    def read(self, window: Window) -> UnitReadSummary:
        """Claim and stage units of the window with :meth:`read_unit` until every unit of it is done."""
        return self.read_units(window, self.read_unit)

    def read_unit(self, window: Window, token: str, writer: StagingWriter, read: UnitRead) -> None:
        """Stage one unit (see :class:`~airflow_provider_cdc.sources.protocol.StagesUnits`); a source
        whose reader relies on :meth:`read` implements it."""
        raise NotImplementedError(f"{type(self).__name__} stages no unit by itself: it implements read()")

    def read_units(
        self, window: Window, read_unit: ReadUnit, *, partition_rows: bool = False
    ) -> UnitReadSummary:
        """Claim and stage units of the window with ``read_unit`` until every unit of it is done.

        A try that fails with a :attr:`retryable` error is retried (backing off, the lease renewed)
        into a new writer of the same claim, which starts from an empty folder; any other error, or
        retries used up, fails the read with :attr:`read_error`. ``partition_rows``: a unit's rows
        are also its record count.
        """
        started = time.monotonic()
        summary = UnitReadSummary(window.window_id, window_location(self.staging_root, self.folder, window))
        if not self.metastore.window_partitions(self.key, window.start, window.end):
            raise self.read_error(window, None, f"the window of {self.key} has not been opened")
        for token, claim_id in self.claims(window):
            summary.units.append(self._read_unit(window, token, claim_id, read_unit, partition_rows))
        summary.seconds = time.monotonic() - started
        self.log.info(
            "Window %s of %s: read %d rows from %d %s(s) in %.1fs",
            window,
            self.folder,
            summary.rows,
            len(summary.units),
            self.read_error.partition_noun,
            summary.seconds,
        )
        return summary

    def _read_unit(
        self, window: Window, token: str, claim_id: str, read_unit: ReadUnit, partition_rows: bool
    ) -> UnitRead:
        result = UnitRead(token)
        began = time.monotonic()
        while True:
            result.rows, result.transactions = 0, 0.0
            writer = self.staging_writer(window, token, claim_id)
            try:
                with writer:
                    read_unit(window, token, writer, result)
                break
            except self.read_error:
                raise
            except Exception as exc:
                result.retries += 1
                delay = self.back_off(window, token, exc, result.retries)
                self.log.warning(
                    "%s %s of window %s: %s; retry %d/%d in %.1fs",
                    self.read_error.partition_noun.capitalize(),
                    token,
                    window,
                    self.describe(exc),
                    result.retries,
                    self.retries,
                    delay,
                )
                self._sleep(delay)
        result.seconds = time.monotonic() - began
        self.complete(
            window,
            token,
            claim_id,
            rows=result.rows,
            transactions=result.transactions,
            output_files=len(writer.files),
            partition_rows=partition_rows,
        )
        self.discard_other_claims(writer, token)
        return result
