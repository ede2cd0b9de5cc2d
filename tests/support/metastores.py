"""A metastore that Airflow finds through a connection, for tests of steps that look it up by id."""

from __future__ import annotations

import json

import pytest

from airflow_provider_cdc.metastore import Metastore


def connected_metastore(monkeypatch: pytest.MonkeyPatch, conn_id: str, url: str) -> Metastore:
    """A metastore at ``url`` (schema made) that the Airflow connection ``conn_id`` names."""
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}",
        json.dumps({"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": url}}),
    )
    metastore = Metastore(url)
    metastore.create_schema()
    return metastore
