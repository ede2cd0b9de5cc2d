"""``SparkMergeWindowOperator``: run the bundled merge job for one window through ``spark-submit``."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_provider_cdc._compat import AirflowFailException
from airflow_provider_cdc.core.contract.staged_rows import COMMIT_TIME, WINDOW_BASES
from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.hooks.pipeline import MergeInput, StaleEpochError, pending_manifest_name
from airflow_provider_cdc.lineage import StepLineage, location_dataset
from airflow_provider_cdc.merge.input import units_json
from airflow_provider_cdc.operators._window import locations_of, window_of
from airflow_provider_cdc.operators.window_step import (
    WINDOW_STEP_FIELDS,
    LocatedWindowStepFields,
    WindowStepMixin,
    window_step_arguments_of,
)
from airflow_provider_cdc.placement.connect.jobs import SparkConnectJobError, run_merge
from airflow_provider_cdc.placement.connect.session import connect_url, redacted
from airflow_provider_cdc.placement.dataproc.run import run_on_dataproc
from airflow_provider_cdc.placement.job_archive import PACKAGE_DIR, build_domain_zip
from airflow_provider_cdc.placement.spark_submit import (
    SparkJobError,
    connection_master,
    is_connect,
    is_dataproc,
    job_credentials,
    spark_defaults,
)

#: The ``spark-submit`` application this operator runs.
MERGE_JOB_PATH = str(PACKAGE_DIR / "merge" / "job.py")


class SparkMergeWindowOperator(WindowStepMixin, SparkSubmitOperator):
    """Merge one window's staged changes into per-table change sets with Spark.

    Runs ``airflow_provider_cdc/merge/job.py`` through ``spark-submit``: staged rows outside
    ``[window_start, window_end)`` are dropped, every transaction is checked to be complete,
    repeated mods are removed and each key's changes are collapsed in commit order into one row
    of the window's change set (``{changeset_root}/{window_id}/table={table}/``), with
    ``_manifest.json`` written last. Only each partition's recorded output is read (the staged
    files of the claim that completed it, from the metastore), and every partition of the window
    must have been read to its end. Before anything is written every unit (partition or table batch)
    is checked to hold the files and rows its reader recorded when it completed it (Parquet
    footers): a missing folder or file, or another row count, fails naming the window, the unit and
    the claim.

    With ``pipeline_id`` (or ``epoch``) the merge belongs to one opening of the pipeline's window:
    it refuses to start when the window was opened again since (``epoch``, the open task's XCom,
    default the window's current epoch), writes its manifest under a pending name and publishes it
    only after checking the epoch again; the manifest records the epoch and, per table, the end of
    the last earlier window that changed it (the upsert job checks the tables hold it). That needs
    the window before this one applied.

    The domain package is shipped with ``--py-files`` (a zip built on the fly), so the job also
    runs on clusters without this provider installed (they need ``pyspark`` and ``pyarrow``).
    Without a ``conn_id`` connection, Spark runs locally (``local[*]``) with this Python. A local
    master gets settings for a short job (``LOCAL_SPARK_CONF`` in ``operators/_spark.py``: no web
    UI, a driver JVM that does not spend the job's CPU on the optimising compiler) unless ``conf``
    sets them.

    :param locations: the pipeline's roots (templated): ``staging_root`` and ``changeset_root``
        (absolute local paths, ``file://`` or ``gs://`` URIs); the same argument as the upsert's and
        the commit's (see :class:`~airflow_provider_cdc.core.contract.locations.WindowLocations`).
    :param window: the open step's window handle (templated; its return value, e.g.
        ``window=open_window.output``): the window, pipeline, epoch, source key, staging location and
        window basis of this opening; ``stream_key`` and ``window_basis`` are then not needed, and an
        explicit ``window_start``/``window_end``/``epoch``/``pipeline_id`` must agree with it.
    :param stream_key: without ``window``: the stream as the metastore names it
        (``projects/…/databases/<db>/<stream>``; templated); its last segment names the staging folder.
    :param window_basis: without ``window``: which staged rows are the window's: ``commit_time``
        (default: those committed in the window) or ``arrival`` (every row staged for it: a source whose
        windows are the changes that arrived in them, such as files by arrival). Templated.
    :param window_start: inclusive window start, RFC 3339 (templated; default the data interval start).
    :param window_end: exclusive window end, RFC 3339 (templated; default the data interval end).
    :param gcp_conn_id: Google Cloud connection (default ``google_cloud_default``) whose credentials
        reach the job in its environment (never its arguments) for ``gs://`` locations.
    :param impersonation_chain: service account(s) to impersonate with ``gcp_conn_id``.
    :param metastore_conn_id: the metastore holding the window's partitions (``None``: read every
        claim's files in the staging folder, for staging written without a metastore).
    :param pipeline_id: the pipeline whose window this is (templated; default none: no epoch check,
        unless ``epoch`` is given, then the DAG id).
    :param epoch: without ``window``: the opening of the window this run merges (templated, the open
        task's ``epoch`` XCom); default the window's current epoch.
    :param conn_id: Spark connection (templated; default ``spark_default``; missing means ``local[*]``). A
        connection of type ``spark_connect`` runs the same job on that Spark Connect server (a warm
        Spark: no JVM start per window), with this task as the job's driver; the domain zip and
        ``py_files`` become the session's Python artifacts. A connection of type ``dataproc`` submits
        it as a Dataproc job or Serverless batch
        (:class:`~airflow_provider_cdc.placement.dataproc.hook.DataprocJobsHook`; ``conf`` becomes the job's
        properties).
    :param kwargs: passed to ``SparkSubmitOperator`` (``conf``, ``driver_memory``, ``py_files``, ...).
    """

    connection_class = LocatedWindowStepFields
    cdc_step = "merge"
    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        *WINDOW_STEP_FIELDS,
        "stream_key",
        "window_basis",
        "spark_conn_id",
    )
    template_fields_renderers = {"locations": "json"}
    ui_color = "#f4a460"

    @window_step_arguments_of(LocatedWindowStepFields)
    def __init__(
        self,
        *,
        stream_key: str | None = None,
        window_basis: str = COMMIT_TIME,
        conn_id: str = "spark_default",
        name: str = "cdc-merge-window",
        **kwargs: Any,
    ) -> None:
        if "application" in kwargs:
            raise TypeError("SparkMergeWindowOperator runs its bundled merge job; do not pass 'application'")
        if stream_key is None and kwargs.get("window") is None:
            raise TypeError(
                "SparkMergeWindowOperator needs window (the open step's window handle, e.g. "
                "window=open_window.output) or stream_key"
            )
        super().__init__(application=MERGE_JOB_PATH, conn_id=conn_id, name=name, **kwargs)
        self.stream_key = stream_key
        self.window_basis = window_basis
        self.spark_conn_id = conn_id
        #: interrupts the running merge's operations on a Spark Connect server (None: none running)
        self._interrupt_merge: Callable[[], Any] | None = None
        #: the hook running the merge on Dataproc (None: none running)
        self._dataproc: Any = None

    def source_key(self) -> str:
        """The source's metastore key: the window handle's, else ``stream_key``."""
        handle = self.handle()
        stream_key = handle.source_key if handle is not None else str(self.stream_key or "")
        stream_key = stream_key.strip().rstrip("/")
        if not stream_key:
            raise ValueError(
                "stream_key must name the stream (projects/…/databases/<db>/<stream>); or give window, "
                "the open step's window handle"
            )
        return stream_key

    def merge_basis(self) -> str:
        """Which staged rows are the window's: the window handle's basis, else ``window_basis``."""
        handle = self.handle()
        basis = handle.window_basis if handle is not None else str(self.window_basis or COMMIT_TIME).strip()
        if basis not in WINDOW_BASES:
            raise ValueError(f"window_basis must be one of {list(WINDOW_BASES)}, got {self.window_basis!r}")
        return basis

    def _window_and_folders(self, epoch: int | None = None) -> tuple[Window, str, str]:
        """The window, its staging folder (the window handle's staging location, else the staging
        folder of ``stream_key`` under ``staging_root``) and where this merge writes: the change set,
        or within it the folder of the opening ``epoch`` (two runs of one window never write into one
        folder)."""
        handle = self.handle()
        if handle is not None:
            locations = locations_of(self.locations, "changeset_root")
            window, staging = handle.window, handle.staging_location
        else:
            locations = locations_of(self.locations, "staging_root", "changeset_root")
            window = window_of(self.window_start, self.window_end)
            staging = locations.staging_of(self.source_key(), window)
        return window, staging, locations.change_set_data(window, epoch)

    def merge_arguments(
        self, claims: Mapping[str, str] | None = None, *, merge_input: MergeInput | None = None
    ) -> list[str]:
        """Command-line arguments of the merge job from the rendered fields (checked here first);
        ``claims``: partition key → claim id of each partition's recorded output; ``merge_input``:
        every unit as recorded, the epoch and the tables' previous windows."""
        epoch = merge_input.epoch if merge_input is not None else None
        window, staging, changeset = self._window_and_folders(epoch)
        basis = self.merge_basis()
        args = [
            "--staging",
            staging,
            "--changeset",
            changeset,
            "--window-start",
            format_timestamp(window.start),
            "--window-end",
            format_timestamp(window.end),
            "--window-basis",
            basis,
        ]
        if claims is not None:
            args += ["--partition-claims", json.dumps(dict(claims), sort_keys=True)]
        if merge_input is not None:
            args += ["--staged-units", units_json(merge_input.units)]
            if merge_input.epoch is not None:
                args += [
                    "--epoch",
                    str(merge_input.epoch),
                    "--manifest-name",
                    pending_manifest_name(merge_input.epoch),
                ]
            if merge_input.previous_windows is not None:
                args += [
                    "--previous-windows",
                    json.dumps(merge_input.previous_windows, sort_keys=True, separators=(",", ":")),
                ]
        return args

    def _pipeline(self, context: Any) -> str | None:
        """The window handle's pipeline, else ``pipeline_id``; without it the DAG id when ``epoch`` is
        given, else none (no epoch check)."""
        if self.handle() is None and not self.pipeline_id and self.window_epoch() is None:
            return None
        return self.pipeline_of(context, required=False)

    def execute(self, context: Any) -> None:
        try:
            self._merge(context)
        except StaleEpochError as exc:  # the window was opened again: a retry cannot change that
            raise AirflowFailException(str(exc)) from exc

    def _merge(self, context: Any) -> None:
        self._conn_id = self.spark_conn_id = str(self.spark_conn_id)  # as rendered
        self.note_source(self.source_key())  # the metrics' source
        window, staging, changeset = self._window_and_folders()
        merge_input = None
        pipeline = self._pipeline(context)
        if self.metastore_conn_id:
            hook = self.pipeline_hook()
            merge_input = hook.merge_input(self.source_key(), window, pipeline, self.window_epoch())
            rows = hook.check_staging(staging, window, merge_input.units)
            self.log.info(
                "Window %s%s: %d unit(s) hold the %d staged row(s) their readers recorded",
                window,
                f" (epoch {merge_input.epoch})" if merge_input.epoch else "",
                len(merge_input.units),
                rows,
            )
        arguments = self.merge_arguments(merge_input=merge_input)
        if merge_input is not None:
            changeset = self._window_and_folders(merge_input.epoch)[2]
        master = connection_master(self.spark_conn_id)
        if is_connect(master):
            self._merge_on_connect(window, staging, changeset, arguments)
        elif is_dataproc(master):
            self.log.info("Merging window %s from %s into %s on Dataproc", window, staging, changeset)
            run_on_dataproc(
                self, context, step="merge", master=str(master), application=MERGE_JOB_PATH,
                arguments=arguments, locations=(staging, changeset),
                pipeline=pipeline or self.pipeline_of(context, required=False) or self.dag_id, window=window,
            )
        else:
            self._submit(context, window, staging, changeset, arguments, master)
        if merge_input is not None and merge_input.epoch is not None and pipeline is not None:
            hook.publish_manifest(pipeline, window, merge_input.epoch, self._window_and_folders()[2])
            self.log.info("Published the manifest of window %s, epoch %d", window, merge_input.epoch)

    def _merge_on_connect(self, window: Window, staging: str, changeset: str, arguments: list[str]) -> None:
        """Run the job's plan in a session on the Spark Connect server of ``conn_id``."""
        url = connect_url(self.spark_conn_id)
        if url is None:
            raise ValueError(f"connection {self.spark_conn_id!r} is not a spark_connect connection")
        options = self.storage_options()
        self.log.info(
            "Merging window %s from %s into %s on the Spark Connect server %s",
            window, staging, changeset, redacted(url),
        )
        with tempfile.TemporaryDirectory(prefix="cdc-merge-") as workdir:
            artifacts = [build_domain_zip(workdir), *filter(None, (self.py_files or "").split(","))]
            try:
                run_merge(url, arguments, artifacts=artifacts, storage_options=options, log=self.log,
                          on_interruptible=self._track_merge)
            except SparkConnectJobError as error:
                raise SparkJobError(str(error)) from None

    def step_lineage(self) -> StepLineage:
        """The window's staged rows in, its change set out."""
        _, staging, changeset = self._window_and_folders()
        return StepLineage(inputs=[location_dataset(staging)], outputs=[location_dataset(changeset)])

    def _track_merge(self, interrupt: Callable[[], Any] | None) -> None:
        self._interrupt_merge = interrupt

    def on_kill(self) -> None:
        """Interrupt this merge's operations on the Spark Connect server (the other jobs of the shared
        session go on), or kill the ``spark-submit``."""
        if self._dataproc is not None:
            self.log.info("Cancelling the merge's Dataproc job")
            self._dataproc.kill()
            return
        interrupt = self._interrupt_merge
        if interrupt is not None:
            self.log.info("Interrupting the merge's operations on the Spark Connect server")
            interrupt()
            return
        super().on_kill()

    def _submit(
        self, context: Any, window: Window, staging: str, changeset: str, arguments: list[str],
        master: str | None,
    ) -> None:
        """Run the job with ``spark-submit`` (the connection's master, or ``local[*]``)."""
        env = job_credentials(master, self.storage_environment(), self.gcp_conn_id, self.log)
        user_py_files = self.py_files
        with tempfile.TemporaryDirectory(prefix="cdc-merge-") as workdir:
            self.py_files = ",".join(filter(None, [user_py_files, build_domain_zip(workdir)]))
            try:
                with spark_defaults(
                    self, self.spark_conn_id, master, application_args=arguments, env=env
                ) as used:
                    self.log.info(
                        "Merging window %s from %s into %s on Spark master %s",
                        window,
                        staging,
                        changeset,
                        used,
                    )
                    super().execute(context)
            finally:
                self.py_files = user_py_files
