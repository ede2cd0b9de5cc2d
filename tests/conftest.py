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


def emulator_test_instance(host: str) -> Any:
    """The tests' instance ``test-instance`` (``test-project``), created on the emulator at ``host``."""
    from airflow_provider_cdc.testing.emulator_client import emulator_instance

    return emulator_instance(host, EMULATOR_PROJECT, EMULATOR_INSTANCE)


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
    return emulator_test_instance(spanner_emulator.host)


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
    """Factory: the instance ``test-instance`` on a given (extra) emulator, or on one at a ``host:port``."""

    def create(emulator: Any) -> Any:
        return emulator_test_instance(emulator if isinstance(emulator, str) else emulator.host)

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


@pytest.fixture(scope="session")
def google_spanner_emulator() -> Iterator[Any]:
    """Google's Cloud Spanner emulator (``emulator_main``, real clock) on a free loopback port for
    the session, stopped by its PID; skips where the binary is not installed."""
    from airflow_provider_cdc.testing.google_emulator import GoogleEmulatorUnavailable, GoogleSpannerEmulator

    try:
        emulator = GoogleSpannerEmulator()
        emulator.start()
    except GoogleEmulatorUnavailable as error:
        pytest.skip(str(error))
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture(scope="session")
def google_spanner_instance(google_spanner_emulator: Any) -> Any:
    """The instance ``test-instance`` on Google's emulator, created through the client."""
    return emulator_test_instance(google_spanner_emulator.host)


@pytest.fixture(scope="session")
def new_google_database(google_spanner_instance: Any) -> Callable[..., Any]:
    """Factory: a fresh database with the given DDL on Google's emulator."""

    def create(ddl: Sequence[str], prefix: str = "db") -> Any:
        name = f"{prefix}{next(_database_ids)}"
        database = google_spanner_instance.database(name, ddl_statements=list(ddl))
        database.create().result(60)
        return database

    return create


def google_emulator_database(
    host: str, project: str, instance_id: str, database_id: str, ddl: Sequence[str]
) -> Any:
    """Create ``projects/<project>/instances/<instance_id>/databases/<database_id>`` with ``ddl`` on
    Google's emulator at ``host``; returns the database."""
    from airflow_provider_cdc.testing.emulator_client import emulator_instance

    instance = emulator_instance(host, project, instance_id)
    database = instance.database(database_id, ddl_statements=list(ddl))
    database.create().result(60)
    return database


# =============================================================================================
# Metastore fixtures: a SQLite file per test and, when CDC_TEST_POSTGRES_URL points at a
# reachable server, a freshly created PostgreSQL database per test (dropped afterwards).
# =============================================================================================
import uuid  # noqa: E402


@pytest.fixture
def sqlite_url(tmp_path: Any) -> str:
    """URL of a new SQLite metastore file in the test's temporary directory."""
    return f"sqlite:///{tmp_path / 'metastore.db'}"


@pytest.fixture
def spanner_airflow_env(spanner_emulator: Any, monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> str:
    """Airflow's hooks see the session's project emulator and a SQLite metastore; the metastore URL."""
    from support.table_sources import point_airflow_at

    return point_airflow_at(monkeypatch, spanner_emulator.host, sqlite_url)


@pytest.fixture
def google_airflow_env(google_spanner_emulator: Any, monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> str:
    """Airflow's hooks see Google's emulator and a SQLite metastore; the metastore URL."""
    from support.table_sources import point_airflow_at

    return point_airflow_at(monkeypatch, google_spanner_emulator.host, sqlite_url)


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


# =============================================================================================
# Example DAG on Airflow 3: the demo database on an emulator in this process, an Airflow home
# with a migrated SQLite metadata database and the DAG serialized, and the environment every
# Airflow command of the end-to-end tests runs with (tests/e2e/test_example_dag.py).
# =============================================================================================
import json  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from datetime import timedelta  # noqa: E402
from pathlib import Path  # noqa: E402

EXAMPLE_DAGS_FOLDER = Path(__file__).resolve().parents[1] / "example_dags"
EXAMPLE_DAG_WINDOWS = 12
EXAMPLE_DAG_CHANGES_PER_WINDOW = 200


def free_port() -> int:
    """A TCP port nothing listens on at the moment."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class ExampleDagHome:
    """Where the example DAG runs: its Airflow home, data roots and the history it reads."""

    root: Path
    airflow_home: Path
    env: dict[str, str]
    settings: Any  # DemoSettings
    workload: Any  # Workload: the committed history, the ground truth
    metastore_url: str
    api_port: int

    @property
    def demo_home(self) -> Path:
        return self.root / "demo"

    @property
    def lake_root(self) -> Path:
        return self.demo_home / "lake"

    @property
    def changeset_root(self) -> Path:
        return self.demo_home / "changesets"

    @property
    def staging_root(self) -> Path:
        return self.demo_home / "staging"

    @property
    def airflow_db(self) -> Path:
        return self.airflow_home / "airflow.db"

    def dag_runs(self, dag_id: str) -> list[tuple[str, str, datetime, datetime]]:
        """``(run_type, state, data_interval_start, data_interval_end)`` of the DAG's runs, oldest first."""
        import sqlite3

        with sqlite3.connect(f"file:{self.airflow_db}?mode=ro", uri=True, timeout=30) as db:
            rows = db.execute(
                "SELECT run_type, state, data_interval_start, data_interval_end FROM dag_run "
                "WHERE dag_id = ? ORDER BY data_interval_start",
                (dag_id,),
            ).fetchall()

        def utc(text: str) -> datetime:
            return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)

        return [(run_type, state, utc(start), utc(end)) for run_type, state, start, end in rows]

    def airflow(self, *args: str, log: Path, timeout: float = 300.0) -> str:
        """Run an ``airflow`` command; its output goes to ``log`` and is returned; a failure fails."""
        command = [str(Path(sys.executable).parent / "airflow"), *args]
        with log.open("w") as out:
            completed = subprocess.run(
                command, env=self.env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False
            )
        text = log.read_text(errors="replace")
        if completed.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited with {completed.returncode}:\n{text[-4000:]}")
        return text


def spark_connect_connection(port: int) -> str:
    """An Airflow connection (``AIRFLOW_CONN_*`` JSON) to a Spark Connect server on loopback ``port``."""
    return json.dumps({"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": port})


def example_dag_environment(
    root: Path, emulator_host: str, api_port: int, metastore_url: str, spark_connect_port: int | None = None
) -> dict[str, str]:
    """Environment of the Airflow commands and tasks: nothing inherited from this process's Airflow.

    With ``spark_connect_port`` the DAGs' merges run on that Spark Connect server (``spark_default``),
    warm; without it each merge is a cold ``spark-submit`` (the DAGs' default)."""
    inherited = ("AIRFLOW", "CDC_", "SPANNER_EMULATOR", "PYSPARK", "SPARK_")
    env = {key: value for key, value in os.environ.items() if not key.startswith(inherited)}
    env.update(
        AIRFLOW_HOME=str(root / "airflow"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(EXAMPLE_DAGS_FOLDER),
        AIRFLOW__CORE__EXECUTOR="LocalExecutor",
        AIRFLOW__CORE__PARALLELISM="4",
        # The scheduler runs backfills and cleared runs only; it creates no runs of its own.
        AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE="False",
        AIRFLOW__API__PORT=str(api_port),
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{api_port}/execution/",
        AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(free_port()),
        AIRFLOW_CONN_CDC_METASTORE_DEFAULT=json.dumps(
            {"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": metastore_url}}
        ),
        SPANNER_EMULATOR_HOST=emulator_host,
        CDC_DEMO_HOME=str(root / "demo"),
        CDC_WINDOW_MINUTES="10",
        CDC_READERS="2",
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    )
    if spark_connect_port is not None:
        env["AIRFLOW_CONN_SPARK_DEFAULT"] = spark_connect_connection(spark_connect_port)
    return env


@contextmanager
def emulator_dag_home(
    root: Path,
    settings: Any,
    load: Callable[[Any, Any, Path], Any],
    reserialize: bool = True,
    spark_connect_port: int | None = None,
) -> Iterator[ExampleDagHome]:
    """A DAG home in ``root``: a demo database written by ``load(emulator, settings, truth_path)`` (it
    returns the committed history) on an emulator served from this process until the context ends, a
    metastore, a lake and an Airflow 3 home with a migrated metadata database (and the DAGs serialized)."""
    from airflow_provider_cdc.testing.spanner_emulator import ManualClock, SpannerEmulator

    emulator = SpannerEmulator(ManualClock(settings.start - timedelta(minutes=1)))
    host = emulator.start()
    try:
        history = load(emulator, settings, root / "truth.json")
        api_port, metastore_url = free_port(), f"sqlite:///{root / 'cdc_metastore.db'}"
        home = ExampleDagHome(
            root=root,
            airflow_home=root / "airflow",
            env=example_dag_environment(root, host, api_port, metastore_url, spark_connect_port),
            settings=settings,
            workload=history,
            metastore_url=metastore_url,
            api_port=api_port,
        )
        home.airflow_home.mkdir()
        home.airflow("db", "migrate", log=root / "db-migrate.log")
        if reserialize:
            home.airflow("dags", "reserialize", log=root / "dags-reserialize.log")
        yield home
    finally:
        emulator.stop()


@contextmanager
def example_dag_home_at(
    root: Path, windows: int, changes_per_window: int, spark_connect_port: int | None = None
) -> Iterator[ExampleDagHome]:
    """The change-stream example DAG's home in ``root`` (:func:`emulator_dag_home`) over the demo database
    of ``windows`` windows of ``changes_per_window`` changes."""
    from airflow_provider_cdc.testing.demo import DemoSettings, load_demo

    settings = DemoSettings(windows=windows, changes_per_window=changes_per_window)
    with emulator_dag_home(root, settings, load_demo, spark_connect_port=spark_connect_port) as home:
        yield home


@pytest.fixture(scope="session")
def example_dag_home(
    spark_connect_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ExampleDagHome]:
    """The demo database (12 windows, 200 changes each) on an emulator, and an Airflow 3 home for the DAG.

    The emulator serves from this process for the whole session; Airflow commands and tasks run as
    subprocesses with :attr:`ExampleDagHome.env`. Merges run on this process's Spark Connect server
    (the cold ``spark-submit`` path runs end to end in the crash campaign, the Cloud Storage DAG test
    and the Airflow 2.11 tests).
    """
    root = tmp_path_factory.mktemp("example-dag")
    with example_dag_home_at(
        root, EXAMPLE_DAG_WINDOWS, EXAMPLE_DAG_CHANGES_PER_WINDOW, spark_connect_server.port
    ) as home:
        yield home


# =============================================================================================
# Cloud Storage: gcp-storage-emulator on loopback (the JSON API the google-cloud-storage client speaks)
# =============================================================================================
@dataclass
class CloudStorage:
    """A loopback Cloud Storage emulator: ``endpoint`` (``http://host:port``), an anonymous client."""

    endpoint: str

    def client(self) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project="test-project",
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.endpoint},
        )

    def bucket(self, name: str) -> Any:
        client = self.client()
        bucket = client.bucket(name)
        if not bucket.exists():
            bucket = client.create_bucket(name)
        return bucket


@pytest.fixture
def cloud_storage(monkeypatch: pytest.MonkeyPatch) -> Iterator[CloudStorage]:
    """A Cloud Storage emulator for the test; ``STORAGE_EMULATOR_HOST`` points every client at it."""
    server_module = pytest.importorskip("gcp_storage_emulator.server")
    port = free_port()
    server = server_module.create_server("127.0.0.1", port, in_memory=True)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint)
    try:
        yield CloudStorage(endpoint)
    finally:
        server.stop()


# =============================================================================================
# Spark Connect: one local server for the tests that run jobs on it (started on first use)
# =============================================================================================


@pytest.fixture(scope="session")
def spark_connect_server(tmp_path_factory) -> Iterator[Any]:
    """A local Spark Connect server (``local[2]``) on a free loopback port, stopped at the end."""
    from airflow_provider_cdc.spark_connect.server import LocalSparkConnectServer, free_port

    server = LocalSparkConnectServer(tmp_path_factory.mktemp("spark-connect"))
    state = server.start(free_port(), master="local[2]")
    try:
        yield state
    finally:
        server.stop()


# =============================================================================================
# Dataproc fake: its certificate is made at start-up and trusted by this process and its children
# (gRPC reads GRPC_DEFAULT_SSL_ROOTS_FILE_PATH once per process, before its first TLS channel)
# =============================================================================================
import tempfile  # noqa: E402

DATAPROC_FAKE_TLS_DIR = tempfile.mkdtemp(prefix="cdc-dataproc-fake-tls-")


def _trust_dataproc_fake() -> None:
    from airflow_provider_cdc.testing.dataproc_fake.tls import certificate

    roots, _, _ = certificate(DATAPROC_FAKE_TLS_DIR)
    os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(roots)


_trust_dataproc_fake()


@pytest.fixture
def dataproc_fake(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A Cloud Storage fake (bucket ``cdc``, in a child process) and the Dataproc fake running jobs
    against it, with the cluster ``cdc`` in ``test-project``/``us-central1``; the environment sends the
    google provider's Dataproc clients (connection ``google_cloud_dataproc``, anonymous) and every
    storage client of this process to them. Yields ``(dataproc, gcs, key_file)``."""
    import json

    from airflow_provider_cdc.testing.dataproc_fake import FakeDataproc
    from airflow_provider_cdc.testing.gcs_fake import FakeGcsProcess

    with FakeGcsProcess(["cdc"]) as gcs:
        key_file = tmp_path / "service-account.json"
        key_file.write_text(gcs.delta_storage_options()["google_service_account_key"])
        cluster_env = {"STORAGE_EMULATOR_HOST": gcs.endpoint, "GOOGLE_SERVICE_ACCOUNT": str(key_file)}
        with FakeDataproc(
            gcs.endpoint, output_bucket="cdc", cluster_env=cluster_env, certificate_dir=DATAPROC_FAKE_TLS_DIR
        ) as dataproc:
            dataproc.create_cluster(EMULATOR_PROJECT, "us-central1", "cdc")
            for name, value in {**dataproc.client_environ(), **cluster_env}.items():
                monkeypatch.setenv(name, value)
            monkeypatch.setenv(
                "AIRFLOW_CONN_GOOGLE_CLOUD_DATAPROC",
                json.dumps({"conn_type": "google_cloud_platform", "extra": {"is_anonymous": True}}),
            )
            yield dataproc, gcs, key_file


def dataproc_connection(cluster: str | None = "cdc", **extra: Any) -> str:
    """A ``dataproc`` Spark connection (JSON) on the fake: the cluster ``cluster`` or, with ``None``,
    Serverless batches; job files staged under ``gs://cdc/dataproc``."""
    import json

    fields = {
        "project_id": EMULATOR_PROJECT,
        "region": "us-central1",
        "staging_uri": "gs://cdc/dataproc",
        "gcp_conn_id": "google_cloud_dataproc",
        **({"cluster_name": cluster} if cluster else {}),
        **extra,
    }
    return json.dumps({"conn_type": "dataproc", "extra": fields})
