"""Per-key collapse of a window's changes into one change-set row (reference semantics).

The merge job folds all changes of one key in one window into a single row of the change set
(ARCHITECTURE.md, "Change sets"). Rules, applied to the key's changes in sequence-number order
after de-duplication (a change is identified by table, key and sequence number):

* The chain is cut into segments at every DELETE and before every INSERT; only the last
  segment (the one after the last DELETE) shapes the image.
* A chain ending in DELETE gives a ``DELETE`` row (``INSERT → DELETE`` too: an earlier window may
  hold the key). Its image is empty and counts as full.
* Otherwise the row is an ``UPSERT`` whose image merges the segment's after images column-wise, the
  later value winning per column (``UPDATE → UPDATE`` = partial image, ``INSERT → UPDATE`` and
  ``DELETE → INSERT`` = full image). ``_full_image`` is true when the segment began with INSERT or
  follows a DELETE: after a DELETE the row starts empty, so ``DELETE → UPDATE`` (a source whose
  update of an absent row inserts it, as a wide-column store's row update does) is a full image of the
  updated columns, the other non-key columns NULL.
* ``_CHANGE_SEQUENCE_NUMBER`` and ``_commit_timestamp`` are those of the key's newest change.
* ``_column_types_json`` is the table's column types in the window: the union of the
  ``column_types_json`` of all its changes, the newest description of each column winning
  (a source may list only the key columns and the changed ones, e.g. a change stream's UPDATE,
  so no single change need carry every column).

Text passes through unchanged where nothing is merged: a segment of one change keeps its
``after_json`` text; a merged image is compact JSON with sorted column names. The merge job
produces exactly the rows these functions produce.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_provider_cdc.core.contract.change_set import (
    CHANGE_SEQUENCE_NUMBER,
    CHANGE_TYPE,
    COLUMN_TYPES_JSON,
    COMMIT_TIMESTAMP,
    FULL_IMAGE,
    KEYS_JSON,
    PRESENT_COLUMNS,
    UPSERT,
    VALUES_JSON,
)
from airflow_provider_cdc.core.contract.staged_rows import DELETE, INSERT, OPERATIONS, UPDATE

EMPTY_IMAGE = "{}"


class CollapseError(ValueError):
    """Changes of one key that cannot be collapsed (mixed keys, unknown operation, bad JSON)."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (the JSON value encoding writes it as the string {name!r})")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_IMAGE_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def dumps_image(values: Mapping[str, Any]) -> str:
    """Compact JSON with sorted column names: the text of a merged image."""
    return _IMAGE_ENCODER.encode(values)


def change_order(change: Mapping[str, Any]) -> str:
    """Sort key of a staged change: its sequence number (sortable form)."""
    return change["change_sequence_number"]


def deduplicate(changes: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Drop repeated changes, keeping the first of each ``(table_name, keys_json,
    change_sequence_number)`` in input order (a retried read repeats changes; a source numbers
    each change of a key apart, e.g. several changes of one row in one transaction by their order
    in it)."""
    seen: set[tuple[Any, Any, Any]] = set()
    unique = []
    for change in changes:
        identity = (change["table_name"], change["keys_json"], change["change_sequence_number"])
        if identity not in seen:
            seen.add(identity)
            unique.append(change)
    return unique


def _loads_object(text: Any, position: int) -> dict[str, Any]:
    try:
        value = _DECODER.decode(text)
    except (TypeError, AttributeError, ValueError) as error:
        raise CollapseError(f"change {position + 1}: after_json is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise CollapseError(f"change {position + 1}: after_json is not a JSON object: {text!r}")
    return value


def collapse_chain(operations: Sequence[str], after_images: Sequence[str]) -> tuple[str, str, bool]:
    """Fold one key's ordered, de-duplicated chain of changes, given column by column.

    Returns ``(_CHANGE_TYPE, _values_json, _full_image)``. Errors name the position of the
    offending change in the chain; callers add the table and key.
    """
    if not operations:
        raise CollapseError("no changes to collapse")
    segment_start = None
    for position, operation in enumerate(operations):
        if operation == DELETE:
            segment_start = None
        elif operation == INSERT:
            segment_start = position
        elif operation == UPDATE:
            if segment_start is None:
                segment_start = position
        else:
            raise CollapseError(
                f"change {position + 1}: unknown operation {operation!r}; "
                f"expected one of {', '.join(OPERATIONS)}"
            )
    if segment_start is None:  # the chain ends with DELETE
        return DELETE, EMPTY_IMAGE, True
    last = len(operations) - 1
    if segment_start == last:
        values_json = after_images[last]
        _loads_object(values_json, last)
    else:
        merged: dict[str, Any] = {}
        for position in range(segment_start, last + 1):
            merged.update(_loads_object(after_images[position], position))
        values_json = dumps_image(merged)
    full_image = operations[segment_start] == INSERT or (
        segment_start > 0 and operations[segment_start - 1] == DELETE
    )
    return UPSERT, values_json, full_image


def collapse_key(
    changes: Iterable[Mapping[str, Any]], column_types_json: str | None = None
) -> dict[str, Any]:
    """Collapse one key's changes in a window (staged-row mappings) into one change-set row.

    The changes may come in any order and may hold duplicates: they are ordered by
    :func:`change_order` and the first of each change (:func:`deduplicate`) is kept.
    ``column_types_json`` is the table's (see :func:`collapse_window`); by default the newest
    change's.
    """
    chain = deduplicate(sorted(changes, key=change_order))
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
    try:
        change_type, values_json, full_image = collapse_chain(
            [change["operation"] for change in chain], [change["after_json"] for change in chain]
        )
    except CollapseError as error:
        raise CollapseError(f"table {table!r}, key {key}: {error}") from None
    return {
        KEYS_JSON: key,
        VALUES_JSON: values_json,
        PRESENT_COLUMNS: sorted(json.loads(values_json)),
        FULL_IMAGE: full_image,
        CHANGE_TYPE: change_type,
        CHANGE_SEQUENCE_NUMBER: newest["change_sequence_number"],
        COMMIT_TIMESTAMP: newest["commit_timestamp"],
        COLUMN_TYPES_JSON: newest["column_types_json"] if column_types_json is None else column_types_json,
    }


def collapse_window(changes: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Collapse a window's staged changes: table name → change-set rows ordered by ``_keys_json``.

    Reference for the merge job; holds the whole window in memory, so meant for tests and small
    windows. Window bounds and transaction completeness are the caller's concern.
    """
    from airflow_provider_cdc.core.values import column_types_json, union_column_types

    by_key: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    of_table: dict[str, list[Mapping[str, Any]]] = {}
    for change in changes:
        table = change["table_name"]
        by_key.setdefault((table, change["keys_json"]), []).append(change)
        of_table.setdefault(table, []).append(change)
    column_types = {
        table: column_types_json(
            union_column_types(change["column_types_json"] for change in sorted(rows, key=change_order))
        )
        for table, rows in of_table.items()
    }
    tables: dict[str, list[dict[str, Any]]] = {}
    for (table, _key), key_changes in sorted(by_key.items()):
        tables.setdefault(table, []).append(collapse_key(key_changes, column_types[table]))
    return tables
