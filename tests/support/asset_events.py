"""A window applied to a Delta lake and open in a metastore, ready for the commit, and a DAG folder
whose commit task emits the tables' asset events beside the example consumer DAG: the asset event
tests on Airflow 3 (tests/pipeline/test_asset_events.py) and 2.11 (tests/e2e/test_asset_events_airflow2.py).
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow_provider_cdc.changesets.reader import ChangeSetReader
from airflow_provider_cdc.changesets.writer import Change, change_set_table, write_change_set
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore

EXAMPLE_DAGS = Path(__file__).resolve().parents[2] / "example_dags"
PIPELINE = "shop"
START = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
END = START + timedelta(minutes=10)
WINDOW = Window(START, END)
PRODUCER_DAG_ID = "cdc_assets_producer"

PRODUCER = """
from datetime import datetime, timezone

try:
    from airflow.sdk import DAG
except ImportError:
    from airflow import DAG

from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator, table_asset_outlets

with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
    CdcCommitWindowOperator(
        task_id="commit",
        outlets=table_asset_outlets({pipeline!r}),
        pipeline_id={pipeline!r},
        window_start={start!r},
        window_end={end!r},
        locations={locations!r},
    )
"""


def window_in_lake(root: Path, metastore_url: str) -> dict[str, str]:
    """A change set of the window (2 Orders rows, 1 Customers row) applied to Delta under ``root``,
    the window open in the metastore; returns the commit's ``locations``."""
    from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

    types = [
        {"name": "Id", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
        {"name": "Name", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2},
    ]

    def changes(n: int) -> list[Change]:
        return [Change({"Id": i}, "UPSERT", f"{i:016X}", START, {"Name": "n"}) for i in range(n)]

    changeset = root / "changesets" / WINDOW.window_id
    write_change_set(str(changeset), {"Orders": change_set_table(types, changes(2)),
                                      "Customers": change_set_table(types, changes(1))})
    lake = DeltaLakeTarget(str(root / "lake"), apply_mode="immediate")
    for table in ChangeSetReader(str(changeset)).tables():
        lake.apply_window(table, PIPELINE, WINDOW)
    store = Metastore(metastore_url)
    store.create_schema()
    store.open_window(PIPELINE, "OrdersStream", START, END)
    return {"changeset_root": str(root / "changesets"), "lake_root": str(root / "lake")}


def producer_home(root: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The window in a lake under ``root``, a DAG folder with the producer DAG and the example consumer
    DAG (scheduled on ``{lake_root}/Orders``), and the environment of an Airflow home there with
    nothing inherited; returns ``(locations, environment)``."""
    metastore_url = f"sqlite:///{root / 'cdc_metastore.db'}"
    locations = window_in_lake(root, metastore_url)
    dags = root / "dags"
    dags.mkdir()
    (dags / "producer.py").write_text(PRODUCER.format(
        dag_id=PRODUCER_DAG_ID, pipeline=PIPELINE, start=START.isoformat(), end=END.isoformat(),
        locations=locations,
    ))
    shutil.copy(EXAMPLE_DAGS / "cdc_table_consumer.py", dags / "cdc_table_consumer.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "CDC_"))}
    env.update(
        AIRFLOW_HOME=str(root / "airflow"),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",  # a paused consumer is not queued
        AIRFLOW_CONN_CDC_METASTORE_DEFAULT=json.dumps(
            {"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": metastore_url}}
        ),
        CDC_CONSUMER_LAKE_ROOT=locations["lake_root"],
    )
    return locations, env


def expected_orders_extra() -> dict[str, object]:
    """The extra of the Orders table's event for the window."""
    return {
        "window_start": "2026-03-01T12:00:00.000000Z",
        "window_end": "2026-03-01T12:10:00.000000Z",
        "window_id": WINDOW.window_id,
        "target": "delta",
        "table": "Orders",
        "watermark": "2026-03-01T12:10:00.000000Z",
        "rows": 2,
    }
