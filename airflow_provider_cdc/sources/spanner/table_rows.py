"""Rows read from Spanner tables (not from a change stream) as staged change rows.

Two sources read tables:

- a **snapshot** of a table at a timestamp ``T - 1µs`` (``T`` = a pipeline's first window start):
  every row is an ``INSERT`` committed at the snapshot timestamp, so its sequence number sorts
  below every change the stream reads from ``T`` on;
- a table read by its **commit-timestamp column** (:class:`CommitTimestampTable`): every row
  written in ``[start, end)`` is a full image of its key at that commit timestamp; an insert-only
  changelog table maps each row to a change of a configured entity key, and a soft-delete column
  or a change-type column maps rows to ``DELETE``.

A table read has no transactions: each row is a transaction of one record of its own (its id
names the table, the timestamp and the key), so the merge's completeness check holds, and the
sequence number is ``commit timestamp / fingerprint(table, key) / 0 / 0``: changes order by
(commit timestamp, key) as the source can tell them apart.

:class:`ChangeRowEncoder` builds the staged rows column-wise from rows whose values are already in
Spanner's JSON encoding (what a query returns on the wire); :func:`table_change_rows` does the same
for rows of Python values. The JSON texts of keys and images are written a column at a time
(:func:`json_texts`) and put together with one ``%`` format per row.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from airflow_provider_cdc.core.columns import ColumnType, column_types_json
from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.timestamps import parse_timestamp, to_micros
from airflow_provider_cdc.core.values import encode_value
from airflow_provider_cdc.sources.spanner.change_row import source_metadata_json

INSERT = "INSERT"
UPDATE = "UPDATE"
DELETE = "DELETE"
_RECORD_SEQUENCE = "00000000"
_SEQUENCE_TAIL = "/" + "0" * 16 + "/" + "0" * 16  # record sequence 0, mod index 0
#: Change-type column values and the mod types they stand for (case-insensitive).
CHANGE_TYPE_VALUES = {
    "INSERT": INSERT,
    "UPDATE": UPDATE,
    "UPSERT": INSERT,
    "DELETE": DELETE,
    "I": INSERT,
    "U": UPDATE,
    "D": DELETE,
}


class TableRowError(ValueError):
    """A table row that cannot become a change (the message names table, key and column)."""


@dataclass(frozen=True)
class CommitTimestampTable:
    """How a table read by its commit-timestamp column maps to changes.

    :param table: the Spanner table.
    :param timestamp_column: a ``TIMESTAMP OPTIONS (allow_commit_timestamp=true)`` column written
        with the commit timestamp on every insert and update.
    :param entity_key: for an insert-only changelog table (e.g. ``DocumentHistory(UserId,
        DocumentId, Ts, Delta)``), the columns naming the entity each row changes (``("UserId",
        "DocumentId")``); the change lands in a target table named ``target_table`` with that key.
        ``None``: the table's own primary key (each row is the image of its key).
    :param soft_delete_column: a BOOL column; a row where it is true is a ``DELETE`` of its key.
    :param change_type_column: a STRING column holding ``INSERT``/``UPDATE``/``DELETE`` (or
        ``I``/``U``/``D``, ``UPSERT``) for each row.
    :param target_table: the table the changes land in (default: ``table``).
    """

    table: str
    timestamp_column: str
    entity_key: tuple[str, ...] | None = None
    soft_delete_column: str | None = None
    change_type_column: str | None = None
    target_table: str | None = None

    def __post_init__(self) -> None:
        validate_identifier(self.table, "table")
        validate_identifier(self.timestamp_column, "commit timestamp column")
        if self.entity_key is not None:
            if isinstance(self.entity_key, str):
                raise ValueError(f"table {self.table!r}: entity_key must be a list of columns, not a string")
            key = tuple(self.entity_key)
            if not key:
                raise ValueError(f"table {self.table!r}: entity_key names no column")
            for column in key:
                validate_identifier(column, "entity key column")
            object.__setattr__(self, "entity_key", key)
        for name, value in (
            ("soft_delete_column", self.soft_delete_column),
            ("change_type_column", self.change_type_column),
        ):
            if value is not None:
                validate_identifier(value, name.replace("_", " "))
        if self.target_table is not None:
            validate_identifier(self.target_table, "target table")

    @property
    def target(self) -> str:
        """The table the changes land in."""
        return self.target_table or self.table

    @property
    def is_changelog(self) -> bool:
        """An insert-only changelog table (its rows change an entity key)."""
        return self.entity_key is not None

    @classmethod
    def of(cls, value: CommitTimestampTable | Mapping[str, Any]) -> CommitTimestampTable:
        """A configuration from itself or a mapping of its fields (as a DAG passes it)."""
        if isinstance(value, CommitTimestampTable):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(
                f"a commit-timestamp table is a mapping of its fields, got {type(value).__name__}"
            )
        fields = dict(value)
        unknown = sorted(set(fields) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"commit-timestamp table {fields.get('table')!r}: unknown field(s) {unknown}")
        if fields.get("entity_key") is not None and not isinstance(fields["entity_key"], str):
            fields["entity_key"] = tuple(fields["entity_key"])
        return cls(**fields)

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON values (:meth:`of` reads them back)."""
        return {
            "table": self.table,
            "timestamp_column": self.timestamp_column,
            "entity_key": list(self.entity_key) if self.entity_key else None,
            "soft_delete_column": self.soft_delete_column,
            "change_type_column": self.change_type_column,
            "target_table": self.target_table,
        }

    def change_columns(self, columns: Sequence[ColumnType]) -> list[ColumnType]:
        """The columns of the changes: the entity key as the key (changelog tables) or the table's
        own columns; the soft-delete and change-type columns are not carried."""
        by_name = {c.name: c for c in columns}
        for column in (
            self.timestamp_column,
            self.soft_delete_column,
            self.change_type_column,
            *(self.entity_key or ()),
        ):
            if column is not None and column not in by_name:
                raise TableRowError(f"table {self.table!r} has no column {column!r}")
        dropped = {self.soft_delete_column, self.change_type_column}
        if self.entity_key and dropped & set(self.entity_key):
            raise TableRowError(
                f"table {self.table!r}: a soft-delete or change-type column is part of the key"
            )
        key = set(self.entity_key) if self.entity_key else {c.name for c in columns if c.is_primary_key}
        result = []
        for position, column in enumerate(
            (c for c in sorted(columns, key=lambda c: c.ordinal_position) if c.name not in dropped), start=1
        ):
            result.append(replace(column, is_primary_key=column.name in key, ordinal_position=position))
        return result

    def mod_type(self, row: Mapping[str, Any]) -> str:
        """The change a row stands for (values as Python values or in Spanner's JSON encoding)."""
        if self.soft_delete_column is not None and row.get(self.soft_delete_column) is True:
            return DELETE
        if self.change_type_column is not None:
            value = row.get(self.change_type_column)
            mod = CHANGE_TYPE_VALUES.get(str(value).strip().upper()) if value is not None else None
            if mod is None:
                raise TableRowError(
                    f"table {self.table!r}: column {self.change_type_column!r} holds {value!r}; "
                    f"expected one of {sorted(CHANGE_TYPE_VALUES)}"
                )
            return mod
        return INSERT


def _make_dumps(item_separator: str = ",") -> Callable[[Any], str]:
    """Compact JSON text, calling the C encoder directly; dicts are written in insertion order
    (the encoder builds them with sorted keys, which makes the text canonical)."""
    encoder = json.JSONEncoder(separators=(item_separator, ":"))
    make_encoder = getattr(json.encoder, "c_make_encoder", None)
    if make_encoder is None:  # pragma: no cover - Python without the C accelerator
        return encoder.encode
    encode = make_encoder(
        None,
        encoder.default,
        json.encoder.encode_basestring_ascii,
        None,
        ":",
        item_separator,
        False,
        False,
        True,
    )
    join = "".join
    return lambda value: join(encode(value, 0))


_dumps = _make_dumps()
# A list written with this separator between its items splits into the items' texts: the writer
# escapes every control character, so no scalar's text holds it (a nested array of two or more
# items does, and shows as more pieces than items).
_SEPARATOR = "\x00"
_dumps_separated = _make_dumps(_SEPARATOR)
_encode_string = json.encoder.encode_basestring_ascii
#: Type codes whose values are JSON strings in Spanner's encoding.
_STRING_CODES = frozenset(
    ("BYTES", "DATE", "ENUM", "INT64", "INTERVAL", "JSON", "NUMERIC", "PROTO", "STRING", "TIMESTAMP", "UUID")
)


def json_texts(values: Sequence[Any], strings: bool = False) -> list[str]:
    """The compact JSON text of each value, as a column: what ``json.dumps(value,
    separators=(",", ":"))`` writes for each. ``strings``: the values are likely all strings."""
    if strings:
        try:
            return list(map(_encode_string, values))
        except TypeError:  # a NULL or a value of another kind
            pass
    if not values:
        return []
    texts = _dumps_separated(values)[1:-1].split(_SEPARATOR)
    if len(texts) == len(values):
        return texts
    return [_dumps(value) for value in values]


def _object_format(names: Sequence[str]) -> str:
    """A ``%`` format of the JSON object of ``names`` whose values are given as JSON texts."""
    fields = (_dumps(name).replace("%", "%%") + ":%s" for name in names)
    return "{" + ",".join(fields) + "}"


class ColumnChunk(list):  # type: ignore[type-arg]
    """Rows given column-wise: one sequence of encoded values per selected column, all of one
    length (how a table read hands a chunk of rows to :meth:`ChangeRowEncoder.columns`)."""


class ChangeRowEncoder:
    """Builds one table's staged change rows, column-wise, from rows of encoded values.

    Each row is a sequence of values in ``select`` order, already in Spanner's JSON encoding (as a
    query returns them on the wire: INT64 and TIMESTAMP as strings, BYTES as base64, ...).
    ``columns`` are the change's columns (keys by ``is_primary_key``; each must be selected);
    ``table`` is the table the changes land in. Every row is committed at ``commit_timestamp`` (a
    snapshot) or at its ``config.timestamp_column``; ``config`` (a :class:`CommitTimestampTable`)
    also gives each row's mod type.
    """

    def __init__(
        self,
        table: str,
        columns: Sequence[ColumnType],
        select: Sequence[str],
        *,
        partition_token: str,
        commit_timestamp: datetime | None = None,
        config: CommitTimestampTable | None = None,
        value_capture_type: str = "NEW_ROW",
    ) -> None:
        if (commit_timestamp is None) == (config is None):
            raise ValueError("give exactly one of commit_timestamp and config")
        self.table = validate_identifier(table, "table")
        position = {name: index for index, name in enumerate(select)}
        missing = [c.name for c in columns if c.name not in position]
        if missing:
            raise TableRowError(f"table {table!r}: columns {missing} are not read")
        ordered = sorted(columns, key=lambda c: c.name)  # canonical JSON: sorted names
        self._width = len(select)
        self._keys = [(c.name, position[c.name]) for c in ordered if c.is_primary_key]
        self._values = [(c.name, position[c.name]) for c in ordered if not c.is_primary_key]
        if not self._keys:
            raise TableRowError(f"table {table!r}: no key column")
        # Per key and value column: where it is read, and whether its values are JSON strings.
        self._key_texts = [(position[c.name], _is_string(c)) for c in ordered if c.is_primary_key]
        self._value_texts = [(position[c.name], _is_string(c)) for c in ordered if not c.is_primary_key]
        self._key_format = _object_format([name for name, _ in self._keys])
        self._value_format = _object_format([name for name, _ in self._values])
        self.partition_token = partition_token
        self.types_json = column_types_json(columns)
        self.value_capture_type = value_capture_type
        self.metadata_json = source_metadata_json(value_capture_type, 1, True)
        self.config = config
        self._commit = None
        if commit_timestamp is not None:
            micros = to_micros(commit_timestamp)
            self._commit = (commit_timestamp, micros, f"{micros:016X}/", f"{table}/{micros}/")
        self._timestamp_at = position[config.timestamp_column] if config is not None else -1
        self._mod_columns = [
            (name, position[name])
            for name in ((config.soft_delete_column, config.change_type_column) if config else ())
            if name is not None
        ]
        self._stamps: dict[str, tuple[datetime, int, str, str]] = {}

    def _stamp(self, text: Any, keys_json: str) -> tuple[datetime, int, str, str]:
        found = self._stamps.get(text) if isinstance(text, str) else None
        if found is None:
            column = self.config.timestamp_column if self.config is not None else "?"
            try:
                stamp = parse_timestamp(text) if isinstance(text, str) else None
            except ValueError:
                stamp = None
            if stamp is None:
                raise TableRowError(
                    f"table {self.table!r}, key {keys_json}: column {column!r} is {text!r}, not a timestamp"
                )
            micros = to_micros(stamp)
            if len(self._stamps) > 4096:
                self._stamps.clear()
            found = self._stamps[text] = (stamp, micros, f"{micros:016X}/", f"{self.table}/{micros}/")
        return found

    def keys_json(self, row: Sequence[Any]) -> str:
        """The canonical JSON of a row's key."""
        return _dumps({name: row[at] for name, at in self._keys})

    def columns(self, rows: Iterable[Sequence[Any]] | ColumnChunk) -> list[list[Any]]:
        """The rows' staged change rows: one list per ``STAGED_CHANGE_COLUMNS`` entry; ``rows`` are
        sequences of values in ``select`` order, or a :class:`ColumnChunk`."""
        if isinstance(rows, ColumnChunk):
            return self.encode_columns(rows)
        rows = list(rows)
        if not rows:
            return [[] for _ in STAGED_CHANGE_COLUMNS]
        return self.encode_columns(list(zip(*rows, strict=True)))

    def encode_columns(self, values: Sequence[Sequence[Any]]) -> list[list[Any]]:
        """As :meth:`columns`, from rows given column-wise (see :class:`ColumnChunk`)."""
        if len(values) != self._width:
            raise ValueError(f"table {self.table!r}: expected {self._width} columns, got {len(values)}")
        count = len(values[0]) if values else 0
        if any(len(column) != count for column in values):
            raise ValueError(f"table {self.table!r}: the columns differ in length")
        key_format = self._key_format
        texts = [json_texts(values[at], strings) for at, strings in self._key_texts]
        if len(texts) == 1:
            keys = [key_format % text for text in texts[0]]
        else:
            keys = [key_format % row for row in zip(*texts, strict=True)]
        blake2b = hashlib.blake2b
        if self._commit is not None:
            stamp, _micros, prefix, transaction_prefix = self._commit
            timestamps = [stamp] * count
            transactions = [transaction_prefix + keys_json for keys_json in keys]
            mods = [INSERT] * count
            # domain.sequence_number.fingerprint64, inline and uncached: every row's text is new
            sequences = [
                prefix
                + blake2b(transaction.encode("utf-8"), digest_size=8).hexdigest().upper()
                + _SEQUENCE_TAIL
                for transaction in transactions
            ]
        else:
            timestamps, transactions, mods, sequences = self._committed(values, keys)
        try:
            images = self._images(values, count)
        except TypeError:
            if DELETE not in mods:
                raise
            images = [  # a value that is not JSON in a deleted row: the row's image is not written
                "{}" if mod == DELETE else _dumps({name: values[at][index] for name, at in self._values})
                for index, mod in enumerate(mods)
            ]
        if DELETE in mods:
            images = ["{}" if mod == DELETE else image for mod, image in zip(mods, images, strict=True)]
        return [
            [self.partition_token] * count,
            timestamps,
            transactions,
            [_RECORD_SEQUENCE] * count,
            [1] * count,
            [self.table] * count,
            mods,
            keys,
            images,
            ["{}"] * count,
            [self.types_json] * count,
            [self.metadata_json] * count,
            sequences,
        ]

    def _images(self, values: Sequence[Sequence[Any]], count: int) -> list[str]:
        """The rows' value images (their non-key columns as JSON objects)."""
        if not self._value_texts:
            return ["{}"] * count
        value_format = self._value_format
        texts = [json_texts(values[at], strings) for at, strings in self._value_texts]
        return [value_format % row for row in zip(*texts, strict=True)]

    def _committed(
        self, values: Sequence[Sequence[Any]], keys: list[str]
    ) -> tuple[list[datetime], list[str], list[str], list[str]]:
        """Commit timestamps, transactions, mod types and sequence numbers of rows committed at
        their own timestamps (a commit-timestamp table)."""
        config, blake2b = self.config, hashlib.blake2b
        timestamps: list[datetime] = []
        transactions: list[str] = []
        mods: list[str] = []
        sequences: list[str] = []
        mod_columns = [(name, values[at]) for name, at in self._mod_columns]
        for index, (text, keys_json) in enumerate(zip(values[self._timestamp_at], keys, strict=True)):
            stamp, _micros, prefix, transaction_prefix = self._stamp(text, keys_json)
            mod = INSERT
            if mod_columns:
                assert config is not None
                try:
                    mod = config.mod_type({name: column[index] for name, column in mod_columns})
                except TableRowError as exc:
                    raise TableRowError(f"{exc} (key {keys_json})") from None
            transaction = transaction_prefix + keys_json
            timestamps.append(stamp)
            transactions.append(transaction)
            mods.append(mod)
            digest = blake2b(transaction.encode("utf-8"), digest_size=8).hexdigest().upper()
            sequences.append(prefix + digest + _SEQUENCE_TAIL)
        return timestamps, transactions, mods, sequences


def _is_string(column: ColumnType) -> bool:
    """Whether a column's encoded values are JSON strings (or NULL)."""
    return isinstance(column.type, Mapping) and column.type.get("code") in _STRING_CODES


def encode_row(columns: Sequence[ColumnType], row: Mapping[str, Any], table: str) -> dict[str, Any]:
    """A row of Python values (BYTES as raw bytes) in Spanner's JSON encoding, column by column."""
    values = {}
    for column in columns:
        try:
            values[column.name] = encode_value(column.logical_type, row.get(column.name), column.name)
        except (TypeError, ValueError) as exc:
            raise TableRowError(f"table {table!r}: column {column.name!r}: {exc}") from exc
    return values


def table_change_rows(
    table: str,
    columns: Sequence[ColumnType],
    rows: Iterable[Mapping[str, Any]],
    *,
    partition_token: str,
    commit_timestamp: datetime | None = None,
    config: CommitTimestampTable | None = None,
    value_capture_type: str = "NEW_ROW",
) -> Iterator[dict[str, Any]]:
    """Staged change rows (mappings) of table rows given as ``{column: Python value}``.

    As :class:`ChangeRowEncoder`; ``columns`` are the change's columns, and the columns ``config``
    reads (timestamp, soft delete, change type) are taken from the rows too. TIMESTAMP values are
    datetimes, BYTES raw bytes.
    """
    extra = []
    if config is not None:
        extra = [
            n
            for n in (config.timestamp_column, config.soft_delete_column, config.change_type_column)
            if n is not None and n not in {c.name for c in columns}
        ]
    select = [c.name for c in columns] + extra
    encoder = ChangeRowEncoder(
        table,
        columns,
        select,
        partition_token=partition_token,
        commit_timestamp=commit_timestamp,
        config=config,
        value_capture_type=value_capture_type,
    )
    for row in rows:
        encoded = encode_row(columns, row, table)
        for name in extra:
            value = row.get(name)
            encoded[name] = value.isoformat() if isinstance(value, datetime) else value
        for values in zip(*encoder.columns([[encoded[name] for name in select]]), strict=True):
            staged = dict(zip(STAGED_CHANGE_COLUMNS, values, strict=True))
            yield staged
