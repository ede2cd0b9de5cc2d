"""Hook for the provider's partition/window metastore (any SQLAlchemy URL; SQLite by default).

Only the default connection ``cdc_metastore_default`` may be missing (the metastore is then a SQLite
file under ``AIRFLOW_HOME``, logged with its path); any other ``metastore_conn_id`` must be defined:
a typo must not give each worker a metastore of its own.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_cdc._compat import AirflowFailException, BaseHook
from airflow_provider_cdc._errors import metastore_errors
from airflow_provider_cdc.hooks.connections import defined_connection
from airflow_provider_cdc.metastore import Metastore

if TYPE_CHECKING:
    from airflow_provider_cdc.core.window import Window

#: The metastore connection every step uses unless given another ``metastore_conn_id``.
DEFAULT_METASTORE_CONN_ID = "cdc_metastore_default"


def default_metastore_path() -> Path:
    """The SQLite file of the default metastore: ``$AIRFLOW_HOME/cdc_metastore.db``."""
    return Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow") / "cdc_metastore.db"


def default_metastore_url() -> str:
    """A SQLite file under ``AIRFLOW_HOME`` (the default when no connection is configured)."""
    path = default_metastore_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def metastore_connection(conn_id: str, logger: Any = None) -> Any | None:
    """The metastore connection ``conn_id``; ``None`` for a missing ``cdc_metastore_default`` (the
    SQLite file, logged); any other missing connection raises ``ConnectionNotDefinedError``."""
    return defined_connection(
        conn_id,
        "metastore_conn_id",
        default=DEFAULT_METASTORE_CONN_ID,
        default_means=f"the metastore is the SQLite file {default_metastore_path()} (this machine only)",
        logger=logger,
    )


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
        ``postgres``/``sqlite`` connections) names the database. When ``cdc_metastore_default`` does
        not exist, the metastore is the SQLite file ``$AIRFLOW_HOME/cdc_metastore.db``; any other
        connection must exist (``ConnectionNotDefinedError``, which fails a task without retries).
    """

    conn_name_attr = "metastore_conn_id"
    default_conn_name = DEFAULT_METASTORE_CONN_ID
    conn_type = "cdc_metastore"
    hook_name = "CDC Metastore"

    def __init__(self, metastore_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.metastore_conn_id = metastore_conn_id
        self._metastore: Metastore | None = None

    def get_url(self) -> str:
        conn = metastore_connection(self.metastore_conn_id, self.log)
        return default_metastore_url() if conn is None else connection_url(conn)

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


def check_predecessor(metastore_conn_id: str, pipeline: str, window: Window) -> None:
    """Fail unless the window before ``window`` is applied (or ``window`` is the pipeline's first): a
    predecessor that was never run fails without retries, one not applied yet fails with its state."""
    with metastore_errors(f"window {window} of pipeline {pipeline!r}: checking its predecessor"):
        with CdcMetastoreHook(metastore_conn_id) as metastore:
            error = metastore.metastore.predecessor_error(pipeline, window.start, window.end)
    if error is not None:
        raise AirflowFailException(str(error)) if error.never_run else error
