"""The Datastream reader's retryable storage errors are found when first asked, not at construction."""

from __future__ import annotations

from typing import Any

from airflow_provider_cdc.sources.datastream.reader import DatastreamWindowReader, retryable_storage_errors


def _reader(**kwargs: Any) -> DatastreamWindowReader:
    return DatastreamWindowReader(None, None, None, "key", "folder", "staging", owner="me", **kwargs)  # type: ignore[arg-type]


def test_the_default_is_the_storage_errors() -> None:
    reader = _reader()
    assert reader._retryable is None  # nothing imported for a read that does not fail
    assert reader.retryable == retryable_storage_errors()
    assert isinstance(ConnectionError("reset"), reader.retryable)
    assert not isinstance(ValueError("bad event"), reader.retryable)


def test_a_given_list_is_kept() -> None:
    reader = _reader(retryable=[KeyError])
    assert reader.retryable == (KeyError,)
    reader.retryable = (OSError,)
    assert reader.retryable == (OSError,)
