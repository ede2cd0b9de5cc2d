"""Change sets (merge job → targets): reading ``{changeset_root}/{window_id}``.

:class:`ChangeSetReader` opens a change set locally or on object storage, refuses it without a
manifest or when its folders and row counts disagree with the manifest, and gives one
:class:`ChangeSetTable` (a Parquet dataset) per table. Decoding a batch into a table's typed merge
source is :mod:`airflow_provider_cdc.changesets.typed_batches`, whose names are importable from here too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pa_ds
import pyarrow.fs as pa_fs

from airflow_provider_cdc.changesets.typed_batches import (
    COMMIT_TIMESTAMP_TYPE,
    SEQUENCE_TYPE,
    SOURCE_CHANGE_TYPE,
    SOURCE_COMMIT_TIMESTAMP,
    SOURCE_FULL_IMAGE,
    SOURCE_KEYS_JSON,
    SOURCE_PRESENT,
    SOURCE_SEQUENCE,
    TableColumns,
    to_merge_source,
    verbatim_key,
)
from airflow_provider_cdc.core.columns import ColumnType, parse_column_types
from airflow_provider_cdc.core.contract.change_set import (
    CHANGE_SET_COLUMNS,
    COLUMN_TYPES_JSON,
    ChangeSetError,
    manifest_tables,
)
from airflow_provider_cdc.core.contract.locations import (
    MANIFEST_FOLDER,
    MANIFEST_NAME,
    TABLE_DIR_PREFIX,
    manifest_folder,
)
from airflow_provider_cdc.filesystems import resolve

_WINDOW_ID = re.compile(r"^(\d+)-(\d+)$")


def merge_column_types(texts: Iterable[str | None], table: str) -> list[dict[str, Any]]:
    """Union of the distinct ``_column_types_json`` values of a table's change set.

    A column added during the window appears in the later values only; a column whose type
    differs between values is an error naming table and column. A column is nullable when any value
    says so, not nullable when one says so and none says otherwise, else of unknown nullability.
    """
    merged: dict[str, ColumnType] = {}
    for text in texts:
        if text is None:
            continue
        for column in parse_column_types(text):
            previous = merged.get(column.name)
            if previous is not None and (
                previous.logical_type != column.logical_type
                or previous.is_primary_key != column.is_primary_key
            ):
                raise ChangeSetError(
                    f"table {table!r}: column {column.name!r} has conflicting types in the change set: "
                    f"{previous.logical_type} and {column.logical_type}"
                )
            if previous is not None:
                known = {previous.is_nullable, column.is_nullable} - {None}
                nullable = True if True in known else (False if known else None)
                if column.ordinal_position <= previous.ordinal_position:
                    column = previous
                column = replace(column, is_nullable=nullable)
            merged[column.name] = column
    if not merged:
        raise ChangeSetError(f"table {table!r}: the change set carries no column types")
    return [c.to_json_dict() for c in sorted(merged.values(), key=lambda c: (c.ordinal_position, c.name))]


def filesystem_for(
    uri: str, storage_options: Mapping[str, str] | None = None
) -> tuple[pa_fs.FileSystem, str]:
    """A filesystem and path for a change set (:func:`airflow_provider_cdc.filesystems.resolve`)."""
    return resolve(uri, storage_options)


#: Errors of reading a Parquet file (corrupt data, file-system failures).
READ_ERRORS = (OSError, pa.ArrowException)


def unreadable_file(
    files: Sequence[str], filesystem: pa_fs.FileSystem
) -> tuple[str, BaseException] | None:
    """The first of ``files`` that cannot be read whole as Parquet, with the error; ``None`` if all can."""
    import pyarrow.parquet as pq

    for path in files:
        try:
            with filesystem.open_input_file(path) as handle:
                pq.ParquetFile(handle).read()
        except READ_ERRORS as exc:
            return path, exc
    return None


def _file_uri(location: str, path: str) -> str:
    """A file of a change set at ``location``: local paths as they are, object-store paths under it."""
    local = "://" not in location or location.startswith("file://")
    return path if local or not location else f"{location}/{path}"


def describe_read_error(exc: BaseException) -> str:
    """``Type: first line`` of a read error, for messages."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


@dataclass(frozen=True)
class ChangeSetTable:
    """One table of a change set: its name, expected row count and Parquet dataset.

    ``location`` is the change set's URI, which the dataset's relative file paths are under.
    """

    name: str
    expected_rows: int | None
    dataset: pa_ds.Dataset
    location: str = ""

    def file_uri(self, path: str) -> str:
        """A dataset file as the user knows it: an absolute path, or the path under :attr:`location`."""
        return _file_uri(self.location, path)

    def unreadable_file(self) -> tuple[str, BaseException] | None:
        """The first of the table's files that cannot be read whole (its URI and the error), or ``None``."""
        files = getattr(self.dataset, "files", None) or []
        found = unreadable_file(files, self.dataset.filesystem)
        return None if found is None else (self.file_uri(found[0]), found[1])

    def column_types(self) -> list[dict[str, Any]]:
        """Union of the table's column types as seen in the window."""
        texts: set[str] = set()
        for batch in self.dataset.to_batches(columns=[COLUMN_TYPES_JSON]):
            column = batch.column(0)
            if pa.types.is_dictionary(column.type):  # read as dictionary: no per-row strings
                column = column.dictionary.take(pc.unique(column.indices.drop_null()))
            texts.update(v for v in pc.unique(column).to_pylist() if v is not None)
        if not texts:
            raise ChangeSetError(f"table {self.name!r}: the change set carries no column types")
        return merge_column_types(sorted(texts), self.name)

    def count_rows(self) -> int:
        return self.dataset.count_rows()


class ChangeSetReader:
    """Reads ``{changeset_root}/{window_id}``: its manifest and one Parquet dataset per table."""

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.uri = uri.rstrip("/")
        self._fs, self._root = filesystem_for(self.uri, storage_options)

    def __repr__(self) -> str:
        return f"ChangeSetReader({self.uri!r})"

    def _path(self, *parts: str) -> str:
        return "/".join(p for p in (self._root, *parts) if p)

    @property
    def window_id(self) -> str:
        return self.uri.rsplit("/", 1)[-1]

    def window_bounds(self) -> tuple[int, int] | None:
        """``(start_micros, end_micros)`` parsed from the window id, or ``None``."""
        match = _WINDOW_ID.match(self.window_id)
        return (int(match.group(1)), int(match.group(2))) if match else None

    def manifest(self) -> dict[str, Any]:
        """The manifest; its absence means the change set is incomplete and is an error."""
        path = self._path(MANIFEST_NAME)
        info = self._fs.get_file_info(path)
        if info.type != pa_fs.FileType.File:
            raise ChangeSetError(
                f"change set {self.uri!r} has no {MANIFEST_NAME}: it is incomplete (the merge that writes it "
                "did not finish); refusing to apply it"
            )
        with self._fs.open_input_stream(path) as stream:
            raw = stream.read()
        try:
            manifest = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ChangeSetError(
                f"change set {self.uri!r}: {MANIFEST_NAME} is not valid JSON: {exc}"
            ) from None
        if not isinstance(manifest, dict):
            raise ChangeSetError(f"change set {self.uri!r}: {MANIFEST_NAME} must be a JSON object")
        return manifest

    def data_folder(self, manifest: Mapping[str, Any]) -> str:
        """The folder (relative to the change set) holding the tables of ``manifest``: an epoch's
        (``epoch=<n>``, for a merge that belongs to an opening of the window) or the change set's own."""
        try:
            return manifest_folder(manifest.get(MANIFEST_FOLDER))
        except ValueError as exc:
            raise ChangeSetError(f"change set {self.uri!r}: {exc}; refusing to apply it") from None

    def table_folders(self, folder: str = "") -> list[str]:
        """Names of the ``table=*`` folders the change set (or its data ``folder``) holds."""
        infos = self._fs.get_file_info(pa_fs.FileSelector(self._path(folder), allow_not_found=True))
        return sorted(
            info.base_name[len(TABLE_DIR_PREFIX):]
            for info in infos
            if info.type == pa_fs.FileType.Directory and info.base_name.startswith(TABLE_DIR_PREFIX)
        )

    def tables(self) -> list[ChangeSetTable]:
        """The manifest's tables in name order, each with its dataset, checked against the folders.

        A ``table=*`` folder the manifest does not list, a manifest row total that is not the sum
        of its tables', or a table whose files hold another number of rows than listed is an error
        naming the table: such a change set is not the one the merge wrote, and applying it (and
        advancing watermarks from it) could lose changes.
        """
        manifest = self.manifest()
        folder = self.data_folder(manifest)
        listed = manifest_tables(manifest, self.uri)
        unlisted = sorted(set(self.table_folders(folder)) - set(listed))
        if unlisted:
            folders = ", ".join(TABLE_DIR_PREFIX + name for name in unlisted)
            raise ChangeSetError(
                f"change set {self.uri!r}: folder(s) {folders} hold "
                f"table(s) {', '.join(repr(n) for n in unlisted)} that {MANIFEST_NAME} does not list "
                f"(it lists {', '.join(repr(n) for n in sorted(listed)) or 'no table'}); refusing to apply it"
            )
        total = manifest.get("rows")
        counted = [count for count in listed.values() if count is not None]
        if isinstance(total, int) and not isinstance(total, bool) and len(counted) == len(listed) and (
            sum(counted) != total
        ):
            raise ChangeSetError(
                f"change set {self.uri!r}: {MANIFEST_NAME} says {total} rows in all but its tables add up "
                f"to {sum(counted)}; refusing to apply it"
            )
        result = []
        for name in sorted(listed):
            directory = self._path(folder, f"{TABLE_DIR_PREFIX}{name}")
            files = [
                info.path
                for info in self._fs.get_file_info(pa_fs.FileSelector(directory, allow_not_found=True))
                if info.type == pa_fs.FileType.File
                and info.base_name.endswith(".parquet")
                and not info.base_name.startswith((".", "_"))
            ]
            expected = listed[name]
            if not files and expected:
                raise ChangeSetError(
                    f"change set {self.uri!r}: manifest lists table {name!r} with {expected} rows "
                    f"but {directory!r} holds no Parquet files"
                )
            try:
                dataset = pa_ds.dataset(sorted(files), format=_PARQUET, filesystem=self._fs)
                actual = dataset.count_rows() if expected is not None else None
            except READ_ERRORS as exc:
                found = unreadable_file(sorted(files), self._fs)
                path, cause = found if found is not None else (directory, exc)
                where = _file_uri(self.uri, path)
                raise ChangeSetError(
                    f"change set {self.uri!r}: table {name!r}: file {where!r} cannot be read "
                    f"({describe_read_error(cause)})"
                ) from exc
            if expected is not None and actual != expected:
                raise ChangeSetError(
                    f"change set {self.uri!r}: table {name!r} has {actual} rows, manifest says {expected}"
                )
            result.append(ChangeSetTable(name, expected, dataset, self.uri))
        return result


# Column types repeat on every row: read them as a dictionary, one string per distinct value.
_PARQUET = pa_ds.ParquetFileFormat(
    read_options=pa_ds.ParquetReadOptions(dictionary_columns={COLUMN_TYPES_JSON})
)


def iter_batches(change_set: Any, batch_size: int = 65_536) -> Iterator[pa.RecordBatch]:
    """Record batches of a change set given as a Table, batch, reader, dataset or iterable of batches."""
    if isinstance(change_set, pa.RecordBatch):
        yield change_set
    elif isinstance(change_set, pa.Table):
        yield from change_set.to_batches(max_chunksize=batch_size)
    elif isinstance(change_set, pa_ds.Dataset):
        names = set(change_set.schema.names)
        columns = [c for c in CHANGE_SET_COLUMNS if c != COLUMN_TYPES_JSON and c in names]
        yield from change_set.to_batches(columns=columns, batch_size=batch_size)
    elif isinstance(change_set, pa.RecordBatchReader):
        yield from change_set
    elif isinstance(change_set, Iterable):
        for item in change_set:
            yield from iter_batches(item, batch_size)
    else:
        raise TypeError(f"unsupported change set type {type(change_set).__name__}")


__all__ = [
    "COMMIT_TIMESTAMP_TYPE",
    "READ_ERRORS",
    "SEQUENCE_TYPE",
    "SOURCE_CHANGE_TYPE",
    "SOURCE_COMMIT_TIMESTAMP",
    "SOURCE_FULL_IMAGE",
    "SOURCE_KEYS_JSON",
    "SOURCE_PRESENT",
    "SOURCE_SEQUENCE",
    "ChangeSetError",
    "ChangeSetReader",
    "ChangeSetTable",
    "TableColumns",
    "describe_read_error",
    "filesystem_for",
    "iter_batches",
    "merge_column_types",
    "to_merge_source",
    "unreadable_file",
    "verbatim_key",
]
