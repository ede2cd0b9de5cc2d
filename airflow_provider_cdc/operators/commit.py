"""Operator that commits an applied window: window state, apply watermarks, staleness check."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_provider_cdc._compat import AirflowException, BaseOperator
from airflow_provider_cdc._errors import metastore_errors, require_absolute
from airflow_provider_cdc.domain.timestamps import coerce_timestamp, format_timestamp
from airflow_provider_cdc.domain.window import Window
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.metastore import WindowState


class LakeNotAppliedError(RuntimeError):
    """The commit found a table of the change set that does not hold the window."""


def stale_tables(
    watermarks: Mapping[str, datetime], now: datetime, max_staleness: timedelta
) -> dict[str, timedelta]:
    """Tables whose apply watermark lags ``now`` by more than ``max_staleness``, with their lag."""
    return {table: now - mark for table, mark in sorted(watermarks.items()) if now - mark > max_staleness}


class CdcCommitWindowOperator(BaseOperator):
    """Marks a window applied and advances each table's apply watermark to the window end.

    The apply watermark is the analog of BigQuery's ``upsert_stream_apply_watermark``: every change
    committed before it is in the target table. With ``max_staleness`` set, the task fails when a
    table's watermark lags the current time (or ``staleness_reference``) by more than that.

    A window commits only after the pipeline's previous window (the one ending at its start) is
    applied, or when it is the pipeline's first window. With ``lake_root`` every table of the change
    set must hold the window (the upsert applied it), and the Delta version that applied it is
    recorded per window and table in the metastore: the next upsert checks the tables against it.

    :param read_summaries: the readers' summaries (XCom), summed into the window's counts.
    :param changeset_root: where the merge job wrote the window's change set; the tables its
        manifest names get watermarks (as do all tables already applied by the pipeline).
    :param lake_root: root of the Delta tables the upsert wrote (absolute local path or ``gs://`` URI;
        like ``changeset_root``, a relative path is refused).
    :param gcp_conn_id: Google Cloud connection for a ``gs://`` lake (as the upsert's).
    """

    template_fields: Sequence[str] = (
        "pipeline_id",
        "window_start",
        "window_end",
        "read_summaries",
        "changeset_root",
        "lake_root",
        "staleness_reference",
    )

    def __init__(
        self,
        *,
        pipeline_id: str | None = None,
        window_start: Any = "{{ data_interval_start }}",
        window_end: Any = "{{ data_interval_end }}",
        read_summaries: Any = None,
        changeset_root: str | None = None,
        lake_root: str | None = None,
        gcp_conn_id: str | None = None,
        metastore_conn_id: str = CdcMetastoreHook.default_conn_name,
        max_staleness: timedelta | None = None,
        staleness_reference: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.pipeline_id = pipeline_id
        self.window_start = window_start
        self.window_end = window_end
        self.read_summaries = read_summaries
        self.changeset_root = changeset_root
        self.lake_root = lake_root
        self.gcp_conn_id = gcp_conn_id
        self.metastore_conn_id = metastore_conn_id
        self.max_staleness = max_staleness
        self.staleness_reference = staleness_reference

    def execute(self, context: Any) -> dict[str, Any]:
        pipeline = self.pipeline_id or context["ti"].dag_id
        window = Window(coerce_timestamp(self.window_start), coerce_timestamp(self.window_end))
        require_absolute("changeset_root", self.changeset_root)
        require_absolute("lake_root", self.lake_root)
        with metastore_errors(f"window {window} of pipeline {pipeline!r}: committing the window"):
            return self._commit(pipeline, window)

    def _commit(self, pipeline: str, window: Window) -> dict[str, Any]:
        changed = self._changed_tables(window)  # before the window is marked applied
        store = CdcMetastoreHook(self.metastore_conn_id).metastore
        record = store.get_window(pipeline, window.start, window.end)
        if record.state is not WindowState.APPLIED:
            store.require_predecessor_applied(pipeline, window.start, window.end)
            versions = self._table_versions(pipeline, window, changed)
            store.record_window_tables(pipeline, window.start, window.end, versions)
        summaries = _summaries(self.read_summaries)
        rows = sum(int(s.get("rows", 0)) for s in summaries)
        transactions = round(sum(float(s.get("transactions", 0.0)) for s in summaries))
        if record.state is WindowState.APPLIED:
            self.log.info(
                "Window %s of %s was already applied (attempt %d)", window, pipeline, record.attempt
            )
        elif not store.transition_window(
            pipeline,
            window.start,
            window.end,
            record.state,
            WindowState.APPLIED,
            attempt=record.attempt,
            record_count=rows if summaries else None,
            transaction_count=transactions if summaries else None,
        ):
            # Lost the compare-and-set: another run of this window may have committed it meanwhile.
            current = store.get_window(pipeline, window.start, window.end)
            if current.state is not WindowState.APPLIED:
                raise AirflowException(
                    f"window {window} of {pipeline} changed state to {current.state.value} (attempt "
                    f"{current.attempt}) while it was being committed"
                )
            self.log.info("Window %s of %s was applied by another run meanwhile", window, pipeline)
        tables = set(store.table_watermarks(pipeline)) | set(changed)
        for table in sorted(tables):
            store.advance_table_watermark(pipeline, table, window.end)
        watermarks = store.table_watermarks(pipeline)
        self.log.info(
            "Window %s applied: %d change rows, %d transactions; apply watermarks: %s",
            window,
            rows,
            transactions,
            ", ".join(f"{t}={format_timestamp(w)}" for t, w in sorted(watermarks.items())) or "none",
        )
        if self.max_staleness is not None:
            now = (
                coerce_timestamp(self.staleness_reference)
                if self.staleness_reference
                else datetime.now(timezone.utc)
            )
            stale = stale_tables(watermarks, now, self.max_staleness)
            if stale:
                detail = ", ".join(f"{t} lags {lag}" for t, lag in stale.items())
                raise AirflowException(
                    f"apply watermark older than max_staleness={self.max_staleness}: {detail}"
                )
        return {
            "window_id": window.window_id,
            "rows": rows,
            "transactions": transactions,
            "watermarks": {t: format_timestamp(w) for t, w in sorted(watermarks.items())},
        }

    def _changed_tables(self, window: Window) -> dict[str, int | None]:
        """The tables the window's change set holds with their rows, its manifest checked against
        its folders and row counts (a manifest that omits a table or miscounts one is refused)."""
        if not self.changeset_root:
            return {}
        from airflow_provider_cdc.lake.change_set import ChangeSetReader

        reader = ChangeSetReader(f"{self.changeset_root.rstrip('/')}/{window.window_id}")
        return {table.name: table.expected_rows for table in reader.tables()}

    def _table_versions(
        self, pipeline: str, window: Window, changed: Mapping[str, int | None]
    ) -> dict[str, tuple[int | None, int | None]]:
        """Per changed table: the Delta version that applied the window (checked to exist) and rows."""
        if not self.lake_root:
            return {table: (None, rows) for table, rows in changed.items()}
        from airflow_provider_cdc.lake.delta import DeltaLakeTarget
        from airflow_provider_cdc.operators.upsert import gcp_lake_storage_options

        target = DeltaLakeTarget(str(self.lake_root), gcp_lake_storage_options(self.gcp_conn_id))
        versions = {}
        for table, rows in sorted(changed.items()):
            version = target.window_commit_version(table, pipeline, window.end_micros)
            if version is None:
                held = target.applied_window_version(table, pipeline)
                raise LakeNotAppliedError(
                    f"window {window} of pipeline {pipeline!r}: table {table!r} does not hold it (its last "
                    f"applied window version is {held}); the upsert must apply the window before it commits"
                )
            versions[table] = (version, rows)
        return versions


def _summaries(value: Any) -> list[Mapping[str, Any]]:
    """The readers' summaries as a list; ignores anything that is not a mapping."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [value]
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        # A slice of Airflow's lazy XCom sequence is one fetch; iterating fetches item by item
        # until a lookup past the end fails (and logs that failure).
        value = value[:]
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        return [v for v in value if isinstance(v, Mapping)]
    return []
