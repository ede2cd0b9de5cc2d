"""Datastream's files as a pipeline plug-in: :class:`DatastreamFiles`, the spec
:func:`~airflow_provider_cdc.pipeline.cdc_pipeline` builds a window's source tasks from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from airflow_provider_cdc.specs import (
    SourceSpec,
    SourceTasks,
    SourceWindow,
    spec_identifier,
    spec_root,
)

__all__ = ["DatastreamFiles"]


@dataclass(frozen=True, kw_only=True)
class DatastreamFiles(SourceSpec):
    """Datastream's files in GCS (or a folder), one window of arrived files per run.

    :param stream_root: the stream's destination path (``gs://bucket/prefix`` or an absolute folder).
    :param source: the source's name (a plain identifier): its staging folder and metastore key; two
        pipelines on one stream each take their own (a window's files are claimed per source).
    :param objects: the Datastream objects to read (default every object), or a template of their JSON.
    :param settings: ``source_database``, ``primary_keys``, ``column_types``, ``table_names``.
    :param file_rotation_interval: the stream's file rotation interval in seconds.
    :param lateness_margin: seconds after a window's end before it is listed (default: two rotations
        plus 60 s).
    :param wait_timeout: seconds the arrival and completion sensors wait.
    """

    kind: ClassVar[str] = "Datastream files"

    stream_root: str
    source: str
    objects: Sequence[str] | str | None = None
    settings: Mapping[str, Any] | str | None = None
    file_rotation_interval: float | str = 60
    lateness_margin: float | str | None = None
    gcp_conn_id: str | None = None
    wait_timeout: float = 3600

    def validate(self) -> None:
        spec_root(self, "stream_root")
        spec_identifier(self, "source", "source")

    def connection(self) -> dict[str, Any]:
        """The Datastream operators' and sensor's connection arguments."""
        arguments: dict[str, Any] = {
            "stream_root": self.stream_root,
            "source": self.source,
            "file_rotation_interval": self.file_rotation_interval,
        }
        for name in ("objects", "settings", "lateness_margin", "gcp_conn_id"):
            if getattr(self, name) is not None:
                arguments[name] = getattr(self, name)
        return arguments

    def window_tasks(self, window: SourceWindow) -> SourceTasks:
        """wait_for_files ─► open_window ─► read (mapped) ─► complete: the files that arrived in the
        window, once no more may arrive."""
        from airflow_provider_cdc.sources.datastream.operators import (
            DatastreamOpenWindowOperator,
            DatastreamReadWindowOperator,
            DatastreamWindowArrivedSensor,
        )
        from airflow_provider_cdc.sources.pipeline import window_complete

        stream, arguments = self.connection(), window.window_arguments()
        wait_for_files = DatastreamWindowArrivedSensor(
            task_id="wait_for_files", timeout=self.wait_timeout, **stream, **window.metastore
        )
        open_window = DatastreamOpenWindowOperator(
            task_id="open_window", readers=window.readers, first_window_start=window.first_window_start,
            **stream, **arguments,
        )  # fmt: skip
        read = DatastreamReadWindowOperator.partial(task_id="read", **stream, **arguments).expand(
            reader_index=window.reader_indices()
        )
        complete = window_complete(window, open_window, self.wait_timeout)
        return SourceTasks(before=wait_for_files, open_window=open_window, read=read, complete=complete)
