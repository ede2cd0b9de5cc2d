"""The pipeline pages and connection forms on Airflow 2.11, through the webserver's HTTP responses.

The Airflow 2.11 virtualenv runs ``tests/e2e/airflow2_pages_client.py`` (the webserver app's Flask test
client) against an Airflow home of its own, a metastore of two pipelines recorded through the Metastore
API, and Airflow's failed run of the ``orders`` pipeline's reading window (``airflow dags test``). A user
who may read only the DAG ``orders_to_lake`` sees that pipeline and its failed window's pointer to the
task's log, not ``payments``; another sees only ``payments``; nobody signed in is sent to the login.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from support.dag_runs import AIRFLOW2_VENV, ON_AIRFLOW2

from airflow_provider_cdc.core.timestamps import to_micros
from airflow_provider_cdc.metastore import Metastore
from tests.support.clock import ManualClock
from tests.support.pipeline_pages import T0, record_pipeline

REPO = Path(__file__).resolve().parents[2]
CLIENT = Path(__file__).with_name("airflow2_pages_client.py")

pytestmark = ON_AIRFLOW2

DAG_FILE = '''
from datetime import datetime, timedelta, timezone

from airflow import DAG
from airflow.models.param import Param
from airflow.operators.bash import BashOperator
from airflow.timetables.interval import DeltaDataIntervalTimetable

with DAG(
    "{dag_id}",
    schedule=DeltaDataIntervalTimetable(timedelta(minutes=10)),
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    params={{"pipeline_id": Param("{pipeline}", type="string")}},
):
    BashOperator(task_id="open_window", bash_command="true") >> BashOperator(
        task_id="merge",
        bash_command=(
            "{{% if data_interval_start.minute == 30 %}}echo failed >&2; exit 1{{% else %}}true{{% endif %}}"
        ),
        retries=0,
    )
'''


def _run(args: list[str], env: dict[str, str], log: Path, ok: tuple[int, ...] = (0,)) -> str:
    with log.open("w") as out:
        code = subprocess.run(args, env=env, cwd=env["AIRFLOW_HOME"], stdout=out, stderr=subprocess.STDOUT,
                              timeout=600, check=False).returncode  # fmt: skip
    text = log.read_text(errors="replace")
    assert code in ok, f"{' '.join(args[1:])} exited with {code}:\n{text[-3000:]}"
    return text


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("pipeline-pages-airflow2")
    (root / "dags").mkdir()
    (root / "airflow").mkdir()
    for dag_id, pipeline in (("orders_to_lake", "orders"), ("payments_to_lake", "payments")):
        source = textwrap.dedent(DAG_FILE.format(dag_id=dag_id, pipeline=pipeline))
        (root / "dags" / f"{dag_id}.py").write_text(source)
    metastore_url = f"sqlite:///{root / 'cdc_metastore.db'}"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "CDC_")) and k not in ("VIRTUAL_ENV", "PYTHONPATH")}  # fmt: skip
    env.update(
        AIRFLOW_HOME=str(root / "airflow"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(root / "dags"),
        AIRFLOW_CONN_CDC_METASTORE_DEFAULT=json.dumps(
            {"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": metastore_url}}
        ),
        PATH=os.pathsep.join([str(AIRFLOW2_VENV / "bin"), os.environ.get("PATH", "")]),
        PYTHONWARNINGS="ignore",
    )
    airflow = str(AIRFLOW2_VENV / "bin" / "airflow")
    _run([airflow, "db", "migrate"], env, root / "db-migrate.log")
    _run([airflow, "dags", "reserialize"], env, root / "reserialize.log")
    clock = ManualClock(to_micros(T0))
    store = Metastore(metastore_url, clock=clock)
    store.create_schema()
    orders = record_pipeline(store, clock, "orders")
    record_pipeline(store, clock, "payments", windows=2, last_reading=False, tables={"delta": ["Payments"]})
    store.dispose()
    failed_end = orders.windows[3][1].isoformat()
    _run([airflow, "dags", "test", "orders_to_lake", failed_end], env, root / "run-failed.log", ok=(0, 1))
    output = _run([str(AIRFLOW2_VENV / "bin" / "python"), str(CLIENT), f"sqlite:///{root / 'ui.db'}"],
                  env, root / "client.log")  # fmt: skip
    (line,) = [line for line in output.splitlines() if line.startswith("RESULT ")]
    return json.loads(line[len("RESULT ") :])


def test_each_user_sees_the_pipelines_of_the_dags_they_may_read(seen: dict[str, Any]) -> None:
    assert seen["ana"]["list"] == [200, ["orders"]]
    assert seen["ben"]["list"] == [200, ["payments"]]
    assert seen["admin"]["list"] == [200, ["orders", "payments"]]
    assert seen["ben"]["orders"][0] == 404
    refused = seen["ben"]["orders_text"].replace("&#39;", "'")
    assert "No pipeline 'orders' is run by a DAG you may read." in refused
    assert all(seen[user]["menu"] for user in ("ana", "ben", "admin"))  # Browse → CDC pipelines
    status, location = seen["anonymous"]
    assert status == 302 and "/login/" in location


def test_the_pipeline_page_shows_the_failed_window_and_where_its_error_is(seen: dict[str, Any]) -> None:
    status, states, failures = seen["ana"]["orders"]
    assert status == 200
    assert states == ["failed", "applied", "applied", "applied"]
    ((link, text),) = failures
    assert text == "task merge failed (try 1); the error is in its log"
    assert link.startswith("/dags/orders_to_lake/grid?dag_run_id=") and "task_id=merge" in link
    assert "tab=logs" in link
    page = " ".join(seen["ana"]["orders_text"].split())
    for shown in ("Apply watermarks", "bigquery Orders 2026-01-01 00:30:00", "Units in flight",
                  "token-b running", "reader-1@worker-b", "1 of 2 units done", "Lag when applied",
                  "Change rows per window"):  # fmt: skip
        assert shown in page, shown
    assert seen["bad_page"] == 400 and seen["older_link"] is None  # four windows: one page


def test_connections_saved_from_the_forms_are_read_by_their_hooks(seen: dict[str, Any]) -> None:
    forms = seen["connection_forms"]
    assert all(forms["labels"].values()), forms["labels"]
    assert set(forms["saved"].values()) == {302}, forms["saved"]
    assert forms["metastore_url"].startswith("sqlite:///") and forms["metastore_url"].endswith("/ui.db")
    assert forms["tablestore"] == {
        "endpoint": "https://orders.cn-hangzhou.ots.aliyuncs.com", "instance": "orders",
        "access_key_id": "LTAIid", "access_key_secret": "key-secret", "sts_token": "sts",
    }  # fmt: skip
    assert forms["dataproc"] == [{"spark.executor.cores": "2", "a": "b"}, {"team": "data"}, 600]
