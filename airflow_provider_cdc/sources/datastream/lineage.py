"""OpenLineage names of what a Datastream source reads (pure): the location of the source's folder of
files under the stream root (its metastore key ``datastream/gs/{bucket}/{path}`` or
``datastream/local/{path}``)."""

from __future__ import annotations

from collections.abc import Iterable

from airflow_provider_cdc.lineage import DatasetName

#: The first segment of a Datastream source's metastore key.
KEY_PREFIX = "datastream"


def datasets(source_key: str, tables: Iterable[str] = ()) -> list[DatasetName]:
    """The source's folder of files."""
    segments = source_key.split("/")
    if len(segments) >= 4 and segments[1] == "gs":
        return [DatasetName(f"gs://{segments[2]}", "/".join(segments[3:]))]
    if len(segments) >= 3 and segments[1] == "local":
        return [DatasetName("file", "/" + "/".join(segments[2:]))]
    return []


def table_dataset(source_key: str, table: str) -> DatasetName | None:
    """Files: no table to copy columns from."""
    return None
