"""Which pipeline (on which metastore) a DAG runs, read from the DAG as Airflow serializes it: what the
pipeline pages use to show a pipeline only to those who may read its DAG."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.sdk import DAG, Param
from airflow.serialization.serialized_objects import DagSerialization

from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator
from airflow_provider_cdc.ui.airflow_records import DagPipeline, pipelines_of_dag

LOCATIONS = {"staging_root": "/s", "changeset_root": "/c", "lake_root": "/l"}
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def serialized(dag: DAG) -> Any:
    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


def dag_with(dag_id: str, params: dict[str, Any] | None = None, **commit: Any) -> DAG:
    with DAG(dag_id, schedule=timedelta(minutes=10), start_date=START, params=params or {}) as dag:
        if commit:
            CdcCommitWindowOperator(task_id="commit", locations=LOCATIONS, **commit)
    return dag


def test_the_pipeline_a_dags_tasks_are_given() -> None:
    templated = dag_with(
        "orders_to_lake",
        {"pipeline_id": Param("orders", type="string"), "metastore": Param("cdc_prod", type="string")},
        pipeline_id="{{ params.pipeline_id }}", metastore_conn_id="{{ params.metastore }}",
    )  # fmt: skip
    expected = DagPipeline("orders_to_lake", "orders", "cdc_prod", True)
    assert pipelines_of_dag(serialized(templated)) == [expected]
    literal = dag_with("refunds_dag", pipeline_id="refunds")
    assert pipelines_of_dag(serialized(literal)) == [
        DagPipeline("refunds_dag", "refunds", "cdc_metastore_default", True)
    ]


def test_a_dag_without_pipeline_tasks_names_its_pipeline_by_its_param_or_its_id() -> None:
    by_param = dag_with("payments_dag", {"pipeline_id": "payments"})
    assert pipelines_of_dag(serialized(by_param)) == [
        DagPipeline("payments_dag", "payments", "cdc_metastore_default", True)
    ]
    by_id = dag_with("cleanup")
    expected = DagPipeline("cleanup", "cleanup", "cdc_metastore_default", False)
    assert pipelines_of_dag(serialized(by_id)) == [expected]


def test_a_template_other_than_a_param_names_no_pipeline() -> None:
    rendered_at_run = dag_with("odd_dag", pipeline_id="{{ dag_run.conf['pipeline'] }}")
    assert pipelines_of_dag(serialized(rendered_at_run)) == [
        DagPipeline("odd_dag", "odd_dag", "cdc_metastore_default", False)
    ]
