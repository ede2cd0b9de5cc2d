"""Operator that applies a window's change set to the Delta Lake target through spark-submit."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_provider_cdc._errors import metastore_errors, require_absolute
from airflow_provider_cdc.domain.timestamps import parse_timestamp, to_micros
from airflow_provider_cdc.domain.window import Window
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.operators._spark import (
    LocalPythonJob,
    connection_master,
    is_local,
    local_environment,
    spark_defaults,
)

if TYPE_CHECKING:  # pragma: no cover
    try:
        from airflow.sdk import Context
    except ImportError:
        from airflow.utils.context import Context  # type: ignore[no-redef]

try:  # Airflow 3
    from airflow.sdk.log import mask_secret
except ImportError:  # pragma: no cover - Airflow 2
    from airflow.utils.log.secrets_masker import mask_secret  # type: ignore[no-redef]

UPSERT_JOB_PATH = str(Path(__file__).resolve().parent.parent / "jobs" / "upsert_job.py")
STORAGE_OPTIONS_ENV = "CDC_LAKE_STORAGE_OPTIONS"  # read by jobs/upsert_job.py
_EXTRA_PREFIX = "extra__google_cloud_platform__"
_UNSUPPORTED_GCP_FIELDS = (
    "key_secret_name",
    "credential_config_file",
    "impersonation_chain",
    "idp_issuer_url",
    "is_anonymous",
)


def gcp_storage_options(extras: Mapping[str, Any]) -> dict[str, str]:
    """delta-rs ``gs://`` storage options from a Google Cloud connection's extras.

    ``keyfile_dict`` becomes ``google_service_account_key`` (the key JSON), ``key_path``
    becomes ``google_service_account`` (a key file path on the worker); with neither, the job
    uses Application Default Credentials (e.g. workload identity) and no option is set. Other
    credential sources of the connection are refused with the field's name.
    """

    def field(name: str) -> Any:
        value = extras.get(name)
        return extras.get(_EXTRA_PREFIX + name) if value in (None, "") else value

    unsupported = [name for name in _UNSUPPORTED_GCP_FIELDS if field(name) not in (None, "", False)]
    if unsupported:
        raise ValueError(
            f"Google Cloud connection field(s) {unsupported} cannot be passed to the Delta Lake writer; "
            "use 'keyfile_dict', 'key_path' or Application Default Credentials"
        )
    keyfile_dict, key_path = field("keyfile_dict"), field("key_path")
    if keyfile_dict and key_path:
        raise ValueError("Google Cloud connection sets both 'keyfile_dict' and 'key_path'; keep one")
    if keyfile_dict:
        if isinstance(keyfile_dict, str):
            try:
                keyfile_dict = json.loads(keyfile_dict)
            except json.JSONDecodeError:
                raise ValueError("Google Cloud connection field 'keyfile_dict' is not valid JSON") from None
        if not isinstance(keyfile_dict, Mapping):
            raise ValueError("Google Cloud connection field 'keyfile_dict' must be a JSON object")
        return {"google_service_account_key": json.dumps(dict(keyfile_dict))}
    if key_path:
        if str(key_path).endswith(".p12"):
            raise ValueError("Google Cloud connection field 'key_path' names a P12 key; use a JSON key file")
        return {"google_service_account": str(key_path)}
    return {}


def window_version_micros(value: Any, context: Mapping[str, Any]) -> int:
    """Window version (window end in µs) from an int, digits, an RFC 3339 text or a datetime.

    ``None`` means the run's ``data_interval_end``.
    """
    if value is None or value == "":
        end = context.get("data_interval_end")
        if end is None:
            raise ValueError("window_version is not set and the run has no data_interval_end")
        return to_micros(end)
    if isinstance(value, bool):
        raise ValueError(f"window_version must be µs since the epoch or a timestamp, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, datetime):
        return to_micros(value)
    if isinstance(value, str):
        text = value.strip()
        return int(text) if text.isdigit() else to_micros(parse_timestamp(text))
    raise ValueError(f"window_version must be µs since the epoch or a timestamp, got {value!r}")


def gcp_lake_storage_options(gcp_conn_id: str | None) -> dict[str, str]:
    """delta-rs storage options from an Airflow Google connection (empty without one); every
    secret in them is masked in task logs."""
    if not gcp_conn_id:
        return {}
    from airflow.providers.google.common.hooks.base_google import GoogleBaseHook

    options = gcp_storage_options(GoogleBaseHook(gcp_conn_id=gcp_conn_id).extras)
    for value in options.values():
        mask_secret(value)
    key = options.get("google_service_account_key")
    if key:
        for secret in ("private_key", "private_key_id"):
            if json.loads(key).get(secret):
                mask_secret(json.loads(key)[secret])
    return options


def _window_of(changeset: str, context: Mapping[str, Any]) -> Window:
    """The window a change set belongs to: its folder's window id, else the run's data interval."""
    try:
        return Window.from_window_id(changeset.rsplit("/", 1)[-1])
    except ValueError:
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        if start is None or end is None:
            raise ValueError(
                f"change set {changeset!r} is not named by a window id and the run has no data interval"
            ) from None
        return Window(start, end)


class SparkUpsertWindowOperator(SparkSubmitOperator):
    """Apply a window's change set to the Delta Lake tables with ``jobs/upsert_job.py``.

    :param lake_root: root of the Delta tables (``gs://`` URI or absolute local path; relative local
        paths, here and in ``changeset_uri``/``changeset_root``, are refused). Templated.
    :param pipeline_id: pipeline id; names the Delta app transaction that makes applies
        idempotent. Templated.
    :param changeset_uri: change set of the window, ``{changeset_root}/{window_id}``. Templated.
    :param changeset_root: alternative to ``changeset_uri``: the window id is then built from the
        run's data interval (``{start_micros}-{end_micros}``). Templated.
    :param window_version: window end (µs since the epoch, RFC 3339 text or datetime); defaults
        to the run's ``data_interval_end``. Templated.
    :param gcp_conn_id: optional Google Cloud connection whose credentials reach the job as
        storage options in its environment (never in its arguments, never in rendered fields).
    :param metastore_conn_id: the metastore; before the job runs, the window must be able to apply
        (the pipeline's previous window applied) and the job is given what the metastore says
        each table holds, which it checks before applying anything. ``None`` skips both.
    :param local_python: on a local master (or without the Spark connection) run the job with the
        worker's Python instead of ``spark-submit`` (default ``True``). The job starts no
        SparkSession, so ``spark-submit`` would only add a JVM start (10-20 s) before the same
        Python runs; ``False`` submits it anyway. Other masters always use ``spark-submit``.

    Other keyword arguments go to :class:`SparkSubmitOperator` (``conn_id``, ``conf``,
    ``env_vars``, ``py_files`` …); ``application`` defaults to the job shipped in this package.
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "lake_root",
        "pipeline_id",
        "changeset_uri",
        "changeset_root",
        "window_version",
    )
    ui_color = "#d6f5e3"

    def __init__(
        self,
        *,
        lake_root: str,
        pipeline_id: str,
        changeset_uri: str | None = None,
        changeset_root: str | None = None,
        window_version: int | str | datetime | None = None,
        gcp_conn_id: str | None = None,
        metastore_conn_id: str | None = CdcMetastoreHook.default_conn_name,
        local_python: bool = True,
        application: str = UPSERT_JOB_PATH,
        name: str = "cdc-upsert-window",
        **kwargs: Any,
    ) -> None:
        if (changeset_uri is None) == (changeset_root is None):
            raise ValueError("give exactly one of changeset_uri and changeset_root")
        if kwargs.get("application_args"):
            raise ValueError("application_args are built by SparkUpsertWindowOperator; do not pass them")
        super().__init__(application=application, name=name, **kwargs)
        self.lake_root = lake_root
        self.pipeline_id = pipeline_id
        self.changeset_uri = changeset_uri
        self.changeset_root = changeset_root
        self.window_version = window_version
        self.gcp_conn_id = gcp_conn_id
        self.metastore_conn_id = metastore_conn_id
        self.local_python = local_python
        self._local_job: LocalPythonJob | None = None

    def resolve_changeset(self, context: Mapping[str, Any]) -> str:
        if self.changeset_uri:
            return str(self.changeset_uri).rstrip("/")
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        if start is None or end is None:
            raise ValueError("changeset_root needs the run's data interval to build the window id")
        return f"{str(self.changeset_root).rstrip('/')}/{to_micros(start)}-{to_micros(end)}"

    def build_application_args(self, context: Mapping[str, Any]) -> list[str]:
        for field in ("lake_root", "changeset_uri", "changeset_root"):
            require_absolute(field, getattr(self, field))
        changeset = self.resolve_changeset(context)
        args = [
            "--changeset",
            changeset,
            "--lake-root",
            str(self.lake_root),
            "--pipeline-id",
            str(self.pipeline_id),
            "--window-version",
            str(window_version_micros(self.window_version, context)),
        ]
        if self.metastore_conn_id:
            window = _window_of(changeset, context)
            with metastore_errors(f"window {window} of pipeline {self.pipeline_id!r}: checking it can apply"):
                store = CdcMetastoreHook(self.metastore_conn_id).metastore
                store.require_predecessor_applied(str(self.pipeline_id), window.start, window.end)
                args += ["--expected-versions", store.table_versions(str(self.pipeline_id)).to_json()]
        return args

    def runs_locally(self, master: str | None) -> bool:
        """Whether the job runs with this worker's Python: ``local_python`` and a local ``master``
        (the Spark connection's, as :func:`connection_master` gives it)."""
        return self.local_python and is_local(master)

    def execute(self, context: Context) -> None:  # type: ignore[override]
        self.application_args = self.build_application_args(context)
        master = connection_master(self._conn_id)
        if self.runs_locally(master):
            env = {**local_environment(self.env_vars), **self._storage_environment()}
            self._local_job = LocalPythonJob(self.application, self.application_args, env, self.py_files)
            self.log.info("Applying change set with arguments %s locally", self.application_args)
            self._local_job.run(self.log)
            return None
        with spark_defaults(self, self._conn_id, master) as used:
            self.log.info(
                "Applying change set with arguments %s on Spark master %s", self.application_args, used
            )
            return super().execute(context)

    def lake_storage_options(self) -> dict[str, str]:
        """Storage options from ``gcp_conn_id`` (empty without a connection)."""
        return gcp_lake_storage_options(self.gcp_conn_id)

    def _storage_environment(self) -> dict[str, str]:
        """``{CDC_LAKE_STORAGE_OPTIONS: json}`` for the job's environment (empty without options)."""
        options = self.lake_storage_options()
        if not options:
            return {}
        encoded = json.dumps(options)
        mask_secret(encoded)
        return {STORAGE_OPTIONS_ENV: encoded}

    def on_kill(self) -> None:
        if self._local_job is not None:
            self._local_job.kill()
        else:
            super().on_kill()

    def _get_hook(self):  # type: ignore[override]
        storage_env = self._storage_environment()
        if not storage_env:
            return super()._get_hook()
        # Added to the hook's environment only, so rendered fields keep the user's env_vars.
        rendered_env = self.env_vars
        self.env_vars = {**(rendered_env or {}), **storage_env}
        try:
            hook = super()._get_hook()
        finally:
            self.env_vars = rendered_env
        master = str(hook._connection.get("master") or "")
        if "yarn" in master or "k8s" in master:
            # spark-submit would carry the environment as --conf values on its command line.
            raise ValueError(
                f"gcp_conn_id credentials can only reach a driver started by this worker; master {master!r} "
                "would put them on the spark-submit command line. Drop gcp_conn_id and give the cluster "
                "its own Google credentials (e.g. workload identity)"
            )
        return hook
