"""Which errors a retry cannot heal, decided in one place; the window steps fail on them without retries.

:func:`permanent_reason` looks at an error and its causes, outermost first, and stops at the first one
it can judge:

* **permanent** (a retry reads the same setting and meets the same answer): an undefined connection; a
  Google API error saying something does not exist (a database, an instance, a table, a bucket: 404),
  that access is refused (401, 403), that a request is invalid (400, out of range) or not implemented;
  missing Application Default Credentials; the provider's own errors marked ``permanent`` (invalid
  settings, a window outside its source's retention; :class:`~airflow_provider_cdc._errors.CdcError`)
  any other error whose ``permanent`` attribute is true (a Table Store error with such a code), and
  one that fails a task without retries already (``AirflowFailException``);
* **transient** (retried as Airflow retries any failure): 5xx answers, ``UNAVAILABLE``,
  ``DEADLINE_EXCEEDED``, ``ABORTED``, too many requests, a session that expired;
* anything else is retried too.

:class:`FailsPermanentErrors` gives a task class's ``execute`` that judgement: a permanent error becomes
an ``AirflowFailException`` (the task fails for good, the message saying why), others pass unchanged.
The window steps (open, read, merge, upserts, commit) and the window-complete sensors derive from it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from airflow_provider_cdc._compat import AirflowFailException, AirflowNotFoundException

__all__ = ["FailsPermanentErrors", "PermanentFailure", "fail_permanent_errors", "permanent_reason"]

_Method = TypeVar("_Method", bound=Callable[..., Any])
_MAX_CHAIN = 12
_TRANSIENT = object()


class PermanentFailure(AirflowFailException):
    """A window step's error that a retry cannot heal (its cause is the original error)."""


def _google_verdict(error: BaseException) -> object | str | None:
    """A reason (permanent), :data:`_TRANSIENT`, or ``None`` (not a Google error this module judges)."""
    try:
        from google.api_core import exceptions as gexc
    except ImportError:  # pragma: no cover - the google provider brings it
        return None
    if not isinstance(error, gexc.GoogleAPICallError):
        return None
    message = str(getattr(error, "message", "") or error)
    if isinstance(error, gexc.MethodNotImplemented):
        return "the service does not offer this call (501)"
    if isinstance(error, (gexc.ServerError, gexc.TooManyRequests, gexc.Aborted, gexc.Cancelled)):
        return _TRANSIENT
    if isinstance(error, gexc.NotFound):
        if "session not found" in message.lower():
            return _TRANSIENT  # an expired session: a new client opens another
        return "it does not exist (404): check the names the task was given"
    if isinstance(error, (gexc.PermissionDenied, gexc.Forbidden)):
        return "permission denied (403): grant the connection's identity access"
    if isinstance(error, (gexc.Unauthenticated, gexc.Unauthorized)):
        return "the credentials were refused (401): check the connection's key"
    if isinstance(error, gexc.FailedPrecondition):
        return None  # Spanner and BigQuery use it for transient states as well
    if isinstance(error, gexc.BadRequest):  # InvalidArgument, OutOfRange
        return "the request is invalid (400): check the settings it was built from"
    return None


def _verdict(error: BaseException) -> object | str | None:
    if isinstance(error, AirflowNotFoundException):
        return "a connection it names is not defined"
    if getattr(error, "permanent", False) is True or isinstance(error, AirflowFailException):
        return "a retry meets the same setting"
    found = _google_verdict(error)
    if found is not None:
        return found
    try:
        from google.auth.exceptions import DefaultCredentialsError
    except ImportError:  # pragma: no cover
        return None
    if isinstance(error, DefaultCredentialsError):
        return "no Google credentials: define the connection or Application Default Credentials"
    return None


def permanent_reason(error: BaseException) -> str | None:
    """Why ``error`` cannot be healed by a retry (``None``: it may be, or it cannot be told)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < _MAX_CHAIN:
        seen.add(id(current))
        verdict = _verdict(current)
        if verdict is _TRANSIENT:
            return None
        if isinstance(verdict, str):
            return verdict
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return None


@contextmanager
def fail_permanent_errors() -> Iterator[None]:
    """Re-raise a permanent error (:func:`permanent_reason`) as :class:`PermanentFailure`."""
    try:
        yield
    except AirflowFailException:
        raise
    except Exception as error:
        reason = permanent_reason(error)
        if reason is None:
            raise
        raise PermanentFailure(f"{error} [not retried: {reason}]") from error


def fails_permanently(method: _Method) -> _Method:
    """``method`` (an ``execute``) with :func:`fail_permanent_errors` around it."""
    if getattr(method, "__cdc_fails_permanently__", False):
        return method

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with fail_permanent_errors():
            return method(self, *args, **kwargs)

    wrapper.__cdc_fails_permanently__ = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


class FailsPermanentErrors:
    """Every ``execute`` a subclass defines fails without retries on a permanent error (see the
    module). Put it before the Airflow base class."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        execute = cls.__dict__.get("execute")
        if callable(execute):
            cls.execute = fails_permanently(execute)  # type: ignore[attr-defined]
