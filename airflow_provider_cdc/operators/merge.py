"""``SparkMergeWindowOperator``: run the bundled merge job for one window through ``spark-submit``."""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_provider_cdc._errors import metastore_errors, require_absolute
from airflow_provider_cdc.domain.timestamps import coerce_timestamp, format_timestamp, to_micros
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.operators._spark import spark_defaults

PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: The ``spark-submit`` application this operator runs.
MERGE_JOB_PATH = str(PACKAGE_DIR / "jobs" / "merge_job.py")
#: Replaced in ``staging_uri`` and ``changeset_uri`` by the window id ``{start_micros}-{end_micros}``.
WINDOW_ID_PLACEHOLDER = "{window_id}"
DOMAIN_ZIP_NAME = "airflow_provider_cdc_domain.zip"
_ZIP_PACKAGE_INIT = '"""The domain layer of airflow-provider-cdc, shipped to Spark with --py-files."""\n'


def build_domain_zip(directory: str | os.PathLike[str]) -> str:
    """Write ``airflow_provider_cdc/domain`` as a zip for ``--py-files``; return the zip's path.

    The zip holds the domain modules and a package ``__init__`` without imports, so the driver and
    executors can import ``airflow_provider_cdc.domain`` without Airflow installed.
    """
    target = Path(directory) / DOMAIN_ZIP_NAME
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("airflow_provider_cdc/__init__.py", _ZIP_PACKAGE_INIT)
        for module in sorted((PACKAGE_DIR / "domain").glob("*.py")):
            archive.write(module, f"airflow_provider_cdc/domain/{module.name}")
    return str(target)


class SparkMergeWindowOperator(SparkSubmitOperator):
    """Merge one window's staged changes into per-table change sets with Spark.

    Runs ``airflow_provider_cdc/jobs/merge_job.py`` through ``spark-submit``: staged rows outside
    ``[window_start, window_end)`` are dropped, every transaction is checked to be complete,
    repeated mods are removed and each key's changes are collapsed in commit order into one row
    of ``{changeset_uri}/table={table}/``, with ``_manifest.json`` written last.

    The domain package is shipped with ``--py-files`` (a zip built on the fly), so the job also
    runs on clusters without this provider installed (they need ``pyspark`` and ``pyarrow``).
    Without a ``conn_id`` connection, Spark runs locally (``local[*]``) with this Python. A local
    master gets settings for a short job (``LOCAL_SPARK_CONF`` in ``operators/_spark.py``: no web
    UI, a driver JVM that does not spend the job's CPU on the optimising compiler) unless ``conf``
    sets them.

    :param staging_uri: the window's staging folder, ``{staging_root}/{stream}/{window_id}``
        (templated; absolute local path, ``file://`` or ``gs://``). A literal ``{window_id}`` in it is
        replaced by ``{start_micros}-{end_micros}`` of the rendered window.
    :param changeset_uri: the window's change-set folder, ``{changeset_root}/{window_id}``
        (templated; ``{window_id}`` is replaced as in ``staging_uri``).
    :param window_start: inclusive window start, RFC 3339 (templated; default the data interval start).
    :param window_end: exclusive window end, RFC 3339 (templated; default the data interval end).
    :param stream_key: the stream as the metastore names it (``projects/…/databases/<db>/<stream>``;
        templated). With it the job reads only each partition's recorded output (the staged files
        of the claim that completed it), and every partition of the window must be read.
    :param metastore_conn_id: the metastore holding the window's partitions (with ``stream_key``).
    :param conn_id: Spark connection (default ``spark_default``; missing means ``local[*]``).
    :param kwargs: passed to ``SparkSubmitOperator`` (``conf``, ``driver_memory``, ``py_files``, ...).
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "staging_uri",
        "changeset_uri",
        "window_start",
        "window_end",
        "stream_key",
    )
    ui_color = "#f4a460"

    def __init__(
        self,
        *,
        staging_uri: str,
        changeset_uri: str,
        window_start: str = "{{ data_interval_start }}",
        window_end: str = "{{ data_interval_end }}",
        conn_id: str = "spark_default",
        name: str = "cdc-merge-window",
        stream_key: str | None = None,
        metastore_conn_id: str = CdcMetastoreHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        if "application" in kwargs:
            raise TypeError("SparkMergeWindowOperator runs its bundled merge job; do not pass 'application'")
        super().__init__(application=MERGE_JOB_PATH, conn_id=conn_id, name=name, **kwargs)
        self.staging_uri = staging_uri
        self.changeset_uri = changeset_uri
        self.window_start = window_start
        self.window_end = window_end
        self.merge_conn_id = conn_id
        self.stream_key = stream_key
        self.metastore_conn_id = metastore_conn_id

    def merge_arguments(self) -> list[str]:
        """Command-line arguments of the merge job from the rendered fields (checked here first)."""
        bounds = []
        for field in ("window_start", "window_end"):
            value = getattr(self, field)
            try:
                bounds.append(coerce_timestamp(value if isinstance(value, datetime) else str(value)))
            except ValueError:
                raise ValueError(
                    f"{field} must be an RFC 3339 timestamp, got {value!r} "
                    "(a run without a data interval needs explicit window_start/window_end)"
                ) from None
        start, end = bounds
        if start >= end:
            raise ValueError(
                f"window_start {format_timestamp(start)} is not before window_end {format_timestamp(end)}"
            )
        window_id = f"{to_micros(start)}-{to_micros(end)}"
        locations = []
        for field in ("staging_uri", "changeset_uri"):
            value = getattr(self, field)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{field} must be a non-empty location, got {value!r}")
            require_absolute(field, value.strip())
            locations.append(value.strip().replace(WINDOW_ID_PLACEHOLDER, window_id))
        args = [
            "--staging",
            locations[0],
            "--changeset",
            locations[1],
            "--window-start",
            format_timestamp(start),
            "--window-end",
            format_timestamp(end),
        ]
        if self.stream_key:
            window = f"[{format_timestamp(start)}, {format_timestamp(end)})"
            with metastore_errors(f"window {window} of {self.stream_key}: reading its partitions' claims"):
                claims = self.partition_claims(start, end)
            args += ["--partition-claims", json.dumps(claims, sort_keys=True)]
        return args

    def partition_claims(self, start: datetime, end: datetime) -> dict[str, str]:
        """Partition key → the claim whose staged files are the partition's output (metastore)."""
        from airflow_provider_cdc.staging.parquet import partition_key

        items = CdcMetastoreHook(self.metastore_conn_id).metastore.window_partitions(
            str(self.stream_key), start, end
        )
        window = f"[{format_timestamp(start)}, {format_timestamp(end)})"
        if not items:
            raise ValueError(f"window {window} of {self.stream_key}: no partitions recorded; read it first")
        unread = [item.token for item in items if not item.is_done]
        if unread:
            raise ValueError(
                f"window {window}: {len(unread)} partition(s) not read to the window end yet: "
                + ", ".join(unread[:5])
            )
        return {partition_key(item.token): item.claim_id for item in items if item.claim_id}

    def execute(self, context: Any) -> None:
        self.application = MERGE_JOB_PATH
        self.application_args = self.merge_arguments()
        user_py_files = self.py_files
        with tempfile.TemporaryDirectory(prefix="cdc-merge-") as workdir:
            self.py_files = ",".join(filter(None, [user_py_files, build_domain_zip(workdir)]))
            try:
                with spark_defaults(self, self.merge_conn_id) as master:
                    self.log.info(
                        "Merging window [%s, %s) from %s into %s on Spark master %s",
                        self.application_args[5],
                        self.application_args[7],
                        self.application_args[1],
                        self.application_args[3],
                        master,
                    )
                    super().execute(context)
            finally:
                self.py_files = user_py_files
