"""Which Datastream files **arrived** in a window: a listing of the stream's objects by creation time.

Datastream writes no completeness marker, delivers at least once, keeps writing a backfill into the
folder of the minute the backfill started and may deliver CDC files for old minutes late, so a window
is the set of objects **created** in ``[start, end)``: Cloud Storage's object creation time
(``timeCreated``; a listing is strongly consistent), a local file's modification time. Once the clock
is past ``end`` plus a lateness margin, one listing returns every object created before ``end``.

The path's minute folders (``[object]/yyyy/mm/dd/hh/mm/``) are only a pruning hint: a file lies in
the folder of its first event's source time (a backfill: the minute the backfill started), which is
never later than its arrival by more than the source's clock skew, so folders after ``end + skew``
are skipped; with ``max_file_delay`` set, folders older than ``start - max_file_delay`` are skipped
too (off by default: a backfill can run for days).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import IO, Any, Protocol

from airflow_provider_cdc.core.timestamps import from_micros, to_micros
from airflow_provider_cdc.sources.datastream.names import is_data_file

__all__ = [
    "ArrivedFile",
    "FolderBounds",
    "GcsStreamFiles",
    "LocalStreamFiles",
    "StreamFiles",
    "split_token",
    "stream_files",
]

#: Separates an object's name from its generation in a unit token (``name#generation``).
GENERATION_SEPARATOR = "#"
_MINUTE_DEPTH = 5  # yyyy/mm/dd/hh/mm


@dataclass(frozen=True)
class ArrivedFile:
    """One data file of the stream: its path below the stream root, when it arrived, its size and its
    generation (Cloud Storage: the object generation listed, which the read pins; a local file: its
    modification time in µs)."""

    name: str
    created: datetime
    size: int
    generation: int | None = None

    @property
    def token(self) -> str:
        """The unit token of the file: its name, and ``#generation`` on Cloud Storage."""
        if self.generation is None:
            return self.name
        return f"{self.name}{GENERATION_SEPARATOR}{self.generation}"


def split_token(token: str) -> tuple[str, int | None]:
    """``(name, generation)`` of a unit token (see :attr:`ArrivedFile.token`)."""
    name, separator, generation = token.rpartition(GENERATION_SEPARATOR)
    if separator and generation.isdigit():
        return name, int(generation)
    return token, None


@dataclass(frozen=True)
class FolderBounds:
    """The minute folders a window's files can lie in: ``oldest`` (``None``: no lower bound) to
    ``newest``, both inclusive, as ``(yyyy, mm, dd, hh, mm)`` text tuples."""

    oldest: tuple[str, ...] | None
    newest: tuple[str, ...]

    @classmethod
    def of(
        cls, start: datetime, end: datetime, clock_skew: timedelta, max_file_delay: timedelta | None
    ) -> FolderBounds:
        newest = _minute_parts(end + clock_skew)
        oldest = None if max_file_delay is None else _minute_parts(start - max_file_delay)
        return cls(oldest, newest)

    def admits(self, parts: Sequence[str]) -> bool:
        """Whether a folder whose first ``len(parts)`` minute components are ``parts`` can hold files
        of the window (a folder that is not a minute folder is admitted: it is not ours to judge)."""
        depth = len(parts)
        if depth == 0 or depth > _MINUTE_DEPTH or not all(part.isdigit() for part in parts):
            return True
        prefix = tuple(parts)
        if prefix > self.newest[:depth]:
            return False
        return self.oldest is None or prefix >= self.oldest[:depth]

    def bounds_text(self) -> tuple[str | None, str]:
        """The bounds as path text (``yyyy/mm/dd/hh/mm``), for listing offsets."""
        oldest = None if self.oldest is None else "/".join(self.oldest)
        return oldest, "/".join(self.newest)


def _minute_parts(moment: datetime) -> tuple[str, ...]:
    moment = moment.astimezone(timezone.utc)
    return (
        f"{moment.year:04d}",
        f"{moment.month:02d}",
        f"{moment.day:02d}",
        f"{moment.hour:02d}",
        f"{moment.minute:02d}",
    )


class StreamFiles(Protocol):
    """The files of one stream root (local folder or ``gs://bucket/prefix``)."""

    root: str

    def object_names(self) -> list[str]:
        """The stream's objects (the folders directly under the root), sorted."""
        ...

    def arrived(
        self, obj: str, start: datetime, end: datetime, bounds: FolderBounds
    ) -> Iterator[ArrivedFile]:
        """The data files of object ``obj`` created in ``[start, end)`` in folders ``bounds`` admits."""
        ...

    def open(self, token: str) -> Any:
        """A context manager giving a binary stream of the file a unit token names."""
        ...


class LocalStreamFiles:
    """A stream root on a local (or mounted) file system; a file's modification time is its arrival."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/") or "/"

    def object_names(self) -> list[str]:
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            raise FileNotFoundError(f"Datastream root {self.root} does not exist") from None
        return sorted(entry.name for entry in entries if entry.is_dir() and not entry.name.startswith("."))

    def arrived(
        self, obj: str, start: datetime, end: datetime, bounds: FolderBounds
    ) -> Iterator[ArrivedFile]:
        start_us, end_us = to_micros(start), to_micros(end)
        base = os.path.join(self.root, obj)
        yield from self._walk(base, obj, (), start_us, end_us, bounds)

    def _walk(
        self,
        folder: str,
        relative: str,
        parts: tuple[str, ...],
        start_us: int,
        end_us: int,
        bounds: FolderBounds,
    ) -> Iterator[ArrivedFile]:
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except FileNotFoundError:
            return
        for entry in entries:
            name = f"{relative}/{entry.name}"
            if entry.is_dir():
                child = (*parts, entry.name)
                if bounds.admits(child):
                    yield from self._walk(entry.path, name, child, start_us, end_us, bounds)
                continue
            if not is_data_file(name):
                continue
            stat = entry.stat()
            created_us = stat.st_mtime_ns // 1000
            if start_us <= created_us < end_us:
                # The modification time stands in for a generation: a file written again is a new unit.
                yield ArrivedFile(name, from_micros(created_us), stat.st_size, created_us)

    @contextmanager
    def open(self, token: str) -> Iterator[IO[bytes]]:
        name, _ = split_token(token)
        path = os.path.join(self.root, name)
        try:
            handle = open(path, "rb")
        except FileNotFoundError:
            raise FileNotFoundError(
                f"Datastream file {path} was listed for the window but no longer exists"
            ) from None
        with handle:
            yield handle


class GcsStreamFiles:
    """A stream root ``gs://bucket/prefix`` read with a ``google.cloud.storage`` client; an object's
    ``timeCreated`` is its arrival, and a read pins the generation that was listed."""

    def __init__(self, root: str, client: Any) -> None:
        if not root.startswith("gs://"):
            raise ValueError(f"a Cloud Storage stream root starts with gs://, got {root!r}")
        self.root = root.rstrip("/")
        bucket, _, prefix = self.root[len("gs://") :].partition("/")
        if not bucket:
            raise ValueError(f"stream root {root!r} names no bucket")
        self.bucket_name = bucket
        self.prefix = f"{prefix}/" if prefix else ""
        self.client = client

    def object_names(self) -> list[str]:
        iterator = self.client.list_blobs(self.bucket_name, prefix=self.prefix, delimiter="/")
        for _page in iterator.pages:  # prefixes fill in as pages are read
            pass
        return sorted(p[len(self.prefix) :].rstrip("/") for p in iterator.prefixes)

    def arrived(
        self, obj: str, start: datetime, end: datetime, bounds: FolderBounds
    ) -> Iterator[ArrivedFile]:
        object_prefix = f"{self.prefix}{obj}/"
        oldest, newest = bounds.bounds_text()
        options: dict[str, Any] = {"prefix": object_prefix, "fields": _LIST_FIELDS}
        # Minute folders sort as text in time order; the end offset is exclusive, so the folder
        # after the newest one admitted ends the listing.
        options["end_offset"] = f"{object_prefix}{newest}0"
        if oldest is not None:
            options["start_offset"] = f"{object_prefix}{oldest}"
        for blob in self.client.list_blobs(self.bucket_name, **options):
            relative = blob.name[len(self.prefix) :]
            if not is_data_file(relative):
                continue
            parts = tuple(relative.split("/")[1:-1][:_MINUTE_DEPTH])
            if not bounds.admits(parts):
                continue
            created = blob.time_created
            if created is None:
                raise ValueError(
                    f"Cloud Storage listed gs://{self.bucket_name}/{blob.name} without timeCreated"
                )
            if start <= created < end:
                yield ArrivedFile(relative, created, int(blob.size or 0), int(blob.generation))

    @contextmanager
    def open(self, token: str) -> Iterator[IO[bytes]]:
        name, generation = split_token(token)
        blob = self.client.bucket(self.bucket_name).blob(f"{self.prefix}{name}", generation=generation)
        with blob.open("rb", chunk_size=_READ_CHUNK_BYTES) as handle:
            yield handle


_LIST_FIELDS = "items(name,size,generation,timeCreated),prefixes,nextPageToken"
_READ_CHUNK_BYTES = 8 * 1024 * 1024


def stream_files(root: str, client_factory: Any = None) -> StreamFiles:
    """The files of ``root``: a ``gs://`` root through ``client_factory()`` (a storage client), an
    absolute local path as it is."""
    if root.startswith("gs://"):
        if client_factory is None:
            raise ValueError(f"stream root {root} is on Cloud Storage: a storage client is needed")
        return GcsStreamFiles(root, client_factory())
    if "://" in root or not os.path.isabs(root):
        raise ValueError(
            f"a Datastream root is a gs:// URI or an absolute local path, got {root!r} "
            "(tasks run in other working directories)"
        )
    return LocalStreamFiles(root)
