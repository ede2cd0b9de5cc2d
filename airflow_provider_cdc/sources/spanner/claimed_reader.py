"""The claimed reader of Spanner sources: the errors of ``google-cloud-spanner`` worth retrying, and how
messages word them.

The claim, lease, staging-folder and retry machine itself is
:class:`airflow_provider_cdc.sources.claimed_reader.ClaimedWindowReader`, shared by every source.
"""

from __future__ import annotations

from google.api_core import exceptions as gexc

from airflow_provider_cdc.sources.claimed_reader import ClaimedWindowReader, WindowReadError

__all__ = ["RETRYABLE", "ClaimedWindowReader", "SpannerClaimedReader", "WindowReadError", "describe_error"]

# Errors worth retrying from where the read got to (the client already resumes UNAVAILABLE
# transparently with resume tokens; these are what reach us).
RETRYABLE = (
    gexc.Aborted,
    gexc.ServiceUnavailable,
    gexc.InternalServerError,
    gexc.DeadlineExceeded,
    gexc.ResourceExhausted,
    gexc.Cancelled,
)


def describe_error(exc: BaseException) -> str:
    """``CODE: message`` of a Spanner error (``Type: message`` of any other)."""
    if not isinstance(exc, gexc.GoogleAPICallError):
        return f"{type(exc).__name__}: {exc}"
    code = getattr(exc, "grpc_status_code", None)
    return f"{code.name if code is not None else type(exc).__name__}: {exc.message}"


class SpannerClaimedReader(ClaimedWindowReader):
    """A claimed reader of a Spanner source: retries :data:`RETRYABLE`, words errors by their code."""

    retryable: tuple[type[BaseException], ...] = RETRYABLE

    def describe(self, exc: BaseException) -> str:
        return describe_error(exc)
