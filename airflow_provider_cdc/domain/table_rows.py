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
for rows of Python values.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_provider_cdc.domain.columns import ColumnType, column_types_json
from airflow_provider_cdc.domain.contract.staged_rows import STAGED_CHANGE_COLUMNS
from airflow_provider_cdc.domain.identifiers import validate_identifier
from airflow_provider_cdc.domain.spanner_types import write_json_value
from airflow_provider_cdc.domain.timestamps import parse_timestamp, to_micros

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
            result.append(ColumnType(column.name, column.type, column.name in key, position))
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


def _make_dumps() -> Callable[[Any], str]:
    """Compact JSON text, calling the C encoder directly; dicts are written in insertion order
    (the encoder builds them with sorted keys, which makes the text canonical)."""
    encoder = json.JSONEncoder(separators=(",", ":"))
    make_encoder = getattr(json.encoder, "c_make_encoder", None)
    if make_encoder is None:  # pragma: no cover - Python without the C accelerator
        return encoder.encode
    encode = make_encoder(
        None, encoder.default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True
    )
    join = "".join
    return lambda value: join(encode(value, 0))


_dumps = _make_dumps()


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
        self._keys = [(c.name, position[c.name]) for c in ordered if c.is_primary_key]
        self._values = [(c.name, position[c.name]) for c in ordered if not c.is_primary_key]
        if not self._keys:
            raise TableRowError(f"table {table!r}: no key column")
        self._single_key = (
            (self._keys[0][0], self._keys[0][1], "{" + _dumps(self._keys[0][0]) + ":")
            if len(self._keys) == 1
            else None
        )
        self.partition_token = partition_token
        self.types_json = column_types_json(columns)
        self.value_capture_type = value_capture_type
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

    def columns(self, rows: Iterable[Sequence[Any]]) -> list[list[Any]]:
        """The rows' staged change rows: one list per ``STAGED_CHANGE_COLUMNS`` entry."""
        dumps, encode, blake2b = _dumps, json.encoder.encode_basestring_ascii, hashlib.blake2b
        keys_columns, value_columns, single = self._keys, self._values, self._single_key
        timestamps: list[datetime] = []
        transactions: list[str] = []
        mods: list[str] = []
        keys: list[str] = []
        images: list[str] = []
        sequences: list[str] = []
        config, mod_columns = self.config, self._mod_columns
        for row in rows:
            if single is not None:
                value = row[single[1]]
                # The common key, one INT64 or STRING column: its JSON text without building a dict.
                keys_json = (
                    single[2] + encode(value) + "}" if value.__class__ is str else dumps({single[0]: value})
                )
            else:
                keys_json = dumps({name: row[at] for name, at in keys_columns})
            if self._commit is not None:
                stamp, _micros, prefix, transaction_prefix = self._commit
            else:
                stamp, _micros, prefix, transaction_prefix = self._stamp(row[self._timestamp_at], keys_json)
            mod = INSERT
            if mod_columns:
                assert config is not None
                try:
                    mod = config.mod_type({name: row[at] for name, at in mod_columns})
                except TableRowError as exc:
                    raise TableRowError(f"{exc} (key {keys_json})") from None
            transaction = transaction_prefix + keys_json
            timestamps.append(stamp)
            transactions.append(transaction)
            mods.append(mod)
            keys.append(keys_json)
            images.append("{}" if mod == DELETE else dumps({name: row[at] for name, at in value_columns}))
            # domain.sequence_number.fingerprint64, inline and uncached: every row's text is new
            digest = blake2b(transaction.encode("utf-8"), digest_size=8).hexdigest().upper()
            sequences.append(prefix + digest + _SEQUENCE_TAIL)
        count = len(keys)
        return [
            [self.partition_token] * count,
            timestamps,
            transactions,
            [_RECORD_SEQUENCE] * count,
            [0] * count,
            [self.table] * count,
            mods,
            keys,
            images,
            ["{}"] * count,
            [self.types_json] * count,
            [self.value_capture_type] * count,
            [1] * count,
            [1] * count,
            [True] * count,
            sequences,
        ]


def encode_row(columns: Sequence[ColumnType], row: Mapping[str, Any], table: str) -> dict[str, Any]:
    """A row of Python values (BYTES as raw bytes) in Spanner's JSON encoding, column by column."""
    values = {}
    for column in columns:
        try:
            values[column.name] = write_json_value(column.spanner_type, row.get(column.name), column.name)
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
