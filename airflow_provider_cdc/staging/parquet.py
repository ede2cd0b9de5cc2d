"""Writing change rows to Parquet staging, one directory per (stream, window, partition).

Layout (``domain.contract.locations``): ``{root}/{stream}/{window_id}/partition={partition_key}/
claim={claim_id}/part-{n:05d}.parquet``. Each claim of a partition (one reading of it, see the
metastore's ``claim_window_partition``) writes a folder of its own, so a reader that lost its lease
and wakes up later writes and clears only its own folder, never the output of the claim that
completed the partition; the metastore records that claim, and readers of the staging read only
recorded claims (``staged_files(..., claims=...)`` of :mod:`.reading`). Without a claim id a writer
uses the partition's folder itself. File names are deterministic and a writer clears its folder when
it opens, so a retried write replaces the earlier attempt's files instead of adding to them; a
resuming writer keeps them and continues the numbering. ``root`` is a local path or a URI
(``gs://bucket/prefix``), opened with ``storage_options`` unless a filesystem is given
(:func:`.files.open_root`); on a local file system every file is written under a hidden temporary
name and renamed into place, on object stores each file is one atomic object write. Rows are kept as
Python values for at most ``BATCH_ROWS`` rows, then become an Arrow record batch: on a local file
system each batch is written at once as a row group of the file being written, so memory is bounded
by ``BATCH_ROWS``; for an object store a file's batches are held until it is full (memory bounded by
``rows_per_file``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_provider_cdc import filesystems
from airflow_provider_cdc.core.contract.locations import WindowLocations, partition_key
from airflow_provider_cdc.core.contract.staged_rows import (
    NULLABLE_COLUMNS,
    STAGED_CHANGE_COLUMNS,
    STAGED_CHANGE_FIELDS,
    StagedChanges,
    arrow_type,
    staged_change_schema,
)
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.timestamps import from_micros
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.staging.batches import memory_pool, record_batch
from airflow_provider_cdc.staging.files import (
    PART_FILE,
    check_window,
    delete_quietly,
    is_local,
    list_files,
    open_root,
    partition_directories,
    window_directory,
)

_TIMESTAMP_INDEX = STAGED_CHANGE_COLUMNS.index("commit_timestamp")
_TYPES: dict[str, pa.DataType] = {name: arrow_type(kind) for name, kind, _ in STAGED_CHANGE_FIELDS}

#: Arrow schema of a staged change row (only ``NULLABLE_COLUMNS`` may be null).
STAGED_CHANGE_SCHEMA = staged_change_schema()

# Python types a row's values must have (checked per row, so a bad row is refused where it is written).
_PYTHON_TYPES: dict[str, type] = {
    name: {
        pa.string(): str,
        pa.int32(): int,
        pa.int64(): int,
        pa.bool_(): bool,
        pa.timestamp("us", tz="UTC"): datetime,
    }[type_]
    for name, type_ in _TYPES.items()
}

DEFAULT_ROWS_PER_FILE = 50_000
#: Rows buffered as Python values before they become an Arrow record batch (and, on a local file
#: system, a row group): a reader's peak memory grows by about 4 KB per row of a batch.
BATCH_ROWS = 4_096
# Columns with few distinct values get dictionary encoding; the per-change ones (commit times,
# transactions, keys, images, a change's source metadata, sequence numbers) rarely repeat, so a
# dictionary for them is built only to be discarded.
_DICTIONARY_COLUMNS = [
    name
    for name in STAGED_CHANGE_COLUMNS
    if name
    not in (
        "commit_timestamp",
        "transaction_id",
        "keys_json",
        "after_json",
        "before_json",
        "source_metadata_json",
        "change_sequence_number",
    )
]


def window_location(root: str, stream: str, window: Window) -> str:
    """Where a window's staged rows live: ``{root}/{stream}/{window_id}`` (``root`` as given)."""
    return WindowLocations(staging_root=root).staging(stream, check_window(window))


@dataclass(frozen=True)
class StagedFile:
    """One Parquet file a :class:`StagingWriter` has committed."""

    path: str
    rows: int
    min_commit_timestamp: datetime
    max_commit_timestamp: datetime


class StagingWriter:
    """Writes one partition's change rows of one window to Parquet files.

    Use as a context manager. On entry the partition's directory is cleared (``resume=False``) or
    its files are kept and numbering continues after the highest one (``resume=True``). Rows are
    buffered up to ``rows_per_file`` and written as ``part-00000.parquet``, ``part-00001.parquet``,
    ...; leaving the ``with`` block normally writes the rest, leaving it with an exception discards
    the unwritten rows (they were not acknowledged, so the reader reads them again).
    ``on_file_written`` is called after each file is committed, e.g. to advance a watermark.
    ``root`` is opened with ``storage_options`` (the object-store client's options, as for the
    targets' tables) unless ``filesystem`` is given.
    """

    def __init__(
        self,
        root: str,
        stream: str,
        window: Window,
        partition_token: str,
        rows_per_file: int = DEFAULT_ROWS_PER_FILE,
        filesystem: pafs.FileSystem | None = None,
        *,
        resume: bool = False,
        on_file_written: Callable[[StagedFile], None] | None = None,
        claim_id: str | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        if isinstance(rows_per_file, bool) or not isinstance(rows_per_file, int) or rows_per_file < 1:
            raise ValueError(f"rows_per_file must be a positive integer, got {rows_per_file!r}")
        self.stream = validate_identifier(stream, "change stream")
        self.window = check_window(window)
        self.partition_token = partition_token
        self.partition_key = partition_key(partition_token)
        self.rows_per_file = rows_per_file
        self.resume = resume
        self.filesystem, base = open_root(root, filesystem, storage_options)
        self.partition_directory, self.directory = partition_directories(
            window_directory(base, self.stream, self.window), partition_token, claim_id
        )
        self.claim_id = claim_id
        self.files: list[StagedFile] = []
        self._on_file_written = on_file_written
        self._local = is_local(self.filesystem)
        self._columns: dict[str, list[Any]] = {name: [] for name in STAGED_CHANGE_COLUMNS}
        self._column_lists = list(self._columns.values())
        self._pending = 0  # rows in self._columns
        self._batches: list[pa.RecordBatch] = []  # object stores: the file's sealed batches
        self._file: pq.ParquetWriter | None = None  # local file system: the file being written
        self._buffered = 0  # rows of the next file: in self._columns, self._batches or self._file
        self._min_timestamp: datetime | None = None
        self._max_timestamp: datetime | None = None
        self._next_index = 0
        self._state = "new"

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> StagingWriter:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self._clear_buffer()
            self._state = "closed"

    def open(self) -> None:
        """Prepare the partition directory: clear it, or find where a resumed write continues."""
        if self._state != "new":
            raise RuntimeError(f"staging writer for {self.directory} was already opened")
        existing = list_files(self.filesystem, self.directory)
        for info in existing:
            if not self.resume or not PART_FILE.fullmatch(info.base_name):
                self.filesystem.delete_file(info.path)
        if self.resume:
            matches = (PART_FILE.fullmatch(info.base_name) for info in existing)
            numbers = [int(match.group(1)) for match in matches if match]
            self._next_index = max(numbers, default=-1) + 1
        self._state = "open"

    def close(self) -> None:
        """Write the buffered rows and close the writer."""
        self._require_open()
        self.flush()
        self._state = "closed"

    # -- writing -------------------------------------------------------------------------------

    @property
    def rows_written(self) -> int:
        """Rows committed to files by this writer."""
        return sum(staged.rows for staged in self.files)

    @property
    def buffered_rows(self) -> int:
        """Rows waiting for the next file."""
        return self._buffered

    def write_record(self, record: StagedChanges) -> int:
        """Stage every change of a source's record (its staged rows for this writer's unit); returns
        the number of rows added."""
        return self.write_rows(record.staged_rows(self.partition_token))

    def write_rows(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """Stage staged-change rows; returns how many were added."""
        count = 0
        for row in rows:
            self.write_row(row)
            count += 1
        return count

    def write_tuples(self, rows: Iterable[tuple]) -> int:
        """Stage rows given as tuples in ``STAGED_CHANGE_COLUMNS`` order, built by a decoder that
        already validated them; types are still enforced when the rows become an Arrow batch.
        """
        self._require_open()
        columns = self._column_lists
        count = 0
        for row in rows:
            for values, value in zip(columns, row, strict=True):
                values.append(value)
            count += 1
            self._added(1)
        return count

    def write_columns(self, columns: Sequence[Sequence[Any]]) -> int:
        """Stage rows given column-wise: one sequence per ``STAGED_CHANGE_COLUMNS`` entry, all of one
        length (the read hot path: a decoded data change record); returns the number of rows added.
        Values were validated by the decoder; types are still enforced when the rows become an
        Arrow batch.
        """
        self._require_open()
        if len(columns) != len(self._column_lists):
            raise ValueError(f"expected {len(self._column_lists)} columns, got {len(columns)}")
        count = len(columns[0])
        if set(map(len, columns)) != {count}:
            raise ValueError("staged change columns differ in length")
        if self._pending + count < BATCH_ROWS and self._buffered + count < self.rows_per_file:
            # the common case (a few rows, no batch to seal, no file to write): one step
            for values, given in zip(self._column_lists, columns):  # noqa: B905 - lengths checked
                values.extend(given)
            self._pending += count
            self._buffered += count
            return count
        done = 0
        while done < count:
            take = min(count - done, self.rows_per_file - self._buffered, BATCH_ROWS - self._pending)
            if done == 0 and take == count:
                for values, given in zip(self._column_lists, columns, strict=True):
                    values.extend(given)
            else:
                for values, given in zip(self._column_lists, columns, strict=True):
                    values.extend(given[done : done + take])
            done += take
            self._added(take)
        return count

    def write_batch(self, batch: pa.RecordBatch) -> int:
        """Stage rows given as an Arrow record batch with the staged-change columns (a columnar
        decoder's output; cast to ``STAGED_CHANGE_SCHEMA``); returns the number of rows added. Rows
        held as Python values are sealed first, so rows keep the order they were given in."""
        self._require_open()
        if batch.schema.names != list(STAGED_CHANGE_COLUMNS):
            raise ValueError(f"expected the columns {list(STAGED_CHANGE_COLUMNS)}, got {batch.schema.names}")
        if not batch.schema.equals(STAGED_CHANGE_SCHEMA):
            batch = pa.RecordBatch.from_arrays(
                [
                    column.cast(field.type)
                    for column, field in zip(batch.columns, STAGED_CHANGE_SCHEMA, strict=True)
                ],
                schema=STAGED_CHANGE_SCHEMA,
            )
        for column, field in zip(batch.columns, STAGED_CHANGE_SCHEMA):  # noqa: B905 - one schema
            if column.null_count and not field.nullable:
                raise ValueError(f"staged change column {field.name!r} must not be null")
        count = batch.num_rows
        self._seal()
        done = 0
        while done < count:
            take = min(count - done, self.rows_per_file - self._buffered)
            part = batch if take == count else batch.slice(done, take)
            bounds = pc.min_max(part.column(_TIMESTAMP_INDEX))
            self._append(part, from_micros(bounds["min"].value), from_micros(bounds["max"].value))
            done += take
            self._buffered += take
            if self._buffered >= self.rows_per_file:
                self.flush()
        return count

    def write_row(self, row: Mapping[str, Any]) -> None:
        """Stage one row with exactly the staged-change columns."""
        self._require_open()
        if row.keys() != self._columns.keys():
            missing = sorted(set(STAGED_CHANGE_COLUMNS) - set(row))
            extra = sorted(set(row) - set(STAGED_CHANGE_COLUMNS))
            raise ValueError(f"staged change row has missing columns {missing} and unknown columns {extra}")
        for name, python_type in _PYTHON_TYPES.items():
            value = row[name]
            if value is None:
                if name in NULLABLE_COLUMNS:
                    continue
                raise ValueError(f"staged change column {name!r} must not be null")
            if not isinstance(value, python_type) or (python_type is int and isinstance(value, bool)):
                raise ValueError(
                    f"staged change column {name!r} expects {python_type.__name__}, got "
                    f"{type(value).__name__} {value!r}"
                )
        if row["commit_timestamp"].tzinfo is None:
            raise ValueError("staged change column 'commit_timestamp' must be timezone-aware")
        if row["unit"] != self.partition_token:
            raise ValueError(
                f"row of unit {row['unit']!r} written to the staging of unit {self.partition_token!r}"
            )
        for name, values in self._columns.items():
            values.append(row[name])
        self._added(1)

    def _added(self, count: int) -> None:
        """Account for ``count`` rows appended to the column lists; seal a batch, write a full file."""
        self._pending += count
        self._buffered += count
        if self._pending >= BATCH_ROWS:
            self._seal()
        if self._buffered >= self.rows_per_file:
            self.flush()

    def _seal(self) -> None:
        """Turn the rows held as Python values into an Arrow record batch (types checked here)."""
        if not self._pending:
            return
        batch = record_batch(self._columns)
        timestamps = self._columns["commit_timestamp"]
        if timestamps.count(timestamps[0]) == len(timestamps):
            low = high = timestamps[0]
        else:
            low, high = min(timestamps), max(timestamps)
        for values in self._column_lists:
            values.clear()
        self._pending = 0
        self._append(batch, low, high)

    def _append(self, batch: pa.RecordBatch, low: datetime, high: datetime) -> None:
        """Add a sealed batch (commit timestamps from ``low`` to ``high``) to the file being written."""
        if self._min_timestamp is None or low < self._min_timestamp:
            self._min_timestamp = low
        if self._max_timestamp is None or high > self._max_timestamp:
            self._max_timestamp = high
        if not self._local:
            self._batches.append(batch)
            return
        if self._file is None:
            self.filesystem.create_dir(self.directory, recursive=True)
            self._file = pq.ParquetWriter(
                self._temporary_path(),
                STAGED_CHANGE_SCHEMA,
                filesystem=self.filesystem,
                use_dictionary=_DICTIONARY_COLUMNS,
                memory_pool=memory_pool(),
            )
        self._file.write_batch(batch)
        # The Parquet writer's page and encoder buffers come from Arrow's default pool, whose
        # allocator (mimalloc or jemalloc) keeps freed pages: hand them back after each row group.
        pa.default_memory_pool().release_unused()

    def flush(self) -> StagedFile | None:
        """Write the buffered rows as the next file; returns it, or ``None`` if nothing was buffered."""
        self._require_open()
        if not self._buffered:
            return None
        self._seal()
        path = self._path()
        if self._local:
            file, self._file = self._file, None
            assert file is not None
            try:
                file.close()
                self.filesystem.move(self._temporary_path(), path)
            except BaseException:
                delete_quietly(self.filesystem, self._temporary_path())
                raise
        else:
            table = pa.Table.from_batches(self._batches, schema=STAGED_CHANGE_SCHEMA)
            pq.write_table(table, path, filesystem=self.filesystem, use_dictionary=_DICTIONARY_COLUMNS)
        assert self._min_timestamp is not None and self._max_timestamp is not None
        staged = StagedFile(
            path=path,
            rows=self._buffered,
            min_commit_timestamp=self._min_timestamp,
            max_commit_timestamp=self._max_timestamp,
        )
        self._next_index += 1
        self._clear_buffer()
        self.files.append(staged)
        if self._on_file_written is not None:
            self._on_file_written(staged)
        return staged

    def _path(self) -> str:
        return filesystems.join(self.directory, f"part-{self._next_index:05d}.parquet")

    def _temporary_path(self) -> str:
        return filesystems.join(self.directory, f".part-{self._next_index:05d}.parquet.tmp")

    def _clear_buffer(self) -> None:
        """Drop the rows not yet in a committed file (a local file being written is deleted)."""
        for values in self._column_lists:
            values.clear()
        self._batches.clear()
        self._pending = self._buffered = 0
        self._min_timestamp = self._max_timestamp = None
        if self._file is not None:
            file, self._file = self._file, None
            with contextlib.suppress(Exception):  # the rows are dropped anyway; keep the first error
                file.close()
            delete_quietly(self.filesystem, self._temporary_path())

    def _require_open(self) -> None:
        if self._state != "open":
            state = "not opened (use it in a with block)" if self._state == "new" else "closed"
            raise RuntimeError(f"staging writer for {self.directory} is {state}")


__all__ = [
    "BATCH_ROWS",
    "DEFAULT_ROWS_PER_FILE",
    "STAGED_CHANGE_SCHEMA",
    "StagedFile",
    "StagingWriter",
    "partition_key",
    "window_location",
]
