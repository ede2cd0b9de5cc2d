"""Every command and DAG file the documentation includes runs, or is checked against what it names.

The pages include their commands from ``docs/snippets/`` (and DAGs from ``example_dags/``). Each snippet
is run here against a scratch Airflow home, lake or emulator; those that take minutes, install packages
or need another virtualenv (the demo, the whole suite, ``pip install``, Airflow 2.11, the benchmarks) are
checked against the scripts, extras and options they name.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from snippet_support import (
    ROOT,
    SNIPPET_PORT,
    SNIPPETS,
    free_port,
    long_options,
    run_snippet,
    shell_words,
    shop_emulator,
    snippet_commands,
    snippet_env,
)

__all__ = ["shop_emulator"]  # a fixture, used by name

E2E = os.environ.get("CDC_E2E_TESTS") == "1"
needs_e2e = pytest.mark.skipif(not E2E, reason="runs a whole window or a Spark server: CDC_E2E_TESTS=1")

#: snippet → the test that runs it (``run``) or checks it (``checked``)
EXERCISED = {
    "shop.sql": "run",
    "own_emulator.sh": "run",
    "own_clock.sh": "run",
    "own_rows.py": "run",
    "shop_pipeline.py": "run",  # parsed in a DagBag (test_own_dag.py)
    "own_pipeline.sh": "run",
    "diagnose.sh": "run",
    "check.sh": "run",
    "repair.sh": "run",
    "deferred_latest.sh": "run",
    "dataproc_connection.sh": "run",
    "emulator_demo.sh": "run",
    "spark_connect.sh": "run",
    "composer/metastore_secret.sh": "run",
    "composer/dataproc_cluster.sh": "run",
    "demo.sh": "checked",
    "test_commands.sh": "checked",
    "install.sh": "checked",
    "airflow2_backfill.sh": "checked",
    "docs_build.sh": "checked",
    "benchmarks/apply_window_deferred.sh": "checked",
    "benchmarks/datastream_read.sh": "checked",
    "benchmarks/tablestore_read.sh": "checked",
}


def _output(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n--- stdout\n{done.stdout[-6000:]}\n--- stderr\n{done.stderr[-6000:]}"


def test_every_snippet_is_run_or_checked() -> None:
    files = {str(p.relative_to(SNIPPETS)) for p in SNIPPETS.rglob("*") if p.is_file()}
    assert files == set(EXERCISED), "a snippet under docs/snippets/ that no test runs, or a stale entry"


# ----- your own pipeline: the emulator, the clock, the rows, a window -------------------------------
@pytest.fixture(scope="module")
def clock_moved(shop_emulator: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """``own_clock.sh`` against the running emulator: rows written, the first window over."""
    home = tmp_path_factory.mktemp("clock-home")
    port = shop_emulator.rsplit(":", 1)[1]
    done = run_snippet(SNIPPETS / "own_clock.sh", snippet_env(home), {SNIPPET_PORT: port}, timeout=180)
    assert done.returncode == 0, _output(done)
    return done.stdout


def test_own_schema_clock_and_rows(clock_moved: str) -> None:
    lines = clock_moved.splitlines()
    assert lines[0].startswith("2025-12-31T23:59:00"), clock_moved  # clock show: the --start
    assert lines[1].startswith("2026-01-01T00:01:00"), clock_moved  # clock set
    assert "wrote 2 customers" in clock_moved
    assert lines[-1].startswith("2026-01-01T00:11:00"), clock_moved  # clock advance 10m


def test_check_finds_the_missing_demo_database(shop_emulator: str, tmp_path: Path) -> None:
    """``check.sh`` on the example DAG's defaults against the shop emulator: the preflight's findings."""
    done = run_snippet(SNIPPETS / "check.sh", snippet_env(tmp_path, SPANNER_EMULATOR_HOST=shop_emulator))
    assert done.returncode == 1, _output(done)  # the default database `demo` is not there
    assert "error" in done.stdout and "demo" in done.stdout, _output(done)
    assert "metastore_conn_id" in done.stdout, _output(done)


def test_diagnose_and_repair_on_a_new_metastore(tmp_path: Path) -> None:
    env = snippet_env(tmp_path)
    for command in snippet_commands(SNIPPETS / "diagnose.sh"):
        done = subprocess.run(
            ["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )  # fmt: skip
        if " explain " in command:  # nothing recorded yet: it says so, and how to ask about a window
            said = done.stdout + done.stderr
            assert done.returncode == 2 and "recorded no window yet" in said, _output(done)
        else:
            assert done.returncode == 0, _output(done)
    roots = {"/path/to/lake": str(tmp_path / "lake"), "/path/to/changesets": str(tmp_path / "changesets")}
    done = run_snippet(SNIPPETS / "repair.sh", env, roots)
    assert done.returncode == 0 and "holds the windows the metastore applied" in done.stdout, _output(done)


@needs_e2e
def test_own_pipeline_runs_a_window(clock_moved: str, shop_emulator: str, tmp_path: Path) -> None:
    """``own_pipeline.sh``: check, one window of the example DAG on the shop schema, status, tables."""
    port = shop_emulator.rsplit(":", 1)[1]
    env = snippet_env(tmp_path)
    done = run_snippet(SNIPPETS / "own_pipeline.sh", env, {SNIPPET_PORT: port}, timeout=900)
    assert done.returncode == 0, _output(done)
    assert "Customers: 2 rows" in done.stdout and "Orders: 1 rows" in done.stdout, _output(done)
    done = run_snippet(SNIPPETS / "diagnose.sh", env)
    assert done.returncode == 0 and "applied" in done.stdout, _output(done)


# ----- the command line on a lake ---------------------------------------------------------------------
def _deferred_lake(lake: Path) -> None:
    """A Delta table ``Orders`` with two windows pending (deferred apply), pipeline ``orders``."""
    from airflow_provider_cdc.changesets.writer import Change, change_set_table
    from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

    types = [
        {"name": "ID", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
        {"name": "Name", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2},
    ]
    base = datetime(2026, 1, 1, tzinfo=timezone.utc)
    target = DeltaLakeTarget(str(lake), apply_mode="deferred")
    for n in (1, 2):
        at = base + timedelta(minutes=10 * n)
        changes = [Change({"ID": n}, "UPSERT", f"{n:016X}/{0:016X}", at, {"Name": f"name {n}"})]
        version = (at - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1)
        target.apply_change_set("Orders", change_set_table(types, changes), types, "orders", version)


def test_latest_and_compact(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    _deferred_lake(lake)
    done = run_snippet(
        SNIPPETS / "deferred_latest.sh", snippet_env(tmp_path), {"/path/to/lake": str(lake),
        "orders.parquet": str(tmp_path / "orders.parquet")},
    )  # fmt: skip
    assert done.returncode == 0, _output(done)
    import pyarrow.parquet as pq

    assert sorted(pq.read_table(tmp_path / "orders.parquet").column("ID").to_pylist()) == [1, 2]


# ----- connections, the emulator's demo, Spark Connect ----------------------------------------------
def test_dataproc_connection(tmp_path: Path) -> None:
    """The exported ``dataproc`` connection is one the Dataproc steps accept."""
    check = (
        "from airflow_provider_cdc._compat import BaseHook\n"
        "from airflow_provider_cdc.dataproc.placement import DataprocPlacement\n"
        "conn = BaseHook.get_connection('dataproc_jobs')\n"
        "assert conn.conn_type == 'dataproc', conn.conn_type\n"
        "p = DataprocPlacement.from_connection('dataproc_jobs', conn.extra_dejson)\n"
        "print(p.project_id, p.region, p.cluster_name, p.staging_uri)\n"
    )
    script = (SNIPPETS / "dataproc_connection.sh").read_text() + f"\npython - <<'PY'\n{check}PY\n"
    done = subprocess.run(
        ["bash", "-e", "-c", script], cwd=ROOT, env=snippet_env(tmp_path), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, _output(done)
    assert "my-project us-central1 cdc gs://my-bucket/dataproc" in done.stdout, _output(done)


def test_emulator_demo_starts(tmp_path: Path) -> None:
    (command,) = snippet_commands(SNIPPETS / "emulator_demo.sh")
    log = tmp_path / "log"
    with log.open("w") as out:
        process = subprocess.Popen(
            ["bash", "-c", "exec " + command.replace(SNIPPET_PORT, str(free_port()))], cwd=tmp_path,
            env=snippet_env(tmp_path), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        import time

        deadline = time.monotonic() + 180
        while "serving on" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        assert (tmp_path / "truth.json").exists(), log.read_text()
    finally:
        process.terminate()
        process.wait(timeout=30)


@needs_e2e
def test_spark_connect_start_status_stop(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        if sock.connect_ex(("127.0.0.1", 15002)) == 0:
            pytest.skip("port 15002, which the snippet names, is taken")
    env = snippet_env(tmp_path, CDC_SPARK_CONNECT_HOME=str(tmp_path / "spark-connect"))
    done = run_snippet(SNIPPETS / "spark_connect.sh", env, timeout=600)
    assert done.returncode == 0, _output(done)
    assert "running: sc://127.0.0.1:15002" in done.stdout and "stopped" in done.stdout, _output(done)


# ----- Cloud Composer: gcloud replaced by a stand-in that records its arguments ---------------------
@pytest.fixture
def gcloud(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / "gcloud"
    stand_in.write_text(
        '#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$GCLOUD_RECORD.args"\n'
        'if [ "$*" = "${*%--data-file=-}" ]; then : ; else cat > "$GCLOUD_RECORD.stdin"; fi\n'
    )
    stand_in.chmod(0o755)
    return bin_dir


def _gcloud(snippet: str, gcloud: Path, tmp_path: Path) -> tuple[list[str], str]:
    env = snippet_env(tmp_path, GCLOUD_RECORD=str(tmp_path / "gcloud"))
    env["PATH"] = f"{gcloud}{os.pathsep}{env['PATH']}"
    done = run_snippet(SNIPPETS / "composer" / snippet, env)
    assert done.returncode == 0, _output(done)
    stdin = tmp_path / "gcloud.stdin"
    return (tmp_path / "gcloud.args").read_text().splitlines(), stdin.read_text() if stdin.exists() else ""


def test_composer_metastore_secret(gcloud: Path, tmp_path: Path) -> None:
    from sqlalchemy.engine import make_url

    from airflow_provider_cdc.connection_forms import CONNECTION_FORMS

    args, stdin = _gcloud("metastore_secret.sh", gcloud, tmp_path)
    assert args == ["secrets", "create", "airflow-connections-cdc_metastore_default", "--data-file=-"]
    secret = json.loads(stdin)  # Airflow's Secret Manager backend reads a connection as this JSON
    assert secret["conn_type"] in {form.connection_type for form in CONNECTION_FORMS}
    assert make_url(secret["extra"]["sqlalchemy_url"]).drivername == "postgresql+psycopg2"


def test_composer_dataproc_cluster_pins_the_locked_versions(gcloud: Path, tmp_path: Path) -> None:
    args, _ = _gcloud("dataproc_cluster.sh", gcloud, tmp_path)
    assert args[:4] == ["dataproc", "clusters", "create", "cdc"]
    packages = args[args.index("--properties") + 1].split("=", 1)[1].split(",")
    lock = (ROOT / "requirements" / "airflow3.lock").read_text()
    for package in packages:
        assert re.search(rf"(?m)^{re.escape(package)}\b", lock), f"{package} is not the locked version"


# ----- checked: the demo, the suite, install, Airflow 2.11, the docs build, benchmarks ---------------
def test_demo_variants_are_the_scripts() -> None:
    script = (ROOT / "scripts" / "demo.sh").read_text()
    modes = set(re.findall(r'if \[ "\$\{1:-\}" = ([a-z-]+) \]', script))
    for command in snippet_commands(SNIPPETS / "demo.sh"):
        words = shell_words(command)
        assert words[words.index("bash") + 1] == "scripts/demo.sh", command
        rest = words[words.index("scripts/demo.sh") + 1 :]
        assert not rest or rest[0] in modes or rest[0].isdigit(), f"{command}: demo.sh has modes {modes}"
        for word in words[: words.index("bash")]:
            assert word.split("=")[0] in script, f"{command}: demo.sh does not read {word}"


def test_test_commands_are_the_scripts() -> None:
    script = (ROOT / "scripts" / "test.sh").read_text()
    for command in snippet_commands(SNIPPETS / "test_commands.sh"):
        words = shell_words(command)
        assert "scripts/test.sh" in words, command
        for word in words[words.index("scripts/test.sh") + 1 :]:
            assert word in script if word.startswith("--") else (ROOT / word).exists(), command
        for word in words[: words.index("bash")]:
            assert word.split("=")[0] in script, command


def test_install_names_the_defined_extras() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    named: set[str] = set()
    for command in snippet_commands(SNIPPETS / "install.sh"):
        for spec in re.findall(r"\[([a-z,-]+)\]", command):
            named |= set(spec.split(","))
    assert named <= extras
    text = (ROOT / "README.md").read_text()
    for extra in extras:  # the README's install section names every extra
        assert f"`{extra}`" in text, extra


def test_airflow2_backfill_command(tmp_path: Path) -> None:
    commands = snippet_commands(SNIPPETS / "airflow2_backfill.sh")
    backfill = next(c for c in commands if " dags backfill " in c)
    assert shell_words(backfill)[-1] in {p.stem for p in (ROOT / "example_dags").glob("*.py")}
    airflow2 = ROOT / ".venv-airflow2" / "bin" / "airflow"
    if not airflow2.exists():
        pytest.skip("the Airflow 2.11 virtualenv (.venv-airflow2) is not set up")
    done = subprocess.run(
        [str(airflow2), "dags", "backfill", "--help"], capture_output=True, text=True, timeout=300,
        env={**os.environ, "AIRFLOW_HOME": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 0, _output(done)
    for option in ["-s", "-e", "--reset-dagruns", "-y"]:
        assert re.search(rf"(?<![\w-]){re.escape(option)}\b", done.stdout), option


def test_docs_build_commands() -> None:
    for command in snippet_commands(SNIPPETS / "docs_build.sh"):
        words = shell_words(command)
        assert (ROOT / words[0]).name in {"mkdocs", "python"}, command
        assert (Path(sys.executable).parent / Path(words[0]).name).exists(), command
        for word in words[1:]:
            assert not word.startswith("tests/") or (ROOT / word).exists(), command


@pytest.mark.parametrize("snippet", sorted(p.name for p in (SNIPPETS / "benchmarks").glob("*.sh")))
def test_benchmark_commands_take_their_options(snippet: str) -> None:
    helps: dict[str, str] = {}
    for command in snippet_commands(SNIPPETS / "benchmarks" / snippet):
        script = next(w for w in shell_words(command) if w.startswith("benchmarks/"))
        if script not in helps:
            done = subprocess.run(
                [sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300
            )  # fmt: skip
            assert done.returncode == 0, _output(done)
            helps[script] = done.stdout
        for option in long_options(command):
            assert option in helps[script], f"{command}: {script} has no {option}"
