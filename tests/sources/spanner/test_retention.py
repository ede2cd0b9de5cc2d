"""Retention: the argument, the stream's ``retention_period`` and Spanner's default, checked on the
database's clock by the hook, the operators, the drained sensor and its trigger."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.table_sources import point_airflow_at

from airflow_provider_cdc.core.window import Window

TABLE = "CREATE TABLE Items (Id INT64 NOT NULL, Name STRING(MAX)) PRIMARY KEY (Id)"
STREAMS = [
    TABLE,
    "CREATE CHANGE STREAM Weekly FOR ALL OPTIONS (retention_period = '7d')",
    "CREATE CHANGE STREAM Hours FOR Items "
    "OPTIONS (retention_period = '36h', value_capture_type = 'NEW_VALUES')",
    "CREATE CHANGE STREAM Plain FOR Items",
]
MINUTE = timedelta(minutes=1)


@pytest.fixture
def emulator(start_emulator: Any) -> Any:
    """An emulator of this test's own: its manual clock moves by days."""
    return start_emulator(initial_partitions=2)


@pytest.fixture
def database(emulator: Any, emulator_instance: Any) -> Any:
    database = emulator_instance(emulator).database("retention", ddl_statements=STREAMS)
    database.create().result(30)
    return database


@pytest.fixture
def airflow_env(emulator: Any, monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> str:
    return point_airflow_at(monkeypatch, emulator.host, sqlite_url)


def _hook(database_id: str, stream: str = "Weekly", **kwargs: Any) -> Any:
    from airflow_provider_cdc.sources.spanner.change_stream_hook import SpannerChangeStreamHook

    return SpannerChangeStreamHook(
        project_id="test-project",
        instance_id="test-instance",
        database_id=database_id,
        stream=stream,
        **kwargs,
    )


def _insert(database: Any, first: int, count: int) -> None:
    with database.batch() as batch:
        batch.insert("Items", ["Id", "Name"], [[i, f"item {i}"] for i in range(first, first + count)])


def _committed_window(emulator: Any, database: Any) -> Window:
    """A one-minute window holding three inserts, starting now on the emulator's clock."""
    start = emulator.clock.advance(timedelta(seconds=1))
    _insert(database, 1, 3)
    return Window(start, start + MINUTE)


def test_a_two_day_old_window_of_a_seven_day_stream_is_read(
    emulator: Any, database: Any, airflow_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    window = _committed_window(emulator, database)
    emulator.clock.set(window.start + timedelta(days=2))
    hook = _hook(database.database_id)
    hook.open_window("pipeline", window, str(tmp_path), "reader")
    summary = hook.read_window(window, str(tmp_path), "reader")
    assert summary.rows == 3
    assert hook.retention.period == timedelta(days=7) and hook.retention.source == "stream"
    assert "keeps changes for" not in capsys.readouterr().out  # no warning at 2 of 7 days


def test_a_window_past_the_streams_retention_fails_naming_window_retention_and_source(
    emulator: Any, database: Any, airflow_env: str, tmp_path: Path
) -> None:
    from airflow_provider_cdc.sources.spanner.errors import RetentionExpiredError

    window = _committed_window(emulator, database)
    emulator.clock.set(window.start + timedelta(days=7, minutes=5))
    hook = _hook(database.database_id)
    with pytest.raises(RetentionExpiredError) as caught:
        hook.open_window("pipeline", window, str(tmp_path), "reader")
    message = str(caught.value)
    assert str(window) in message, message
    assert "7d" in message and "retention_period option '7d'" in message, message
    assert "INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS" in message, message
    assert "can no longer be read" in message
    assert not (tmp_path / "Weekly").exists(), "nothing is staged for an expired window"


def test_a_window_past_most_of_the_retention_logs_a_warning(
    emulator: Any, database: Any, airflow_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    window = _committed_window(emulator, database)
    emulator.clock.set(window.start + timedelta(days=6))  # 86% of 7 days
    hook = _hook(database.database_id)
    hook.open_window("pipeline", window, str(tmp_path), "reader")
    warnings = [line for line in capsys.readouterr().out.splitlines() if "keeps changes for" in line]
    assert warnings and str(window) in warnings[0] and "keeps changes for 7d" in warnings[0], warnings


def test_the_argument_overrides_the_streams_retention(
    emulator: Any, database: Any, airflow_env: str, tmp_path: Path
) -> None:
    from airflow_provider_cdc.sources.spanner.errors import RetentionExpiredError

    window = _committed_window(emulator, database)
    emulator.clock.set(window.start + timedelta(days=2))
    hook = _hook(database.database_id, retention="36h")
    assert hook.retention.period == timedelta(hours=36) and hook.retention.source == "argument"
    expected = r"retention period of 36h \(given by the retention argument\)"
    with pytest.raises(RetentionExpiredError, match=expected):
        hook.open_window("pipeline", window, str(tmp_path), "reader")
    # a longer one than the stream's lets the check pass (the database still enforces its own)
    longer = _hook(database.database_id, retention=timedelta(days=3))
    assert longer.check_retention(window).source == "argument"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (timedelta(days=7), timedelta(days=7)),
        (3600, timedelta(hours=1)),
        (5400.0, timedelta(minutes=90)),
        ("7d", timedelta(days=7)),
        ("36h", timedelta(hours=36)),
        ("90m", timedelta(minutes=90)),
        ("3600s", timedelta(hours=1)),
        ("86400", timedelta(days=1)),
        (" 2D ", timedelta(days=2)),
    ],
)
def test_retention_accepts_timedelta_seconds_and_duration_text(value: Any, expected: timedelta) -> None:
    from airflow_provider_cdc.sources.spanner.change_stream_hook import parse_retention

    assert parse_retention(value) == expected


@pytest.mark.parametrize("value", ["7 days", "1w", "-3600", "0s", "", "h", True, [7], float("nan"), 1e300])
def test_a_retention_that_is_not_a_duration_is_refused(value: Any, airflow_env: str) -> None:
    from airflow_provider_cdc.sources.spanner.errors import ChangeStreamConfigError

    if value == "":  # the empty text of an unset template means "discover it"
        assert _hook("anydb", retention=value).retention_argument is None
        return
    with pytest.raises(ChangeStreamConfigError, match="retention"):
        _hook("anydb", retention=value)


def _drained_sensor_arguments(database: Any, window: Any) -> dict[str, Any]:
    """The drained sensor's arguments for ``window`` of the stream ``Weekly`` of ``database``."""
    return dict(
        project_id="test-project",
        instance_id="test-instance",
        database_id=database.database_id,
        stream="Weekly",
        timestamp=window.end,
        window_start=window.start,
        window_end=window.end,
    )


def _retentions(database: Any) -> dict[str, Any]:
    return {name: _hook(database.database_id, stream=name).retention for name in ("Weekly", "Hours", "Plain")}


def _assert_the_streams_retentions(found: dict[str, Any]) -> None:
    """``Weekly`` keeps 7 days (its option), ``Hours`` 36 hours, ``Plain`` Spanner's default day."""
    assert (found["Weekly"].period, found["Weekly"].source, found["Weekly"].option_value) == (
        timedelta(days=7),
        "stream",
        "7d",
    )
    assert (found["Hours"].period, found["Hours"].option_value) == (timedelta(hours=36), "36h")
    assert (found["Plain"].period, found["Plain"].source) == (timedelta(days=1), "default")


def test_the_project_emulator_reports_each_streams_retention(database: Any, airflow_env: str) -> None:
    found = _retentions(database)
    _assert_the_streams_retentions(found)
    assert "Spanner's default" in found["Plain"].describe()


def test_the_project_emulator_answers_change_stream_options_as_google_does(database: Any) -> None:
    with database.snapshot() as snapshot:
        everything = snapshot.execute_sql("SELECT * FROM INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS")
        rows = sorted(tuple(r) for r in everything)
    assert rows == [
        ("", "", "Hours", "retention_period", "STRING", "36h"),
        ("", "", "Hours", "value_capture_type", "STRING", "NEW_VALUES"),
        ("", "", "Weekly", "retention_period", "STRING", "7d"),
    ]
    with database.snapshot() as snapshot:
        found = snapshot.execute_sql(
            "SELECT option_value FROM INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS "
            "WHERE change_stream_name = @name AND option_name = 'retention_period'",
            params={"name": "Hours"},
        )
        assert [list(r) for r in found] == [["36h"]]
        assert found.fields[0].name == "option_value"


def test_google_emulator_reports_the_streams_retention(
    new_google_database: Any, google_spanner_emulator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = new_google_database(STREAMS, prefix="retention")
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", google_spanner_emulator.host)
    found = _retentions(database)
    _assert_the_streams_retentions(found)
    assert _hook(database.database_id, retention="2h").retention.period == timedelta(hours=2)
    now = _hook(database.database_id).database_now()
    assert abs((now - datetime.now(now.tzinfo)).total_seconds()) < 60


def test_operators_take_retention_as_a_templated_field(
    emulator: Any, database: Any, airflow_env: str, tmp_path: Path
) -> None:
    from airflow_provider_cdc.sources.spanner.change_stream_operators import (
        SpannerChangeStreamOpenWindowOperator,
        SpannerChangeStreamReadWindowOperator,
    )
    from airflow_provider_cdc.sources.spanner.errors import RetentionExpiredError

    window = _committed_window(emulator, database)
    emulator.clock.set(window.start + timedelta(days=2))
    fields = dict(
        project_id="test-project",
        instance_id="test-instance",
        database_id=database.database_id,
        stream="Weekly",
        staging_root=str(tmp_path),
        window_start=window.start.isoformat(),
        window_end=window.end.isoformat(),
    )
    ti = SimpleNamespace(
        dag_id="cdc", run_id="run-1", task_id="read", map_index=0, xcom_push=lambda key, value: None
    )
    context = {"ti": ti}
    for operator in (SpannerChangeStreamOpenWindowOperator, SpannerChangeStreamReadWindowOperator):
        assert "retention" in operator.template_fields
    templated = "{{ params.retention }}"
    opener = SpannerChangeStreamOpenWindowOperator(task_id="open", retention=templated, **fields)
    opener.render_template_fields({"params": {"retention": "1d"}})
    assert opener.retention == "1d"
    expired = r"retention period of 1d \(given by the retention argument\)"
    with pytest.raises(RetentionExpiredError, match=expired):
        opener.execute(context)
    SpannerChangeStreamOpenWindowOperator(task_id="open", **fields).execute(context)
    reader = SpannerChangeStreamReadWindowOperator(task_id="read", retention=timedelta(days=3), **fields)
    assert reader.execute(context)["rows"] == 3


def test_sensor_and_trigger_carry_retention_and_fail_for_an_expired_window(
    emulator: Any, database: Any, airflow_env: str, tmp_path: Path
) -> None:
    from airflow.exceptions import TaskDeferred

    from airflow_provider_cdc._errors import DrainWaitError
    from airflow_provider_cdc.sensors.partitions_drained import SpannerChangeStreamPartitionsDrainedSensor
    from airflow_provider_cdc.sources.spanner.errors import RetentionExpiredError
    from airflow_provider_cdc.triggers.partitions_drained import PartitionsDrainedTrigger

    window = _committed_window(emulator, database)
    hook = _hook(database.database_id)
    hook.open_window("pipeline", window, str(tmp_path), "reader")  # opened, never read
    emulator.clock.set(window.start + timedelta(days=2))
    kwargs = _drained_sensor_arguments(database, window)
    assert "retention" in SpannerChangeStreamPartitionsDrainedSensor.template_fields
    assert SpannerChangeStreamPartitionsDrainedSensor(task_id="waits", **kwargs).poke({}) is False
    expired = SpannerChangeStreamPartitionsDrainedSensor(task_id="expired", retention="1d", **kwargs)
    with pytest.raises(RetentionExpiredError, match=r"window .* retention period of 1d"):
        expired.poke({})
    deferring = SpannerChangeStreamPartitionsDrainedSensor(
        task_id="deferring", retention="36h", deferrable=True, poke_interval=0.05, **kwargs
    )
    with pytest.raises(RetentionExpiredError, match="36h"):
        deferring.execute({})
    waiting = SpannerChangeStreamPartitionsDrainedSensor(
        task_id="deferring", retention="3d", deferrable=True, poke_interval=0.05, **kwargs
    )
    with pytest.raises(TaskDeferred) as deferred:
        waiting.execute({})
    classpath, arguments = deferred.value.trigger.serialize()
    assert arguments["retention"] == timedelta(days=3).total_seconds()
    json.dumps(arguments)  # what the triggerer stores
    emulator.clock.set(window.start + timedelta(days=4))
    trigger = PartitionsDrainedTrigger(**arguments)

    async def first_event() -> Any:
        return await asyncio.wait_for(trigger.run().__anext__(), 30)

    event = asyncio.run(first_event())
    assert event.payload["status"] == "error"
    message = event.payload["message"]
    assert str(window) in message and "3d (given by the retention argument)" in message, message
    with pytest.raises(DrainWaitError, match="outside change stream Weekly's retention period"):
        waiting.execute_complete({}, event.payload)


def test_a_sensor_looks_the_retention_up_once_for_all_its_pokes(
    emulator: Any, database: Any, airflow_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.cloud.spanner_v1 import snapshot

    from airflow_provider_cdc.sensors.partitions_drained import SpannerChangeStreamPartitionsDrainedSensor
    from airflow_provider_cdc.sources.spanner.change_stream_hook import RETENTION_QUERY

    queries: list[str] = []
    execute_sql = snapshot._SnapshotBase.execute_sql

    def recording(self: Any, sql: str, *args: Any, **kwargs: Any) -> Any:
        queries.append(sql)
        return execute_sql(self, sql, *args, **kwargs)

    monkeypatch.setattr(snapshot._SnapshotBase, "execute_sql", recording)
    window = _committed_window(emulator, database)
    _hook(database.database_id).open_window("pipeline", window, str(tmp_path), "reader")  # never read
    queries.clear()
    sensor = SpannerChangeStreamPartitionsDrainedSensor(
        task_id="waits", **_drained_sensor_arguments(database, window)
    )
    assert [sensor.poke({}) for _ in range(3)] == [False, False, False]
    assert queries.count(RETENTION_QUERY) == 1, queries
    assert queries.count("SELECT CURRENT_TIMESTAMP()") == 3, "each poke measures the age anew"
