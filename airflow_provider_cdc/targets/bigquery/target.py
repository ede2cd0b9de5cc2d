"""BigQuery CDC target: applies a window's change set to ``{project}.{dataset}.{table}`` tables.

Per source table: create the table when missing (columns mapped by ``bigquery.schema``, primary key
``NOT ENFORCED`` on the source key or on the derived key ``_cdc_key`` (``bigquery.keys``),
clustered on the key, ``max_staleness``), add new columns, then stream every change as an ``UPSERT``
(full row image, see ``targets.images``) or ``DELETE`` row carrying the change's
``_CHANGE_SEQUENCE_NUMBER`` through the table's default stream. BigQuery keeps, per key, the row
modification with the greatest sequence number.

:meth:`BigQueryCdcTarget.plan_tables` checks every table of a window (key types, the key an existing
table declares, NULL key values) before :meth:`BigQueryCdcTarget.apply_table` sends the first row.

As a :class:`~airflow_provider_cdc.core.contract.target.Target` (``plan_window``, ``send_planned``,
``apply_window``) it keeps a ledger: the metastore's ``cdc_window_tables`` under the target
``bigquery``, which records each table as soon as its send completed. A table the ledger records for
the window is not sent again (BigQuery forgets DELETEs after two days, so a window must never be sent
twice); a window older than one the ledger records for the table, and not recorded itself, is refused.
A table sent while the row source (the target partial images are completed from) holds later windows
sends only the rows those windows did not supersede.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_cdc.changesets.arrow_values import decode_json_objects
from airflow_provider_cdc.changesets.reader import (
    SOURCE_CHANGE_TYPE,
    SOURCE_KEYS_JSON,
    SOURCE_SEQUENCE,
    ChangeSetReader,
    ChangeSetTable,
    TableColumns,
    to_merge_source,
)
from airflow_provider_cdc.core.contract.change_set import CHANGE_SET_COLUMNS, COLUMN_TYPES_JSON
from airflow_provider_cdc.core.contract.target import (
    ALREADY_APPLIED,
    APPLIED,
    SKIPPED,
    OlderWindowError,
    Outcome,
    TableApplyResult,
)
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.timestamps import format_timestamp, to_micros
from airflow_provider_cdc.core.values import ValueEncodingError
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.targets.bigquery.keys import (
    DERIVED_KEY,
    DERIVED_KEY_COLUMN,
    DerivedKeyOption,
    derived_keys,
    null_key_problem,
    uses_derived_key,
)
from airflow_provider_cdc.targets.bigquery.schema import (
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
from airflow_provider_cdc.targets.bigquery.writer import (
    MAX_REQUEST_BYTES,
    DefaultStreamWriter,
    default_stream,
)
from airflow_provider_cdc.targets.images import RowSource, complete_images

log = logging.getLogger(__name__)

WATERMARK_QUERY = (
    "SELECT upsert_stream_apply_watermark FROM `{project}.{dataset}.INFORMATION_SCHEMA.TABLES` "
    "WHERE table_name = @table_name"
)


#: The metastore key of this target (its registered name).
BIGQUERY = "bigquery"


class BigQueryCdcError(RuntimeError):
    """A change set that cannot be applied to BigQuery (names the table)."""


class ResendError(OlderWindowError):
    """A table cannot be sent again safely (names the table and the window)."""


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
    #: The table is keyed on the derived key column ``_cdc_key``.
    derived_key: bool = False
    #: The ledger records the table as sent for this window: nothing was sent again.
    already_sent: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def table_result(self, window: int, outcome: Outcome) -> TableApplyResult:
        """This send as the target protocol's result for the window ending at ``window`` µs."""
        detail = "the ledger records the table as sent for this window" if self.already_sent else ""
        return TableApplyResult(BIGQUERY, self.table, window, outcome, self.rows, None, detail)


@dataclass(frozen=True)
class TablePlan:
    """One table of a window, checked before anything is sent: its change set, BigQuery table name,
    columns (``None`` when it has no changes) and whether it is keyed on ``_cdc_key``."""

    change_set: ChangeSetTable
    table: str
    columns: TableColumns | None
    derived_key: bool = False

    @property
    def source(self) -> str:
        return self.change_set.name


class BigQueryCdcTarget:
    """Writes change sets to one BigQuery dataset with the real ``bigquery.Client`` and
    ``BigQueryWriteClient`` (see the module docstring). ``row_source`` is the target of the pipeline
    that keeps current rows, partial images are completed from (a
    :class:`~airflow_provider_cdc.targets.images.RowSource`); ``ledger``
    the metastore that records the sent windows (needed by the window methods)."""

    name = BIGQUERY

    def __init__(
        self,
        bigquery_client: Any,
        write_client: Any,
        project: str,
        dataset: str,
        *,
        max_staleness: timedelta | str | None = None,
        row_source: RowSource | None = None,
        table_names: Mapping[str, str] | None = None,
        batch_rows: int = 8_192,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        max_in_flight: int = 8,
        max_attempts: int = 5,
        backoff_seconds: float = 0.5,
        schema_wait_seconds: float = 300.0,
        derived_key: str | Mapping[str, str] | None = "auto",
        ledger: Any | None = None,
    ) -> None:
        self.bigquery = bigquery_client
        self.write_client = write_client
        self.project = validate_project(project)
        self.dataset = validate_dataset(dataset)
        self.max_staleness = interval_text(max_staleness)
        self.row_source = row_source
        self.ledger = ledger
        self.table_names = {
            validate_identifier(k, "table"): validate_identifier(v, "table")
            for k, v in (table_names or {}).items()
        }
        self.derived_key = DerivedKeyOption(derived_key)
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
    def declared_key(self, table: str) -> list[str] | None:
        """The primary key the BigQuery table declares (``None`` when the table does not exist)."""
        from google.api_core.exceptions import NotFound

        try:
            found = self.bigquery.get_table(self.table_id(table))
        except NotFound:
            return None
        constraints = found.table_constraints
        return list(constraints.primary_key.columns) if constraints and constraints.primary_key else []

    def ensure_table(
        self, table: str, columns: TableColumns, derived_key: bool = False
    ) -> tuple[list[BigQueryColumn], bool, list[str]]:
        """Create or evolve the table (keyed on ``_cdc_key`` when ``derived_key``); returns its
        columns (in table order), whether it was created and the names of added columns."""
        from google.api_core.exceptions import Conflict, NotFound
        from google.cloud import bigquery
        from google.cloud.bigquery.table import PrimaryKey, TableConstraints

        wanted = bigquery_columns(columns.columns, table)
        natural = [c.name for c in columns.keys]
        check_primary_key(table, natural)
        key = [DERIVED_KEY_COLUMN] if derived_key else natural
        if derived_key:
            wanted = [DERIVED_KEY, *wanted]
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
            derived = f", which is the BigQuery key ({', '.join(key)})" if derived_key else ""
            raise BigQuerySchemaError(
                f"table {table_id!r} declares primary key ({', '.join(declared)}) but the source table "
                f"{columns.table!r} has key ({', '.join(natural)}){derived}"
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
        """Apply every table of a change set (its manifest is checked by the reader; every table is
        checked before the first is sent)."""
        return [self.apply_table(plan) for plan in self.plan_tables(reader.tables())]

    def plan_tables(self, change_sets: Sequence[ChangeSetTable]) -> list[TablePlan]:
        """Check every table before anything is sent (see :meth:`plan_table`)."""
        return [self.plan_table(change_set) for change_set in change_sets]

    def plan_table(self, change_set: ChangeSetTable) -> TablePlan:
        """Decide the table's BigQuery key and check that its changes can be sent: key columns of
        types BigQuery refuses with ``derived_key='never'``, an existing table declaring another key,
        and NULL key values in a table keyed on its source key fail naming table and column."""
        source = change_set.name
        table = self.table_name(source)
        if change_set.count_rows() == 0:
            return TablePlan(change_set, table, None)
        columns = TableColumns.from_column_types(source, change_set.column_types())
        bigquery_columns(columns.columns, table)  # every column has a BigQuery type
        check_primary_key(table, [c.name for c in columns.keys])
        mode = self.derived_key.mode(source)
        derived = uses_derived_key(source, self.table_id(table), columns.keys, mode, self.declared_key(table))
        if not derived:
            problem = _null_keys(change_set, columns)
            if problem is not None:
                raise BigQuerySchemaError(problem)
        return TablePlan(change_set, table, columns, derived)

    def apply_table(
        self, table_or_plan: ChangeSetTable | TablePlan, *, later_windows: bool = False
    ) -> TableResult:
        """Send one table's changes. ``later_windows``: the row source has applied windows after
        this one, so UPSERT rows those windows superseded are not sent (``targets.images``)."""
        plan = table_or_plan if isinstance(table_or_plan, TablePlan) else self.plan_table(table_or_plan)
        change_set, source, table, columns = plan.change_set, plan.source, plan.table, plan.columns
        if columns is None:
            log.info("%s: no changes in this window; nothing to send to %s", source, self.table_id(table))
            return TableResult(source, table)
        bq_columns, created, added = self.ensure_table(table, columns, plan.derived_key)
        result = TableResult(
            source, table, created=created, added_columns=added, derived_key=plan.derived_key
        )
        descriptor = proto_descriptor(bq_columns)
        message = message_class(descriptor)
        key_names = [DERIVED_KEY_COLUMN] if plan.derived_key else [c.name for c in columns.keys]

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
        rows = self._rows(
            change_set, columns, bq_columns, result, writer.row_budget, plan.derived_key, later_windows
        )
        stats = writer.append(rows, total)
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
        derived_key: bool = False,
        later_windows: bool = False,
    ) -> Iterator[bytes]:
        names = [c.name for c in bq_columns]
        by_lower = {c.name.lower(): c.name for c in columns.columns}
        by_lower[DERIVED_KEY_COLUMN] = DERIVED_KEY_COLUMN
        # Written names as the change set spells them (BigQuery names are case-insensitive).
        written = [by_lower.get(n.lower(), n) for n in names]
        renamed = [BigQueryColumn(w, c.type, c.mode) for w, c in zip(written, bq_columns, strict=True)]
        imaged = [w for w in written if w != DERIVED_KEY_COLUMN]
        key_names = [c.name for c in columns.keys]
        for batch in _read_batches(change_set, self.batch_rows):
            decoded = pa.Table.from_batches([to_merge_source(batch, columns)])
            decoded, superseded = complete_images(
                decoded,
                columns,
                imaged,
                self.row_source,
                source_table=change_set.name,
                later_windows=later_windows,
            )
            if derived_key:
                decoded = decoded.append_column(DERIVED_KEY_COLUMN, derived_keys(decoded, columns.keys))
            else:
                nulls = [k for k in key_names if decoded.column(k).null_count]
                if nulls:  # checked before the first send; a change set rewritten since is refused here
                    raise BigQueryCdcError(
                        f"table {columns.table!r}: key column {nulls[0]!r} is NULL and BigQuery primary-key "
                        "values must not be NULL"
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

    # ------------------------------------------------------------------ windows (target protocol)
    def _ledger(self) -> Any:
        if self.ledger is None:
            raise BigQueryCdcError(
                f"the BigQuery target {self.project}.{self.dataset} applies windows with a ledger (the "
                "metastore) only: it records which windows were sent"
            )
        return self.ledger

    def applied_window(self, table: str, pipeline: str) -> int | None:
        """The end (µs) of the last window of ``pipeline`` the ledger records as sent to the table."""
        records = self._ledger().window_tables(pipeline, target=BIGQUERY, table=self.table_name(table))
        return max((to_micros(r.window_end) for r in records), default=None)

    def window_result(self, table: str, pipeline: str, window: Window) -> TableApplyResult | None:
        """What the ledger records about ``window`` for the table (``None``: not sent)."""
        name = self.table_name(table)
        records = self._ledger().window_tables(
            pipeline, target=BIGQUERY, table=name, window=(window.start, window.end)
        )
        if not records:
            return None
        return TableApplyResult(BIGQUERY, name, window.end_micros, ALREADY_APPLIED, records[0].rows or 0)

    def plan_window(
        self, change_sets: Sequence[ChangeSetTable], pipeline: str, window: Window
    ) -> tuple[list[TableResult], list[TablePlan]]:
        """The tables of a window the ledger records as sent (nothing is sent again) and the plans of
        the others, every one checked before the first is sent: the checks of :meth:`plan_table`, and
        an older window than the ledger records for a table refused (:class:`ResendError`)."""
        recorded = self._ledger().window_tables(pipeline, target=BIGQUERY, window=(window.start, window.end))
        sent = {r.table for r in recorded}
        done: list[TableResult] = []
        pending = []
        for change_set in change_sets:
            name = self.table_name(change_set.name)
            if name in sent:
                log.info(
                    "%s: already sent for window %s (ledger of pipeline %s, target %s); not sent again",
                    self.table_id(name),
                    window.window_id,
                    pipeline,
                    BIGQUERY,
                )
                done.append(TableResult(change_set.name, name, already_sent=True))
            else:
                pending.append(change_set)
        plans = self.plan_tables(pending)
        for plan in plans:
            if plan.columns is not None:
                self._refuse_older_window(pipeline, plan.table, window)
        return done, plans

    def _refuse_older_window(self, pipeline: str, table: str, window: Window) -> None:
        later = [
            r.window_end
            for r in self._ledger().window_tables(
                pipeline, target=BIGQUERY, table=table, starting_from=window.end
            )
        ]
        if later:
            raise ResendError(
                f"BigQuery table {table!r}: window {window.window_id} is not recorded as sent but later "
                f"windows (up to {format_timestamp(max(later))}) are; windows are sent in order (BigQuery "
                "may have forgotten the later windows' DELETEs, which this window's images would undo), so "
                "nothing is sent"
            )

    def send_planned(self, plan: TablePlan, pipeline: str, window: Window) -> TableResult:
        """Send one planned table of ``window`` and record it in the ledger. When the row source holds
        later windows of its table, the rows they superseded are left out."""
        later = plan.columns is not None and self._rows_hold_later(plan.source, pipeline, window)
        result = self.apply_table(plan, later_windows=later)
        self._ledger().record_window_tables(
            pipeline, window.start, window.end, {result.table: (None, result.rows)}, target=BIGQUERY
        )
        return result

    def _rows_hold_later(self, source: str, pipeline: str, window: Window) -> bool:
        held = None if self.row_source is None else self.row_source.applied_window(source, pipeline)
        return held is not None and held > window.end_micros

    def apply_window(self, change_set: ChangeSetTable, pipeline: str, window: Window) -> TableApplyResult:
        """Send one table's change set of ``window`` unless the ledger records it (:meth:`plan_window`)."""
        done, plans = self.plan_window([change_set], pipeline, window)
        if done:
            return done[0].table_result(window.end_micros, ALREADY_APPLIED)
        outcome = APPLIED if plans[0].columns is not None else SKIPPED
        return self.send_planned(plans[0], pipeline, window).table_result(window.end_micros, outcome)

    # ------------------------------------------------------------------ status
    def apply_watermark(self, table: str, pipeline: str | None = None) -> datetime | None:
        """The ``upsert_stream_apply_watermark`` of the source table's BigQuery table (when BigQuery last
        applied row modifications; the table's, whatever the pipeline)."""
        from google.cloud import bigquery

        sql = WATERMARK_QUERY.format(project=self.project, dataset=self.dataset)
        config = bigquery.QueryJobConfig(
            query_parameters=[bigquery.ScalarQueryParameter("table_name", "STRING", self.table_name(table))]
        )
        rows = list(self.bigquery.query_and_wait(sql, job_config=config, project=self.project))
        return rows[0][0] if rows else None


def _null_keys(change_set: ChangeSetTable, columns: TableColumns) -> str | None:
    """The refusal of the change set's NULL key values (see :func:`bigquery.keys.null_key_problem`);
    only ``_keys_json`` texts that mention ``null`` are decoded."""
    dataset = change_set.dataset
    texts = dataset.to_table(columns=[SOURCE_KEYS_JSON]).column(SOURCE_KEYS_JSON).combine_chunks()
    if not len(texts):
        return None
    texts = texts.cast(pa.string())
    candidates = texts.filter(pc.fill_null(pc.match_substring(texts, "null"), False))
    if not len(candidates):
        return None
    try:
        decoded = decode_json_objects(candidates, columns.keys, what=SOURCE_KEYS_JSON)
    except ValueEncodingError as exc:
        raise BigQueryCdcError(f"table {columns.table!r}: {exc}") from None
    return null_key_problem(columns.table, columns.keys, decoded, candidates.to_pylist())


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
    from airflow_provider_cdc.core.timestamps import ensure_utc

    now = now or datetime.now(tz=watermark.tzinfo)
    return (ensure_utc(now) - ensure_utc(watermark)).total_seconds()
