"""Data-aware scheduling on Airflow 2.11: the commit's dataset events (through the pipeline's
``DatasetAlias``) reach Airflow's database with their extra and queue the example consumer DAG."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from support.asset_events import PRODUCER_DAG_ID, expected_orders_extra, producer_home
from support.dag_runs import AIRFLOW2_VENV, ON_AIRFLOW2

pytestmark = ON_AIRFLOW2

RUN = """
import json, sys
import airflow
from airflow.models import DagBag
from airflow.models.dataset import DatasetDagRunQueue, DatasetEvent, DatasetModel
from airflow.models.serialized_dag import SerializedDagModel
from airflow.utils.db import upgradedb
from airflow.utils.session import create_session

upgradedb()
bag = DagBag(sys.argv[1], include_examples=False)
assert not bag.import_errors, bag.import_errors
for dag in bag.dags.values():  # what the DAG processor does: the consumer's schedule, the alias
    dag.sync_to_db()
    SerializedDagModel.write_dag(dag)
run = bag.dags[sys.argv[2]].test()
assert run.state == "success", run.state
with create_session() as session:
    events = [
        {"uri": e.dataset.uri, "extra": e.extra, "dag": e.source_dag_id,
         "aliases": [a.name for a in e.source_aliases]}
        for e in session.query(DatasetEvent).order_by(DatasetEvent.id)
    ]
    queued = sorted(
        (q.target_dag_id, session.get(DatasetModel, q.dataset_id).uri)
        for q in session.query(DatasetDagRunQueue)
    )
print(json.dumps({"version": airflow.__version__, "events": events, "queued": queued}))
"""


def test_the_commit_emits_dataset_events_that_queue_the_consumer_on_airflow_2(tmp_path: Path) -> None:
    locations, env = producer_home(tmp_path)
    command = [str(AIRFLOW2_VENV / "bin" / "python"), "-c", RUN, env["AIRFLOW__CORE__DAGS_FOLDER"],
               PRODUCER_DAG_ID]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["version"].startswith("2.11."), report["version"]
    orders = f"file://{locations['lake_root']}/Orders"
    customers = f"file://{locations['lake_root']}/Customers"
    assert [e["uri"] for e in report["events"]] == [customers, orders]
    assert {(e["dag"], tuple(e["aliases"])) for e in report["events"]} == {(PRODUCER_DAG_ID, ("cdc:shop",))}
    assert report["events"][1]["extra"] == expected_orders_extra()
    assert report["queued"] == [["cdc_table_consumer", orders]]
