"""BigQuery CDC target: applies a window's change set to ``{project}.{dataset}.{table}`` tables.

Per source table: create the table when missing (columns mapped by ``bigquery.schema``, primary key
``NOT ENFORCED`` from the Spanner key, clustered on the key, ``max_staleness``), add new columns,
then stream every change as an ``UPSERT`` (full row image, see ``bigquery.images``) or ``DELETE``
row carrying the change's ``_CHANGE_SEQUENCE_NUMBER`` through the table's default stream. BigQuery
keeps, per key, the row modification with the greatest sequence number, so sending a window again
(a retry, a cleared run, a backfill) leaves the table as it was.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_cdc.bigquery.images import complete_images
from airflow_provider_cdc.bigquery.schema import (
    BigQueryColumn,
    BigQuerySchemaError,
    bigquery_columns,
    check_primary_key,
    clustering_columns,
    encode_batch,
    evolve_schema,
    interval_text,
    message_class,
    proto_descriptor,
    validate_dataset,
    validate_project,
)
from airflow_provider_cdc.bigquery.writer import MAX_REQUEST_BYTES, DefaultStreamWriter, default_stream
from airflow_provider_cdc.domain.contract.change_set import CHANGE_SET_COLUMNS, COLUMN_TYPES_JSON
from airflow_provider_cdc.domain.identifiers import validate_identifier
from airflow_provider_cdc.lake.change_set import (
    SOURCE_CHANGE_TYPE,
    SOURCE_KEYS_JSON,
    SOURCE_SEQUENCE,
    ChangeSetReader,
    ChangeSetTable,
    TableColumns,
    to_merge_source,
)

log = logging.getLogger(__name__)

WATERMARK_QUERY = (
    "SELECT upsert_stream_apply_watermark FROM `{project}.{dataset}.INFORMATION_SCHEMA.TABLES` "
    "WHERE table_name = @table_name"
)


class BigQueryCdcError(RuntimeError):
    """A change set that cannot be applied to BigQuery (names the table)."""


@dataclass
class TableResult:
    """What one table's apply sent."""

    source_table: str
    table: str
    rows: int = 0
    upserts: int = 0
    deletes: int = 0
    superseded: int = 0
    requests: int = 0
    retries: int = 0
    seconds: float = 0.0
    created: bool = False
    added_columns: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class BigQueryCdcTarget:
    """Writes change sets to one BigQuery dataset with the real ``bigquery.Client`` and
    ``BigQueryWriteClient`` (see the module docstring). ``lake`` is the ``DeltaLakeTarget`` partial
    images are completed from."""

    def __init__(
        self,
        bigquery_client: Any,
        write_client: Any,
        project: str,
        dataset: str,
        *,
        max_staleness: timedelta | str | None = None,
        lake: Any | None = None,
        table_names: Mapping[str, str] | None = None,
        batch_rows: int = 8_192,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        max_in_flight: int = 8,
        max_attempts: int = 5,
        backoff_seconds: float = 0.5,
        schema_wait_seconds: float = 300.0,
    ) -> None:
        self.bigquery = bigquery_client
        self.write_client = write_client
        self.project = validate_project(project)
        self.dataset = validate_dataset(dataset)
        self.max_staleness = interval_text(max_staleness)
        self.lake = lake
        self.table_names = {
            validate_identifier(k, "table"): validate_identifier(v, "table")
            for k, v in (table_names or {}).items()
        }
        self.batch_rows = batch_rows
        self.schema_wait_seconds = schema_wait_seconds
        self.writer_options = {
            "max_request_bytes": max_request_bytes,
            "max_in_flight": max_in_flight,
            "max_attempts": max_attempts,
            "backoff_seconds": backoff_seconds,
        }

    def table_name(self, source_table: str) -> str:
        return self.table_names.get(source_table, validate_identifier(source_table, "table"))

    def table_id(self, table: str) -> str:
        return f"{self.project}.{self.dataset}.{validate_identifier(table, 'table')}"

    # ------------------------------------------------------------------ DDL
    def ensure_table(self, table: str, columns: TableColumns) -> tuple[list[BigQueryColumn], bool, list[str]]:
        """Create or evolve the table; returns its columns (in table order), whether it was created
        and the names of added columns."""
        from google.api_core.exceptions import Conflict, NotFound
        from google.cloud import bigquery
        from google.cloud.bigquery.table import PrimaryKey, TableConstraints

        wanted = bigquery_columns(columns.columns, table)
        key = [c.name for c in columns.keys]
        check_primary_key(table, key)
        table_id = self.table_id(table)
        created = False
        try:
            found = self.bigquery.get_table(table_id)
        except NotFound:
            new = bigquery.Table(table_id, schema=[_schema_field(c) for c in wanted])
            new.table_constraints = TableConstraints(primary_key=PrimaryKey(columns=key), foreign_keys=None)
            by_name = {c.name: c for c in wanted}
            clustering = clustering_columns([by_name[k] for k in key])
            if clustering:
                new.clustering_fields = clustering
            if self.max_staleness is not None:
                new.max_staleness = self.max_staleness
            try:
                found = self.bigquery.create_table(new)
                created = True
                log.info(
                    "created BigQuery table %s (primary key %s, clustered by %s, max_staleness %s)",
                    table_id,
                    key,
                    clustering,
                    self.max_staleness,
                )
            except Conflict:
                found = self.bigquery.get_table(table_id)
        constraints = found.table_constraints
        declared = list(constraints.primary_key.columns) if constraints and constraints.primary_key else []
        if not declared:
            raise BigQuerySchemaError(
                f"table {table_id!r} has no primary key; BigQuery CDC needs PRIMARY KEY ({', '.join(key)}) "
                "NOT ENFORCED"
            )
        if [c.lower() for c in declared] != [k.lower() for k in key]:
            raise BigQuerySchemaError(
                f"table {table_id!r} declares primary key ({', '.join(declared)}) but the Spanner table "
                f"{columns.table!r} has key ({', '.join(key)})"
            )
        existing = [BigQueryColumn.from_api(f.to_api_repr()) for f in found.schema]
        added = evolve_schema(table_id, existing, wanted)
        if added:
            found.schema = [*found.schema, *(_schema_field(c) for c in added)]
            found = self.bigquery.update_table(found, ["schema"])
            log.info("added column(s) %s to %s", [c.name for c in added], table_id)
        if self.max_staleness is not None and found.max_staleness != self.max_staleness:
            found.max_staleness = self.max_staleness
            found = self.bigquery.update_table(found, ["max_staleness"])
        return (
            [BigQueryColumn.from_api(f.to_api_repr()) for f in found.schema],
            created,
            [c.name for c in added],
        )

    # ------------------------------------------------------------------ rows
    def apply_change_set(self, reader: ChangeSetReader) -> list[TableResult]:
        """Apply every table of a change set (its manifest is checked by the reader)."""
        return [self.apply_table(table) for table in reader.tables()]

    def apply_table(self, change_set: ChangeSetTable) -> TableResult:
        source = change_set.name
        table = self.table_name(source)
        if change_set.count_rows() == 0:
            log.info("%s: no changes in this window; nothing to send to %s", source, self.table_id(table))
            return TableResult(source, table)
        columns = TableColumns.from_column_types(source, change_set.column_types())
        bq_columns, created, added = self.ensure_table(table, columns)
        result = TableResult(source, table, created=created, added_columns=added)
        descriptor = proto_descriptor(bq_columns)
        message = message_class(descriptor)
        key_names = [c.name for c in columns.keys]

        def describe(data: bytes) -> str:
            row = message.FromString(data)
            return "key " + json.dumps({k: str(getattr(row, k)) for k in key_names}, sort_keys=True)

        options = dict(self.writer_options)
        if created or added:
            options.setdefault("schema_wait_seconds", self.schema_wait_seconds)
        writer = DefaultStreamWriter(
            self.write_client,
            default_stream(self.project, self.dataset, table),
            descriptor,
            describe_row=describe,
            **options,
        )
        total = change_set.count_rows()
        stats = writer.append(self._rows(change_set, columns, bq_columns, result, writer.row_budget), total)
        result.rows, result.requests, result.retries = stats.rows, stats.requests, stats.retries
        result.seconds = stats.seconds
        log.info(
            "%s → %s: %d rows (%d upserts, %d deletes, %d superseded) in %d request(s), %.2fs, %.0f rows/s",
            source,
            self.table_id(table),
            result.rows,
            result.upserts,
            result.deletes,
            result.superseded,
            result.requests,
            result.seconds,
            stats.rows_per_second,
        )
        return result

    def _rows(
        self,
        change_set: ChangeSetTable,
        columns: TableColumns,
        bq_columns: list[BigQueryColumn],
        result: TableResult,
        row_budget: int,
    ) -> Iterator[bytes]:
        names = [c.name for c in bq_columns]
        by_lower = {c.name.lower(): c.name for c in columns.columns}
        # Written names as the change set spells them (BigQuery names are case-insensitive).
        written = [by_lower.get(n.lower(), n) for n in names]
        renamed = [BigQueryColumn(w, c.type, c.mode) for w, c in zip(written, bq_columns, strict=True)]
        for batch in _read_batches(change_set, self.batch_rows):
            decoded = pa.Table.from_batches([to_merge_source(batch, columns)])
            decoded, superseded = complete_images(
                decoded, columns, written, self.lake, lake_table=change_set.name
            )
            result.superseded += superseded
            deletes = pc.sum(pc.equal(decoded.column(SOURCE_CHANGE_TYPE), "DELETE")).as_py() or 0
            result.deletes += deletes
            result.upserts += decoded.num_rows - deletes
            try:
                encoded = encode_batch(
                    decoded,
                    renamed,
                    decoded.column(SOURCE_CHANGE_TYPE),
                    decoded.column(SOURCE_SEQUENCE),
                    columns.table,
                )
            except BigQuerySchemaError as exc:
                raise BigQueryCdcError(str(exc)) from None
            sizes = list(map(len, encoded))
            if sizes and max(sizes) > row_budget:
                index = next(i for i, size in enumerate(sizes) if size > row_budget)
                raise BigQueryCdcError(
                    f"table {columns.table!r}: the row of key {decoded.column(SOURCE_KEYS_JSON)[index]} "
                    f"encodes to {sizes[index]} bytes, more than an AppendRows request may carry "
                    f"({row_budget} bytes for rows)"
                )
            yield from encoded

    # ------------------------------------------------------------------ status
    def apply_watermark(self, table: str) -> datetime | None:
        """The table's ``upsert_stream_apply_watermark`` (when BigQuery last applied row modifications)."""
        from google.cloud import bigquery

        sql = WATERMARK_QUERY.format(project=self.project, dataset=self.dataset)
        config = bigquery.QueryJobConfig(
            query_parameters=[
                bigquery.ScalarQueryParameter("table_name", "STRING", validate_identifier(table, "table"))
            ]
        )
        rows = list(self.bigquery.query_and_wait(sql, job_config=config, project=self.project))
        return rows[0][0] if rows else None


def _read_batches(change_set: ChangeSetTable, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The change set's rows, one file and one row group at a time (memory stays flat whatever the
    window's size; a dataset scan reads files ahead of a slow consumer)."""
    import pyarrow.parquet as pq

    dataset = change_set.dataset
    stored = set(dataset.schema.names)
    columns = [c for c in CHANGE_SET_COLUMNS if c != COLUMN_TYPES_JSON and c in stored]
    for path in getattr(dataset, "files", None) or []:
        with dataset.filesystem.open_input_file(path) as handle:
            yield from pq.ParquetFile(handle).iter_batches(batch_size=batch_rows, columns=columns)


def _schema_field(column: BigQueryColumn) -> Any:
    from google.cloud import bigquery

    return bigquery.SchemaField(column.name, column.type, mode=column.mode)


def staleness_seconds(watermark: datetime | None, now: datetime | None = None) -> float | None:
    """Seconds since the apply watermark (``None`` when BigQuery has applied nothing yet)."""
    if watermark is None:
        return None
    from airflow_provider_cdc.domain.timestamps import ensure_utc

    now = now or datetime.now(tz=watermark.tzinfo)
    return (ensure_utc(now) - ensure_utc(watermark)).total_seconds()
