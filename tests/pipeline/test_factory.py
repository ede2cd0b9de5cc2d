"""One declaration of a pipeline: each source × target pair built in a few lines parses in a real DagBag
and carries the rules the window steps rely on, as the scheduler sees the serialized DAG."""

from __future__ import annotations

import re
import textwrap
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pendulum
import pytest

from airflow_provider_cdc.pipeline import (
    BigQueryCdc,
    DatastreamFiles,
    DeltaLake,
    Locations,
    PipelineSpecError,
    SpannerChangeStream,
    SpannerTables,
    TablestoreStream,
    cdc_pipeline,
)

T = datetime(2026, 1, 1, tzinfo=timezone.utc)

SOURCES = {
    "change_stream": 'SpannerChangeStream(instance_id="prod", database_id="shop", stream="Orders")',
    "tables": 'SpannerTables(instance_id="prod", database_id="ledger", source="ledger",'
    ' tables=[{"table": "Payments", "timestamp_column": "Ts"}])',
    "datastream": 'DatastreamFiles(stream_root="gs://bucket/stream", source="mysql_orders")',
    "tablestore": 'TablestoreStream(table="orders")',
}
TARGETS = {
    "delta": "[DeltaLake()]",
    "bigquery": '[BigQueryCdc(project_id="p", dataset="cdc")]',
    "both": '[DeltaLake(), BigQueryCdc(dataset="{{ params.dataset }}")]',
}
#: A user's own pipeline: the whole DAG file.
USER_DAG = textwrap.dedent(
    """
    from datetime import datetime, timedelta, timezone

    from airflow.sdk import DAG
    from airflow.timetables.interval import DeltaDataIntervalTimetable

    from airflow_provider_cdc.pipeline import *

    START = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with DAG("{dag_id}", start_date=START, schedule=DeltaDataIntervalTimetable(timedelta(minutes=10)),
             catchup=True, max_active_runs=1, params={{"dataset": "cdc", "initial_snapshot": True}}):
        cdc_pipeline(
            source={source},
            targets={targets},
            locations=Locations(staging_root="gs://b/staging", changeset_root="gs://b/changesets",
                                lake_root="gs://b/lake"),
            readers=3,
            {snapshot}
        )
    """
)


def parsed(tmp_path: Path, source: str, targets: str, snapshot: str = "") -> Any:
    """A DagBag of the user's DAG file of ``source`` and ``targets``."""
    from airflow.dag_processing.dagbag import DagBag

    dag_id = f"{source}_to_{targets}"
    path = tmp_path / f"{dag_id}.py"
    path.write_text(
        USER_DAG.format(dag_id=dag_id, source=SOURCES[source], targets=TARGETS[targets], snapshot=snapshot)
    )
    return DagBag(str(path))


def scheduled_dag(tmp_path: Path, source: str, targets: str, snapshot: str = "") -> Any:
    """The DAG as the scheduler gets it: parsed by a DagBag, serialized and read back."""
    from airflow.serialization.serialized_objects import DagSerialization

    bag = parsed(tmp_path, source, targets, snapshot)
    assert bag.import_errors == {}
    return DagSerialization.from_dict(DagSerialization.to_dict(bag.dags[f"{source}_to_{targets}"]))


def downstream(dag: Any, task_id: str) -> set[str]:
    return set(dag.get_task(task_id).downstream_task_ids)


def handle_task(task: Any) -> str | None:
    """The task whose return value (the window handle) ``task`` takes as ``window``: an XComArg, or the
    template a serialized DAG keeps of it."""
    value = getattr(task, "window_handle", None)
    if value is None:
        return None
    if isinstance(value, str):
        matched = re.search(r"xcom_pull\(task_ids='([^']+)'.*key='return_value'\)", value)
        return matched.group(1) if matched else None
    return str(value.operator.task_id) if getattr(value, "key", None) == "return_value" else None


def render(dag: Any, template: str, **context: Any) -> str:
    """``template`` rendered as a task renders it (the DAG's Jinja environment, Airflow's filters)."""
    from airflow.sdk import DAG

    env = DAG("render", schedule=None).get_template_env()
    return env.from_string(template).render(**context)


FIRST = {"change_stream": "wait_parents", "datastream": "wait_for_files"}
COMPLETE = {"change_stream": "drained", "datastream": "complete", "tablestore": "complete"}
APPLY = {"delta": ["upsert"], "bigquery": ["to_bigquery"], "both": ["upsert", "to_bigquery"]}
#: Sources whose UPDATEs carry only the columns they change: a target that writes whole rows (BigQuery)
#: needs a target that keeps current rows (Delta) before it, to complete them from.
PARTIAL = ("change_stream", "tablestore")
PAIRS = [(s, t) for s in SOURCES for t in TARGETS if not (s in PARTIAL and t == "bigquery")]


@pytest.mark.parametrize("source", PARTIAL)
def test_a_source_of_partial_images_to_bigquery_alone_is_refused_when_the_dag_is_parsed(
    tmp_path: Path, source: str
) -> None:
    (error,) = parsed(tmp_path, source, "bigquery").import_errors.values()
    assert "['BigQueryCdc'] write whole rows" in error
    assert "add a target that keeps current rows (Delta) before it" in error


@pytest.mark.parametrize(("source", "targets"), PAIRS)
def test_every_source_and_target_builds_one_window_in_order(
    tmp_path: Path, source: str, targets: str
) -> None:
    dag = scheduled_dag(tmp_path, source, targets)
    chain = [
        FIRST.get(source),
        "open_window",
        "read",
        COMPLETE.get(source),
        "merge",
        *APPLY[targets],
        "commit",
    ]
    chain = [task for task in chain if task]
    assert set(dag.task_ids) == set(chain)
    for before, after in zip(chain, chain[1:], strict=False):
        assert after in downstream(dag, before), (before, after)
    # the commit takes the readers' summaries, every target's apply step's output, and the window handle
    # the open step returned
    assert set(dag.get_task("commit").upstream_task_ids) == {"read", *APPLY[targets], "open_window"}
    # every step after the open belongs to this opening of the window: it takes the open step's window
    # handle whole (window, pipeline, epoch, source key, staging location), nothing rebuilt from strings
    for step in ("merge", *APPLY[targets], "commit"):
        task = dag.get_task(step)
        assert handle_task(task) == "open_window", step
        assert task.epoch is None, step  # the handle's, when the step runs
    if COMPLETE.get(source) == "complete":  # the completion sensor waits for the handle's window
        assert handle_task(dag.get_task("complete")) == "open_window"
    assert dag.get_task("merge").stream_key is None
    # the window handle adds no order: each step taking it already follows the open step
    assert downstream(dag, "open_window") - {"merge", *APPLY[targets], "commit", "complete"} == {"read"}
    # readers mapped over a fixed list (Airflow 2's backfill expands no task mapped over a task's output)
    read = dag.get_task("read")
    assert read.expand_input.value == {"reader_index": [0, 1, 2]}
    assert dag.get_task("open_window").readers == 3
    # no snapshot: every task runs when the one before it succeeded
    assert {dag.get_task(t).trigger_rule for t in chain} == {"all_success"}
    if targets != "delta":
        assert dag.get_task("to_bigquery").dataset in ("cdc", "{{ params.dataset }}")


SNAPSHOT = 'initial_snapshot="{{ params.initial_snapshot }}", first_window_start=START,'


@pytest.mark.parametrize("targets", ["delta", "both"])
def test_a_change_stream_with_a_snapshot_branches_to_it_from_the_open_step(
    tmp_path: Path, targets: str
) -> None:
    dag = scheduled_dag(tmp_path, "change_stream", targets, SNAPSHOT)
    snapshot = ["open", "read", "merge", *APPLY[targets], "commit"]
    assert {t for t in dag.task_ids if t.startswith("initial_snapshot.")} == {
        f"initial_snapshot.{t}" for t in snapshot
    }
    for before, after in zip(snapshot, snapshot[1:], strict=False):
        assert f"initial_snapshot.{after}" in downstream(dag, f"initial_snapshot.{before}")
    for step in snapshot[2:]:  # the snapshot's steps take its open step's window handle
        assert handle_task(dag.get_task(f"initial_snapshot.{step}")) == "initial_snapshot.open", step
    # open_window is the branch: the snapshot's first task is directly after it, and nothing else starts it
    opened = dag.get_task("open_window")
    handle_takers = {"merge", *APPLY[targets], "commit"}
    assert downstream(dag, "open_window") - handle_takers == {"read", "initial_snapshot.open"}
    assert set(dag.get_task("initial_snapshot.open").upstream_task_ids) == {"open_window"}
    assert opened.inherits_from_skipmixin  # a cleared skipped snapshot stays skipped
    # the window's merge waits for the snapshot's commit, and runs when the snapshot was skipped
    assert downstream(dag, "initial_snapshot.commit") == {"merge"}
    assert dag.get_task("merge").trigger_rule == "none_failed"
    assert "none_failed" not in {dag.get_task(t).trigger_rule for t in dag.task_ids if t != "merge"}
    # the snapshot window [T - 1µs, T) is the pipeline's first when the param is on
    params = {"params": {"initial_snapshot": True}}
    assert render(dag, opened.first_window_start, **params) == "2025-12-31T23:59:59.999999Z"
    assert render(dag, opened.first_window_start, params={"initial_snapshot": False}) == T.isoformat()
    assert (
        dag.get_task("initial_snapshot.open").window_start,
        dag.get_task("initial_snapshot.open").window_end,
    ) == (
        "2025-12-31T23:59:59.999999Z",
        "2026-01-01T00:00:00.000000Z",
    )
    # wait_parents checks the window before is applied, except at T: there it is this run's snapshot
    waits = dag.get_task("wait_parents").pipeline_id
    assert render(dag, waits, data_interval_start=pendulum.instance(T)) == ""
    later = pendulum.datetime(2026, 1, 1, 0, 10, tz="UTC")
    assert render(dag, waits, data_interval_start=later) == "change_stream_to_" + targets


def test_a_source_without_a_snapshot_refuses_one_naming_the_field() -> None:
    with pytest.raises(PipelineSpecError, match="initial_snapshot: a Table Store stream takes no snapshot"):
        cdc_pipeline(
            source=TablestoreStream(table="orders"),
            targets=[DeltaLake()],
            locations=Locations(staging_root="/s", changeset_root="/c", lake_root="/l"),
            pipeline_id="p",
            initial_snapshot=True,
            first_window_start=T,
        )


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: SpannerChangeStream(instance_id="i", database_id="d", stream="Orders-2"),
         r"SpannerChangeStream\.stream: invalid change stream name 'Orders-2'"),
        (lambda: Locations(staging_root="staging", changeset_root="/c"),
         r"Locations\.staging_root: 'staging' is a relative path .* use an absolute path"),
        (lambda: DatastreamFiles(stream_root="stream", source="s"),
         r"DatastreamFiles\.stream_root: 'stream'"),
        (lambda: SpannerTables(instance_id="i", database_id="d", source="s", tables=[{"table": "T"}]),
         r"SpannerTables\.tables\[0\]: lacks \['timestamp_column'\]"),
        (lambda: BigQueryCdc(dataset="my-dataset"), r"BigQueryCdc\.dataset: invalid dataset name"),
    ],
)  # fmt: skip
def test_a_literal_that_cannot_work_fails_the_parse_naming_field_and_fix(build: Any, message: str) -> None:
    with pytest.raises(PipelineSpecError, match=message):
        build()


def test_templates_are_left_to_the_task_and_a_missing_lake_root_is_named() -> None:
    SpannerChangeStream(instance_id="{{ params.i }}", database_id="{{ params.d }}", stream="{{ params.s }}")
    Locations(staging_root="{{ params.staging_root }}", changeset_root="{{ params.changeset_root }}")
    with pytest.raises(
        PipelineSpecError, match="locations.lake_root: missing; the DeltaLake target needs it"
    ):
        cdc_pipeline(
            source=TablestoreStream(table="orders"),
            targets=[DeltaLake()],
            locations=Locations(staging_root="/s", changeset_root="/c"),
            pipeline_id="p",
        )
    with pytest.raises(PipelineSpecError, match="readers: 0; give a positive number"):
        cdc_pipeline(
            source=TablestoreStream(table="orders"),
            targets=[DeltaLake()],
            locations=Locations(staging_root="/s", changeset_root="/c", lake_root="/l"),
            pipeline_id="p",
            readers=0,
        )


def test_two_pipelines_in_one_dag_each_wire_their_own_tasks() -> None:
    from airflow.sdk import DAG

    locations = Locations(staging_root="/s", changeset_root="/c", lake_root="/l")
    with DAG("two", schedule=None, start_date=T) as dag:
        for name in ("orders", "payments"):
            cdc_pipeline(
                source=SpannerChangeStream(instance_id="i", database_id="d", stream=name.title()),
                targets=[DeltaLake()],
                locations=locations,
                pipeline_id=name,
                initial_snapshot=True,
                first_window_start=T,
                group_id=name,
            )
    for name in ("orders", "payments"):
        opened = dag.get_task(f"{name}.open_window")
        assert opened.snapshot_task_ids == (f"{name}.initial_snapshot.open",)
        takers = {f"{name}.{step}" for step in ("merge", "upsert", "commit")}
        assert opened.downstream_task_ids - takers == {f"{name}.read", f"{name}.initial_snapshot.open"}
        assert handle_task(dag.get_task(f"{name}.commit")) == f"{name}.open_window"
        assert dag.get_task(f"{name}.initial_snapshot.open").source == f"{name}_snapshot"


def test_the_commits_take_the_outlets_and_every_targets_output() -> None:
    from airflow.sdk import DAG

    from airflow_provider_cdc._compat import AssetAlias
    from airflow_provider_cdc.assets import alias_name

    with DAG("assets", schedule=None, start_date=T) as dag:
        cdc_pipeline(
            source=SpannerChangeStream(instance_id="i", database_id="d", stream="Orders"),
            targets=[BigQueryCdc(project_id="p", dataset="cdc"), DeltaLake()],
            locations=Locations(staging_root="/s", changeset_root="/c", lake_root="/l"),
            pipeline_id="assets",
            initial_snapshot=True,
            first_window_start=T,
            outlets=[AssetAlias(alias_name("assets"))],
        )
    for commit, prefix in (("commit", ""), ("initial_snapshot.commit", "initial_snapshot.")):
        task = dag.get_task(commit)
        assert task.outlets, commit
        # BigQuery applies after the Delta tables it completes partial rows from, whatever the order given
        assert [arg.operator.task_id for arg in task.applied] == [f"{prefix}upsert", f"{prefix}to_bigquery"]
        assert f"{prefix}upsert" in dag.get_task(f"{prefix}to_bigquery").upstream_task_ids


def test_target_specs_live_in_their_folders_and_keep_their_import_paths() -> None:
    from airflow_provider_cdc.targets.bigquery.pipeline import BigQueryCdc as InFolder

    assert BigQueryCdc is InFolder
    assert (DeltaLake.target, BigQueryCdc.target, BigQueryCdc.needs_full_images) == (
        "delta",
        "bigquery",
        True,
    )
    with pytest.raises(PipelineSpecError, match="lake_root: missing; the DeltaLake target needs it"):
        cdc_pipeline(
            source=SpannerChangeStream(instance_id="i", database_id="d", stream="Orders"),
            targets=[DeltaLake()],
            locations=Locations(staging_root="/s", changeset_root="/c"),
            pipeline_id="p",
        )


def test_a_target_root_is_any_registered_targets_and_reads_by_its_name() -> None:
    locations = Locations(staging_root="/s", changeset_root="/c", lake_root="/l")
    assert (locations.lake_root, locations.root("lake_root"), locations.target_roots) == (
        "/l",
        "/l",
        {"lake_root": "/l"},
    )
    assert locations.as_argument() == {"staging_root": "/s", "changeset_root": "/c", "lake_root": "/l"}
    assert Locations(staging_root="/s", changeset_root="/c").lake_root is None
    with pytest.raises(PipelineSpecError, match=r"Locations\.lake_root: 'lake' is a relative path"):
        Locations(staging_root="/s", changeset_root="/c", lake_root="lake")
    with pytest.raises(
        PipelineSpecError, match=r"\['warehouse_root'\] is no registered target's root.*'lake_root'"
    ):
        cdc_pipeline(
            source=TablestoreStream(table="orders"),
            targets=[DeltaLake()],
            locations={
                "staging_root": "/s",
                "changeset_root": "/c",
                "lake_root": "/l",
                "warehouse_root": "/w",
            },
            pipeline_id="p",
        )


def test_a_pipeline_whose_targets_all_write_whole_rows_refuses_a_source_of_partial_images() -> None:
    class PartialStream(TablestoreStream):
        sends_partial_images = True

    with pytest.raises(
        PipelineSpecError, match=r"\['BigQueryCdc'\] write whole rows .*add a target that keeps"
    ):
        cdc_pipeline(
            source=PartialStream(table="orders"),
            targets=[BigQueryCdc(project_id="p", dataset="cdc")],
            locations=Locations(staging_root="/s", changeset_root="/c"),
            pipeline_id="p",
        )
