"""OpenLineage names of what a Spanner source reads (pure): ``spanner://{project}/{instance}`` and
``{database}.{table}`` (the google provider's Spanner naming); a change stream is named like a table."""

from __future__ import annotations

import re
from collections.abc import Iterable

from airflow_provider_cdc.lineage import DatasetName

#: The first segment of a Spanner source's metastore key (``projects/{p}/instances/{i}/databases/{d}/{s}``).
KEY_PREFIX = "projects"
_KEY = re.compile(r"^projects/([^/]+)/instances/([^/]+)/databases/([^/]+)/([^/]+)$")


def spanner_dataset(project: str, instance: str, database: str, table: str) -> DatasetName:
    """A Spanner table (or change stream) of a database."""
    return DatasetName(f"spanner://{project}/{instance}", f"{database}.{table}")


def datasets(source_key: str, tables: Iterable[str] = ()) -> list[DatasetName]:
    """The database's ``tables`` (the change stream or table source itself when none are named)."""
    matched = _KEY.match(source_key)
    if matched is None:
        return []
    project, instance, database, stream = matched.groups()
    return [spanner_dataset(project, instance, database, table) for table in sorted(set(tables)) or [stream]]


def table_dataset(source_key: str, table: str) -> DatasetName | None:
    """The database's table ``table``."""
    matched = _KEY.match(source_key)
    if matched is None:
        return None
    project, instance, database, _ = matched.groups()
    return spanner_dataset(project, instance, database, table)
