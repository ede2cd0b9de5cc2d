"""Hook for the BigQuery CDC target: the real BigQuery clients built from a Google Cloud connection.

Credentials, project and impersonation come from ``google_cloud_default`` (or any
``google_cloud_platform`` connection) exactly as for the google provider's ``BigQueryHook``.
``api_endpoint``/``write_endpoint`` point the clients elsewhere; loopback endpoints
(``127.0.0.1``, ``localhost``, ``::1``), such as the project's fake, are reached without TLS and
with anonymous credentials, and no connection is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from airflow.providers.google.common.hooks.base_google import GoogleBaseHook

from airflow_provider_cdc._compat import BaseHook
from airflow_provider_cdc.core.contract.locations import WindowLocations
from airflow_provider_cdc.core.identifiers import validate_pipeline_id
from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.targets.bigquery.schema import validate_dataset, validate_project

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
#: The Google Cloud connection extras of anonymous access (the google provider's ``is_anonymous``).
ANONYMOUS_EXTRAS: Mapping[str, Any] = {"is_anonymous": True}


def is_loopback(endpoint: str | None) -> bool:
    """Whether an endpoint (``http://host:port`` or ``host:port``) is on this machine."""
    if not endpoint:
        return False
    host = urlsplit(endpoint if "://" in endpoint else f"//{endpoint}").hostname
    return host in LOOPBACK_HOSTS


class BigQueryCdcHook(GoogleBaseHook):
    """Builds ``google.cloud.bigquery.Client`` and ``BigQueryWriteClient`` and the CDC target on them.

    :param gcp_conn_id: Google Cloud connection (credentials, default project).
    :param impersonation_chain: service account(s) to impersonate, as for the google provider's hooks.
    :param api_endpoint: BigQuery REST endpoint, e.g. ``http://127.0.0.1:9050`` for a local fake.
    :param write_endpoint: Storage Write API ``host:port``.
    :param location: BigQuery location for queries (``US``, ``EU`` …).
    """

    conn_name_attr = "gcp_conn_id"
    default_conn_name = "google_cloud_default"
    conn_type = "google_cloud_platform"
    hook_name = "BigQuery CDC"

    def __init__(
        self,
        gcp_conn_id: str = default_conn_name,
        impersonation_chain: str | Sequence[str] | None = None,
        *,
        api_endpoint: str | None = None,
        write_endpoint: str | None = None,
        location: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.api_endpoint = api_endpoint
        self.write_endpoint = write_endpoint
        self.location = location
        #: Both clients go to this machine (a local fake): the connection is not read, and its
        #: extras are the google provider's anonymous ones (``is_anonymous``).
        self.local_endpoints = is_loopback(api_endpoint) and is_loopback(write_endpoint)
        if self.local_endpoints:
            BaseHook.__init__(self, **kwargs)
            self.gcp_conn_id = gcp_conn_id
            self.impersonation_chain = impersonation_chain
            self.quota_project_id = None
            self.extras = dict(ANONYMOUS_EXTRAS)
        else:
            super().__init__(gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain, **kwargs)

    def get_credentials_and_project_id(self) -> tuple[Any, str | None]:
        """The connection's credentials and project, as the google provider builds them; for local
        endpoints the provider's anonymous credentials (the connection extra ``is_anonymous``)."""
        if self.local_endpoints:
            from airflow.providers.google.cloud.utils.credentials_provider import (
                get_credentials_and_project_id,
            )

            return get_credentials_and_project_id(is_anonymous=True)
        return super().get_credentials_and_project_id()

    def _credentials(self, endpoint: str | None) -> Any:
        if is_loopback(endpoint):  # a fake on this machine takes no credentials
            from airflow.providers.google.cloud.utils.credentials_provider import (
                get_credentials_and_project_id,
            )

            return get_credentials_and_project_id(is_anonymous=True)[0]
        return self.get_credentials()

    def get_bigquery_client(self, project_id: str | None = None) -> Any:
        from google.cloud import bigquery

        project = project_id or (None if is_loopback(self.api_endpoint) else self.project_id)
        options = {"api_endpoint": self.api_endpoint} if self.api_endpoint else None
        return bigquery.Client(
            project=project,
            credentials=self._credentials(self.api_endpoint),
            location=self.location,
            client_options=options,
        )

    def get_write_client(self) -> Any:
        from google.cloud.bigquery_storage_v1 import BigQueryWriteClient

        if is_loopback(self.write_endpoint):
            import grpc
            from google.cloud.bigquery_storage_v1.services.big_query_write.transports import (
                BigQueryWriteGrpcTransport,
            )

            channel = grpc.insecure_channel(
                self.write_endpoint, options=[("grpc.max_send_message_length", 32 * 1024 * 1024)]
            )
            return BigQueryWriteClient(transport=BigQueryWriteGrpcTransport(channel=channel))
        options = {"api_endpoint": self.write_endpoint} if self.write_endpoint else None
        return BigQueryWriteClient(credentials=self.get_credentials(), client_options=options)

    def get_conn(self) -> Any:
        return self.get_bigquery_client()

    def get_target(
        self,
        dataset: str,
        project_id: str | None = None,
        *,
        max_staleness: timedelta | str | None = None,
        row_source: Any | None = None,
        derived_key: str | Mapping[str, str] | None = "auto",
        **options: Any,
    ) -> Any:
        """A ``BigQueryCdcTarget`` for ``{project_id}.{dataset}`` (the connection's project by default)."""
        from airflow_provider_cdc.targets.bigquery.target import BigQueryCdcTarget

        project = validate_project(project_id or self.project_id)
        return BigQueryCdcTarget(
            self.get_bigquery_client(project),
            self.get_write_client(),
            project,
            validate_dataset(dataset),
            max_staleness=max_staleness,
            row_source=row_source,
            derived_key=derived_key,
            **options,
        )

    def apply_window(
        self,
        pipeline: str,
        window: Window,
        locations: WindowLocations,
        dataset: str,
        project_id: str | None = None,
        *,
        max_staleness: timedelta | str | None = None,
        table_names: Mapping[str, str] | None = None,
        metastore_conn_id: str = CdcMetastoreHook.default_conn_name,
        report_watermarks: bool = True,
        writer_options: Mapping[str, Any] | None = None,
        derived_key: str | Mapping[str, str] | None = "auto",
        epoch: int | None = None,
    ) -> dict[str, Any]:
        """Send the window's change set to ``{project}.{dataset}``; return a summary per table (with
        each table's ``upsert_stream_apply_watermark`` when ``report_watermarks``).

        The metastore ledger records each table (target ``bigquery``) as soon as its send completed; a
        table it records for this window is not sent again (reported ``already_sent``), whatever the run
        (retry, clear, backfill) and however long after, and a window older than one it records for a
        table is refused. Every table still to send is checked before the first is sent
        (``BigQueryCdcTarget.plan_window``). Partial row images are completed from the target of the
        pipeline that keeps current rows (its root in ``locations``), which must have applied the
        window; a table whose rows there hold later windows sends only the rows those windows did not
        supersede.

        ``epoch`` (the opening of the window this run belongs to, the open task's ``epoch`` XCom)
        fences a stale run: when the window was opened again since, nothing is sent
        (``StaleEpochError``); it is checked before the first table and again before each next one.
        """
        from airflow_provider_cdc.changesets.reader import ChangeSetReader
        from airflow_provider_cdc.hooks.storage import storage_options
        from airflow_provider_cdc.targets.bigquery.target import TableResult, staleness_seconds
        from airflow_provider_cdc.targets.images import open_row_source

        pipeline = validate_pipeline_id(pipeline)
        options = storage_options(self.gcp_conn_id) if _has_object_store(locations) else {}
        reader = ChangeSetReader(locations.change_set(window), options)
        tables = reader.tables()  # checks the manifest before anything is sent
        rows = open_row_source(locations.target_roots, options)
        if rows is not None:
            behind = [
                t.name
                for t in tables
                if t.expected_rows != 0 and (rows.applied_window(t.name, pipeline) or -1) < window.end_micros
            ]
            if behind:
                raise LakeBehindError(
                    f"the {rows.name} tables {behind} at {rows.table_uri(behind[0])!r} have not applied "
                    f"window {window.window_id} of pipeline {pipeline!r}; run the {rows.name} apply step "
                    "first (partial row images are completed from them)"
                )
        project = project_id or (None if is_loopback(self.api_endpoint) else self.project_id)
        results: list[TableResult]
        with CdcMetastoreHook(metastore_conn_id) as metastore:
            store = metastore.metastore
            check_epoch(store, pipeline, window, epoch)
            target = self.get_target(
                str(dataset),
                project,
                max_staleness=max_staleness,
                row_source=rows,
                table_names=dict(table_names or {}),
                derived_key=derived_key,
                ledger=store,
                **dict(writer_options or {}),
            )
            results, plans = target.plan_window(tables, pipeline, window)  # every table checked first
            self.log.info(
                "applying change set %s to BigQuery dataset %s.%s (%d table(s), %d already sent)",
                reader.uri,
                target.project,
                dataset,
                len(plans),
                len(results),
            )
            for plan in plans:
                check_epoch(store, pipeline, window, epoch)
                results.append(target.send_planned(plan, pipeline, window))
        order = {t.name: i for i, t in enumerate(tables)}
        results.sort(key=lambda r: order[r.source_table])
        summary: dict[str, Any] = {
            "window_id": window.window_id,
            "project": target.project,
            "dataset": str(dataset),
            "tables": {},
        }
        for result in results:
            entry = result.to_dict()
            if report_watermarks:
                watermark = target.apply_watermark(result.source_table)
                shown = None if watermark is None else format_timestamp(watermark)
                entry["upsert_stream_apply_watermark"] = shown
                entry["staleness_seconds"] = staleness_seconds(watermark)
                self.log.info(
                    "%s: upsert_stream_apply_watermark %s (%s s behind)",
                    target.table_id(result.table),
                    entry["upsert_stream_apply_watermark"],
                    entry["staleness_seconds"],
                )
            summary["tables"][result.table] = entry
        return summary


def check_epoch(store: Any, pipeline: str, window: Window, epoch: int | None) -> None:
    """``StaleEpochError`` when ``epoch`` is given and is no longer the window's (it was opened again)."""
    if epoch is not None:
        from airflow_provider_cdc.hooks.pipeline import require_epoch

        require_epoch(store, pipeline, window, epoch, "send")


class LakeBehindError(RuntimeError):
    """The tables that complete partial row images (the row source's) have not applied the window yet."""


def _has_object_store(locations: WindowLocations) -> bool:
    from airflow_provider_cdc.filesystems import is_local

    return any(
        root and not is_local(root) for root in (locations.changeset_root, *locations.target_roots.values())
    )


def __getattr__(name: str) -> Any:
    """``ResendError`` now lives with the target (which refuses the send); imported from here on demand."""
    if name == "ResendError":
        from airflow_provider_cdc.targets.bigquery.target import ResendError

        return ResendError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
