"""Bad change-stream queries and injected faults, seen as the real client reports them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud.spanner_v1 import (
    ExecuteSqlRequest,
    TransactionOptions,
    TransactionSelector,
    Type,
    TypeCode,
)
from google.protobuf import struct_pb2

from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, format_timestamp
from airflow_provider_cdc.sources.spanner.records import ChildPartitionsRecord, DataChangeRecord
from airflow_provider_cdc.testing.lineage_walk import change_stream_query, query_partition

SCHEMA = [
    "CREATE TABLE Singers (SingerId INT64 NOT NULL, Name STRING(MAX)) PRIMARY KEY (SingerId)",
    "CREATE CHANGE STREAM Everything FOR ALL OPTIONS (retention_period = '7d')",
    "CREATE CHANGE STREAM Other FOR Singers",
]


@dataclass
class History:
    database: Any
    created: datetime  # at or before the streams' creation
    start: datetime  # after the streams' creation
    end: datetime
    tokens: list[str]
    busiest: str  # the partition with the most records in [start, end]


@pytest.fixture(scope="module")
def history(spanner_emulator: Any, new_spanner_database: Any) -> History:
    clock = spanner_emulator.clock
    created = clock.now()
    database = new_spanner_database(SCHEMA, prefix="errors")
    start = clock.advance(timedelta(seconds=1))
    for singer in range(40):
        clock.advance(timedelta(milliseconds=700))
        with database.batch() as batch:
            batch.insert("Singers", columns=["SingerId", "Name"], values=[[singer, f"singer {singer}"]])
    end = clock.advance(timedelta(seconds=1))
    records = list(query_partition(database, "Everything", start, start, None, 10_000))
    tokens = [child.token for record in records for child in record.child_partitions]
    counts = {
        token: len(list(query_partition(database, "Everything", start, end, token, 10_000)))
        for token in tokens
    }
    busiest = max(counts, key=lambda token: counts[token])
    assert counts[busiest] >= 12
    return History(database, created, start, end, tokens, busiest)


def query(history: History, **overrides: Any) -> list[Any]:
    arguments = {
        "stream": "Everything",
        "start": history.start,
        "end": history.end,
        "token": history.busiest,
        "heartbeat_milliseconds": 10_000,
    }
    arguments.update(overrides)
    return list(query_partition(history.database, **arguments))


@pytest.mark.parametrize("heartbeat", [0, 999, 300_001, -1_000])
def test_heartbeat_outside_bounds_is_invalid(history: History, heartbeat: int) -> None:
    with pytest.raises(exceptions.InvalidArgument) as caught:
        query(history, heartbeat_milliseconds=heartbeat)
    assert "heartbeat_milliseconds" in caught.value.message


@pytest.mark.parametrize("heartbeat", [1_000, 300_000])
def test_heartbeat_bounds_are_accepted(history: History, heartbeat: int) -> None:
    records = query(history, heartbeat_milliseconds=heartbeat)
    assert any(isinstance(record, DataChangeRecord) for record in records)


def test_start_before_stream_creation_is_rejected(history: History) -> None:
    with pytest.raises((exceptions.OutOfRange, exceptions.InvalidArgument)) as caught:
        query(history, start=history.created - timedelta(seconds=1), token=None)
    assert "start_timestamp" in caught.value.message


def test_start_outside_retention_is_rejected(spanner_emulator: Any, new_spanner_database: Any) -> None:
    database = new_spanner_database(
        [SCHEMA[0], "CREATE CHANGE STREAM ShortLived FOR ALL OPTIONS (retention_period = '1h')"],
        prefix="retention",
    )
    clock = spanner_emulator.clock
    start = clock.advance(timedelta(seconds=1))
    assert list(query_partition(database, "ShortLived", start, start, None, 10_000))
    clock.advance(timedelta(hours=2))
    with pytest.raises((exceptions.OutOfRange, exceptions.InvalidArgument)) as caught:
        list(query_partition(database, "ShortLived", start, start + timedelta(seconds=1), None, 10_000))
    message = caught.value.message
    assert "start_timestamp" in message and "retention" in message.lower(), message
    recent = clock.now() - timedelta(minutes=30)
    assert list(query_partition(database, "ShortLived", recent, recent, None, 10_000))


def test_end_before_start_is_invalid(history: History) -> None:
    with pytest.raises(exceptions.InvalidArgument) as caught:
        query(history, end=history.start - ONE_MICROSECOND)
    assert "end_timestamp" in caught.value.message


def test_unknown_partition_token_is_invalid(history: History) -> None:
    with pytest.raises(exceptions.InvalidArgument) as caught:
        query(history, token="no-such-partition")
    assert "no-such-partition" in caught.value.message


def test_token_of_another_stream_is_invalid(history: History) -> None:
    other = list(query_partition(history.database, "Other", history.start, history.start, None, 10_000))
    token = other[0].child_partitions[0].token
    assert token not in history.tokens
    with pytest.raises(exceptions.InvalidArgument) as caught:
        query(history, token=token)
    assert token in caught.value.message


def test_an_unknown_stream_is_an_unknown_function_as_spanner_answers(history: History) -> None:
    # Google's emulator (and Spanner) compile READ_<stream> first: a stream that does not exist is a
    # table-valued function that does not exist, whatever the arguments.
    with pytest.raises(exceptions.InvalidArgument) as caught:
        query(history, stream="NoSuchStream", heartbeat_milliseconds=0)
    assert caught.value.message.startswith("Table-valued function not found: READ_NoSuchStream [at 1:")


# ---------------------------------------------------------------------------------------------
# Injected faults
# ---------------------------------------------------------------------------------------------


def test_unavailable_mid_stream_is_resumed_without_duplicates_or_loss(
    spanner_emulator: Any, history: History
) -> None:
    baseline = query(history)
    assert len(baseline) > 10
    spanner_emulator.inject_stream_faults(count=1, code="UNAVAILABLE", after_rows=5)
    assert query(history) == baseline
    spanner_emulator.inject_stream_faults(count=3, code="UNAVAILABLE", after_rows=2)
    assert query(history) == baseline


def test_unavailable_fault_breaks_the_raw_stream(spanner_emulator: Any, history: History) -> None:
    """Without the client's resume logic the injected fault is visible after the promised rows."""
    database = history.database
    session = database.session()
    session.create()
    params = struct_pb2.Struct()
    params.update(
        {
            "start": format_timestamp(history.start),
            "end": format_timestamp(history.end),
            "token": history.busiest,
            "heartbeat": "10000",
        }
    )
    request = ExecuteSqlRequest(
        session=session.name,
        sql=change_stream_query("Everything"),
        params=params,
        param_types={
            "start": Type(code=TypeCode.TIMESTAMP),
            "end": Type(code=TypeCode.TIMESTAMP),
            "token": Type(code=TypeCode.STRING),
            "heartbeat": Type(code=TypeCode.INT64),
        },
        transaction=TransactionSelector(
            single_use=TransactionOptions(read_only=TransactionOptions.ReadOnly())
        ),
    )
    rows_before_fault = 0
    spanner_emulator.inject_stream_faults(count=1, code="UNAVAILABLE", after_rows=5)
    with pytest.raises(exceptions.ServiceUnavailable):
        for partial in database.spanner_api.execute_streaming_sql(request=request):
            rows_before_fault += len(partial.values)
    assert rows_before_fault >= 5
    total = sum(
        len(partial.values) for partial in database.spanner_api.execute_streaming_sql(request=request)
    )
    assert rows_before_fault < total


def test_aborted_surfaces_to_the_caller(spanner_emulator: Any, history: History) -> None:
    spanner_emulator.inject_stream_faults(count=1, code="ABORTED", after_rows=3)
    received = []
    with pytest.raises(exceptions.Aborted):
        for record in query_partition(
            history.database, "Everything", history.start, history.end, history.busiest
        ):
            received.append(record)
    assert len(received) <= 3
    assert len(query(history)) > 10, "the fault is spent: the next read completes"


def test_initial_query_reports_every_initial_partition(history: History) -> None:
    records = list(query_partition(history.database, "Everything", history.start, history.end, None, 10_000))
    assert all(isinstance(record, ChildPartitionsRecord) for record in records)
    assert {record.start_timestamp for record in records} == {history.start}
    assert sorted(child.token for record in records for child in record.child_partitions) == sorted(
        history.tokens
    )


# ---------------------------------------------------------------------------------------------
# What does not exist, answered as Google's emulator answers it
# ---------------------------------------------------------------------------------------------
def _missing_answers(host: str, database_id: str) -> list[tuple[str, str]]:
    """``(error type, message up to ', request_id')`` of a query of a missing database, of a database
    of a missing instance and of a missing change stream; then what the listings hold."""
    from airflow_provider_cdc.testing.emulator_client import emulator_client

    client = emulator_client(host, "test-project")

    def answer(instance: str, database: str, sql: str) -> tuple[str, str]:
        try:
            with client.instance(instance).database(database).snapshot() as snapshot:
                list(snapshot.execute_sql(sql))
        except exceptions.GoogleAPICallError as error:
            message = str(error.message).split(", request_id")[0].split(" [resource_type")[0]
            return type(error).__name__, message.splitlines()[0]
        return "OK", ""

    read = "SELECT ChangeRecord FROM READ_Nowhere(start_timestamp => CURRENT_TIMESTAMP(), end_timestamp => NULL, partition_token => NULL, heartbeat_milliseconds => 10000)"  # noqa: E501
    listed = [i.name.rsplit("/", 1)[-1] for i in client.list_instances()]
    databases = [d.name.rsplit("/", 1)[-1] for d in client.instance("test-instance").list_databases()]
    return [
        answer("test-instance", "nowhere", "SELECT 1"),
        answer("no-instance", database_id, "SELECT 1"),
        answer("test-instance", database_id, read),
        ("instances", str("test-instance" in listed)),
        ("databases", str(database_id in databases)),
    ]


def test_missing_instances_databases_and_streams_are_answered_as_googles_emulator_answers(
    spanner_emulator: Any, new_spanner_database: Any, request: pytest.FixtureRequest
) -> None:
    database = new_spanner_database(SCHEMA, prefix="missing")
    expected = [
        ("NotFound", "Database not found: projects/test-project/instances/test-instance/databases/nowhere"),
        ("NotFound", "Instance not found: projects/test-project/instances/no-instance"),
        ("InvalidArgument", "Table-valued function not found: READ_Nowhere [at 1:26]"),
        ("instances", "True"),
        ("databases", "True"),
    ]
    assert _missing_answers(spanner_emulator.host, database.database_id) == expected
    google = request.getfixturevalue("new_google_database")  # skips where Google's emulator is missing
    same = google(SCHEMA, prefix="missing")
    host = request.getfixturevalue("google_spanner_emulator").host
    assert _missing_answers(host, same.database_id) == expected
