"""Operators and the sensor of the Datastream source (thin: :class:`DatastreamHook` does the I/O).

    wait_for_files ─► open_window ─► read (mapped) ─► merge ─► upsert ─► commit

:class:`DatastreamWindowArrivedSensor` waits until the clock is past the window's end plus the
lateness margin (every file created in the window is then listed), :class:`DatastreamOpenWindowOperator`
lists the window's files once and records them, :class:`DatastreamReadWindowOperator` (mapped) stages
them. The connection fields are declared once (:class:`DatastreamSource`); this module imports neither
the Google provider nor fastavro, so DAG files stay quick to parse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider_cdc._compat import BaseSensorOperator, Context
from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.hooks.connection_fields import (
    ConnectionFields,
    ConnectionFieldsMixin,
    connection_arguments_of,
)
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.hooks.storage import DEFAULT_GCP_CONN_ID
from airflow_provider_cdc.operators._window import WINDOW_END, WINDOW_START, window_of
from airflow_provider_cdc.sources.operators import (
    WINDOW_FIELDS,
    OpenWindowOperatorBase,
    ReadWindowOperatorBase,
    SourceWindowOperator,
    json_argument,
)

if TYPE_CHECKING:
    from airflow_provider_cdc.sources.datastream.hook import DatastreamHook

__all__ = [
    "DatastreamOpenWindowOperator",
    "DatastreamReadWindowOperator",
    "DatastreamSource",
    "DatastreamWindowArrivedSensor",
]


@dataclass(frozen=True)
class DatastreamSource(ConnectionFields):
    """Which Datastream stream a task reads: the arguments :class:`DatastreamHook` takes.

    :param stream_root: the stream's destination path, ``gs://bucket/prefix`` or an absolute folder.
    :param source: the source's name (a plain identifier): its staging folder and metastore key.
    :param objects: the Datastream objects to read (folders such as ``shop_customers``); default all.
    :param settings: ``source_database`` (override), ``primary_keys``, ``column_types`` (JSONL),
        ``table_names``: a dict or its JSON text.
    :param file_rotation_interval: the stream's file rotation interval in seconds (default 60).
    :param lateness_margin: seconds after a window's end before it is listed (default two rotation
        intervals plus 60 s).
    :param max_file_delay: seconds; skip minute folders older than the window start minus this.
    :param gcp_conn_id: the Google Cloud connection (credentials for ``gs://``).
    :param impersonation_chain: a service account, or a chain of them, to impersonate for the reads.
    :param metastore_conn_id: connection of the metastore.
    """

    stream_root: str
    source: str
    objects: Sequence[str] | str | None = None
    settings: Mapping[str, Any] | str | None = None
    file_rotation_interval: float | str = 60
    lateness_margin: float | str | None = None
    max_file_delay: float | str | None = None
    gcp_conn_id: str = DEFAULT_GCP_CONN_ID
    impersonation_chain: str | Sequence[str] | None = None
    metastore_conn_id: str = CdcMetastoreHook.default_conn_name

    def to_hook(self) -> DatastreamHook:
        from airflow_provider_cdc.sources.datastream.hook import DatastreamHook

        arguments = self.arguments()
        arguments["objects"] = json_argument("objects", arguments["objects"])
        arguments["settings"] = json_argument("settings", arguments["settings"], "a dict")
        return DatastreamHook(**arguments)


DATASTREAM_FIELDS: tuple[str, ...] = DatastreamSource.field_names()
datastream_arguments = connection_arguments_of(DatastreamSource)


class DatastreamSourceMixin(ConnectionFieldsMixin):
    """Gives a task the :class:`DatastreamSource` fields (templated) and :meth:`to_hook`."""

    connection_class = DatastreamSource
    template_fields: Sequence[str] = DATASTREAM_FIELDS

    stream_root: str
    source: str
    objects: Sequence[str] | str | None
    settings: Mapping[str, Any] | str | None
    file_rotation_interval: float | str
    lateness_margin: float | str | None
    max_file_delay: float | str | None
    gcp_conn_id: str
    impersonation_chain: str | Sequence[str] | None
    metastore_conn_id: str

    @datastream_arguments
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)

    if TYPE_CHECKING:

        def to_hook(self) -> DatastreamHook: ...


class _DatastreamWindowOperator(DatastreamSourceMixin, SourceWindowOperator):
    """The Datastream fields and the window fields (staging root, window, pipeline id), all templated."""

    template_fields: Sequence[str] = (*DATASTREAM_FIELDS, *WINDOW_FIELDS)
    template_fields_renderers = {"settings": "json"}

    @datastream_arguments
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)


class DatastreamOpenWindowOperator(_DatastreamWindowOperator, OpenWindowOperatorBase):
    """Opens a window of a Datastream stream: fails while its files may still arrive, lists the files
    created in ``[start, end)`` once (an opening again reads the same recorded files) and records them
    as the window's units.

    Returns the window's handle (pipeline, source key, window, epoch, staging location, window basis
    ``arrival``; ``WindowHandle.to_dict()``) for the merge, the upserts and the commit
    (``window=open.output``), also pushed as the XCom ``window`` with the epoch as the XCom ``epoch``.
    (It used to return ``list(range(readers))``: map readers over ``reader_index=list(range(readers))``.)
    """

    template_fields: Sequence[str] = (
        *_DatastreamWindowOperator.template_fields,
        "readers",
        "first_window_start",
    )

    @datastream_arguments
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)


class DatastreamReadWindowOperator(_DatastreamWindowOperator, ReadWindowOperatorBase):
    """Stages the files of one window as change rows; several instances (mapped) share a window.

    Returns the reader's summary: ``window_id``, ``staging_uri``, ``rows`` (events), ``partitions``
    (files read by this reader), ``retries``, ``seconds``, ``rows_per_second``, ``reader_index``.
    """

    template_fields: Sequence[str] = (*_DatastreamWindowOperator.template_fields, "reader_index")

    @datastream_arguments
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)


class DatastreamWindowArrivedSensor(DatastreamSourceMixin, BaseSensorOperator):
    """Waits until every file created in the window has arrived: the clock past the window's end plus
    the lateness margin (checked without listing anything). ``mode="reschedule"`` frees the worker slot
    between pokes."""

    template_fields: Sequence[str] = (*DATASTREAM_FIELDS, "window_start", "window_end")
    ui_color = "#e8f0fe"

    @datastream_arguments
    def __init__(
        self, *, window_start: Any = WINDOW_START, window_end: Any = WINDOW_END, **kwargs: Any
    ) -> None:
        kwargs.setdefault("mode", "reschedule")
        kwargs.setdefault("poke_interval", 30)
        super().__init__(**kwargs)
        self.window_start = window_start
        self.window_end = window_end

    def poke(self, context: Context) -> bool:
        window = window_of(self.window_start, self.window_end)
        ready = self.to_hook().readable_at(window)
        now = datetime.now(timezone.utc)
        if now >= ready:
            return True
        self.log.info("Window %s: files may arrive until %s", window, format_timestamp(ready))
        return False
