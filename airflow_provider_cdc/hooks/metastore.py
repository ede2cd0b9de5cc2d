"""Hook for the provider's partition/window metastore (any SQLAlchemy URL; SQLite by default)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from airflow_provider_cdc._compat import AirflowNotFoundException, BaseHook
from airflow_provider_cdc.metastore import Metastore


def default_metastore_url() -> str:
    """A SQLite file under ``AIRFLOW_HOME`` (the default when no connection is configured)."""
    home = Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow")
    home.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{home / 'cdc_metastore.db'}"


def connection_url(conn: Any) -> str:
    """SQLAlchemy URL of an Airflow connection (``extra.sqlalchemy_url`` wins over the fields)."""
    extra = conn.extra_dejson or {}
    if extra.get("sqlalchemy_url"):
        return str(extra["sqlalchemy_url"])
    conn_type = (conn.conn_type or "").lower()
    if conn_type == "sqlite":
        return f"sqlite:///{conn.host}"
    if conn_type in ("postgres", "postgresql"):
        from sqlalchemy.engine import URL

        return URL.create(
            "postgresql+psycopg2",
            username=conn.login or None,
            password=conn.password or None,
            host=conn.host or None,
            port=conn.port or None,
            database=conn.schema or None,
        ).render_as_string(hide_password=False)
    uri = conn.get_uri()
    return "postgresql" + uri[len("postgres") :] if uri.startswith("postgres://") else uri


class CdcMetastoreHook(BaseHook):
    """Opens the metastore named by an Airflow connection and creates or upgrades its schema.

    The hook owns one engine, opened on first use of :attr:`metastore` and disposed by
    :meth:`close` (or on leaving ``with CdcMetastoreHook(conn_id) as hook:``); the schema is
    created or upgraded at most once per process and database.

    :param metastore_conn_id: connection whose ``extra.sqlalchemy_url`` (or host/login/schema for
        ``postgres``/``sqlite`` connections) names the database. When the connection does not exist,
        the metastore is the SQLite file ``$AIRFLOW_HOME/cdc_metastore.db``.
    """

    conn_name_attr = "metastore_conn_id"
    default_conn_name = "cdc_metastore_default"
    conn_type = "cdc_metastore"
    hook_name = "CDC Metastore"

    def __init__(self, metastore_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.metastore_conn_id = metastore_conn_id
        self._metastore: Metastore | None = None

    def get_url(self) -> str:
        try:
            conn = self.get_connection(self.metastore_conn_id)
        except AirflowNotFoundException:
            return default_metastore_url()
        return connection_url(conn)

    @property
    def metastore(self) -> Metastore:
        """The metastore, with its schema ensured; after :meth:`close`, a new engine opens on use."""
        store = self._metastore
        if store is None:
            store = Metastore(self.get_url())
            try:
                store.ensure_schema()
            except BaseException:
                store.dispose()
                raise
            self._metastore = store
        return store

    def get_conn(self) -> Metastore:
        return self.metastore

    def close(self) -> None:
        """Dispose the hook's engine (closes its pooled connections); harmless to repeat."""
        store, self._metastore = self._metastore, None
        if store is not None:
            store.dispose()

    def __enter__(self) -> CdcMetastoreHook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["port", "login", "password", "schema", "host"],
            "relabeling": {},
            "placeholders": {"extra": '{"sqlalchemy_url": "postgresql+psycopg2://user@host:5432/cdc"}'},
        }
