"""The provider's errors, which carry their context: local paths, metastore failures, waits.

They derive from :class:`CdcError`; Airflow retries them like any other task failure. Errors a retry
cannot heal are ``permanent`` and derive from ``AirflowFailException`` too, so a task fails on them at
once wherever they are raised: a setting that cannot work (:class:`ConfigurationError`), a relative
path, an undefined connection. A source's own errors live in its folder and derive from these. Errors
of the services (a database that does not exist, permission denied) are judged in
:mod:`airflow_provider_cdc.failures`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

from airflow_provider_cdc._compat import AirflowFailException, AirflowNotFoundException

# user:password@ in a URL, and password=… in a DSN: never shown in a message.
_URL_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*):[^@\s]*@")
_DSN_PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)


class CdcError(Exception):
    """Base of the errors this provider raises."""

    #: a retry cannot heal it (a setting that cannot work): the window steps fail without retries
    permanent: bool = False


class ConfigurationError(AirflowFailException, CdcError):
    """A setting that cannot work: a retry reads the same setting, so it is ``permanent``."""

    permanent = True


class InvalidSettingError(ConfigurationError, ValueError):
    """A task argument with a value it cannot take (a window bound, a root's key, an epoch)."""


class DrainWaitError(CdcError):
    """A deferred wait (a window's units read, or drained) ended with an error reported by its trigger."""


class MetastoreUnavailableError(CdcError):
    """The metastore's database could not be reached or used; the original error is the cause."""


class RelativePathError(AirflowFailException, CdcError):
    """A local location given as a relative path (tasks run in other working directories)."""

    permanent = True


class ConnectionNotDefinedError(AirflowFailException, AirflowNotFoundException, CdcError):
    """A connection id given explicitly (or one without a default meaning) that is not defined: the
    message names the connection and the argument that uses it."""

    permanent = True

    def __init__(self, conn_id: str, argument: str, default: str | None = None) -> None:
        self.conn_id, self.argument = conn_id, argument
        variable = "AIRFLOW_CONN_" + re.sub(r"[^A-Za-z0-9]", "_", conn_id).upper()
        unset = f", or leave {argument} unset to use {default!r}" if default and default != conn_id else ""
        super().__init__(
            f"connection {conn_id!r} given as {argument} is not defined: define it (Admin > Connections, "
            f"the environment variable {variable} or your secrets backend) or give {argument} the id of "
            f"a defined connection{unset}"
        )


def require_absolute(field: str, value: object) -> None:
    """Refuse a relative local path in ``field``; URIs (``gs://``, ``file://`` …) and ``None`` pass."""
    if value is None:
        return
    text = str(value).strip()
    if not text or "://" in text or os.path.isabs(text):
        return
    raise RelativePathError(
        f"{field} {text!r} is a relative path; tasks run in other working directories, so local paths "
        f"must be absolute: use {os.path.abspath(text)!r}"
    )


def redact(text: str) -> str:
    """``text`` with the passwords of URLs and DSNs in it replaced by ``***``."""
    return _DSN_PASSWORD.sub(r"\1***", _URL_CREDENTIALS.sub(r"\1:***@", text))


@contextmanager
def metastore_errors(what: str) -> Iterator[None]:
    """Re-raise a SQLAlchemy ``OperationalError`` as :class:`MetastoreUnavailableError` naming ``what``
    (the window and the operation), the driver's first line of explanation, credentials removed."""
    from sqlalchemy.exc import OperationalError

    try:
        yield
    except OperationalError as exc:
        original = exc.orig if exc.orig is not None else exc
        lines = str(original).strip().splitlines()
        detail = redact(lines[0] if lines else "")
        raise MetastoreUnavailableError(
            f"{what}: the metastore failed ({type(original).__name__}: {detail})"
        ) from exc
