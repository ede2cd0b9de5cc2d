"""Per-key collapse of a window's changes into one change-set row (reference semantics).

The merge job folds all changes of one key in one window into a single row of the change set
(ARCHITECTURE.md, "Change sets"). Rules, applied to the key's changes in sequence-number order
after de-duplication:

* The chain is cut into segments at every DELETE and before every INSERT; only the last
  segment (the one after the last DELETE) shapes the image.
* A chain ending in DELETE gives a ``DELETE`` row (``INSERT → DELETE`` too: an earlier window may
  hold the key). Its image is empty and counts as full.
* Otherwise the row is an ``UPSERT`` whose image merges the segment's new values column-wise, the
  later value winning per column (``UPDATE → UPDATE`` = partial image, ``INSERT → UPDATE`` and
  ``DELETE → INSERT`` = full image). ``_full_image`` is true when the segment began with INSERT.
* ``_CHANGE_SEQUENCE_NUMBER`` and ``_commit_timestamp`` are those of the newest change.
* ``_column_types_json`` is the text the changes carry when they all carry the same text, else
  the union of their column types (a later change's entry wins per column) ordered by ordinal
  position.

Text passes through unchanged where nothing is merged: a segment of one change keeps its
``new_values_json`` text; a merged image is compact JSON with sorted column names. The merge job
produces exactly the rows these functions produce.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

INSERT = "INSERT"
UPDATE = "UPDATE"
DELETE = "DELETE"
MOD_TYPES = (INSERT, UPDATE, DELETE)

UPSERT = "UPSERT"

#: Columns of a change-set row, in order (ARCHITECTURE.md "Change sets").
CHANGE_SET_COLUMNS = (
    "_keys_json",
    "_values_json",
    "_present_columns",
    "_full_image",
    "_CHANGE_TYPE",
    "_CHANGE_SEQUENCE_NUMBER",
    "_commit_timestamp",
    "_column_types_json",
)

EMPTY_IMAGE = "{}"


class CollapseError(ValueError):
    """Changes of one key that cannot be collapsed (mixed keys, unknown mod type, bad JSON)."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (Spanner encodes it as the string {name!r})")


def _where(change: Mapping[str, Any]) -> str:
    return (
        f"table {change.get('table_name')!r}, key {change.get('keys_json')}, "
        f"change {change.get('change_sequence_number')}"
    )


def _json_object(change: Mapping[str, Any], field: str) -> dict[str, Any]:
    text = change.get(field)
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (TypeError, ValueError) as error:
        raise CollapseError(f"{field} of {_where(change)} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise CollapseError(f"{field} of {_where(change)} is not a JSON object: {text!r}")
    return value


def dumps_image(values: Mapping[str, Any]) -> str:
    """Compact JSON with sorted column names: the text of a merged image."""
    return json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def deduplicate(changes: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Drop repeated mods: the first of each ``(server_transaction_id, record_sequence, table_name,
    keys_json)`` is kept, in input order."""
    seen: set[tuple[Any, Any, Any, Any]] = set()
    unique = []
    for change in changes:
        identity = (
            change["server_transaction_id"],
            change["record_sequence"],
            change["table_name"],
            change["keys_json"],
        )
        if identity not in seen:
            seen.add(identity)
            unique.append(change)
    return unique


def _ordering(change: Mapping[str, Any]) -> tuple[str, str, str, int]:
    return (
        change["change_sequence_number"],
        change["server_transaction_id"],
        change["record_sequence"],
        change["mod_index"],
    )


def merge_column_types(texts: Sequence[str]) -> str:
    """``_column_types_json`` of a chain: the common text, or the union of the column entries."""
    first = texts[0]
    if all(text == first for text in texts):
        return first
    columns: dict[str, dict[str, Any]] = {}
    for text in texts:
        try:
            entries = json.loads(text)
        except (TypeError, ValueError) as error:
            raise CollapseError(f"column_types_json is not valid JSON: {error}: {text!r}") from None
        if not isinstance(entries, list) or not all(
            isinstance(entry, dict) and isinstance(entry.get("name"), str) for entry in entries
        ):
            raise CollapseError(f"column_types_json is not an array of named columns: {text!r}")
        for entry in entries:
            columns[entry["name"]] = entry
    ordered = sorted(columns.values(), key=lambda entry: (entry.get("ordinal_position") or 0, entry["name"]))
    return json.dumps(ordered, separators=(",", ":"), ensure_ascii=False)


def collapse_key(changes: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Collapse one key's changes in a window (staged-row mappings) into one change-set row.

    The changes may come in any order and may hold duplicates; they are de-duplicated and ordered
    by ``change_sequence_number`` (sortable form), then transaction id, record sequence and mod index.
    """
    chain = sorted(deduplicate(changes), key=_ordering)
    if not chain:
        raise CollapseError("no changes to collapse")
    newest = chain[-1]
    table, key = newest["table_name"], newest["keys_json"]
    for change in chain:
        if change["table_name"] != table or change["keys_json"] != key:
            raise CollapseError(
                f"changes of different keys cannot be collapsed together: table {table!r} key {key} and "
                f"table {change['table_name']!r} key {change['keys_json']}"
            )
        if change["mod_type"] not in MOD_TYPES:
            raise CollapseError(
                f"unknown mod_type {change['mod_type']!r} in {_where(change)}; expected one of "
                f"{', '.join(MOD_TYPES)}"
            )

    segment: list[Mapping[str, Any]] = []
    for change in chain:
        if change["mod_type"] == DELETE:
            segment = []
        elif change["mod_type"] == INSERT:
            segment = [change]
        else:
            segment.append(change)

    row: dict[str, Any] = {
        "_keys_json": key,
        "_CHANGE_SEQUENCE_NUMBER": newest["change_sequence_number"],
        "_commit_timestamp": newest["commit_timestamp"],
        "_column_types_json": merge_column_types([change["column_types_json"] for change in chain]),
    }
    if newest["mod_type"] == DELETE:
        row.update(
            _values_json=EMPTY_IMAGE, _present_columns=[], _full_image=True, _CHANGE_TYPE=DELETE
        )
        return row

    if len(segment) == 1:
        values_json = segment[0]["new_values_json"]
        columns = sorted(_json_object(segment[0], "new_values_json"))
    else:
        merged: dict[str, Any] = {}
        for change in segment:
            merged.update(_json_object(change, "new_values_json"))
        values_json = dumps_image(merged)
        columns = sorted(merged)
    row.update(
        _values_json=values_json,
        _present_columns=columns,
        _full_image=segment[0]["mod_type"] == INSERT,
        _CHANGE_TYPE=UPSERT,
    )
    return row


def collapse_window(changes: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Collapse a window's staged changes: table name → change-set rows ordered by ``_keys_json``.

    Reference for the merge job; holds the whole window in memory, so meant for tests and small
    windows. Window bounds and transaction completeness are the caller's concern.
    """
    by_key: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for change in changes:
        by_key.setdefault((change["table_name"], change["keys_json"]), []).append(change)
    tables: dict[str, list[dict[str, Any]]] = {}
    for (table, _key), key_changes in sorted(by_key.items()):
        tables.setdefault(table, []).append(collapse_key(key_changes))
    return tables
