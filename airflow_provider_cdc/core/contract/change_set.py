"""The change set: one row per changed key of a window and table, the targets' input.

``{changeset_root}/{window_id}/table={table}/part-*.parquet`` with the columns declared here, and
``_manifest.json`` written last (a change set without a manifest is incomplete). See ARCHITECTURE.md,
"Change sets", for what each column means.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from airflow_provider_cdc.core.contract.staged_rows import arrow_type
from airflow_provider_cdc.core.identifiers import validate_identifier

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

KEYS_JSON = "_keys_json"
VALUES_JSON = "_values_json"
PRESENT_COLUMNS = "_present_columns"
FULL_IMAGE = "_full_image"
CHANGE_TYPE = "_CHANGE_TYPE"
CHANGE_SEQUENCE_NUMBER = "_CHANGE_SEQUENCE_NUMBER"
COMMIT_TIMESTAMP = "_commit_timestamp"
COLUMN_TYPES_JSON = "_column_types_json"

#: The change set's columns in file order, with their logical types.
CHANGE_SET_FIELDS: tuple[tuple[str, str], ...] = (
    (KEYS_JSON, "string"),
    (VALUES_JSON, "string"),
    (PRESENT_COLUMNS, "string_list"),
    (FULL_IMAGE, "bool"),
    (CHANGE_TYPE, "string"),
    (CHANGE_SEQUENCE_NUMBER, "string"),
    (COMMIT_TIMESTAMP, "timestamp"),
    (COLUMN_TYPES_JSON, "string"),
)
CHANGE_SET_COLUMNS: tuple[str, ...] = tuple(name for name, _ in CHANGE_SET_FIELDS)
#: ``_CHANGE_TYPE`` values, as the CDC format of change types names them.
UPSERT = "UPSERT"
DELETE = "DELETE"
CHANGE_TYPES = (UPSERT, DELETE)


class ChangeSetError(ValueError):
    """A change set that breaks the change-set contract (names the table and the problem)."""


@cache
def change_set_schema() -> pa.Schema:
    """Arrow schema of a change set's rows."""
    import pyarrow as pa

    return pa.schema([pa.field(name, arrow_type(kind)) for name, kind in CHANGE_SET_FIELDS])


def manifest(window_id: str, tables: Mapping[str, Mapping[str, int]], **details: Any) -> dict[str, Any]:
    """A change set's manifest: the window, each table with its ``rows`` (and other counts), and
    ``rows``, the total; ``details`` (window bounds, source counts …) are recorded as given."""
    total = sum(int(entry["rows"]) for entry in tables.values())
    return {
        "window_id": window_id,
        **details,
        "tables": {name: dict(entry) for name, entry in sorted(tables.items())},
        "rows": total,
    }


def manifest_bytes(value: Mapping[str, Any]) -> bytes:
    """The manifest as the file holds it (indented JSON, sorted keys)."""
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8")


_ROW_COUNT_KEYS = ("rows", "row_count", "num_rows", "change_rows", "count")


def manifest_tables(value: Mapping[str, Any], where: str = "change set") -> dict[str, int | None]:
    """Table name → expected row count (``None`` if not stated) from a manifest.

    Accepts ``"tables"`` as an object (name → count or name → {"rows": count, ...}), a list of
    names, or a list of objects with ``"name"``/``"table"``; ``"row_counts"`` may give counts.
    """
    tables = value.get("tables")
    counts = value.get("row_counts") if isinstance(value.get("row_counts"), Mapping) else {}
    result: dict[str, int | None] = {}

    def _count(entry: Any) -> int | None:
        if isinstance(entry, bool):
            return None
        if isinstance(entry, int):
            return entry
        if isinstance(entry, Mapping):
            for key in _ROW_COUNT_KEYS:
                if isinstance(entry.get(key), int) and not isinstance(entry.get(key), bool):
                    return int(entry[key])
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
    for name, entry in items:
        validate_identifier(name, "table")
        count = _count(entry)
        result[name] = count if count is not None else _count(counts.get(name))
    return result


class ChangeSetTable(Protocol):
    """What a target reads of one table of a change set: its name, expected row count and Parquet
    dataset (:class:`airflow_provider_cdc.changesets.reader.ChangeSetTable` is the one a change set
    reader gives)."""

    @property
    def name(self) -> str: ...

    @property
    def expected_rows(self) -> int | None: ...

    @property
    def dataset(self) -> Any: ...

    def column_types(self) -> list[dict[str, Any]]:
        """Union of the table's column types as seen in the window."""
        ...

    def count_rows(self) -> int:
        """The table's rows in the change set."""
        ...
