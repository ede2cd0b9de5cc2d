"""What a pipeline reads and where it writes, as small typed specs :func:`~airflow_provider_cdc.pipeline.
factory.cdc_pipeline` builds the window's tasks from.

Every field may be a template (``"{{ params.stream }}"``): it is then checked when the task renders it.
A literal value is checked when the DAG is parsed: identifiers (streams, sources, tables), roots
(absolute paths or URIs) and choices fail the parse with a :class:`PipelineSpecError` naming the spec, the
field and the fix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

from airflow_provider_cdc.core.identifiers import InvalidIdentifierError, validate_identifier

__all__ = [
    "DatastreamFiles",
    "Locations",
    "PipelineSpecError",
    "SpannerChangeStream",
    "SpannerTables",
    "TablestoreStream",
    "TargetSpec",
    "apply_order",
    "is_template",
]


class PipelineSpecError(ValueError):
    """A pipeline spec's literal value that cannot work: names the spec, the field and the fix."""


def is_template(value: object) -> bool:
    """Whether ``value`` is Jinja text Airflow renders when the task runs."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _refuse(spec: object, name: str, problem: str, fix: str) -> PipelineSpecError:
    return PipelineSpecError(f"{type(spec).__name__}.{name}: {problem}; {fix}")


def _identifier(spec: object, name: str, kind: str) -> None:
    value = getattr(spec, name)
    if value is None or is_template(value):
        return
    try:
        validate_identifier(value, kind)
    except InvalidIdentifierError as exc:
        raise _refuse(spec, name, str(exc), f"give a plain {kind} name, or a template") from None


def _root(spec: object, name: str, *, required: bool = True) -> None:
    value = getattr(spec, name)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise _refuse(spec, name, "is missing", "give an absolute path or a URI such as gs://bucket/path")
        return
    if not isinstance(value, str):
        raise _refuse(spec, name, f"is a {type(value).__name__}", "give an absolute path or a URI")
    text = value.strip()
    if is_template(text) or "://" in text or os.path.isabs(text):
        return
    raise _refuse(
        spec, name, f"{text!r} is a relative path (tasks run in other working directories)",
        f"use an absolute path such as {os.path.abspath(text)!r}, or a URI",
    )  # fmt: skip


def _text(spec: object, name: str) -> None:
    value = getattr(spec, name)
    if not isinstance(value, str) or not value.strip():
        raise _refuse(spec, name, f"is {value!r}", "give its name, or a template such as '{{ params.x }}'")


@dataclass(frozen=True, kw_only=True)
class Locations:
    """Where a pipeline's data lives, the same for every step after the read.

    :param staging_root: the staged changes (a source's staging belongs to the source: pipelines
        reading one stream may share it).
    :param changeset_root: the merged change sets, one per window.
    :param lake_root: the Delta tables; needed by :class:`DeltaLake`, and by :class:`BigQueryCdc` to
        complete partial row images.
    """

    staging_root: str
    changeset_root: str
    lake_root: str | None = None

    def __post_init__(self) -> None:
        _root(self, "staging_root")
        _root(self, "changeset_root")
        _root(self, "lake_root", required=False)

    def as_argument(self) -> dict[str, str]:
        """The window steps' ``locations`` argument."""
        roots = {"staging_root": self.staging_root, "changeset_root": self.changeset_root}
        if self.lake_root:
            roots["lake_root"] = self.lake_root
        return roots


@dataclass(frozen=True, kw_only=True)
class SourceSpec:
    """What every source spec has: the connections its tasks use (``None``: the operators' default)."""

    #: a short name of the source's kind, for errors and task ids
    kind: ClassVar[str] = "source"
    #: whether the pipeline may start with a snapshot of the source's database
    takes_snapshot: ClassVar[bool] = False

    def validate(self) -> None:
        """Check the literal fields (called when the spec is made)."""

    def __post_init__(self) -> None:
        self.validate()


@dataclass(frozen=True, kw_only=True)
class SpannerChangeStream(SourceSpec):
    """A Spanner change stream, read one window of partitions at a time.

    :param instance_id: the Spanner instance.
    :param database_id: the database.
    :param stream: the change stream (a plain identifier).
    :param project_id: the Google Cloud project (default: the connection's).
    :param snapshot_tables: the tables the initial snapshot reads (default: every table the stream
        watches, with the columns it watches).
    :param snapshot_source: the snapshot's name (a plain identifier): its staging folder and metastore
        key (default ``{pipeline_id}_snapshot``).
    :param retention: overrides the stream's ``retention_period`` (``timedelta``, seconds or ``'7d'``).
    :param gcp_conn_id: the Google Cloud connection (default ``google_cloud_default``).
    :param drain_timeout: seconds the drain sensors wait for the stream's partitions.
    """

    kind: ClassVar[str] = "Spanner change stream"
    takes_snapshot: ClassVar[bool] = True

    instance_id: str
    database_id: str
    stream: str
    project_id: str | None = None
    snapshot_tables: Sequence[str] | None = None
    snapshot_source: str | None = None
    retention: timedelta | float | str | None = None
    gcp_conn_id: str | None = None
    drain_timeout: float = 3600

    def validate(self) -> None:
        _text(self, "instance_id")
        _text(self, "database_id")
        _identifier(self, "stream", "change stream")
        _identifier(self, "snapshot_source", "snapshot source")

    def connection(self) -> dict[str, Any]:
        """The change-stream operators' and sensors' connection arguments."""
        arguments: dict[str, Any] = {
            "instance_id": self.instance_id, "database_id": self.database_id, "stream": self.stream,
        }  # fmt: skip
        for name in ("project_id", "retention", "gcp_conn_id"):
            if getattr(self, name) is not None:
                arguments[name] = getattr(self, name)
        return arguments


@dataclass(frozen=True, kw_only=True)
class SpannerTables(SourceSpec):
    """Spanner tables read by their commit-timestamp column, one window of commit timestamps per run.

    :param source: the source's name (a plain identifier): its staging folder and metastore key.
    :param tables: ``CommitTimestampTable`` fields as dicts (``table``, ``timestamp_column``, and
        ``soft_delete_column``, ``entity_key``, ``target_table``), or a template rendering their JSON
        (``"{{ params.tables | tojson }}"``).
    :param on_late_rows: ``fail`` (default) or ``warn`` when rows arrive in a window already read.
    """

    kind: ClassVar[str] = "Spanner tables"

    instance_id: str
    database_id: str
    source: str
    tables: Sequence[Mapping[str, Any]] | str
    project_id: str | None = None
    on_late_rows: str = "fail"
    page_rows: int | str | None = None
    gcp_conn_id: str | None = None

    def validate(self) -> None:
        _text(self, "instance_id")
        _text(self, "database_id")
        _identifier(self, "source", "source")
        if not is_template(self.tables):
            if isinstance(self.tables, str) or not self.tables:
                fix = "give a list of {'table': …, 'timestamp_column': …} dicts, or a template"
                raise _refuse(self, "tables", f"is {self.tables!r}", fix)
            for index, table in enumerate(self.tables):
                missing = [key for key in ("table", "timestamp_column") if key not in table]
                if missing:
                    raise _refuse(
                        self, f"tables[{index}]", f"lacks {missing}", "name the table and its column"
                    )
                validate_table = table["table"]
                if not is_template(validate_table):
                    try:
                        validate_identifier(validate_table, "table")
                    except InvalidIdentifierError as exc:
                        raise _refuse(self, f"tables[{index}]", str(exc), "give a plain table name") from None
        if not is_template(self.on_late_rows) and self.on_late_rows not in ("fail", "warn"):
            raise _refuse(self, "on_late_rows", f"is {self.on_late_rows!r}", "give 'fail' or 'warn'")

    def connection(self) -> dict[str, Any]:
        """The table operators' connection arguments."""
        arguments: dict[str, Any] = {
            "instance_id": self.instance_id, "database_id": self.database_id, "source": self.source,
        }  # fmt: skip
        for name in ("project_id", "gcp_conn_id"):
            if getattr(self, name) is not None:
                arguments[name] = getattr(self, name)
        return arguments


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
        _root(self, "stream_root")
        _identifier(self, "source", "source")

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

    table: str
    tablestore_conn_id: str = "tablestore_default"
    column_types: Mapping[str, str] | str | None = None
    settle_margin: float | str | None = None
    wait_timeout: float = 3600

    def validate(self) -> None:
        _identifier(self, "table", "table")
        _text(self, "tablestore_conn_id")

    def connection(self) -> dict[str, Any]:
        """The Table Store operators' connection arguments."""
        arguments: dict[str, Any] = {"table": self.table, "tablestore_conn_id": self.tablestore_conn_id}
        for name in ("column_types", "settle_margin"):
            if getattr(self, name) is not None:
                arguments[name] = getattr(self, name)
        return arguments


@dataclass(frozen=True, kw_only=True)
class TargetSpec:
    """What every target spec has: each target's spec lives in its folder (``targets/<name>/pipeline.py``)
    and builds the target's apply step; the factory names no target.

    ``target`` is the registered target the spec applies to, ``task_id`` its apply step's task id and
    ``reads`` the targets whose tables it reads while it applies (it applies after them: BigQuery
    completes partial rows from the Delta tables).
    """

    #: the task id of the target's apply step
    task_id: ClassVar[str] = "apply"
    #: the registered target (its metastore key)
    target: ClassVar[str] = ""
    #: the targets whose tables the apply step reads: it applies after them
    reads: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check the literal fields (called when the spec is made)."""

    def validate_locations(self, locations: Locations) -> None:
        """Refuse ``locations`` that lack what the target needs (called by the factory)."""

    def apply_step(self, common: Mapping[str, Any], spark: Mapping[str, Any]) -> Any:
        """The target's apply step of a window: ``common`` are the window steps' arguments
        (``locations``, ``pipeline_id``, ``epoch``, the metastore, the window), ``spark`` the Spark
        connection (``conn_id``) of a step that runs a Spark job. Its output is the commit's
        ``applied`` entry (a ``TargetApplied``)."""
        raise NotImplementedError(f"{type(self).__name__} builds no apply step")


def apply_order(targets: Sequence[TargetSpec]) -> list[TargetSpec]:
    """``targets`` in the order they apply: each after the targets it ``reads`` (otherwise as given)."""
    ordered: list[TargetSpec] = []
    pending = list(targets)
    while pending:
        names = {t.target for t in pending}
        ready = [t for t in pending if not (set(t.reads) & (names - {t.target}))]
        if not ready:
            raise PipelineSpecError(
                f"cdc_pipeline targets: {[type(t).__name__ for t in pending]} read each other's tables; "
                "give targets that can apply one after the other"
            )
        ordered.append(ready[0])
        pending.remove(ready[0])
    return ordered


def __getattr__(name: str) -> Any:
    """The target specs live in their targets' folders; imported from here on demand."""
    specs = {
        "DeltaLake": "airflow_provider_cdc.targets.delta.pipeline",
        "BigQueryCdc": "airflow_provider_cdc.targets.bigquery.pipeline",
    }
    if name in specs:
        import importlib

        return getattr(importlib.import_module(specs[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
