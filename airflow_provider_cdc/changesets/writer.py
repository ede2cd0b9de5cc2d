"""Building and writing change sets from Python values.

Produces exactly the change-set contract of ARCHITECTURE.md ("Change sets"), for sources other
than the merge job, for tools and for tests of pipelines that end in a target.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_cdc.changesets.reader import filesystem_for
from airflow_provider_cdc.core.columns import canonical_column_types_json, parse_column_types
from airflow_provider_cdc.core.contract.change_set import (
    CHANGE_SEQUENCE_NUMBER,
    CHANGE_TYPE,
    COLUMN_TYPES_JSON,
    COMMIT_TIMESTAMP,
    FULL_IMAGE,
    KEYS_JSON,
    PRESENT_COLUMNS,
    VALUES_JSON,
    ChangeSetError,
    change_set_schema,
)
from airflow_provider_cdc.core.contract.locations import MANIFEST_NAME, TABLE_DIR_PREFIX
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.timestamps import ensure_utc
from airflow_provider_cdc.core.values import encode_value

CHANGE_SET_SCHEMA = change_set_schema()


@dataclass(frozen=True)
class Change:
    """One key's net change in a window.

    ``values`` maps non-key column names to Python values. ``present`` lists the columns a
    partial image carries; ``None`` means a full image (every non-key column, missing ones NULL).
    ``sequence`` is the sortable ``_CHANGE_SEQUENCE_NUMBER``.
    """

    keys: Mapping[str, Any]
    change_type: Literal["UPSERT", "DELETE"]
    sequence: str
    commit_timestamp: datetime
    values: Mapping[str, Any] | None = None
    present: Sequence[str] | None = None


def _canonical(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def change_set_table(column_types: Any, changes: Iterable[Change]) -> pa.Table:
    """Encode changes into a change-set Arrow table for one source table."""
    columns = parse_column_types(column_types)
    types_json = canonical_column_types_json(columns)
    key_columns = [c for c in columns if c.is_primary_key]
    value_columns = [c for c in columns if not c.is_primary_key]
    rows: dict[str, list[Any]] = {name: [] for name in CHANGE_SET_SCHEMA.names}
    for change in changes:
        if change.change_type not in ("UPSERT", "DELETE"):
            raise ChangeSetError(f"change type must be UPSERT or DELETE, got {change.change_type!r}")
        missing = [c.name for c in key_columns if c.name not in change.keys]
        if missing:
            raise ChangeSetError(f"change for keys {dict(change.keys)!r} lacks key column(s) {missing}")
        keys = {c.name: encode_value(c.logical_type, change.keys[c.name], c.name) for c in key_columns}
        values = dict(change.values or {})
        full = change.change_type == "DELETE" or change.present is None
        present = [c.name for c in value_columns] if full else list(change.present or [])
        unknown = set(values) - {c.name for c in value_columns}
        if unknown:
            raise ChangeSetError(f"change for keys {keys!r} names unknown column(s) {sorted(unknown)}")
        encoded = {}
        if change.change_type == "UPSERT":
            for column in value_columns:
                if column.name in present:
                    encoded[column.name] = encode_value(
                        column.logical_type, values.get(column.name), column.name
                    )
        rows[KEYS_JSON].append(_canonical(keys))
        rows[VALUES_JSON].append(_canonical(encoded))
        rows[PRESENT_COLUMNS].append(present)
        rows[FULL_IMAGE].append(full)
        rows[CHANGE_TYPE].append(change.change_type)
        rows[CHANGE_SEQUENCE_NUMBER].append(change.sequence)
        rows[COMMIT_TIMESTAMP].append(ensure_utc(change.commit_timestamp))
        rows[COLUMN_TYPES_JSON].append(types_json)
    return pa.Table.from_pydict(rows, schema=CHANGE_SET_SCHEMA)


def write_change_set(
    uri: str,
    tables: Mapping[str, pa.Table],
    storage_options: Mapping[str, str] | None = None,
    *,
    rows_per_file: int = 1_000_000,
) -> dict[str, Any]:
    """Write ``{uri}/table={name}/part-NNNNN.parquet`` per table, then ``{uri}/_manifest.json`` last.

    Returns the manifest (``{"window_id", "tables": {name: {"rows": n}}}``).
    """
    filesystem, root = filesystem_for(uri, storage_options)

    def path(*parts: str) -> str:
        return "/".join(p for p in (root, *parts) if p)

    if root:
        filesystem.create_dir(root, recursive=True)
    manifest: dict[str, Any] = {"window_id": uri.rstrip("/").rsplit("/", 1)[-1], "tables": {}}
    for name, table in sorted(tables.items()):
        validate_identifier(name, "table")
        directory = path(f"{TABLE_DIR_PREFIX}{name}")
        filesystem.create_dir(directory, recursive=True)
        table = table.select(CHANGE_SET_SCHEMA.names).cast(CHANGE_SET_SCHEMA)
        for index, start in enumerate(range(0, max(table.num_rows, 1), rows_per_file)):
            part = table.slice(start, rows_per_file)
            pq.write_table(part, f"{directory}/part-{index:05d}.parquet", filesystem=filesystem)
        manifest["tables"][name] = {"rows": table.num_rows}
    with filesystem.open_output_stream(path(MANIFEST_NAME)) as stream:
        stream.write(json.dumps(manifest, sort_keys=True).encode())
    return manifest
