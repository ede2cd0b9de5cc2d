"""Shared pytest fixtures."""

from __future__ import annotations

# =============================================================================================
# Change-stream emulator fixtures (the real google-cloud-spanner client against the emulator)
# =============================================================================================
import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

import pytest

EMULATOR_EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
EMULATOR_PROJECT = "test-project"
EMULATOR_INSTANCE = "test-instance"
_database_ids = itertools.count(1)


def _start_emulator(**kwargs: Any) -> Any:
    from airflow_provider_cdc.testing.spanner_emulator import ManualClock, SpannerEmulator

    kwargs.setdefault("clock", ManualClock(EMULATOR_EPOCH))
    kwargs.setdefault("seed", 7)
    emulator = SpannerEmulator(**kwargs)
    emulator.start()
    return emulator


def emulator_client(host: str) -> Any:
    """A ``google-cloud-spanner`` client for the emulator at ``host``.

    The client reads ``SPANNER_EMULATOR_HOST`` when it is constructed; it is set for that moment
    only, so clients of several emulators can coexist in one process.
    """
    from google.cloud.spanner_v1 import Client

    previous = os.environ.get("SPANNER_EMULATOR_HOST")
    os.environ["SPANNER_EMULATOR_HOST"] = host
    try:
        return Client(project=EMULATOR_PROJECT, disable_builtin_metrics=True)
    finally:
        if previous is None:
            os.environ.pop("SPANNER_EMULATOR_HOST", None)
        else:
            os.environ["SPANNER_EMULATOR_HOST"] = previous


def create_emulator_instance(client: Any) -> Any:
    instance = client.instance(
        EMULATOR_INSTANCE,
        configuration_name=f"projects/{EMULATOR_PROJECT}/instanceConfigs/emulator-config",
        node_count=1,
    )
    instance.create().result(30)
    return instance


@pytest.fixture(scope="session")
def spanner_emulator() -> Iterator[Any]:
    """One emulator for the session: manual clock from 2026-01-01, seed 7, two initial partitions.

    Tests that need another configuration start their own emulator. Tests share the clock: they
    read ``emulator.clock.now()`` and never assume an absolute time.
    """
    emulator = _start_emulator(initial_partitions=2)
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture(scope="session")
def spanner_instance(spanner_emulator: Any) -> Any:
    """The instance ``test-instance`` on the session emulator, created through the client."""
    return create_emulator_instance(emulator_client(spanner_emulator.host))


@pytest.fixture(scope="session")
def new_spanner_database(spanner_instance: Any) -> Callable[[Sequence[str]], Any]:
    """Factory: a fresh database with the given DDL on the session emulator."""

    def create(ddl: Sequence[str], prefix: str = "db") -> Any:
        database = spanner_instance.database(f"{prefix}{next(_database_ids)}", ddl_statements=list(ddl))
        database.create().result(30)
        return database

    return create


@pytest.fixture(scope="session")
def emulator_instance() -> Callable[[Any], Any]:
    """Factory: the instance ``test-instance`` on a given (extra) emulator."""

    def create(emulator: Any) -> Any:
        return create_emulator_instance(emulator_client(emulator.host))

    return create


@pytest.fixture
def start_emulator() -> Iterator[Callable[..., Any]]:
    """Factory: start an extra emulator (stopped after the test); keyword arguments as the constructor's."""
    started: list[Any] = []

    def start(**kwargs: Any) -> Any:
        emulator = _start_emulator(**kwargs)
        started.append(emulator)
        return emulator

    yield start
    for emulator in started:
        emulator.stop()


# =============================================================================================
# Metastore fixtures: a SQLite file per test and, when CDC_TEST_POSTGRES_URL points at a
# reachable server, a freshly created PostgreSQL database per test (dropped afterwards).
# =============================================================================================
import uuid  # noqa: E402


@pytest.fixture
def sqlite_url(tmp_path: Any) -> str:
    """URL of a new SQLite metastore file in the test's temporary directory."""
    return f"sqlite:///{tmp_path / 'metastore.db'}"


@pytest.fixture(scope="session")
def _postgres_server_url() -> str:
    """``CDC_TEST_POSTGRES_URL`` once the server answers; skips PostgreSQL tests otherwise."""
    import sqlalchemy as sa

    url = os.environ.get("CDC_TEST_POSTGRES_URL", "").strip()
    if not url:
        pytest.skip("CDC_TEST_POSTGRES_URL is not set: PostgreSQL metastore tests need a server")
    shown = sa.engine.make_url(url).render_as_string(hide_password=True)
    engine = sa.create_engine(url, connect_args={"connect_timeout": 5}, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except Exception as exc:  # any driver or network failure means: no server to test against
        pytest.skip(f"PostgreSQL at {shown} is unreachable: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    finally:
        engine.dispose()
    return url


@pytest.fixture
def postgres_url(_postgres_server_url: str) -> Iterator[str]:
    """URL of a new, uniquely named PostgreSQL database, dropped after the test."""
    import sqlalchemy as sa

    server = sa.engine.make_url(_postgres_server_url)
    name = f"cdc_test_{os.getpid()}_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    quoted = admin.dialect.identifier_preparer.quote(name)
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {quoted}"))
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)"))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def metastore_url(request: pytest.FixtureRequest) -> str:
    """A fresh metastore database URL, once per supported backend."""
    return request.getfixturevalue(f"{request.param}_url")
