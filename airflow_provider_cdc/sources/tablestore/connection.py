"""The ``tablestore`` connection: a Table Store instance's endpoint and access key.

Fields: host = the endpoint (``https://<instance>.<region>.ots.aliyuncs.com``; ``https://`` is assumed
when no scheme is given), login = the access key id, password = the access key secret, extra
``instance`` (the instance name; default the endpoint's first label) and optional ``sts_token``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from airflow_provider_cdc._compat import BaseHook
from airflow_provider_cdc._errors import ConfigurationError
from airflow_provider_cdc.hooks.connections import defined_connection
from airflow_provider_cdc.sources.tablestore.client import TablestoreStreamClient

__all__ = ["TablestoreHook", "client_arguments"]


def client_arguments(
    host: str | None, login: str | None, password: str | None, extra: dict[str, Any]
) -> dict[str, Any]:
    """The client's arguments from a connection's fields (errors name the missing field, never the secret)."""
    if not host:
        raise ValueError("the Table Store connection has no host: set it to the instance's endpoint")
    endpoint = host if "://" in host else f"https://{host}"
    instance = extra.get("instance") or (urlsplit(endpoint).hostname or "").split(".")[0]
    if not instance:
        raise ValueError(f"the Table Store connection to {endpoint} names no instance: set extra 'instance'")
    if not login or not password:
        raise ValueError(
            f"the Table Store connection to {endpoint} needs the access key id (login) and secret (password)"
        )
    arguments: dict[str, Any] = {
        "endpoint": endpoint,
        "instance": instance,
        "access_key_id": login,
        "access_key_secret": password,
    }
    if extra.get("sts_token"):
        arguments["sts_token"] = extra["sts_token"]
    return arguments


class TablestoreHook(BaseHook):
    """A Table Store stream client from an Airflow connection of type ``tablestore``."""

    conn_name_attr = "tablestore_conn_id"
    default_conn_name = "tablestore_default"
    conn_type = "tablestore"
    hook_name = "Alibaba Cloud Table Store"

    def __init__(self, tablestore_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tablestore_conn_id = tablestore_conn_id
        self._client: TablestoreStreamClient | None = None

    def get_conn(self) -> TablestoreStreamClient:
        """The stream client (built once per hook)."""
        if self._client is None:
            # no default meaning: a missing connection fails naming tablestore_conn_id, without retries
            conn = defined_connection(self.tablestore_conn_id, "tablestore_conn_id")
            try:
                arguments = client_arguments(conn.host, conn.login, conn.password, conn.extra_dejson or {})
            except ValueError as exc:
                raise ConfigurationError(
                    f"connection {self.tablestore_conn_id!r} (tablestore_conn_id): {exc}"
                ) from None
            self._client = TablestoreStreamClient(**arguments)
        return self._client

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["port", "schema"],
            "relabeling": {"host": "Endpoint", "login": "AccessKey ID", "password": "AccessKey Secret"},
            "placeholders": {
                "host": "https://my-instance.cn-hangzhou.ots.aliyuncs.com",
                "extra": '{"instance": "my-instance"}',
            },
        }
