"""The provider's errors, which carry their context: local paths, metastore failures, change streams.

They derive from :class:`CdcError`, not from Airflow's exceptions: Airflow retries them like any other
task failure. Only :class:`RelativePathError` fails a task without retries (``AirflowFailException``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

from airflow_provider_cdc._compat import AirflowFailException

# user:password@ in a URL, and password=… in a DSN: never shown in a message.
_URL_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*):[^@\s]*@")
_DSN_PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)


class CdcError(Exception):
    """Base of the errors this provider raises."""


class ChangeStreamConfigError(CdcError):
    """A change stream setting is invalid: a Spanner id, the stream name, a retention, the project."""


class ChangeStreamError(CdcError):
    """Spanner or the metastore refused a step of reading a change stream; the original error is the
    cause."""


class RetentionExpiredError(CdcError):
    """A window starts outside its change stream's retention period: its changes can no longer be read."""


class DrainWaitError(CdcError):
    """The deferred wait for drained partitions ended with an error reported by the trigger."""


class MetastoreUnavailableError(CdcError):
    """The metastore's database could not be reached or used; the original error is the cause."""


class RelativePathError(AirflowFailException, CdcError):
    """A local location given as a relative path (tasks run in other working directories)."""


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
