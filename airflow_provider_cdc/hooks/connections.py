"""Looking up a connection a task was given: a default connection id may be missing, any other must exist.

A default connection id (``cdc_metastore_default``, ``google_cloud_default``, ``spark_default``) that is
not defined means something (a local SQLite metastore, Application Default Credentials, Spark
``local[*]``): :func:`defined_connection` logs what, once per process and connection. A connection id
given explicitly that is not defined is a mistake (a typo in a secret's name): it fails at once, without
retries, naming the connection and the argument (:class:`~airflow_provider_cdc._errors.
ConnectionNotDefinedError`), instead of silently meaning the default.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_provider_cdc._compat import AirflowNotFoundException, BaseHook
from airflow_provider_cdc._errors import ConnectionNotDefinedError

__all__ = ["ConnectionNotDefinedError", "defined_connection", "lookup_connection"]

log = logging.getLogger(__name__)
_announced: set[tuple[str, str]] = set()


def lookup_connection(conn_id: str) -> Any | None:
    """The connection ``conn_id``, or ``None`` when it is not defined."""
    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None


def defined_connection(
    conn_id: str,
    argument: str,
    *,
    default: str | None = None,
    default_means: str | None = None,
    logger: Any = None,
) -> Any | None:
    """The connection ``conn_id`` given as ``argument``.

    When it is not defined: ``None`` if it is ``default`` and the default has a meaning
    (``default_means``, logged once per process), else :class:`ConnectionNotDefinedError`.
    """
    connection = lookup_connection(conn_id)
    if connection is not None:
        return connection
    if default_means is not None and conn_id == default:
        if (conn_id, default_means) not in _announced:
            _announced.add((conn_id, default_means))
            (logger or log).info("No connection %r (%s) is defined: %s", conn_id, argument, default_means)
        return None
    raise ConnectionNotDefinedError(conn_id, argument, default if default_means is not None else None)
