"""Operators that open and read a window of a Spanner change stream (thin wrappers over the hook)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_provider_cdc._compat import AirflowFailException, BaseOperator, Context
from airflow_provider_cdc._errors import metastore_errors, require_absolute
from airflow_provider_cdc.core.timestamps import coerce_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.operators._window import EPOCH_XCOM_KEY
from airflow_provider_cdc.sources.spanner.connection import (
    ChangeStreamConnectionMixin,
    connection_arguments,
)


def reader_owner(context: Context) -> str:
    """Lease owner of a reader task: the same across retries of one task instance, unique otherwise."""
    ti = context["ti"]
    map_index = getattr(ti, "map_index", -1)
    return f"{ti.dag_id}/{ti.run_id}/{ti.task_id}/{map_index}"


class _ChangeStreamWindowOperator(ChangeStreamConnectionMixin, BaseOperator):
    """Fields shared by the open and read operators: the change stream's connection fields (see
    :class:`~airflow_provider_cdc.sources.spanner.connection.ChangeStreamConnection`), the window and
    where it is staged; all templated.

    ``staging_root`` is a ``gs://`` URI or an absolute local path (a relative one is refused: tasks
    run in other working directories). ``retention`` (``timedelta``, seconds or Spanner duration text
    such as ``'7d'``) overrides the stream's ``retention_period``; a window older than the retention
    fails, one older than 80% of it logs a warning.
    """

    template_fields: Sequence[str] = (
        *ChangeStreamConnectionMixin.template_fields,
        "staging_root",
        "window_start",
        "window_end",
        "pipeline_id",
    )

    @connection_arguments
    def __init__(
        self,
        *,
        staging_root: str,
        window_start: Any = "{{ data_interval_start }}",
        window_end: Any = "{{ data_interval_end }}",
        pipeline_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.staging_root = staging_root
        self.window_start = window_start
        self.window_end = window_end
        self.pipeline_id = pipeline_id

    def window(self) -> Window:
        require_absolute("staging_root", self.staging_root)
        return Window(coerce_timestamp(self.window_start), coerce_timestamp(self.window_end))

    def pipeline(self, context: Context) -> str:
        return self.pipeline_id or context["ti"].dag_id


class SpannerChangeStreamOpenWindowOperator(_ChangeStreamWindowOperator):
    """Opens a window for reading: records it, extends the partition lineage, resets its partitions.

    The first window opened for a pipeline records the pipeline's first window start:
    ``first_window_start`` (e.g. the DAG's start date), else this window's start. Windows apply in
    order from there; a window whose predecessor was never run fails here without retries.
    Returns ``list(range(readers))`` so that mapped readers can ``expand`` over it, and pushes the
    opening's epoch as the XCom ``epoch``: the window's merge, upsert and commit take it
    (``epoch=epoch_template(open_window.task_id)``), so a run whose window was opened again since
    changes nothing.
    """

    template_fields: Sequence[str] = (
        *_ChangeStreamWindowOperator.template_fields, "readers", "first_window_start"
    )

    def __init__(self, *, readers: int | str = 1, first_window_start: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.readers = readers
        self.first_window_start = first_window_start

    def execute(self, context: Context) -> list[int]:
        self.readers = int(self.readers)
        if self.readers < 1:
            raise ValueError(f"readers must be at least 1, got {self.readers}")
        window = self.window()
        pipeline = self.pipeline(context)
        first = coerce_timestamp(self.first_window_start) if self.first_window_start else window.start
        with metastore_errors(f"window {window} of pipeline {pipeline!r}: recording the pipeline"):
            with CdcMetastoreHook(self.metastore_conn_id) as metastore:
                recorded = metastore.metastore.record_pipeline(pipeline, first)
                error = metastore.metastore.predecessor_error(pipeline, window.start, window.end)
        self.log.info("Pipeline %s starts with the window at %s", pipeline, recorded.first_window_start)
        if error is not None and error.never_run:
            raise AirflowFailException(str(error))
        epoch, tokens = self.to_hook().open_window_epoch(
            self.pipeline(context), window, self.staging_root, reader_owner(context)
        )
        context["ti"].xcom_push(key=EPOCH_XCOM_KEY, value=epoch)
        self.log.info(
            "Window %s opened (epoch %d) with %d partition(s) to read by %d reader(s)",
            window, epoch, len(tokens), self.readers,
        )
        return list(range(self.readers))


class SpannerChangeStreamReadWindowOperator(_ChangeStreamWindowOperator):
    """Reads partitions of one window into Parquet staging; several instances share a window.

    Returns a small summary (rows, records, transactions, partitions, staging URI, rate), never records.
    """

    template_fields: Sequence[str] = (*_ChangeStreamWindowOperator.template_fields, "reader_index")

    def __init__(
        self,
        *,
        reader_index: int | str = 0,
        lease_seconds: float = 300.0,
        retries_per_partition: int = 5,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.reader_index = reader_index
        self.lease_seconds = lease_seconds
        self.retries_per_partition = retries_per_partition

    def execute(self, context: Context) -> dict[str, Any]:
        window = self.window()
        summary = self.to_hook().read_window(
            window,
            self.staging_root,
            reader_owner(context),
            lease_seconds=self.lease_seconds,
            retries=self.retries_per_partition,
        )
        return {**summary.to_dict(), "reader_index": self.reader_index}
