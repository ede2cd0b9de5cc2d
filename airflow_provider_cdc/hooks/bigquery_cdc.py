"""Hook for the BigQuery CDC target: the real BigQuery clients built from a Google Cloud connection.

Credentials, project and impersonation come from ``google_cloud_default`` (or any
``google_cloud_platform`` connection) exactly as for the google provider's ``BigQueryHook``.
``api_endpoint``/``write_endpoint`` point the clients elsewhere; loopback endpoints
(``127.0.0.1``, ``localhost``, ``::1``), such as the project's fake, are reached without TLS and
with anonymous credentials, and no connection is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from airflow.providers.google.common.hooks.base_google import GoogleBaseHook

from airflow_provider_cdc._compat import BaseHook
from airflow_provider_cdc.bigquery.schema import validate_dataset, validate_project

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


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
        if is_loopback(api_endpoint) and is_loopback(write_endpoint):
            # Both clients go to this machine with anonymous credentials: no connection is needed.
            BaseHook.__init__(self, **kwargs)
            self.gcp_conn_id = gcp_conn_id
            self.impersonation_chain = impersonation_chain
            self.quota_project_id = None
            self.extras = {}
            self._cached_credentials = None
            self._cached_project_id = None
        else:
            super().__init__(gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain, **kwargs)
        self.api_endpoint = api_endpoint
        self.write_endpoint = write_endpoint
        self.location = location

    def _credentials(self, endpoint: str | None) -> Any:
        if is_loopback(endpoint):
            from google.auth.credentials import AnonymousCredentials

            return AnonymousCredentials()
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
        lake: Any | None = None,
        **options: Any,
    ) -> Any:
        """A ``BigQueryCdcTarget`` for ``{project_id}.{dataset}`` (the connection's project by default)."""
        from airflow_provider_cdc.bigquery.target import BigQueryCdcTarget

        project = validate_project(project_id or self.project_id)
        return BigQueryCdcTarget(
            self.get_bigquery_client(project),
            self.get_write_client(),
            project,
            validate_dataset(dataset),
            max_staleness=max_staleness,
            lake=lake,
            **options,
        )
