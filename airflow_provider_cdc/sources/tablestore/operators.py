"""Operators of the Table Store stream source (thin: :class:`TablestoreStreamHook` does the I/O).

    open_window ─► read (mapped) ─► complete ─► merge ─► upsert ─► commit

:class:`TablestoreOpenWindowOperator` takes a ``DescribeStream`` after the window's end and records the
shards (with their lineage) the window reads; :class:`TablestoreReadWindowOperator` (mapped) claims them,
a child only once its parents are drained past the window. The connection fields are declared once
(:class:`TablestoreSource`); this module imports no client, so DAG files stay quick to parse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_cdc.core.timestamps import seconds_duration
from airflow_provider_cdc.hooks.connection_fields import (
    ConnectionFields,
    ConnectionFieldsMixin,
    connection_arguments_of,
)
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.sources.operators import (
    WINDOW_FIELDS,
    OpenWindowOperatorBase,
    ReadWindowOperatorBase,
    SourceWindowOperator,
    json_argument,
)

if TYPE_CHECKING:
    from airflow_provider_cdc.sources.tablestore.hook import TablestoreStreamHook

__all__ = ["TablestoreOpenWindowOperator", "TablestoreReadWindowOperator", "TablestoreSource"]

DEFAULT_CONN_ID = "tablestore_default"


@dataclass(frozen=True)
class TablestoreSource(ConnectionFields):
    """Which Table Store stream a task reads: the arguments :class:`TablestoreStreamHook` takes.

    :param table: the table whose stream is read (its stream must be enabled).
    :param tablestore_conn_id: the ``tablestore`` connection (endpoint, instance, access key).
    :param column_types: the attribute columns' Table Store types (``INTEGER``, ``DOUBLE``, ``BOOLEAN``,
        ``STRING``, ``BINARY``), a dict or its JSON text.
    :param settle_margin: seconds after a window's end before it is read (default 300).
    :param metastore_conn_id: connection of the metastore.
    """

    table: str
    tablestore_conn_id: str = DEFAULT_CONN_ID
    column_types: Mapping[str, str] | str | None = None
    settle_margin: float | str | None = None
    metastore_conn_id: str = CdcMetastoreHook.default_conn_name

    def to_hook(self) -> TablestoreStreamHook:
        from airflow_provider_cdc.sources.tablestore.hook import TablestoreStreamHook

        options: dict[str, Any] = {}
        settle = seconds_duration(self.settle_margin, "settle_margin")
        if settle is not None:
            options["settle_margin"] = settle
        return TablestoreStreamHook(
            self.table,
            tablestore_conn_id=self.tablestore_conn_id,
            metastore_conn_id=self.metastore_conn_id,
            column_types=json_argument("column_types", self.column_types, "a dict"),
            **options,
        )


TABLESTORE_FIELDS: tuple[str, ...] = TablestoreSource.field_names()
tablestore_arguments = connection_arguments_of(TablestoreSource)


class TablestoreSourceMixin(ConnectionFieldsMixin):
    """Gives a task the :class:`TablestoreSource` fields (templated) and :meth:`to_hook`."""

    connection_class = TablestoreSource
    template_fields: Sequence[str] = TABLESTORE_FIELDS

    table: str
    tablestore_conn_id: str
    column_types: Mapping[str, str] | str | None
    settle_margin: float | str | None
    metastore_conn_id: str

    @tablestore_arguments
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)

    if TYPE_CHECKING:

        def to_hook(self) -> TablestoreStreamHook: ...


class _TablestoreWindowOperator(TablestoreSourceMixin, SourceWindowOperator):
    """The Table Store fields and the window fields (staging root, window, pipeline id), all templated."""

    template_fields: Sequence[str] = (*TABLESTORE_FIELDS, *WINDOW_FIELDS)
    template_fields_renderers = {"column_types": "json"}

    @tablestore_arguments
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)


class TablestoreOpenWindowOperator(_TablestoreWindowOperator, OpenWindowOperatorBase):
    """Opens a window of a table's stream: fails while the window is too recent (settle margin) or starts
    outside the stream's retention, describes the stream after the window's end and records the shards
    the window reads, with their lineage.

    Returns the window's handle (``WindowHandle.to_dict()``) for the merge, the upserts and the commit
    (``window=open.output``), also pushed as the XCom ``window`` with the epoch as the XCom ``epoch``.
    (It used to return ``list(range(readers))``: map readers over ``reader_index=list(range(readers))``.)
    """

    template_fields: Sequence[str] = (
        *_TablestoreWindowOperator.template_fields,
        "readers",
        "first_window_start",
    )

    @tablestore_arguments
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)


class TablestoreReadWindowOperator(_TablestoreWindowOperator, ReadWindowOperatorBase):
    """Stages the records of one window's shards; several instances (mapped) share a window.

    Returns the reader's summary: ``window_id``, ``staging_uri``, ``rows`` (records), ``partitions``
    (shards read by this reader), ``retries``, ``seconds``, ``rows_per_second``, ``reader_index``.
    """

    template_fields: Sequence[str] = (*_TablestoreWindowOperator.template_fields, "reader_index")

    @tablestore_arguments
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
