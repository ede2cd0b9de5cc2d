"""Errors raised by the metastore; each names the stream, token, pipeline or window involved."""

from __future__ import annotations


class MetastoreError(Exception):
    """Base class of every metastore error."""


class SchemaVersionError(MetastoreError):
    """The metastore's tables are missing, unversioned, or newer than this provider understands."""


class UnknownStreamError(MetastoreError, LookupError):
    """No partition of the stream has been recorded yet."""

    def __init__(self, stream: str) -> None:
        super().__init__(f"change stream {stream!r} has no partitions in the metastore")
        self.stream = stream


class PartitionNotFoundError(MetastoreError, LookupError):
    """The partition token is not recorded for the stream."""

    def __init__(self, stream: str, token: str) -> None:
        super().__init__(f"partition token {token!r} of change stream {stream!r} is not in the metastore")
        self.stream = stream
        self.token = token


class PartitionStateError(MetastoreError):
    """A partition change that contradicts what the metastore already holds."""

    def __init__(self, stream: str, token: str, message: str) -> None:
        super().__init__(f"partition token {token!r} of change stream {stream!r}: {message}")
        self.stream = stream
        self.token = token


class LeaseLostError(PartitionStateError):
    """The caller no longer holds the partition's lease (it expired and another owner claimed it)."""

    def __init__(self, stream: str, token: str, owner: str, holder: str | None) -> None:
        held = f"it is held by {holder!r}" if holder else "it is not held by anyone"
        super().__init__(stream, token, f"lease owner {owner!r} no longer holds the lease; {held}")
        self.owner = owner
        self.holder = holder


class WindowNotFoundError(MetastoreError, LookupError):
    """No window with these bounds is recorded for the pipeline."""

    def __init__(self, pipeline: str, window_id: str) -> None:
        super().__init__(f"window {window_id} of pipeline {pipeline!r} is not in the metastore")
        self.pipeline = pipeline
        self.window_id = window_id


class WindowConflictError(MetastoreError):
    """A window operation that contradicts the recorded window (other stream, illegal transition)."""

    def __init__(self, pipeline: str, window_id: str, message: str) -> None:
        super().__init__(f"window {window_id} of pipeline {pipeline!r}: {message}")
        self.pipeline = pipeline
        self.window_id = window_id
