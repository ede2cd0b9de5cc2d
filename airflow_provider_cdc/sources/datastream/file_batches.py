"""A Datastream file's changes as Arrow record batches of the staged-change schema, what the reader
stages: JSONL files parsed column-wise, Avro files converted from their change columns."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from typing import Any, BinaryIO

from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS
from airflow_provider_cdc.sources.datastream.files import AVRO, DatastreamFile, _avro_batches, _FileEncoder
from airflow_provider_cdc.sources.datastream.jsonl_arrow import jsonl_batches
from airflow_provider_cdc.sources.datastream.settings import DatastreamSettings
from airflow_provider_cdc.staging.batches import record_batch


def read_file_change_batches(
    stream: BinaryIO, file: DatastreamFile, unit: str, settings: DatastreamSettings
) -> Iterator[Any]:
    """:func:`read_file_change_columns` as Arrow record batches of ``STAGED_CHANGE_SCHEMA`` (what
    ``StagingWriter.write_batch`` takes): JSONL files read columnar
    (:mod:`~airflow_provider_cdc.sources.datastream.jsonl_arrow`), Avro files through
    :func:`~airflow_provider_cdc.sources.datastream.files.read_file_change_columns`: the same rows."""
    encoder = _FileEncoder(file, unit, settings)
    if file.format != AVRO:
        opened = gzip.GzipFile(fileobj=stream, mode="rb") if file.compressed else stream
        yield from jsonl_batches(opened, encoder)
        return
    for columns in _avro_batches(stream, encoder):
        yield record_batch(dict(zip(STAGED_CHANGE_COLUMNS, columns, strict=True)))
