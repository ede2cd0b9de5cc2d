"""The connection fields of a change stream task, declared once for the operators, sensor and trigger.

:class:`ChangeStreamConnection` holds them; :class:`ChangeStreamConnectionMixin` gives a class the same
fields as keyword arguments and attributes, ``template_fields`` and :meth:`~ChangeStreamConnectionMixin.
to_hook` (the machinery is :mod:`airflow_provider_cdc.hooks.connection_fields`). Nothing here imports the
Google provider: a DAG file naming these classes stays quick to parse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_cdc.hooks.connection_fields import (
    ConnectionFields,
    ConnectionFieldsMixin,
    connection_arguments_of,
)
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.hooks.storage import DEFAULT_GCP_CONN_ID
from airflow_provider_cdc.sources.spanner.durations import (
    DEFAULT_HEARTBEAT_MS,
    RetentionValue,
    parse_retention,
)

if TYPE_CHECKING:
    from airflow_provider_cdc.sources.spanner.change_stream_hook import SpannerChangeStreamHook


@dataclass(frozen=True)
class ChangeStreamConnection(ConnectionFields):
    """Which change stream a task reads, and how: the arguments :class:`SpannerChangeStreamHook` takes.

    :param instance_id: Spanner instance id.
    :param database_id: Spanner database id.
    :param stream: change stream name (read through ``READ_<stream>``).
    :param project_id: Google Cloud project (default: the connection's project).
    :param gcp_conn_id: the Google Cloud connection (credentials, project).
    :param impersonation_chain: a service account, or a chain of them, to impersonate.
    :param metastore_conn_id: connection of the partition/window metastore.
    :param heartbeat_ms: heartbeat interval asked of each partition query (1000–300000).
    :param retention: the stream's retention period (``timedelta``, seconds or Spanner duration text
        such as ``'7d'``); default: the stream's ``retention_period`` option, else Spanner's one day.
    """

    instance_id: str
    database_id: str
    stream: str
    project_id: str | None = None
    gcp_conn_id: str = DEFAULT_GCP_CONN_ID
    impersonation_chain: str | Sequence[str] | None = None
    metastore_conn_id: str = CdcMetastoreHook.default_conn_name
    heartbeat_ms: int = DEFAULT_HEARTBEAT_MS
    retention: RetentionValue | None = None

    def serialize(self) -> dict[str, Any]:
        """The fields as JSON values that build an equal connection (a trigger's kwargs): the retention
        in seconds (``None`` when not given), the impersonation chain as a list, the heartbeat an int."""
        values = self.arguments()
        if isinstance(self.impersonation_chain, tuple):
            values["impersonation_chain"] = list(self.impersonation_chain)
        retention = self.retention
        values["retention"] = None if retention in (None, "") else parse_retention(retention).total_seconds()
        values["heartbeat_ms"] = int(self.heartbeat_ms)
        return values

    def to_hook(self) -> SpannerChangeStreamHook:
        """A new hook for these fields."""
        from airflow_provider_cdc.sources.spanner.change_stream_hook import SpannerChangeStreamHook

        return SpannerChangeStreamHook(**self.arguments())


#: The connection fields' names, in declaration order (each task's leading ``template_fields``).
CONNECTION_FIELDS: tuple[str, ...] = ChangeStreamConnection.field_names()
#: Declares an ``__init__`` of a :class:`ChangeStreamConnectionMixin` class as taking the fields.
connection_arguments = connection_arguments_of(ChangeStreamConnection)


class ChangeStreamConnectionMixin(ConnectionFieldsMixin):
    """Gives an operator, sensor or trigger the :class:`ChangeStreamConnection` fields: keyword-only
    arguments and attributes of the same names, all templated, :attr:`connection` and :meth:`to_hook`.

    Put it before the Airflow base class, extend :attr:`template_fields`, and declare the subclass's
    ``__init__`` with :func:`connection_arguments`.
    """

    connection_class = ChangeStreamConnection
    template_fields: Sequence[str] = CONNECTION_FIELDS

    instance_id: str
    database_id: str
    stream: str
    project_id: str | None
    gcp_conn_id: str
    impersonation_chain: str | Sequence[str] | None
    metastore_conn_id: str
    heartbeat_ms: int
    retention: RetentionValue | None

    @connection_arguments
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)

    if TYPE_CHECKING:

        @property
        def connection(self) -> ChangeStreamConnection: ...

        def to_hook(self) -> SpannerChangeStreamHook: ...
