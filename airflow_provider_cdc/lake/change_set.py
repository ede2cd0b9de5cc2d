"""Change sets (merge job → upsert job): reading them and turning them into typed merge sources.

A change set holds, per source table, one row per changed key of a window (see ARCHITECTURE.md,
"Change sets"): the key and row image as Spanner-encoded JSON, the non-key columns the image
carries, ``_CHANGE_TYPE`` (``UPSERT``/``DELETE``) and the sortable ``_CHANGE_SEQUENCE_NUMBER``.
:func:`to_merge_source` decodes one batch into typed columns; :class:`ChangeSetReader` opens
``{changeset_root}/{window_id}`` locally or on object storage and refuses it without a manifest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pa_ds
import pyarrow.fs as pa_fs

from airflow_provider_cdc.domain.identifiers import validate_identifier
from airflow_provider_cdc.domain.layout import MANIFEST_NAME, TABLE_DIR_PREFIX
from airflow_provider_cdc.domain.spanner_types import (
    ColumnType,
    SpannerValueError,
    arrow_schema,
    decode_json_objects,
    parse_column_types,
)

KEYS_JSON = "_keys_json"
VALUES_JSON = "_values_json"
PRESENT_COLUMNS = "_present_columns"
FULL_IMAGE = "_full_image"
CHANGE_TYPE = "_CHANGE_TYPE"
CHANGE_SEQUENCE_NUMBER = "_CHANGE_SEQUENCE_NUMBER"
COMMIT_TIMESTAMP = "_commit_timestamp"
COLUMN_TYPES_JSON = "_column_types_json"
CHANGE_SET_COLUMNS = (
    KEYS_JSON,
    VALUES_JSON,
    PRESENT_COLUMNS,
    FULL_IMAGE,
    CHANGE_TYPE,
    CHANGE_SEQUENCE_NUMBER,
    COMMIT_TIMESTAMP,
    COLUMN_TYPES_JSON,
)
CHANGE_TYPES = ("UPSERT", "DELETE")

# Columns of a decoded merge source besides the table's own columns. Spanner column names start
# with a letter, so these never collide with a source column.
SOURCE_SEQUENCE = "_change_sequence_number"
SOURCE_COMMIT_TIMESTAMP = "_commit_timestamp"
SOURCE_CHANGE_TYPE = "_change_type"
SOURCE_PRESENT = "_present_columns"
SOURCE_FULL_IMAGE = "_full_image"
SOURCE_KEYS_JSON = "_keys_json"

SEQUENCE_TYPE = pa.string()
COMMIT_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
_SORTABLE_SEQUENCE = r"^[0-9A-F]{16}(/[0-9A-F]{16}){0,3}$"
_SECTION_DIGITS = 16
_SORTABLE_LENGTHS = tuple(_SECTION_DIGITS * n + n - 1 for n in range(1, 5))  # 16, 33, 50, 67
_CHECK_ROWS = 2048
# Key types whose compact JSON text {"K":"v"} carries the value verbatim (see _decode_single_key).
_VERBATIM_KEY_CODES = ("INT64", "STRING")
_WINDOW_ID = re.compile(r"^(\d+)-(\d+)$")


class ChangeSetError(ValueError):
    """A change set that breaks the change-set contract (names the table and the problem)."""


@dataclass(frozen=True)
class TableColumns:
    """A table's columns split into key and non-key columns, in ordinal order."""

    table: str
    columns: tuple[ColumnType, ...]

    @classmethod
    def from_column_types(cls, table: str, column_types: Any) -> TableColumns:
        validate_identifier(table, "table")
        columns = tuple(parse_column_types(column_types))
        if not any(c.is_primary_key for c in columns):
            raise ChangeSetError(f"table {table!r}: column_types name no primary-key column")
        return cls(table, columns)

    @property
    def keys(self) -> tuple[ColumnType, ...]:
        return tuple(c for c in self.columns if c.is_primary_key)

    @property
    def values(self) -> tuple[ColumnType, ...]:
        return tuple(c for c in self.columns if not c.is_primary_key)

    def table_schema(self) -> pa.Schema:
        """Schema of the Delta table: source columns, then sequence number and commit timestamp."""
        fields = list(arrow_schema(self.columns))
        fields.append(pa.field(SOURCE_SEQUENCE, SEQUENCE_TYPE))
        fields.append(pa.field(SOURCE_COMMIT_TIMESTAMP, COMMIT_TIMESTAMP_TYPE))
        return pa.schema(fields)

    def source_schema(self) -> pa.Schema:
        """Schema of a decoded merge source (the table schema plus change metadata)."""
        return pa.schema(
            list(self.table_schema())
            + [
                pa.field(SOURCE_CHANGE_TYPE, pa.string()),
                pa.field(SOURCE_PRESENT, pa.list_(pa.string())),
                pa.field(SOURCE_FULL_IMAGE, pa.bool_()),
                pa.field(SOURCE_KEYS_JSON, pa.string()),
            ]
        )


def merge_column_types(texts: Iterable[str | None], table: str) -> list[dict[str, Any]]:
    """Union of the distinct ``_column_types_json`` values of a table's change set.

    A column added during the window appears in the later values only; a column whose type
    differs between values is an error naming table and column.
    """
    merged: dict[str, ColumnType] = {}
    for text in texts:
        if text is None:
            continue
        for column in parse_column_types(text):
            previous = merged.get(column.name)
            if previous is not None and (
                previous.type != column.type or previous.is_primary_key != column.is_primary_key
            ):
                raise ChangeSetError(
                    f"table {table!r}: column {column.name!r} has conflicting types in the change set: "
                    f"{previous.type} and {column.type}"
                )
            if previous is None or column.ordinal_position > previous.ordinal_position:
                merged[column.name] = column
    if not merged:
        raise ChangeSetError(f"table {table!r}: the change set carries no column types")
    return [c.to_json_dict() for c in sorted(merged.values(), key=lambda c: (c.ordinal_position, c.name))]


def _first_offending(array: pa.Array, bad: pa.Array) -> Any:
    index = pc.index(bad, True).as_py()
    return array[index].as_py()


def to_merge_source(batch: pa.RecordBatch | pa.Table, table: TableColumns) -> pa.RecordBatch:
    """Decode one change-set batch into the typed merge source of ``table``.

    Validates change types, sequence numbers (sortable form), present columns and keys; the
    errors name the table and the offending value.
    """
    if isinstance(batch, pa.RecordBatch):
        batch = pa.Table.from_batches([batch])
    name = table.table
    missing = [c for c in CHANGE_SET_COLUMNS if c not in batch.column_names and c != COLUMN_TYPES_JSON]
    if missing:
        raise ChangeSetError(f"table {name!r}: change set lacks column(s) {missing}")
    rows = batch.num_rows
    schema = table.source_schema()
    if rows == 0:
        return pa.RecordBatch.from_pylist([], schema=schema)

    change_type = batch.column(CHANGE_TYPE).combine_chunks().cast(pa.string())
    bad = pc.invert(pc.fill_null(pc.is_in(change_type, pa.array(CHANGE_TYPES)), False))
    if pc.any(bad).as_py():
        raise ChangeSetError(
            f"table {name!r}: {CHANGE_TYPE} must be UPSERT or DELETE, "
            f"got {_first_offending(change_type, bad)!r}"
        )

    sequence = batch.column(CHANGE_SEQUENCE_NUMBER).combine_chunks().cast(pa.string())
    if not _all_sortable(sequence):
        bad = pc.invert(pc.fill_null(pc.match_substring_regex(sequence, _SORTABLE_SEQUENCE), False))
        if pc.any(bad).as_py():
            raise ChangeSetError(
                f"table {name!r}: {CHANGE_SEQUENCE_NUMBER} {_first_offending(sequence, bad)!r} is not in "
                "sortable form (1-4 '/'-separated sections of 16 upper-case hex digits)"
            )

    commit_ts = batch.column(COMMIT_TIMESTAMP).combine_chunks()
    if commit_ts.type != COMMIT_TIMESTAMP_TYPE:
        commit_ts = commit_ts.cast(COMMIT_TIMESTAMP_TYPE)

    present = batch.column(PRESENT_COLUMNS).combine_chunks()
    if present.type != pa.list_(pa.string()):  # e.g. Spark's list<element: string>
        present = present.cast(pa.list_(pa.string()))
    value_names = pa.array([c.name for c in table.values], pa.string())
    flat = pc.list_flatten(present)
    unknown = pc.invert(pc.is_in(flat, value_names))
    if len(flat) and pc.any(unknown).as_py():
        raise ChangeSetError(
            f"table {name!r}: {PRESENT_COLUMNS} names {_first_offending(flat, unknown)!r}, "
            "which is not a non-key column of the table's column types"
        )
    full_image = pc.fill_null(batch.column(FULL_IMAGE).combine_chunks().cast(pa.bool_()), False)

    keys_json = batch.column(KEYS_JSON).combine_chunks().cast(pa.string())
    if keys_json.null_count:
        raise ChangeSetError(f"table {name!r}: {KEYS_JSON} is NULL in {keys_json.null_count} row(s)")
    keys = _decode_keys(keys_json, table)
    try:
        values = decode_json_objects(
            batch.column(VALUES_JSON).combine_chunks().cast(pa.string()), table.values, what=VALUES_JSON
        )
    except SpannerValueError as exc:
        raise ChangeSetError(f"table {name!r}: {exc}") from None

    arrays: list[pa.Array] = []
    for column in table.columns:
        source = keys if column.is_primary_key else values
        arrays.append(source.column(column.name).combine_chunks())
    arrays += [sequence, commit_ts, change_type, present, full_image, keys_json]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _all_sortable(sequence: pa.Array) -> bool:
    """Whether every sequence number is in sortable form, checked on the bytes of equal-length values.

    Equivalent to matching ``_SORTABLE_SEQUENCE`` on each value, for the common case of values of
    one length; ``False`` means "not shown here" (NULLs, mixed lengths or a bad value) and leaves
    the decision to the regex, which also finds the offending value.
    """
    if len(sequence) == 0 or sequence.null_count:
        return False
    offsets = np.frombuffer(sequence.buffers()[1], dtype=np.int32)
    offsets = offsets[sequence.offset : sequence.offset + len(sequence) + 1]
    length = int(offsets[1] - offsets[0])
    if length not in _SORTABLE_LENGTHS or not (np.diff(offsets) == length).all():
        return False
    data = np.frombuffer(sequence.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
    data = data.reshape(-1, length)
    separators = slice(_SECTION_DIGITS, None, _SECTION_DIGITS + 1)
    for start in range(0, len(data), _CHECK_ROWS):  # small temporaries: no fresh pages per call
        rows = data[start : start + _CHECK_ROWS]
        valid = ((rows - np.uint8(ord("0"))) < 10) | ((rows - np.uint8(ord("A"))) < 6)  # uint8 wraps
        valid[:, separators] = rows[:, separators] == ord("/")
        if not valid.all():
            return False
    return True


def verbatim_key(table: TableColumns) -> ColumnType | None:
    """The table's key when it is one INT64 or STRING column (whose compact JSON text carries the
    value verbatim, and whose typed values compare as the key does), else ``None``."""
    (first, *others) = table.keys
    if others or first.type.element is not None or first.type.code not in _VERBATIM_KEY_CODES:
        return None
    return first


def _decode_single_key(keys_json: pa.Array, key: ColumnType) -> pa.Array | None:
    """The values of a :func:`verbatim_key` whose texts all have the compact form ``{"K":"v"}``.

    Strips the constant prefix and suffix instead of parsing JSON; ``None`` when any text has
    another form (whitespace, escapes, a JSON number, NULL, another column) or ``v`` is not a
    decimal INT64, so that the JSON decoder handles (or refuses) the batch as before.
    """
    prefix, suffix = "{" + json.dumps(key.name) + ':"', '"}'
    if not (
        pc.min(pc.binary_length(keys_json)).as_py() >= len(prefix) + len(suffix)
        and pc.all(pc.starts_with(keys_json, prefix)).as_py()
        and pc.all(pc.ends_with(keys_json, suffix)).as_py()
    ):
        return None
    text = pc.utf8_slice_codeunits(keys_json, len(prefix), -len(suffix))  # prefix, suffix: ASCII
    if key.type.code == "STRING":
        # A quote, a backslash or a control character would make the text another JSON value.
        return None if pc.any(pc.match_substring_regex(text, r'["\\\x00-\x1f]')).as_py() else text
    if not pc.all(pc.utf8_is_digit(pc.utf8_ltrim(text, "-"))).as_py():  # Arrow would read 0x.. as hex
        return None
    try:
        return text.cast(pa.int64())  # decimal digits with an optional '-' only
    except pa.ArrowInvalid:
        return None


def _decode_keys(keys_json: pa.Array, table: TableColumns) -> pa.Table:
    key = verbatim_key(table)
    if key is not None:
        verbatim = _decode_single_key(keys_json, key)
        if verbatim is not None:
            return pa.table({key.name: verbatim})
    try:
        keys = decode_json_objects(keys_json, table.keys, what=KEYS_JSON)
    except SpannerValueError as exc:
        raise ChangeSetError(f"table {table.table!r}: {exc}") from None
    if any(keys.column(c.name).null_count for c in table.keys):
        # A NULL key may be a legitimate NULL or a missing key column: tell them apart.
        names = [c.name for c in table.keys]
        for row, text in enumerate(keys_json.to_pylist()):
            absent = [n for n in names if n not in json.loads(text)]
            if absent:
                raise ChangeSetError(
                    f"table {table.table!r}: {KEYS_JSON} of row {row} lacks key column(s) {absent}"
                )
    return keys


# --------------------------------------------------------------------------- reading change sets


def filesystem_for(
    uri: str, storage_options: Mapping[str, str] | None = None
) -> tuple[pa_fs.FileSystem, str]:
    """A pyarrow filesystem and path for a local path or an object-store URI.

    Object-store URIs (``gs://``, ``s3://``, ``az://`` …) go through delta-rs's object store with
    the same storage options as the Delta tables, so one set of credentials serves both.
    """
    if "://" not in uri or uri.startswith("file://"):
        local = uri[len("file://") :] if uri.startswith("file://") else uri
        return pa_fs.LocalFileSystem(), local.rstrip("/") or "/"
    from deltalake.fs import DeltaStorageHandler

    root = uri.rstrip("/")
    handler = DeltaStorageHandler(root, options=dict(storage_options or {}))
    return pa_fs.PyFileSystem(handler), ""


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

    def table_folders(self) -> list[str]:
        """Names of the ``table=*`` folders the change set holds."""
        infos = self._fs.get_file_info(pa_fs.FileSelector(self._root, allow_not_found=True))
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
        listed = manifest_tables(manifest, self.uri)
        unlisted = sorted(set(self.table_folders()) - set(listed))
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
            directory = self._path(f"{TABLE_DIR_PREFIX}{name}")
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
_ROW_COUNT_KEYS = ("rows", "row_count", "num_rows", "change_rows", "count")


def manifest_tables(manifest: Mapping[str, Any], where: str = "change set") -> dict[str, int | None]:
    """Table name → expected row count (``None`` if not stated) from a manifest.

    Accepts ``"tables"`` as an object (name → count or name → {"rows": count, ...}), a list of
    names, or a list of objects with ``"name"``/``"table"``; ``"row_counts"`` may give counts.
    """
    tables = manifest.get("tables")
    counts = manifest.get("row_counts") if isinstance(manifest.get("row_counts"), Mapping) else {}
    result: dict[str, int | None] = {}

    def _count(value: Any) -> int | None:
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, Mapping):
            for key in _ROW_COUNT_KEYS:
                if isinstance(value.get(key), int) and not isinstance(value.get(key), bool):
                    return int(value[key])
        return None

    if isinstance(tables, Mapping):
        items: Iterable[tuple[Any, Any]] = tables.items()
    elif isinstance(tables, Sequence) and not isinstance(tables, (str, bytes)):
        items = []
        for entry in tables:
            if isinstance(entry, str):
                items.append((entry, counts.get(entry)))
            elif isinstance(entry, Mapping) and isinstance(entry.get("name", entry.get("table")), str):
                items.append((entry.get("name", entry.get("table")), entry))
            else:
                raise ChangeSetError(f"{where}: manifest table entry {entry!r} has no name")
    else:
        raise ChangeSetError(f"{where}: manifest has no 'tables' list or object")
    for name, value in items:
        validate_identifier(name, "table")
        count = _count(value)
        result[name] = count if count is not None else _count(counts.get(name))
    return result


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
