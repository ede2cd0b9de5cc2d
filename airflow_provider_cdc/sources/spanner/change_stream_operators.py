"""Operators that open and read a window of a Spanner change stream (thin wrappers over the hook)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_provider_cdc.sources.operators import (
    WINDOW_FIELDS,
    OpenWindowOperatorBase,
    ReadWindowOperatorBase,
    SourceWindowOperator,
    reader_owner,
)
from airflow_provider_cdc.sources.spanner.connection import (
    ChangeStreamConnectionMixin,
    connection_arguments,
)

__all__ = [
    "SpannerChangeStreamOpenWindowOperator",
    "SpannerChangeStreamReadWindowOperator",
    "reader_owner",
]


class _ChangeStreamWindowOperator(ChangeStreamConnectionMixin, SourceWindowOperator):
    """Fields shared by the open and read operators: the change stream's connection fields (see
    :class:`~airflow_provider_cdc.sources.spanner.connection.ChangeStreamConnection`), the window and
    where it is staged; all templated.

    ``staging_root`` is a ``gs://`` URI or an absolute local path (a relative one is refused: tasks
    run in other working directories). ``retention`` (``timedelta``, seconds or Spanner duration text
    such as ``'7d'``) overrides the stream's ``retention_period``; a window older than the retention
    fails, one older than 80% of it logs a warning.
    """

    template_fields: Sequence[str] = (*ChangeStreamConnectionMixin.template_fields, *WINDOW_FIELDS)

    @connection_arguments
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)


class SpannerChangeStreamOpenWindowOperator(_ChangeStreamWindowOperator, OpenWindowOperatorBase):
    """Opens a window for reading: records it, extends the partition lineage, resets its partitions.

    The first window opened for a pipeline records the pipeline's first window start:
    ``first_window_start`` (e.g. the DAG's start date), else this window's start. Windows apply in
    order from there; a window whose predecessor was never run fails here without retries.
    Returns the window's handle (pipeline, stream key, window, epoch, staging location;
    ``WindowHandle.to_dict()``): the window's merge, upserts and commit take it
    (``window=open_window.output``), so a run whose window was opened again since changes nothing. It
    is also pushed as the XCom ``window``, the epoch as the XCom ``epoch``. (It used to return
    ``list(range(readers))``: map readers over a fixed list, ``reader_index=list(range(readers))``.)
    """

    template_fields: Sequence[str] = (
        *_ChangeStreamWindowOperator.template_fields, "readers", "first_window_start"
    )


class SpannerChangeStreamReadWindowOperator(_ChangeStreamWindowOperator, ReadWindowOperatorBase):
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
        super().__init__(
            reader_index=reader_index,
            lease_seconds=lease_seconds,
            retries_per_unit=retries_per_partition,
            **kwargs,
        )
        self.retries_per_partition = retries_per_partition
