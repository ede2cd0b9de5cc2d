"""The Spanner database a Spanner source reads: connection, client, database and its clock.

:class:`SpannerDatabase` is the Google Cloud hook part every Spanner source's hook shares (credentials,
project, impersonation as ``SpannerHook`` takes them). Against the Spanner emulator
(``SPANNER_EMULATOR_HOST``) no Google Cloud connection needs to exist: a connection that is not defined
is taken as one with the google provider's ``is_anonymous`` extra, and the client uses anonymous
credentials.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from datetime import datetime
from functools import cached_property
from typing import Any, ClassVar

from airflow.providers.google.common.hooks.base_google import GoogleBaseHook

from airflow_provider_cdc._compat import AirflowNotFoundException
from airflow_provider_cdc._errors import CdcError, ChangeStreamConfigError, ChangeStreamError
from airflow_provider_cdc.core.timestamps import coerce_timestamp
from airflow_provider_cdc.sources.spanner.connection import DEFAULT_GCP_CONN_ID

__all__ = ["EMULATOR_ENV", "EMULATOR_PROJECT", "SpannerDatabase", "emulator_connection"]

EMULATOR_ENV = "SPANNER_EMULATOR_HOST"
#: The project of a source read from the emulator when neither argument nor connection names one.
EMULATOR_PROJECT = "emulator-project"
_SPANNER_ID_HINT = "lowercase letters, digits, hyphens and underscores"


def _validate_resource_id(value: str, kind: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[a-z][a-z0-9_\-]{1,62}[a-z0-9]", value):
        raise ChangeStreamConfigError(f"invalid Spanner {kind} id {value!r}: expected {_SPANNER_ID_HINT}")
    return value


def emulator_connection(conn_id: str) -> Any:
    """The Google Cloud connection ``conn_id`` as taken against the emulator when it is not defined:
    anonymous credentials (the provider's ``is_anonymous`` extra)."""
    try:  # Airflow 3
        from airflow.sdk import Connection
    except ImportError:  # Airflow 2.11
        from airflow.models.connection import Connection  # type: ignore[no-redef,assignment]
    return Connection(
        conn_id=conn_id, conn_type="google_cloud_platform", extra=json.dumps({"is_anonymous": True})
    )


class SpannerDatabase(GoogleBaseHook):
    """A Spanner database through a Google Cloud connection.

    :param instance_id: Spanner instance id.
    :param database_id: Spanner database id.
    :param project_id: Google Cloud project (defaults to the connection's project).
    :param gcp_conn_id: the Google Cloud connection.
    :param impersonation_chain: a service account, or a chain of them, to impersonate.

    The client is built once per hook. Invalid ids raise :class:`ChangeStreamConfigError`.
    """

    conn_name_attr = "gcp_conn_id"
    default_conn_name = DEFAULT_GCP_CONN_ID
    conn_type = "gcpspanner"
    #: Raised for a setting that cannot work (invalid ids, no project).
    config_error: ClassVar[type[CdcError]] = ChangeStreamConfigError

    def __init__(
        self,
        *,
        instance_id: str,
        database_id: str,
        project_id: str | None = None,
        gcp_conn_id: str = DEFAULT_GCP_CONN_ID,
        impersonation_chain: str | Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain, **kwargs)
        self.instance_id = _validate_resource_id(instance_id, "instance")
        self.database_id = _validate_resource_id(database_id, "database")
        self._project_id = project_id

    @classmethod
    def get_connection(cls, conn_id: str) -> Any:
        """The connection ``conn_id``; against the emulator, an anonymous one when it is not defined."""
        try:
            return super().get_connection(conn_id)
        except AirflowNotFoundException:
            if not os.environ.get(EMULATOR_ENV):
                raise
            return emulator_connection(conn_id)

    @property
    def emulator_host(self) -> str | None:
        return os.environ.get(EMULATOR_ENV) or None

    @cached_property
    def resolved_project_id(self) -> str:
        if self._project_id:
            return self._project_id
        if self.emulator_host:
            return EMULATOR_PROJECT
        project = self.project_id
        if not project:
            raise self.config_error(
                f"no Google Cloud project: set project_id or the connection {self.gcp_conn_id!r}'s project"
            )
        return project

    @cached_property
    def client(self) -> Any:
        from google.cloud.spanner_v1 import Client

        if self.emulator_host:  # the client talks to the emulator: its credentials are anonymous
            from google.auth.credentials import AnonymousCredentials

            return Client(project=self.resolved_project_id, credentials=AnonymousCredentials())
        from airflow.providers.google.common.consts import CLIENT_INFO

        return Client(
            project=self.resolved_project_id,
            credentials=self.get_credentials(),
            client_info=CLIENT_INFO,
            client_options=self.get_client_options(),
        )

    def get_conn(self) -> Any:
        """The ``google.cloud.spanner_v1.database.Database`` read."""
        return self.database

    @cached_property
    def database(self) -> Any:
        return self.client.instance(self.instance_id).database(self.database_id)

    @property
    def database_path(self) -> str:
        return (
            f"projects/{self.resolved_project_id}/instances/{self.instance_id}/databases/{self.database_id}"
        )

    def database_now(self) -> datetime:
        """The database's current time (``CURRENT_TIMESTAMP()``), which retention is measured against."""
        from google.api_core import exceptions as gexc

        try:
            with self.database.snapshot() as snapshot:
                rows = list(snapshot.execute_sql("SELECT CURRENT_TIMESTAMP()"))
        except gexc.GoogleAPICallError as exc:
            raise ChangeStreamError(f"cannot read the current time of {self.database_path}: {exc}") from exc
        return coerce_timestamp(rows[0][0])
