"""Metastores of tests: on a clock the test moves (the fixtures ``clock`` and ``store``, which a test
module imports and names in its ``__all__``), and one Airflow finds through a connection."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from airflow_provider_cdc.metastore import Metastore
from support.clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    """The metastore's clock, from 0 µs; a module that starts it elsewhere defines its own."""
    return ManualClock()


@pytest.fixture
def store(metastore_url: str, clock: ManualClock) -> Iterator[Metastore]:
    """A metastore (schema made) whose leases and timings follow ``clock``, which only the test moves."""
    metastore = Metastore(metastore_url, clock=clock)
    metastore.create_schema()
    yield metastore
    metastore.dispose()


def connected_metastore(monkeypatch: pytest.MonkeyPatch, conn_id: str, url: str) -> Metastore:
    """A metastore at ``url`` (schema made) that the Airflow connection ``conn_id`` names."""
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}",
        json.dumps({"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": url}}),
    )
    metastore = Metastore(url)
    metastore.create_schema()
    return metastore
