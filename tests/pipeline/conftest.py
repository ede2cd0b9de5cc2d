"""Fixtures of the pipeline tests: a metastore whose leases and timings follow a clock the test moves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.clock import ManualClock

from airflow_provider_cdc.metastore import Metastore


@pytest.fixture
def clock() -> ManualClock:
    """The metastore's clock, from 0 µs; a module that starts it elsewhere overrides this fixture."""
    return ManualClock()


@pytest.fixture
def store(metastore_url: str, clock: ManualClock) -> Iterator[Metastore]:
    """A metastore (schema made) whose leases and timings follow ``clock``, which only the test moves."""
    metastore = Metastore(metastore_url, clock=clock)
    metastore.create_schema()
    yield metastore
    metastore.dispose()
