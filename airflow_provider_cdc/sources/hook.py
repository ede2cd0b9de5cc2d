"""The base of every source's hook: the metastore handle, opening a window (each opening an epoch),
reading it through the claimed reader, its completion and its handle.

A source's hook derives from :class:`WindowSourceHook` (after its connection's hook class, if any) and
implements :class:`~airflow_provider_cdc.sources.protocol.WindowSource`: ``source_key``,
``check_readable``, ``check_source`` (the preflight's checks of the source), ``plan_units``,
``window_reader`` and, for its own error types, ``step_errors``.
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_cdc._compat import BaseHook
from airflow_provider_cdc._errors import CdcError, metastore_errors
from airflow_provider_cdc.core.contract.locations import WindowLocations, staging_folder
from airflow_provider_cdc.core.contract.staged_rows import COMMIT_TIME
from airflow_provider_cdc.core.contract.window_handle import WindowHandle
from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.filesystems import is_local
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.metastore import Metastore, MetastoreError

if TYPE_CHECKING:
    from airflow_provider_cdc.core.findings import Finding
    from airflow_provider_cdc.metastore.completion import LaggingPartition
    from airflow_provider_cdc.metastore.model import WindowRecord
    from airflow_provider_cdc.sources.protocol import ReadSummary, UnitReader

__all__ = ["SourceError", "WindowSourceHook"]


class SourceError(CdcError):
    """The source or the metastore refused a step of a window; the cause is kept."""


class WindowSourceHook(BaseHook, metaclass=ABCMeta):
    """What every source's hook shares. A subclass sets ``metastore_conn_id`` (the metastore's
    connection) in its ``__init__`` and implements the source's part, the abstract methods
    (:class:`~airflow_provider_cdc.sources.protocol.WindowSource`): a hook lacking one cannot be built.

    The metastore is opened once per hook (see :meth:`close`).
    """

    metastore_conn_id: str = CdcMetastoreHook.default_conn_name
    #: The error a failed window step raises (the reader's or the metastore's error as its cause).
    source_error: ClassVar[type[CdcError]] = SourceError
    #: Which staged rows are a window's (the window handle carries it to the merge): those committed in
    #: it, or (``ARRIVAL``, a source whose windows are what arrived in them) every row staged for it.
    window_basis: ClassVar[str] = COMMIT_TIME

    # ----- the source's part ----------------------------------------------------------------------
    @property
    @abstractmethod
    def source_key(self) -> str:
        """The source's key in the metastore; its last segment names the staging folder."""

    @abstractmethod
    def check_readable(self, window: Window) -> None:
        """Fail when ``window`` can no longer (or not yet) be read; see the protocol."""

    @abstractmethod
    def check_source(self, **options: Any) -> list[Finding]:
        """The preflight's findings about the source (exists, answers); see the protocol."""

    @abstractmethod
    def plan_units(self, window: Window, staging_root: str, owner: str, **options: Any) -> list[str]:
        """Plan the opened window into units recorded as its partitions; see the protocol."""

    @abstractmethod
    def window_reader(self, staging_root: str, owner: str, **options: Any) -> UnitReader:
        """A reader of the source's windows; see the protocol."""

    @contextmanager
    def step_errors(self, window: Window, what: str) -> Iterator[None]:
        """The reader's and the metastore's errors of a window step as the source's error
        (:attr:`source_error`); an unreachable metastore as ``MetastoreUnavailableError`` naming ``what``."""
        from airflow_provider_cdc.sources.claimed_reader import WindowReadError

        try:
            with metastore_errors(what):
                yield
        except WindowReadError as exc:
            raise self.source_error(str(exc)) from exc
        except MetastoreError as exc:
            raise self.source_error(f"window {window}: {exc}") from exc

    # ----- shared ---------------------------------------------------------------------------------
    @cached_property
    def _metastore_hook(self) -> CdcMetastoreHook:
        return CdcMetastoreHook(self.metastore_conn_id)

    @property
    def metastore(self) -> Metastore:
        """The metastore, on one engine for the life of this hook (see :meth:`close`)."""
        return self._metastore_hook.metastore

    def close(self) -> None:
        """Dispose the metastore engine (a later use opens a new one)."""
        if "_metastore_hook" in self.__dict__:
            self._metastore_hook.close()

    @property
    def staging_folder(self) -> str:
        """The source's staging folder (``staging_folder`` of :attr:`source_key`)."""
        return staging_folder(self.source_key)

    @property
    def storage_conn_id(self) -> str | None:
        """The connection whose identity writes the staging (that of the change sets and the lake)."""
        return getattr(self, "gcp_conn_id", None)

    def staging_storage_options(self, staging_root: str) -> dict[str, str] | None:
        """Object-store options of ``staging_root`` (``None`` for a local path)."""
        if is_local(staging_root):
            return None
        from airflow_provider_cdc.hooks.storage import storage_options

        return storage_options(self.storage_conn_id)

    def reader_options(self, staging_root: str, options: Mapping[str, Any]) -> dict[str, Any]:
        """A reader's options: the hook's log and the staging's storage options unless given."""
        options = dict(options)
        options.setdefault("log", self.log)
        if "storage_options" not in options:
            options["storage_options"] = self.staging_storage_options(staging_root)
        return options

    def reopen_window(self, pipeline: str, window: Window, staging_root: str) -> WindowRecord:
        """Record the window of ``pipeline`` as read from this source, opening it again when it was
        recorded before, in any state (a retry, clear, backfill, or a second run): every opening is an
        epoch (the record's ``attempt``) and fences the steps of earlier openings out. The window's
        units start over; staged files are never deleted here (each claim writes a folder of its own,
        a run of an earlier opening may still be merging its claims, and the merge reads recorded
        claims only)."""
        store = self.metastore
        record = store.open_window(
            pipeline, self.source_key, window.start, window.end, staging_uri=staging_root, reopen=True
        )
        store.reset_window_partitions(self.source_key, window.start, window.end)
        return record

    def open_window_epoch(
        self, pipeline: str, window: Window, staging_root: str, owner: str, **options: Any
    ) -> tuple[int, list[str]]:
        """Open (or re-open) a window and plan its units; returns the opening's epoch and the units'
        tokens (``options``: the source's planning options)."""
        self.check_readable(window)
        with self.step_errors(window, f"window {window} of pipeline {pipeline!r}: opening the window"):
            record = self.reopen_window(pipeline, window, staging_root)
            return record.attempt, self.plan_units(window, staging_root, owner, **options)

    def open_window(self, pipeline: str, window: Window, staging_root: str, owner: str) -> list[str]:
        """Start (or restart) reading a window; returns the units' tokens (:meth:`open_window_epoch`)."""
        return self.open_window_epoch(pipeline, window, staging_root, owner)[1]

    def window_handle(
        self, pipeline: str, window: Window, staging_root: str, epoch: int | None
    ) -> WindowHandle:
        """The handle of an opening of ``window`` that later steps take: its staging location is where
        this source's readers stage the window (:attr:`staging_folder` under ``staging_root``)."""
        location = WindowLocations(staging_root=staging_root).staging(self.staging_folder, window)
        return WindowHandle(
            pipeline, self.source_key, window, staging_root, epoch, self.window_basis, location
        )

    def read_window(self, window: Window, staging_root: str, owner: str, **options: Any) -> ReadSummary:
        """Read units of the window (sharing the work with other readers) into staging."""
        self.check_readable(window)
        with self.step_errors(window, f"window {window}: reading it (reader {owner})"):
            return self.window_reader(staging_root, owner, **options).read(window)

    def lagging_units(self, timestamp: datetime, window: Window | None = None) -> list[LaggingPartition]:
        """Units alive at ``timestamp`` not read up to it, and unread units of ``window``."""
        from airflow_provider_cdc.metastore.completion import lagging_units

        what = f"window {window}" if window is not None else f"source {self.source_key}"
        at = format_timestamp(timestamp)
        with metastore_errors(f"{what}: checking which partitions are drained to {at}"):
            return lagging_units(self.metastore, self.source_key, timestamp, window)

    def window_complete(self, window: Window) -> bool:
        """Whether every unit of ``window`` is staged, from the metastore alone."""
        return not self.lagging_units(window.end, window)
