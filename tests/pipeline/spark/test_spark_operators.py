"""Local defaults of the Spark operators: settings for short local jobs, and the upsert job run with
the worker's Python instead of ``spark-submit`` on a local master."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from deltalake import DeltaTable
from support.change_sets import END, write_window
from support.change_sets import interval_context as _context
from support.log_lines import LineLog

from airflow_provider_cdc.core.timestamps import to_micros
from airflow_provider_cdc.placement.spark_submit import (
    LOCAL_SPARK_CONF,
    LocalPythonJob,
    SparkJobError,
    local_conf,
    spark_defaults,
)
from airflow_provider_cdc.targets.delta.target import APP_ID_PREFIX, DeltaLakeTarget


def _spark_connection(monkeypatch, conn_id: str, host: str) -> str:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "spark", "host": host}))
    return conn_id


def test_local_conf_adds_short_job_settings_the_user_did_not_set() -> None:
    assert local_conf(None) == LOCAL_SPARK_CONF
    assert LOCAL_SPARK_CONF["spark.ui.enabled"] == "false"
    mine = {"spark.ui.enabled": "true", "spark.executor.memory": "2g"}
    merged = local_conf(mine)
    assert merged["spark.ui.enabled"] == "true" and merged["spark.executor.memory"] == "2g"
    assert merged["spark.driver.extraJavaOptions"] == LOCAL_SPARK_CONF["spark.driver.extraJavaOptions"]
    assert mine == {"spark.ui.enabled": "true", "spark.executor.memory": "2g"}  # not modified


@pytest.mark.parametrize(
    ("host", "local"), [("local[2]", True), (None, True), ("yarn", False), ("spark://cluster:7077", False)]
)
def test_spark_defaults_apply_to_local_masters_only_and_restore_the_operator(
    monkeypatch, host: str | None, local: bool
) -> None:
    conn_id = "spark_default" if host is None else "spark_under_test"
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)  # the worker's own Python is the default
    if host is None:
        monkeypatch.delenv(f"AIRFLOW_CONN_{conn_id.upper()}", raising=False)
    else:
        _spark_connection(monkeypatch, conn_id, host)
    op = SparkSubmitOperator(task_id="job", application="job.py", conn_id=conn_id,
                             conf={"spark.sql.shuffle.partitions": "4"}, env_vars={"A": "1"})
    with spark_defaults(op, conn_id) as master:
        hook = op._get_hook()
        command = hook._build_spark_submit_command(op.application)
        settings = dict(
            command[i + 1].split("=", 1) for i, word in enumerate(command) if word == "--conf"
        )
        assert settings["spark.sql.shuffle.partitions"] == "4"
        if local:
            assert master.startswith("local")
            assert settings["spark.ui.enabled"] == "false"
            assert "-XX:TieredStopAtLevel=1" in settings["spark.driver.extraJavaOptions"]
            assert op.env_vars["PYSPARK_PYTHON"] == sys.executable and op.env_vars["A"] == "1"
        else:
            assert master == host
            assert "spark.ui.enabled" not in settings and "spark.driver.extraJavaOptions" not in settings
    assert op.conf == {"spark.sql.shuffle.partitions": "4"} and op.env_vars == {"A": "1"}


def test_spark_defaults_take_a_master_already_looked_up(monkeypatch) -> None:
    from airflow_provider_cdc.placement import spark_submit as _spark

    looked_up: list[str] = []
    monkeypatch.setattr(_spark, "connection_master", lambda conn_id: looked_up.append(conn_id) or "yarn")
    op = SparkSubmitOperator(task_id="job", application="job.py", conn_id="spark_cluster")
    with spark_defaults(op, "spark_cluster", "yarn") as master:
        assert master == "yarn" and not op.conf  # a cluster gets no local settings
    assert looked_up == []
    with spark_defaults(op, "spark_cluster") as master:
        assert master == "yarn"
    assert looked_up == ["spark_cluster"]


def _job(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "job.py"
    script.write_text(body)
    return script


def test_local_python_job_runs_with_py_files_and_logs_each_line(tmp_path: Path) -> None:
    shipped = tmp_path / "deps.zip"
    with zipfile.ZipFile(shipped, "w") as archive:
        archive.writestr("shipped_module.py", "GREETING = 'hello from the zip'\n")
    script = _job(tmp_path, "import os, sys, shipped_module\n"
                            "print(shipped_module.GREETING)\n"
                            "print('args', sys.argv[1:])\n"
                            "print('env', os.environ['WINDOW'])\n"
                            "print('python', sys.executable)\n")
    job = LocalPythonJob(str(script), ["--window", 7], env={"WINDOW": "w1"}, py_files=f" {shipped} ")
    log = LineLog()
    job.run(log)
    assert "hello from the zip" in log.lines
    assert "args ['--window', '7']" in log.lines
    assert "env w1" in log.lines
    assert f"python {sys.executable}" in log.lines


def test_local_python_job_uses_the_pyspark_python_it_is_given(tmp_path: Path) -> None:
    script = _job(tmp_path, "print('ran')\n")
    job = LocalPythonJob(str(script), [], env={"PYSPARK_PYTHON": "/opt/other/python3"})
    assert job.command[0] == "/opt/other/python3"
    driver = LocalPythonJob(str(script), [], env={"PYSPARK_PYTHON": "/a", "PYSPARK_DRIVER_PYTHON": "/b"})
    assert driver.command[0] == "/b"


def test_local_python_job_failure_raises_with_the_last_output(tmp_path: Path) -> None:
    script = _job(tmp_path, "import sys\nfor i in range(100):\n    print('line', i)\n"
                            "print('error: the change set has no manifest', file=sys.stderr)\nsys.exit(3)\n")
    with pytest.raises(SparkJobError, match="exited with status 3") as info:
        LocalPythonJob(str(script), []).run(LineLog())
    message = str(info.value)
    assert "error: the change set has no manifest" in message and "line 99" in message
    assert "line 0\n" not in message  # only the last lines


def test_local_python_job_kill_stops_a_running_job(tmp_path: Path) -> None:
    script = _job(tmp_path, "import time\nprint('started', flush=True)\ntime.sleep(120)\n")
    job = LocalPythonJob(str(script), [])
    log = LineLog()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            job.run(log)
        except SparkJobError as error:
            errors.append(error)

    runner = threading.Thread(target=run)
    began = time.monotonic()
    runner.start()
    while "started" not in log.lines and time.monotonic() - began < 30:
        time.sleep(0.05)
    job.kill()
    runner.join(timeout=30)
    assert not runner.is_alive() and time.monotonic() - began < 60
    assert errors and "exited with status" in str(errors[0])


def test_upsert_operator_runs_locally_wherever_its_driver_would_run_here(monkeypatch) -> None:
    from airflow_provider_cdc.placement.spark_submit import connection_master
    from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator

    def operator(conn_id: str, **kwargs: object) -> SparkUpsertWindowOperator:
        roots = {"changeset_root": "/c", "lake_root": "/l"}
        return SparkUpsertWindowOperator(task_id="upsert", locations=roots, pipeline_id="shop",
                                         conn_id=conn_id, **kwargs)

    def runs_locally(op: SparkUpsertWindowOperator) -> bool:
        return op.runs_locally(connection_master(op.spark_conn_id))

    assert runs_locally(operator(_spark_connection(monkeypatch, "spark_here", "local[*]")))
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    assert runs_locally(operator("spark_default"))  # the default connection undefined: local defaults
    assert not runs_locally(operator("spark_here", local_python=False))
    # client deploy mode: the driver would run on this worker, and the job starts no Spark
    assert runs_locally(operator(_spark_connection(monkeypatch, "spark_yarn", "yarn")))
    assert runs_locally(operator(_spark_connection(monkeypatch, "spark_cluster", "spark://h:7077")))
    assert not runs_locally(operator("spark_yarn", deploy_mode="cluster"))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_K8S", json.dumps(
        {"conn_type": "spark", "host": "k8s://https://k8s.example:6443", "extra": {"deploy-mode": "cluster"}}
    ))
    assert not runs_locally(operator("spark_k8s"))


def test_a_named_spark_connection_that_is_not_defined_fails_at_once(monkeypatch) -> None:
    from airflow_provider_cdc._compat import AirflowFailException
    from airflow_provider_cdc.placement.spark_submit import connection_master

    monkeypatch.delenv("AIRFLOW_CONN_SPARK_NOWHERE", raising=False)
    with pytest.raises(AirflowFailException, match="'spark_nowhere'.*not defined.*spark://HOST:7077"):
        connection_master("spark_nowhere")


def test_the_master_is_resolved_as_spark_submit_resolves_it(monkeypatch) -> None:
    from airflow_provider_cdc.placement.spark_submit import connection_master

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_PORTED", json.dumps(
        {"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077}
    ))
    assert connection_master("spark_ported") == "spark://127.0.0.1:7077"
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_URI", "spark://10.0.0.1:7077")
    assert connection_master("spark_uri") == "spark://10.0.0.1:7077"


def test_upsert_operator_applies_a_window_without_spark_submit(tmp_path: Path, monkeypatch, capfd) -> None:
    from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator

    write_window(tmp_path / "changesets")
    lake = tmp_path / "lake"
    op = SparkUpsertWindowOperator(
        task_id="upsert", conn_id=_spark_connection(monkeypatch, "spark_here", "local[*]"),
        locations={"changeset_root": str(tmp_path / "changesets"), "lake_root": str(lake)},
        pipeline_id="shop",
    )
    op.render_template_fields(_context())

    def no_spark_submit(*args: object, **kwargs: object) -> None:
        raise AssertionError("spark-submit must not run on a local master with local_python")

    monkeypatch.setattr(SparkSubmitOperator, "execute", no_spark_submit)
    applied = op.execute(_context())
    output = capfd.readouterr().out
    # what the commit takes: per table the Delta version that holds the window, named by its location
    assert (applied["target"], applied["window"], applied["location"]) == ("delta", to_micros(END), str(lake))
    assert [(t["table"], t["version"]) for t in applied["tables"]] == [("Customers", 0), ("Orders", 0)]
    assert applied["names"]["Orders"]["uri"] == f"file://{lake}/Orders"
    assert "no spark-submit" in output
    # The job's summary line reaches the task log: one JSON object with sorted keys.
    summaries = re.findall(r'\{"changeset".*?"tables_applied": (\[[^\]]*\])', output)
    assert summaries and json.loads(summaries[-1]) == ["Customers", "Orders"]
    rows = DeltaLakeTarget(str(lake)).read_table("Orders").to_pylist()
    assert sorted(row["OrderId"] for row in rows) == [f"o{i}" for i in range(5)]
    version = DeltaTable(str(lake / "Orders")).version()
    op.execute(_context())  # the applied window again: no new Delta commit
    assert DeltaTable(str(lake / "Orders")).version() == version
    assert DeltaTable(str(lake / "Orders")).transaction_version(APP_ID_PREFIX + "shop") == to_micros(END)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("airflow_provider_cdc.operators._spark", "airflow_provider_cdc.placement.spark_submit"),
        ("airflow_provider_cdc.operators._dataproc", "airflow_provider_cdc.placement.dataproc.run"),
        ("airflow_provider_cdc.spark_connect.session", "airflow_provider_cdc.placement.connect.session"),
        ("airflow_provider_cdc.spark_connect.jobs", "airflow_provider_cdc.placement.connect.jobs"),
        ("airflow_provider_cdc.spark_connect.server", "airflow_provider_cdc.placement.connect.server"),
        ("airflow_provider_cdc.dataproc.placement", "airflow_provider_cdc.placement.dataproc.resources"),
        ("airflow_provider_cdc.hooks.dataproc", "airflow_provider_cdc.placement.dataproc.hook"),
        ("airflow_provider_cdc.job_archive", "airflow_provider_cdc.placement.job_archive"),
    ],
)
def test_the_old_import_paths_of_the_placement_modules_are_those_modules(old: str, new: str) -> None:
    """DAGs, plugins and patches that name an old path reach the very module that moved (its private
    names and its patched attributes too)."""
    import importlib

    assert importlib.import_module(old) is importlib.import_module(new)


def test_the_job_archive_still_ships_the_packages_modules() -> None:
    from airflow_provider_cdc.placement.job_archive import PACKAGE_DIR, job_modules, shipped_modules

    assert (PACKAGE_DIR / "core" / "window.py") in shipped_modules()
    assert (PACKAGE_DIR / "targets" / "delta" / "upsert_job.py") in job_modules()
    assert all(path.is_file() for path in job_modules())


def test_the_job_archive_runs_the_jobs_where_the_provider_is_not_installed(tmp_path: Path) -> None:
    """On Dataproc the jobs import only the archive: each job module imports from it alone."""
    import subprocess
    import sys

    from airflow_provider_cdc.placement.job_archive import build_job_archive

    archive = build_job_archive(tmp_path)
    code = (
        "import sys\n"
        f"sys.path.insert(0, {archive!r})\n"
        # the installed package is out of reach: its editable finder and its checkout leave the path
        "sys.meta_path = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
        f"sys.path = [p for p in sys.path if p.rstrip('/') != {str(Path(__file__).parents[3])!r}]\n"
        "import airflow_provider_cdc.merge.job, airflow_provider_cdc.targets.delta.upsert_job as job\n"
        "print(job.__file__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(archive), done.stdout
