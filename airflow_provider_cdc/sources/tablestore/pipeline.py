"""A Table Store stream as a pipeline plug-in: :class:`TablestoreStream`, the spec
:func:`~airflow_provider_cdc.pipeline.cdc_pipeline` builds a window's source tasks from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from airflow_provider_cdc.specs import (
    SourceSpec,
    SourceTasks,
    SourceWindow,
    spec_identifier,
    spec_text,
)

__all__ = ["TablestoreStream"]


@dataclass(frozen=True, kw_only=True)
class TablestoreStream(SourceSpec):
    """A Table Store table's stream, one window per run.

    :param table: the table whose stream is read.
    :param tablestore_conn_id: the ``tablestore`` connection.
    :param column_types: the attribute columns' Table Store types, or a template of their JSON.
    :param settle_margin: seconds after a window's end before it is read (default 300).
    :param wait_timeout: seconds the completion sensor waits.
    """

    kind: ClassVar[str] = "Table Store stream"
    # An UpdateRow record carries only the columns it puts or deletes.
    sends_partial_images: ClassVar[bool] = True

    table: str
    tablestore_conn_id: str = "tablestore_default"
    column_types: Mapping[str, str] | str | None = None
    settle_margin: float | str | None = None
    wait_timeout: float = 3600

    def validate(self) -> None:
        spec_identifier(self, "table", "table")
        spec_text(self, "tablestore_conn_id")

    def connection(self) -> dict[str, Any]:
        """The Table Store operators' connection arguments."""
        arguments: dict[str, Any] = {"table": self.table, "tablestore_conn_id": self.tablestore_conn_id}
        for name in ("column_types", "settle_margin"):
            if getattr(self, name) is not None:
                arguments[name] = getattr(self, name)
        return arguments

    def window_tasks(self, window: SourceWindow) -> SourceTasks:
        """open_window ─► read (mapped) ─► complete: the stream's records of the window, every shard
        read to its end."""
        from airflow_provider_cdc.sources.pipeline import window_complete
        from airflow_provider_cdc.sources.tablestore.operators import (
            TablestoreOpenWindowOperator,
            TablestoreReadWindowOperator,
        )

        stream, arguments = self.connection(), window.window_arguments()
        open_window = TablestoreOpenWindowOperator(
            task_id="open_window", readers=window.readers, first_window_start=window.first_window_start,
            **stream, **arguments,
        )  # fmt: skip
        read = TablestoreReadWindowOperator.partial(task_id="read", **stream, **arguments).expand(
            reader_index=window.reader_indices()
        )
        complete = window_complete(window, open_window, self.wait_timeout)
        return SourceTasks(open_window=open_window, read=read, complete=complete)
