"""The Table Store stream client against the emulator: signed calls, paging, records, retries, errors."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from airflow_provider_cdc.core.timestamps import from_micros
from airflow_provider_cdc.sources.tablestore.client import TablestoreError, TablestoreStreamClient
from airflow_provider_cdc.sources.tablestore.connection import TablestoreHook, client_arguments
from airflow_provider_cdc.testing.tablestore_emulator import ManualClock, TablestoreEmulator

SECRET = "test-secret"


@pytest.fixture
def emulator() -> Iterator[TablestoreEmulator]:
    with TablestoreEmulator(ManualClock(), shards=2) as running:
        yield running


def client_of(
    emulator: TablestoreEmulator, *, secret: str = SECRET, retries: int = 3
) -> tuple[TablestoreStreamClient, list[float]]:
    slept: list[float] = []
    client = TablestoreStreamClient(
        emulator.endpoint,
        emulator.instance,
        "test-key",
        secret,
        retries=retries,
        backoff_seconds=0.5,
        timeout=5,
        sleep=slept.append,
        clock=lambda: from_micros(emulator.clock()),
    )
    return client, slept


def test_signed_calls_list_describe_and_read_decoded_records(emulator: TablestoreEmulator) -> None:
    stream_id = emulator.create_table("orders", [("id", "INTEGER")])
    emulator.put_row("orders", {"id": 1}, {"name": "ann", "price": 2.5, "paid": True, "blob": b"\x00\x01"})
    emulator.clock.advance(1)
    emulator.update_row("orders", {"id": 1}, put={"name": "bob"}, delete_all=["blob"])
    emulator.clock.advance(1)
    emulator.delete_row("orders", {"id": 1})
    client, _ = client_of(emulator)

    [stream] = client.list_streams("orders")
    assert stream.stream_id == stream_id and stream.table_name == "orders"
    description = client.describe_stream(stream_id)
    assert description.table_name == "orders" and description.expiration_hours == 24
    assert len(description.shards) == 2
    records = []
    for shard in description.shards:
        iterator: str | None = client.get_shard_iterator(stream_id, shard.shard_id)
        while iterator is not None:
            batch = client.get_stream_records(iterator, 10)
            records.extend(batch.records)
            if not batch.records and not batch.may_more_record:
                break
            iterator = batch.next_iterator
    assert [r.action for r in records] == ["PUT_ROW", "UPDATE_ROW", "DELETE_ROW"]
    put, update, delete = records
    assert put.key == (("id", 1),)
    assert {c.name: c.value for c in put.cells} == {
        "name": "ann",
        "price": 2.5,
        "paid": True,
        "blob": b"\x00\x01",
    }
    assert [(c.name, c.op) for c in update.cells] == [("name", "PUT"), ("blob", "DELETE_ALL_VERSION")]
    assert delete.key == (("id", 1),)
    assert put.sequence.timestamp_us < update.sequence.timestamp_us < delete.sequence.timestamp_us


def test_describe_stream_reads_every_page_and_lineage(emulator: TablestoreEmulator) -> None:
    stream_id = emulator.create_table("t", [("k", "STRING")])
    first = emulator.shards("t")[0]["shard_id"]
    left, right = emulator.split_shard("t", first)
    merged = emulator.merge_shards("t", left, right)
    client, _ = client_of(emulator)
    shards = client.describe_stream(stream_id, shard_limit=1).shards
    assert len(shards) == len(emulator.shards("t")) == 5
    by_id = {s.shard_id: s for s in shards}
    assert by_id[left].parents == (first,) and by_id[right].parents == (first,)
    assert by_id[merged].parent_id == left and by_id[merged].parent_sibling_id == right


def test_get_shard_iterator_seeks_by_time(emulator: TablestoreEmulator) -> None:
    stream_id = emulator.create_table("t", [("k", "INTEGER")])
    emulator.put_row("t", {"k": 1}, {"v": 1})
    emulator.clock.advance(10)
    middle = emulator.clock()
    emulator.put_row("t", {"k": 1}, {"v": 2})
    client, _ = client_of(emulator)
    shard = next(s["shard_id"] for s in emulator.shards("t") if s["shard_id"])
    found = []
    for info in client.describe_stream(stream_id).shards:
        batch = client.get_stream_records(client.get_shard_iterator(stream_id, info.shard_id, middle), 10)
        found.extend(batch.records)
    assert shard and [dict((c.name, c.value) for c in r.cells) for r in found] == [{"v": 2}]


def test_busy_errors_are_retried_with_backoff(emulator: TablestoreEmulator) -> None:
    stream_id = emulator.create_table("t", [("k", "INTEGER")])
    client, slept = client_of(emulator)
    emulator.inject("DescribeStream", "OTSServerBusy", status=503, times=2)
    emulator.inject("ListStream", "OTSPartitionUnavailable", status=503)
    assert client.describe_stream(stream_id).stream_id == stream_id
    assert client.list_streams("t")[0].stream_id == stream_id
    assert slept == [0.5, 1.0, 0.5]


def test_retries_give_up_naming_the_call_and_stream(emulator: TablestoreEmulator) -> None:
    stream_id = emulator.create_table("t", [("k", "INTEGER")])
    client, slept = client_of(emulator, retries=2)
    emulator.inject("DescribeStream", "OTSInternalServerError", status=500, times=5)
    with pytest.raises(TablestoreError) as failed:
        client.describe_stream(stream_id)
    assert failed.value.code == "OTSInternalServerError" and failed.value.retryable
    assert f"stream {stream_id!r}" in str(failed.value) and "gave up after 2 retries" in str(failed.value)
    assert slept == [0.5, 1.0]


def test_trimmed_data_is_not_retried_and_names_shard_and_iterator(emulator: TablestoreEmulator) -> None:
    stream_id = emulator.create_table("t", [("k", "INTEGER")], expiration_hours=1)
    emulator.put_row("t", {"k": 1}, {"v": 1})
    client, slept = client_of(emulator)
    shard = client.describe_stream(stream_id).shards[0].shard_id
    iterator = client.get_shard_iterator(stream_id, shard)
    emulator.inject("GetStreamRecord", "OTSTrimmedDataAccess", status=404)
    with pytest.raises(TablestoreError) as failed:
        client.get_stream_records(iterator, 10, stream_id=stream_id, shard_id=shard)
    error = failed.value
    assert error.code == "OTSTrimmedDataAccess" and not error.retryable and slept == []
    assert f"shard {shard!r}" in str(error) and "iterator" in str(error) and error.iterator == iterator


@pytest.mark.parametrize("code", ["OTSParameterInvalid", "OTSObjectNotExist"])
def test_caller_errors_are_not_retried_even_on_5xx(emulator: TablestoreEmulator, code: str) -> None:
    stream_id = emulator.create_table("t", [("k", "INTEGER")])
    client, slept = client_of(emulator)
    emulator.inject("DescribeStream", code, status=500)
    with pytest.raises(TablestoreError) as failed:
        client.describe_stream(stream_id)
    assert failed.value.code == code and slept == []


def test_a_wrong_secret_fails_without_showing_it(
    emulator: TablestoreEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    emulator.create_table("t", [("k", "INTEGER")])
    wrong = "wrong-secret-value"
    client, slept = client_of(emulator, secret=wrong)
    with caplog.at_level(logging.DEBUG), pytest.raises(TablestoreError) as failed:
        client.list_streams("t")
    assert failed.value.code == "OTSAuthFailed" and slept == []
    assert wrong not in str(failed.value) and wrong not in repr(client) and wrong not in caplog.text
    assert wrong not in repr(failed.value.__dict__)


def test_connection_errors_are_retried_then_reported() -> None:
    slept: list[float] = []
    client = TablestoreStreamClient(
        "http://127.0.0.1:9", "demo", "id", "secret", retries=1, sleep=slept.append, timeout=2
    )
    with pytest.raises(TablestoreError) as failed:
        client.list_streams("t")
    assert failed.value.code == "ConnectionError" and slept == [0.5]
    assert "instance 'demo'" in str(failed.value)


def test_connection_fields_give_the_client_arguments() -> None:
    arguments = client_arguments("my-inst.cn-hangzhou.ots.aliyuncs.com", "key", "secret", {})
    assert arguments["endpoint"] == "https://my-inst.cn-hangzhou.ots.aliyuncs.com"
    assert arguments["instance"] == "my-inst"
    with pytest.raises(ValueError, match="access key id") as refused:
        client_arguments("https://x.ots.aliyuncs.com", "", "s3cr3t-value", {"instance": "x"})
    assert "s3cr3t-value" not in str(refused.value)
    assert TablestoreHook.conn_type == "tablestore"
