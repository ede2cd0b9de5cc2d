"""Operator that applies a window's change set to the Delta Lake target through spark-submit."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_provider_cdc._compat import AirflowFailException
from airflow_provider_cdc.core.contract.locations import TABLE_DIR_PREFIX
from airflow_provider_cdc.core.contract.target import TargetApplied
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.hooks.connection_fields import connection_arguments_of
from airflow_provider_cdc.hooks.pipeline import StaleEpochError
from airflow_provider_cdc.lineage import StepLineage, location_dataset, location_table_dataset
from airflow_provider_cdc.operators.window_step import (
    WINDOW_STEP_FIELDS,
    PipelineWindowStepFields,
    WindowStepMixin,
)
from airflow_provider_cdc.placement.dataproc.run import run_on_dataproc
from airflow_provider_cdc.placement.spark_submit import (
    LocalPythonJob,
    connection_deploy_mode,
    connection_master,
    is_connect,
    is_dataproc,
    is_local,
    job_credentials,
    local_environment,
    spark_defaults,
)
from airflow_provider_cdc.targets.delta import LAKE_ROOT
from airflow_provider_cdc.targets.delta.commit import DELTA, held_output
from airflow_provider_cdc.targets.delta.compaction import DEFAULT_COMPACT_EVERY
from airflow_provider_cdc.targets.delta.tombstones import HORIZON_FIX

UPSERT_JOB_PATH = str(Path(__file__).resolve().parent / "upsert_job.py")


def tombstone_horizon_seconds(value: timedelta | int | float | str | None) -> str | None:
    """The job's ``--tombstone-horizon-seconds`` for a horizon given as a ``timedelta`` or seconds (a
    number or its text, as a template renders it); ``None`` or ``""``: tombstones not asked for. A
    horizon that is not positive (0 included: it does not turn tombstones off) fails naming the fix."""
    return positive_seconds(value, "tombstone_horizon", HORIZON_FIX)


def positive_seconds(value: timedelta | int | float | str | None, name: str, fix: str = "") -> str | None:
    """A duration given as a ``timedelta`` or seconds (a number or its text) as the job's seconds
    argument; ``None`` or ``""``: not given. Anything but a positive duration (0 included) fails
    naming ``name`` (and ``fix``, what to give instead)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        if isinstance(value, bool):
            raise ValueError
        seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(
            f"{name} must be a positive timedelta or number of seconds, got {value!r}"
            + (f": {fix}" if fix else "")
        )
    return str(int(seconds)) if seconds.is_integer() else repr(seconds)


def _is_template(value: object) -> bool:
    """Whether ``value`` is Jinja text (checked only once rendered)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


class SparkUpsertWindowOperator(WindowStepMixin, SparkSubmitOperator):
    """Apply one window's change set to the Delta Lake target (``jobs/upsert_job.py``).

    The change set ``{changeset_root}/{window_id}`` is applied to ``{lake_root}/{table}``, one Delta
    commit per table tagged with the pipeline and the window version (the window end in µs), so a
    re-run skips what is applied. The return value is what the lake then holds of the window
    (``TargetApplied.to_dict()``: per table of the change set, the version that holds it): the commit's
    ``applied`` takes it.

    :param locations: the pipeline's roots (templated): ``changeset_root`` and ``lake_root``; the same
        argument as the merge's and the commit's.
    :param pipeline_id: names the pipeline in the Delta tables' app transactions. Templated.
    :param window_start: inclusive window start (templated; default the data interval start).
    :param window_end: exclusive window end (templated; default the data interval end).
    :param gcp_conn_id: Google Cloud connection (default ``google_cloud_default``, only read for
        object-store locations) whose credentials reach the job as storage options in its
        environment (never in its arguments, never in rendered fields).
    :param impersonation_chain: service account(s) to impersonate with ``gcp_conn_id``.
    :param metastore_conn_id: the metastore; before the job runs, the window must be able to apply
        (the pipeline's previous window applied) and the job is given what the metastore says
        each table holds, which it checks before applying anything. ``None`` skips both.
    :param epoch: the opening of the window this run applies (templated: the open task's ``epoch``
        XCom, see ``epoch_template``). With a metastore the upsert refuses to start when the window was
        opened again since; the job refuses a change set merged in another epoch.
    :param tombstone_horizon: keep a tombstone per deleted key this long after the end of the window
        that applied the delete (a positive ``timedelta`` or seconds; templated, checked when given
        and when rendered), so that an older upsert of the key arriving in a later window does not
        insert the row again. Turn it on for sources whose changes can arrive after newer ones were
        applied (Datastream). Tables that have tombstones keep them without it.
    :param apply_mode: ``"auto"`` (default: windows whose keys are spread over a table's files go to its
        pending changes), ``"deferred"`` (every window does) or ``"immediate"``; see
        :class:`~airflow_provider_cdc.targets.delta.target.DeltaLakeTarget`. Templated.
    :param max_staleness: deferred apply: compact a table's pending windows before its apply watermark
        lags the window end by more (a ``timedelta`` or seconds; templated).
    :param compact_every: deferred apply: compact when this many windows are pending (``None``: only
        by ``max_staleness``). Templated.
    :param local_python: on a local master (or without the Spark connection) run the job with the
        worker's Python instead of ``spark-submit`` (default ``True``). The job starts no
        SparkSession, so ``spark-submit`` would only add a JVM start (10-20 s) before the same
        Python runs; ``False`` submits it anyway. The same holds on a cluster master in ``client``
        deploy mode (the driver would run here); ``deploy_mode="cluster"`` uses ``spark-submit``; a Spark
        connection of type ``dataproc`` submits the job to Dataproc (a cluster job or a Serverless
        batch; the cluster needs ``deltalake`` and ``pyarrow``).

    Other keyword arguments go to :class:`SparkSubmitOperator` (``conn_id``: templated here, ``conf``,
    ``env_vars``, ``py_files`` …); ``application`` defaults to the job shipped in this package.
    """

    connection_class = PipelineWindowStepFields
    cdc_step, cdc_target = "upsert", "delta"
    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        *WINDOW_STEP_FIELDS,
        "tombstone_horizon",
        "apply_mode",
        "max_staleness",
        "compact_every",
        "spark_conn_id",
    )
    template_fields_renderers = {"locations": "json"}
    ui_color = "#d6f5e3"

    @connection_arguments_of(PipelineWindowStepFields)
    def __init__(
        self,
        *,
        tombstone_horizon: timedelta | int | float | str | None = None,
        apply_mode: str = "auto",
        max_staleness: timedelta | int | float | str | None = None,
        compact_every: int | str | None = DEFAULT_COMPACT_EVERY,
        local_python: bool = True,
        application: str = UPSERT_JOB_PATH,
        name: str = "cdc-upsert-window",
        conn_id: str = "spark_default",
        **kwargs: Any,
    ) -> None:
        if kwargs.get("application_args"):
            raise ValueError("application_args are built by SparkUpsertWindowOperator; do not pass them")
        super().__init__(application=application, name=name, conn_id=conn_id, **kwargs)
        if not _is_template(tombstone_horizon):  # a template is checked once rendered
            tombstone_horizon_seconds(tombstone_horizon)
        self.tombstone_horizon = tombstone_horizon
        if not isinstance(max_staleness, str):
            positive_seconds(max_staleness, "max_staleness")
        self.apply_mode = apply_mode
        self.max_staleness = max_staleness
        self.compact_every = compact_every
        self.local_python = local_python
        self.spark_conn_id = conn_id
        self._local_job: LocalPythonJob | None = None
        self._dataproc: Any = None

    def build_application_args(self) -> list[str]:
        """The job's arguments from the rendered fields; with a metastore, after checking the window
        may apply, with what each table holds (``--expected-versions``)."""
        window = self.window()
        locations = self.window_locations("changeset_root", LAKE_ROOT)
        args = [
            "--changeset",
            locations.change_set(window),
            "--lake-root",
            locations.root(LAKE_ROOT),
            "--pipeline-id",
            str(self.pipeline_id),
            "--window-version",
            str(window.end_micros),
        ]
        horizon = tombstone_horizon_seconds(self.tombstone_horizon)
        if horizon is not None:
            args += ["--tombstone-horizon-seconds", horizon]
        # deferred apply: only what differs from the job's defaults
        if str(self.apply_mode) != "auto":
            args += ["--apply-mode", str(self.apply_mode)]
        staleness = positive_seconds(self.max_staleness, "max_staleness")
        if staleness is not None:
            args += ["--max-staleness-seconds", staleness]
        every = "0" if self.compact_every is None else str(self.compact_every).strip() or "0"
        if every != str(DEFAULT_COMPACT_EVERY):
            args += ["--compact-every", every]
        epoch = self.window_epoch()
        if epoch is not None:
            args += ["--epoch", str(epoch)]
        if self.metastore_conn_id:
            hook = self.pipeline_hook()
            args += [
                "--expected-versions",
                hook.expected_versions(str(self.pipeline_id), window, DELTA, epoch),
            ]
        return args

    def runs_locally(self, master: str | None) -> bool:
        """Whether the job runs with this worker's Python: with ``local_python``, wherever its driver
        would run on this worker anyway: a local ``master`` (the Spark connection's, as
        :func:`connection_master` gives it), a Spark Connect server, or any ``spark-submit`` master in
        ``client`` deploy mode (a standalone cluster, YARN or Kubernetes: the job writes with delta-rs
        and starts no Spark, so it would use no executor). Only ``deploy_mode="cluster"`` submits it
        to run its driver on the cluster, and ``dataproc`` connections run it on Dataproc."""
        if not self.local_python or is_dataproc(master):
            return False
        if is_local(master) or is_connect(master):
            return True
        return connection_deploy_mode(self.spark_conn_id, self._deploy_mode) != "cluster"

    def execute(self, context: Any) -> dict[str, Any]:
        """Run the job, then return what the lake holds of the window (``TargetApplied.to_dict()``, the
        commit's ``applied``)."""
        self._run(context)
        return self._applied().to_dict()

    def _applied(self) -> TargetApplied:
        """Per table of the change set, the version of its Delta table that holds the window."""
        from airflow_provider_cdc.changesets.reader import ChangeSetReader

        window = self.window()
        locations = self.window_locations("changeset_root", LAKE_ROOT)
        options = self.storage_options()
        tables = ChangeSetReader(locations.change_set(window), options).tables()
        changed = {table.name: table.expected_rows for table in tables}
        return held_output(locations.root(LAKE_ROOT), options, changed, str(self.pipeline_id), window)

    def _run(self, context: Any) -> None:
        self._conn_id = self.spark_conn_id = str(self.spark_conn_id)  # as rendered
        try:
            arguments = self.build_application_args()
        except StaleEpochError as exc:  # the window was opened again: a retry cannot change that
            raise AirflowFailException(str(exc)) from exc
        window: Window = self.window()
        env = self.storage_environment()
        master = connection_master(self.spark_conn_id)
        if self.runs_locally(master):
            self._local_job = LocalPythonJob(
                self.application, arguments, {**local_environment(self.env_vars), **env}, self.py_files
            )
            self.log.info("Applying window %s with arguments %s locally", window, arguments)
            self._local_job.run(self.log)
            return
        if is_dataproc(master):
            locations = self.window_locations("changeset_root", LAKE_ROOT)
            self.log.info("Applying window %s with arguments %s on Dataproc", window, arguments)
            run_on_dataproc(
                self,
                context,
                step="upsert",
                master=str(master),
                application=self.application,
                arguments=arguments,
                locations=(locations.change_set(window), locations.root(LAKE_ROOT)),
                pipeline=str(self.pipeline_id),
                window=window,
            )
            return
        env = job_credentials(master, env, self.gcp_conn_id, self.log)
        with spark_defaults(self, self.spark_conn_id, master, application_args=arguments, env=env) as used:
            self.log.info("Applying window %s with arguments %s on Spark master %s", window, arguments, used)
            super().execute(context)

    def step_lineage(self) -> StepLineage:
        """Each table of the window's change set (its manifest) in, its Delta table out."""
        from airflow_provider_cdc.changesets.reader import ChangeSetReader
        from airflow_provider_cdc.core.contract.change_set import manifest_tables

        window = self.window()
        locations = self.window_locations("changeset_root", LAKE_ROOT)
        change_set = locations.change_set(window)
        manifest = ChangeSetReader(change_set, self.storage_options()).manifest()
        tables = sorted(manifest_tables(manifest, change_set))
        return StepLineage(
            inputs=[location_dataset(f"{change_set}/{TABLE_DIR_PREFIX}{table}") for table in tables],
            outputs=[location_table_dataset(locations.root(LAKE_ROOT), table) for table in tables],
        )

    def on_kill(self) -> None:
        if self._dataproc is not None:
            self._dataproc.kill()
        elif self._local_job is not None:
            self._local_job.kill()
        else:
            super().on_kill()
