"""OpenLineage names of what a Table Store source reads (pure): ``tablestore://{instance}`` and the
table (its metastore key ``tablestore/{instance}/{table}``)."""

from __future__ import annotations

from collections.abc import Iterable

from airflow_provider_cdc.lineage import DatasetName

#: The first segment of a Table Store source's metastore key.
KEY_PREFIX = "tablestore"


def datasets(source_key: str, tables: Iterable[str] = ()) -> list[DatasetName]:
    """The stream's table."""
    segments = source_key.split("/")
    return [DatasetName(f"tablestore://{segments[1]}", segments[2])] if len(segments) == 3 else []


def table_dataset(source_key: str, table: str) -> DatasetName | None:
    """The stream's table when it is ``table``."""
    segments = source_key.split("/")
    if len(segments) == 3 and segments[2] == table:
        return DatasetName(f"tablestore://{segments[1]}", table)
    return None
