"""The Spanner source's errors, and what the shared classifier learns about Spanner's answers.

They derive from :class:`~airflow_provider_cdc._errors.CdcError`; the ``permanent`` ones fail a window
step without retries (:mod:`airflow_provider_cdc.failures` reads the attribute). Importing this module
registers with that classifier the one Spanner answer it cannot tell from others alone: ``NotFound`` for
an expired session is transient (a new client opens another), not a missing database.
"""

from __future__ import annotations

from airflow_provider_cdc._compat import AirflowFailException
from airflow_provider_cdc._errors import CdcError, ConfigurationError
from airflow_provider_cdc.failures import TRANSIENT, register_verdict

__all__ = ["ChangeStreamConfigError", "ChangeStreamError", "RetentionExpiredError"]


class ChangeStreamConfigError(ConfigurationError):
    """A change stream setting is invalid: a Spanner id, the stream name, a retention, the project."""


class ChangeStreamError(CdcError):
    """Spanner or the metastore refused a step of reading a change stream; the original error is the
    cause."""


class RetentionExpiredError(AirflowFailException, CdcError):
    """A window starts outside its change stream's retention period: its changes can no longer be read."""

    permanent = True


def _expired_session(error: BaseException) -> object | None:
    """:data:`~airflow_provider_cdc.failures.TRANSIENT` for Spanner's "session not found" ``NotFound``."""
    try:
        from google.api_core import exceptions as gexc
    except ImportError:  # pragma: no cover - the google provider brings it
        return None
    if isinstance(error, gexc.NotFound) and "session not found" in str(error).lower():
        return TRANSIENT
    return None


register_verdict(_expired_session)
