"""The Spanner database a Spanner source reads: connection, client, database and its clock.

:class:`SpannerDatabase` is the Google Cloud hook part every Spanner source's hook shares (credentials,
project, impersonation as ``SpannerHook`` takes them). The default connection ``google_cloud_default``
need not exist: without it the client uses Application Default Credentials, and against the Spanner
emulator (``SPANNER_EMULATOR_HOST``) anonymous credentials (the google provider's ``is_anonymous``
extra). A ``gcp_conn_id`` given otherwise must exist (``ConnectionNotDefinedError``).
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

from airflow_provider_cdc._errors import CdcError
from airflow_provider_cdc.core.findings import OK, Finding, did_you_mean
from airflow_provider_cdc.core.timestamps import coerce_timestamp
from airflow_provider_cdc.hooks.storage import DEFAULT_GCP_CONN_ID
from airflow_provider_cdc.sources.spanner.errors import ChangeStreamConfigError, ChangeStreamError

__all__ = ["EMULATOR_ENV", "EMULATOR_PROJECT", "SpannerDatabase", "emulator_connection"]

EMULATOR_ENV = "SPANNER_EMULATOR_HOST"
#: The project of a source read from the emulator when neither argument nor connection names one.
EMULATOR_PROJECT = "emulator-project"
_SPANNER_ID_HINT = "lowercase letters, digits, hyphens and underscores"
CHANGE_STREAMS_QUERY = (
    "SELECT CHANGE_STREAM_NAME FROM INFORMATION_SCHEMA.CHANGE_STREAMS "
    "WHERE CHANGE_STREAM_CATALOG = '' AND CHANGE_STREAM_SCHEMA = ''"
)
TABLES_QUERY = "SELECT TABLE_NAME FROM INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = ''"
#: Seconds a preflight query may take (the client's own retries of an unavailable service included).
PREFLIGHT_TIMEOUT = 10.0


def _validate_resource_id(value: str, kind: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[a-z][a-z0-9_\-]{1,62}[a-z0-9]", value):
        raise ChangeStreamConfigError(f"invalid Spanner {kind} id {value!r}: expected {_SPANNER_ID_HINT}")
    return value


def emulator_connection(conn_id: str, anonymous: bool = True) -> Any:
    """The Google Cloud connection ``conn_id`` as taken when it is not defined: against the emulator
    anonymous credentials (the provider's ``is_anonymous`` extra), else Application Default
    Credentials (no extra)."""
    try:  # Airflow 3
        from airflow.sdk import Connection
    except ImportError:  # Airflow 2.11
        from airflow.models.connection import Connection  # type: ignore[no-redef,assignment]
    extra = json.dumps({"is_anonymous": True}) if anonymous else None
    return Connection(conn_id=conn_id, conn_type="google_cloud_platform", extra=extra)


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
        """The connection ``conn_id``. A missing ``google_cloud_default`` is an anonymous connection
        against the emulator, else one with Application Default Credentials; any other missing
        connection fails (``ConnectionNotDefinedError``, naming ``gcp_conn_id``)."""
        from airflow_provider_cdc.hooks.connections import defined_connection

        emulator = bool(os.environ.get(EMULATOR_ENV))
        means = (
            "the Spanner emulator is read with anonymous credentials"
            if emulator
            else "Spanner is read with Application Default Credentials"
        )
        found = defined_connection(conn_id, "gcp_conn_id", default=DEFAULT_GCP_CONN_ID, default_means=means)
        return emulator_connection(conn_id, anonymous=emulator) if found is None else found

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

    # ----- the preflight --------------------------------------------------------------------------
    def query_rows(self, sql: str, **params: str) -> list[list[Any]]:
        """Rows of a read-only query with STRING ``params`` (the preflight's lookups)."""
        from google.cloud.spanner_v1 import param_types

        types = {name: param_types.STRING for name in params}
        with self.database.snapshot() as snapshot:
            found = snapshot.execute_sql(
                sql, params=params or None, param_types=types or None, timeout=PREFLIGHT_TIMEOUT
            )
            return [list(row) for row in found]

    def _names(self, listing: Any) -> list[str] | None:
        """The last path segment of each resource ``listing()`` yields; ``None`` when listing fails
        (no permission to list: no suggestions)."""
        from google.api_core import exceptions as gexc

        try:
            return [str(item.name).rsplit("/", 1)[-1] for item in listing()]
        except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
            self.log.info("Cannot list what exists for suggestions: %s", str(exc).splitlines()[0])
            return None

    def check_database(self) -> list[Finding]:
        """The database answers a query with the connection's identity; a missing instance or database
        names the setting with suggestions from the project's instances or the instance's databases."""
        from google.api_core import exceptions as gexc
        from google.auth.exceptions import DefaultCredentialsError

        from airflow_provider_cdc.failures import permanent_reason

        try:
            self.query_rows("SELECT 1")
        except gexc.NotFound as exc:
            message = str(exc.message)
            if "instance not found" in message.lower():
                known = self._names(self.client.list_instances)
                fix = did_you_mean(self.instance_id, known, "instance") if known is not None else (
                    "check instance_id and the project"
                )
                problem = (
                    f"Spanner instance {self.instance_id!r} does not exist in project "
                    f"{self.resolved_project_id!r}"
                )
                return [Finding("instance_id", problem, fix)]
            known = self._names(self.client.instance(self.instance_id).list_databases)
            fix = "check database_id" if known is None else did_you_mean(self.database_id, known, "database")
            return [Finding(
                "database_id",
                f"Spanner database {self.database_id!r} does not exist in instance {self.instance_id!r} "
                f"of project {self.resolved_project_id!r}",
                fix,
            )]
        except (gexc.PermissionDenied, gexc.Unauthenticated) as exc:
            return [Finding(
                "gcp_conn_id",
                f"Spanner refused {self.database_path} to the identity of connection {self.gcp_conn_id!r}: "
                f"{str(exc.message).splitlines()[0]}",
                "grant that identity roles/spanner.databaseReader on the database, or give gcp_conn_id a "
                "connection that has it",
            )]
        except DefaultCredentialsError:
            return [Finding(
                "gcp_conn_id",
                f"connection {self.gcp_conn_id!r} is not defined and this worker has no Application Default "
                "Credentials",
                f"define the connection {self.gcp_conn_id!r} or set up Application Default Credentials",
            )]
        except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
            reason = permanent_reason(exc)
            return [Finding(
                "instance_id/database_id",
                f"Spanner database {self.database_path} did not answer: {str(exc).splitlines()[0]}",
                "check the names, the network path and the connection" if reason else "try again",
                transient=reason is None,
            )]
        return [Finding("database_id", f"Spanner database {self.database_path} answers", level=OK)]

    def check_change_stream(self, stream: str, setting: str) -> list[Finding]:
        """The database has change stream ``stream`` (given as ``setting``); else the streams it has."""
        names = [str(row[0]) for row in self.query_rows(CHANGE_STREAMS_QUERY)]
        if stream in names:
            return [Finding(setting, f"change stream {stream!r} exists in {self.database_path}", level=OK)]
        return [Finding(
            setting,
            f"change stream {stream!r} does not exist in Spanner database {self.database_path}",
            did_you_mean(stream, names, "change stream"),
        )]

    def check_tables(self, tables: Sequence[str], setting: str) -> list[Finding]:
        """The database has each of ``tables`` (given as ``setting``); else the tables it has."""
        names = [str(row[0]) for row in self.query_rows(TABLES_QUERY)]
        return [
            Finding(
                setting,
                f"table {table!r} does not exist in Spanner database {self.database_path}",
                did_you_mean(table, names, "table"),
            )
            for table in tables
            if table not in names
        ]
