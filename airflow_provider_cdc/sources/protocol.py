"""What a source of windows supplies, declared once.

A source turns a window ``[start, end)`` into **units** (change-stream partitions, table batches,
files, shards), records them in the metastore as the window's partitions, and stages each unit's
changes as staged change rows (:mod:`airflow_provider_cdc.core.contract.staged_rows`) under a claim.
Everything else — recording the pipeline and checking the previous window is applied, opening and
re-opening the window (its epoch), claims, leases, fencing and retries, the completion check, the
window handle — is shared: :class:`~airflow_provider_cdc.sources.hook.WindowSourceHook`,
:class:`~airflow_provider_cdc.sources.claimed_reader.ClaimedWindowReader`,
:mod:`airflow_provider_cdc.sources.operators`, :mod:`airflow_provider_cdc.metastore.completion`.

A source implements the two protocols below: :class:`WindowSource` on its hook (a
:class:`~airflow_provider_cdc.sources.hook.WindowSourceHook`) and :class:`UnitReader` on its reader (a
:class:`~airflow_provider_cdc.sources.claimed_reader.ClaimedWindowReader`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from airflow_provider_cdc.core.window import Window

if TYPE_CHECKING:
    from airflow_provider_cdc.core.findings import Finding
    from airflow_provider_cdc.staging.parquet import StagingWriter

__all__ = ["ReadSummary", "StagesUnits", "UnitReader", "WindowSource"]


@runtime_checkable
class ReadSummary(Protocol):
    """What one reader did for a window; ``to_dict()`` is the read operator's XCom (``window_id``,
    ``staging_uri``, ``rows``, ``partitions``, ``retries``, ``seconds`` at least)."""

    def to_dict(self) -> dict[str, Any]: ...


@runtime_checkable
class UnitReader(Protocol):
    """The reader side of a source: stages the units it claims of a window."""

    #: Errors of the source's client worth retrying (a unit's read is retried on them, backing off).
    retryable: tuple[type[BaseException], ...]

    def read(self, window: Window) -> ReadSummary:
        """Claim and stage units of ``window`` until every unit of it is done (shared with other
        readers). :meth:`ClaimedWindowReader.read` does this with :meth:`StagesUnits.read_unit`; a reader
        that can resume may claim in the same way and resume a failed unit from its last record instead."""
        ...


@runtime_checkable
class StagesUnits(UnitReader, Protocol):
    """A reader that stages one unit at a time and leaves claims, retries and completion to
    :meth:`ClaimedWindowReader.read_units` (a retried unit starts over in an empty claim folder)."""

    def read_unit(self, window: Window, token: str, writer: StagingWriter, read: Any) -> None:
        """Stage unit ``token`` of ``window`` into ``writer`` (its claim's folder), adding to
        ``read.rows`` and ``read.transactions``; may raise a :attr:`retryable` error."""
        ...


@runtime_checkable
class WindowSource(Protocol):
    """The hook side of a source."""

    @property
    def source_key(self) -> str:
        """The source's key in the metastore (``…/<name>``: its last segment names the staging folder)."""
        ...

    def check_readable(self, window: Window) -> None:
        """Fail when ``window`` can no longer be read (a change stream's retention), or is not yet
        complete at the source (the lateness margin of a source whose files arrive late); warn near it."""
        ...

    def check_source(self, **options: Any) -> list[Finding]:
        """What the preflight finds about the source before a window is recorded: that it exists and
        answers (a database, change stream, tables; a bucket and prefix; an instance and table), with
        "did you mean" suggestions from what exists (``options``: the open step's own settings, such
        as a table source's ``mode`` and ``tables``). An error a retry may heal is ``transient``."""
        ...

    def plan_units(self, window: Window, staging_root: str, owner: str, **options: Any) -> list[str]:
        """Plan the (just opened) window into units, record them as its partitions, return their tokens."""
        ...

    def window_reader(self, staging_root: str, owner: str, **options: Any) -> UnitReader:
        """A reader of the source's windows (``options``: leases, retries, staging, logging)."""
        ...

    def window_complete(self, window: Window) -> bool:
        """Whether every unit of ``window`` is staged (the metastore alone tells, by default)."""
        ...
