"""The Datastream source's hook: windows of the files a Datastream stream wrote to Cloud Storage (or a
local folder), by arrival.

A window ``[start, end)`` is the set of data files **created** in it (see
:mod:`~airflow_provider_cdc.sources.datastream.listing`), readable once the clock is past ``end`` plus
the lateness margin (:meth:`DatastreamHook.check_readable`; default two file rotation intervals plus a
minute of clock slack). Opening a window lists its files once and records each as a unit (a partition
of the window in the metastore, living ``[start, end)``); an opening again of the same window reads the
recorded files, never a new listing, so a re-run reads exactly the same objects (and, on Cloud Storage,
the same generations). Mapped readers claim the files like partitions
(:class:`~airflow_provider_cdc.sources.datastream.reader.DatastreamWindowReader`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_provider_cdc.core.contract.staged_rows import ARRIVAL
from airflow_provider_cdc.core.findings import OK, WARNING, Finding, did_you_mean, errors_of, suggest
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.timestamps import format_timestamp, seconds_duration
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.hooks.storage import DEFAULT_GCP_CONN_ID
from airflow_provider_cdc.metastore.model import PartitionSpec, is_stream_path_segment
from airflow_provider_cdc.sources.datastream.listing import (
    ArrivedFile,
    FolderBounds,
    StreamFiles,
    stream_files,
)
from airflow_provider_cdc.sources.datastream.names import EMPTY_WINDOW_TOKEN, is_object_name
from airflow_provider_cdc.sources.datastream.settings import DatastreamSettings, DatastreamSettingsError
from airflow_provider_cdc.sources.hook import SourceError, WindowSourceHook

if TYPE_CHECKING:
    from airflow_provider_cdc.sources.datastream.reader import DatastreamWindowReader

__all__ = [
    "DEFAULT_FILE_ROTATION_INTERVAL",
    "DatastreamHook",
    "DatastreamSourceError",
    "WindowNotArrivedError",
    "lateness_margin_for",
]

#: Datastream's longest file rotation interval (it allows 15-60 seconds).
DEFAULT_FILE_ROTATION_INTERVAL = timedelta(seconds=60)
#: Slack for the clocks of Cloud Storage and the worker.
CLOCK_SLACK = timedelta(seconds=60)
#: How far ahead of Cloud Storage's clock the source database's clock may run (folder pruning only).
DEFAULT_CLOCK_SKEW = timedelta(minutes=10)

Duration = timedelta | int | float | str | None


class DatastreamSourceError(SourceError):
    """A Datastream window step failed (listing, reading or recording); the message names the window
    and the file, the cause is kept."""


class WindowNotArrivedError(DatastreamSourceError):
    """A window whose files may still be arriving (the clock is not past its end plus the margin)."""


def lateness_margin_for(file_rotation_interval: timedelta) -> timedelta:
    """The default lateness margin: two rotation intervals (a file is created when its writer closes
    it, up to one interval after its first event; one more for the upload) plus clock slack."""
    return 2 * file_rotation_interval + CLOCK_SLACK


def source_key_of(stream_root: str, source: str) -> str:
    """The metastore key of a Datastream source: ``datastream/{root's segments}/{source}``."""
    validate_identifier(source, "source")
    root = stream_root.rstrip("/")
    if root.startswith("gs://"):
        segments = ["gs", *root[len("gs://") :].split("/")]
    else:
        segments = ["local", *[s for s in root.split("/") if s]]
    if not all(is_stream_path_segment(segment) for segment in segments):
        import hashlib

        segments = ["root", hashlib.sha256(root.encode()).hexdigest()[:24]]
    return "/".join(["datastream", *segments, source])


class DatastreamHook(WindowSourceHook):
    """Windows of the Datastream files under ``stream_root`` (``gs://bucket/prefix`` or an absolute
    local folder), read into staging.

    :param stream_root: the stream's destination path: its objects are the folders directly below.
    :param source: the source's name (a plain identifier): its staging folder and metastore key.
    :param objects: the Datastream objects (folders, e.g. ``shop_customers`` or ``ea-main_users``) to
        read; default all. Each maps to a table (``settings.table_names``, else the object name with
        every character that is not a letter, digit or ``_`` replaced by ``_``); two objects mapping
        to one table are refused when the hook is built (given objects) or a window is opened
        (listed ones), naming both.
    :param settings: :class:`DatastreamSettings` or its dict: the database kind override, primary keys,
        JSONL column types and table names.
    :param file_rotation_interval: the stream's ``file_rotation_interval`` (default 60 s), from which
        the lateness margin is derived.
    :param lateness_margin: how long after a window's end its files are listed (default
        :func:`lateness_margin_for` the rotation interval).
    :param max_file_delay: skip minute folders older than the window's start minus this (default: list
        every folder; a backfill writes into its start minute's folder for as long as it runs).
    :param gcp_conn_id: the Google Cloud connection (read for a ``gs://`` root or staging).
    :param impersonation_chain: a service account (or chain) to impersonate when reading the files.
    :param metastore_conn_id: connection of the metastore.
    :param clock: the current UTC time (a test drives it).
    """

    def __init__(
        self,
        stream_root: str,
        source: str,
        *,
        objects: Sequence[str] | None = None,
        settings: DatastreamSettings | Mapping[str, Any] | None = None,
        file_rotation_interval: Duration = DEFAULT_FILE_ROTATION_INTERVAL,
        lateness_margin: Duration = None,
        max_file_delay: Duration = None,
        gcp_conn_id: str = DEFAULT_GCP_CONN_ID,
        impersonation_chain: str | Sequence[str] | None = None,
        metastore_conn_id: str = CdcMetastoreHook.default_conn_name,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        super().__init__()
        self.stream_root = stream_root
        self.source = validate_identifier(source, "source")
        if isinstance(objects, str) or not all(is_object_name(obj) for obj in objects or ()):
            raise ValueError(
                f"objects must be a list of Datastream object names (non-empty, no '/'), got {objects!r}"
            )
        self.objects = list(objects or ())
        if isinstance(settings, DatastreamSettings):
            self.settings = settings
        else:
            self.settings = DatastreamSettings.from_dict(dict(settings or {}))
        self.settings.object_tables(self.objects)  # two given objects on one table fail at once
        rotation = (
            seconds_duration(file_rotation_interval, "file_rotation_interval")
            or DEFAULT_FILE_ROTATION_INTERVAL
        )
        self.file_rotation_interval = rotation
        margin = seconds_duration(lateness_margin, "lateness_margin")
        self.lateness_margin = lateness_margin_for(rotation) if margin is None else margin
        self.max_file_delay = seconds_duration(max_file_delay, "max_file_delay")
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.metastore_conn_id = metastore_conn_id
        self._clock = clock or (lambda: datetime.now(timezone.utc))

    # ----- the source's part ----------------------------------------------------------------------
    source_error = DatastreamSourceError
    #: A window is the files that arrived in it: every event staged for it is the window's, whatever
    #: its source timestamp (the merge keeps them all).
    window_basis = ARRIVAL

    @property
    def source_key(self) -> str:
        return source_key_of(self.stream_root, self.source)

    def readable_at(self, window: Window) -> datetime:
        """When every file of ``window`` has arrived: its end plus the lateness margin."""
        return window.end + self.lateness_margin

    def check_readable(self, window: Window) -> None:
        """Fail while files of ``window`` may still arrive (the clock before its end plus the margin)."""
        now, ready = self._clock(), self.readable_at(window)
        if now < ready:
            raise WindowNotArrivedError(
                f"window {window}: files created before its end may still be arriving; it is readable "
                f"from {format_timestamp(ready)} (end + lateness margin {self.lateness_margin}), "
                f"it is {format_timestamp(now)}"
            )

    def check_source(self, **options: Any) -> list[Finding]:
        """The stream root exists (a ``gs://`` bucket and a prefix holding objects, or a folder) and
        holds the configured ``objects``; else suggestions from what exists next to them."""
        root = self.stream_root.rstrip("/")
        if root.startswith("gs://"):
            bucket = root[len("gs://") :].partition("/")[0]
            findings = self._check_bucket(bucket)
            if errors_of(findings):
                return findings
        try:
            objects = self.files.object_names()
        except FileNotFoundError:
            objects = None
        except ValueError as exc:  # not gs:// nor an absolute path
            return [Finding("stream_root", str(exc), "give gs://bucket/prefix or an absolute folder")]
        if not objects:
            last = root.rstrip("/").rsplit("/", 1)[-1]
            siblings = self._siblings(root)
            what = "does not exist" if objects is None else "holds no Datastream object (folder)"
            if objects is None or suggest(last, siblings):
                return [Finding(
                    "stream_root", f"{root} {what}",
                    did_you_mean(last, siblings, "folder"),
                )]
            fix = "check that it is the stream's destination path, if the stream has written files"
            return [Finding("stream_root", f"{root} holds no Datastream object yet", fix, level=WARNING)]
        findings = [
            Finding("objects", f"no object {o!r} under {root}", did_you_mean(o, objects, "object"))
            for o in self.objects
            if o not in objects
        ]
        return findings or [Finding("stream_root", f"{root} holds {len(objects)} object(s)", level=OK)]

    def _check_bucket(self, bucket: str) -> list[Finding]:
        from google.api_core import exceptions as gexc

        client = self._storage_client()
        try:
            if client.lookup_bucket(bucket) is not None:
                return []
        except (gexc.Forbidden, gexc.Unauthorized) as exc:
            return [Finding(
                "stream_root", f"Cloud Storage refused bucket {bucket!r} to connection {self.gcp_conn_id!r}: "
                f"{str(exc).splitlines()[0]}", "grant its identity roles/storage.objectViewer on the bucket",
            )]
        try:
            known: list[str] | None = [b.name for b in client.list_buckets()]
        except gexc.GoogleAPICallError:  # no permission to list the project's buckets: no suggestions
            known = None
        fix = "check stream_root" if known is None else did_you_mean(bucket, known, "bucket")
        return [Finding("stream_root", f"Cloud Storage bucket {bucket!r} does not exist", fix)]

    def _siblings(self, root: str) -> list[str]:
        """The folders next to ``root`` (for suggestions); empty when they cannot be listed."""
        parent = root.rsplit("/", 1)[0]
        if root.startswith("gs://"):
            bucket, _, prefix = parent[len("gs://") :].partition("/")
            prefix = f"{prefix}/" if prefix else ""
            listing = self._storage_client().list_blobs(bucket, prefix=prefix, delimiter="/")
            for _page in listing.pages:  # prefixes fill in as pages are read
                pass
            return [p[len(prefix) :].rstrip("/") for p in listing.prefixes]
        try:
            return [entry.name for entry in os.scandir(parent or "/") if entry.is_dir()]
        except OSError:
            return []

    @cached_property
    def files(self) -> StreamFiles:
        """The stream root's files (a Cloud Storage client through the Google connection for gs://)."""
        return stream_files(self.stream_root, self._storage_client)

    def _storage_client(self) -> Any:
        """A Cloud Storage client with the identity of ``gcp_conn_id`` (the google provider's
        ``GCSHook``); without a ``google_cloud_default`` connection, Application Default Credentials;
        another connection that is not defined fails (``ConnectionNotDefinedError``)."""
        from airflow_provider_cdc.hooks.storage import gcs_client

        return gcs_client(self.gcp_conn_id, self.impersonation_chain, self.log)

    def stream_objects(self) -> list[str]:
        """The objects to read: ``objects``, else every folder directly under the stream root."""
        return self.objects or self.files.object_names()

    def object_tables(self, window: Window) -> dict[str, str]:
        """Each object to read and its table; two objects mapping to one table fail naming both."""
        try:
            objects = self.stream_objects()
        except Exception as exc:
            raise DatastreamSourceError(
                f"window {window}: listing the objects of {self.stream_root} failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        try:
            return self.settings.object_tables(objects)
        except DatastreamSettingsError as exc:
            raise DatastreamSourceError(f"window {window}: stream {self.stream_root}: {exc}") from None

    def open_window_epoch(
        self, pipeline: str, window: Window, staging_root: str, owner: str, **options: Any
    ) -> tuple[int, list[str]]:
        """Open (or re-open) a window (see the base class); the stream's objects are mapped to their
        tables first, so that two objects on one table fail before anything is recorded."""
        self.check_readable(window)
        self.object_tables(window)
        return super().open_window_epoch(pipeline, window, staging_root, owner, **options)

    def list_window(self, window: Window) -> list[ArrivedFile]:
        """The data files created in ``window``, by object then name (one listing)."""
        bounds = FolderBounds.of(window.start, window.end, DEFAULT_CLOCK_SKEW, self.max_file_delay)
        objects = self.stream_objects()
        found: list[ArrivedFile] = []
        for obj in objects:
            found.extend(self.files.arrived(obj, window.start, window.end, bounds))
        return sorted(found, key=lambda f: f.name)

    def recorded_files(self, window: Window) -> list[str] | None:
        """The files an earlier opening of ``window`` recorded (``None``: it was never listed)."""
        store = self.metastore
        if not store.is_known_stream(self.source_key):
            return None
        tokens = [
            record.token
            for record in store.partitions_overlapping(self.source_key, window.start, window.end)
            if record.start_timestamp == window.start and record.end_timestamp == window.end
        ]
        return sorted(tokens) or None

    def plan_units(self, window: Window, staging_root: str, owner: str, **options: Any) -> list[str]:
        """The window's files as its units: those an earlier opening recorded, else one listing,
        recorded (each file a partition living ``[start, end)``)."""
        tokens = self.recorded_files(window)
        if tokens is not None:
            self.log.info(
                "Window %s: reading the %d file(s) recorded when it was first opened", window, len(tokens)
            )
        else:
            try:
                arrived = self.list_window(window)
            except Exception as exc:
                raise DatastreamSourceError(
                    f"window {window}: listing the files of {self.stream_root} failed: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            tokens = [f.token for f in arrived]
            size = sum(f.size for f in arrived)
            self.log.info(
                "Window %s: %d file(s) (%.1f MiB) of %s arrived",
                window,
                len(tokens),
                size / 2**20,
                self.stream_root,
            )
        if not tokens:  # one empty unit, so that readers and the merge see the window done
            tokens = [f"{EMPTY_WINDOW_TOKEN}{window.window_id}"]
        store = self.metastore
        store.add_partitions(self.source_key, [PartitionSpec(token, window.start) for token in tokens])
        store.end_partitions(self.source_key, tokens, window.end)
        store.add_window_partitions(self.source_key, window.start, window.end, tokens)
        return tokens

    def window_reader(self, staging_root: str, owner: str, **options: Any) -> DatastreamWindowReader:
        from airflow_provider_cdc.sources.datastream.reader import DatastreamWindowReader

        return DatastreamWindowReader(
            self.files,
            self.settings,
            self.metastore,
            self.source_key,
            self.staging_folder,
            staging_root,
            owner=owner,
            **self.reader_options(staging_root, options),
        )


#: The unit of a window no file arrived in (it stages nothing).
