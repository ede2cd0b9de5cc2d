"""Which errors a retry cannot heal, decided in one place; the window steps fail on them without retries.

:func:`permanent_reason` looks at an error and its causes, outermost first, and stops at the first one
it can judge:

* **permanent** (a retry reads the same setting and meets the same answer): an undefined connection; a
  Google API error saying something does not exist (a database, an instance, a table, a bucket: 404),
  that access is refused (401, 403), that a request is invalid (400, out of range) or not implemented;
  missing Application Default Credentials; the provider's own errors marked ``permanent`` (invalid
  settings, a window outside its source's retention; :class:`~airflow_provider_cdc._errors.CdcError`),
  any other error whose ``permanent`` attribute is true (a source's client error with such a code), and
  one that fails a task without retries already (``AirflowFailException``);
* **transient** (retried as Airflow retries any failure): 5xx answers, ``UNAVAILABLE``,
  ``DEADLINE_EXCEEDED``, ``ABORTED``, too many requests, a session that expired;
* anything else is retried too.

A source whose service answers in a way only it can read (an expired session reported as "not found")
registers a judge for it with :func:`register_verdict` from its own folder; the judges are asked first.

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

__all__ = [
    "TRANSIENT",
    "FailsPermanentErrors",
    "PermanentFailure",
    "fail_permanent_errors",
    "permanent_reason",
    "register_verdict",
]

_Method = TypeVar("_Method", bound=Callable[..., Any])
_MAX_CHAIN = 12
#: a judge's answer for an error a retry may heal
TRANSIENT = object()
#: what a judge returns: a reason (permanent), :data:`TRANSIENT`, or ``None`` (not an error it judges)
Verdict = Callable[[BaseException], "object | str | None"]
_REGISTERED: list[Verdict] = []


def register_verdict(judge: Verdict) -> None:
    """Ask ``judge`` about every error before the provider's own rules (once per judge)."""
    if judge not in _REGISTERED:
        _REGISTERED.append(judge)


class PermanentFailure(AirflowFailException):
    """A window step's error that a retry cannot heal (its cause is the original error)."""


def _google_verdict(error: BaseException) -> object | str | None:
    """A reason (permanent), :data:`TRANSIENT`, or ``None`` (not a Google error this module judges)."""
    try:
        from google.api_core import exceptions as gexc
    except ImportError:  # pragma: no cover - the google provider brings it
        return None
    if not isinstance(error, gexc.GoogleAPICallError):
        return None
    if isinstance(error, gexc.MethodNotImplemented):
        return "the service does not offer this call (501)"
    if isinstance(error, (gexc.ServerError, gexc.TooManyRequests, gexc.Aborted, gexc.Cancelled)):
        return TRANSIENT
    if isinstance(error, gexc.NotFound):
        return "it does not exist (404): check the names the task was given"
    if isinstance(error, (gexc.PermissionDenied, gexc.Forbidden)):
        return "permission denied (403): grant the connection's identity access"
    if isinstance(error, (gexc.Unauthenticated, gexc.Unauthorized)):
        return "the credentials were refused (401): check the connection's key"
    if isinstance(error, gexc.FailedPrecondition):
        return None  # services use it for transient states as well
    if isinstance(error, gexc.BadRequest):  # InvalidArgument, OutOfRange
        return "the request is invalid (400): check the settings it was built from"
    return None


def _verdict(error: BaseException) -> object | str | None:
    for judge in _REGISTERED:
        found = judge(error)
        if found is not None:
            return found
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
        if verdict is TRANSIENT:
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
