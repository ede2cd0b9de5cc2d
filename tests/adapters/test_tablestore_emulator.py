"""The Tablestore Stream emulator at the wire: signed protobuf POSTs, message by message."""

from __future__ import annotations

from datetime import timedelta

import pytest
import requests

from airflow_provider_cdc.core.timestamps import from_micros
from airflow_provider_cdc.sources.tablestore.protocol import messages
from airflow_provider_cdc.sources.tablestore.protocol.plainbuffer import Cell, SequenceInfo, decode_row
from airflow_provider_cdc.sources.tablestore.protocol.signing import request_headers, verify_response
from airflow_provider_cdc.testing.tablestore_emulator import ManualClock, TablestoreEmulator

START_US = 1_700_000_000_000_000


@pytest.fixture
def emulator():
    emulator = TablestoreEmulator(ManualClock(START_US), shards=2, seed=7)
    emulator.start()
    yield emulator
    emulator.stop()


def call(emulator, operation, request, *, secret="test-secret", skew=timedelta(0)):
    """POST one signed call; return (status, parsed response or Error)."""
    body = request.SerializeToString()
    now = from_micros(emulator.clock())
    headers = request_headers(
        f"/{operation}",
        body,
        access_key_id="test-key",
        access_key_secret=secret,
        instance="demo",
        now=now + skew,
    )
    reply = requests.post(f"{emulator.endpoint}/{operation}", data=body, headers=headers, timeout=10)
    if reply.status_code == 200:
        verify_response(
            f"/{operation}",
            reply.headers,
            reply.content,
            access_key_id="test-key",
            access_key_secret="test-secret",
            now=now,
        )
        return 200, getattr(messages, f"{operation}Response").FromString(reply.content)
    for name in ("x-ots-contentmd5", "x-ots-requestid", "x-ots-date"):
        assert name in reply.headers
    return reply.status_code, messages.Error.FromString(reply.content)


def iterator(emulator, stream_id, shard_id, timestamp_us=None):
    request = messages.GetShardIteratorRequest(stream_id=stream_id, shard_id=shard_id)
    if timestamp_us is not None:
        request.timestamp = timestamp_us
    status, response = call(emulator, "GetShardIterator", request)
    assert status == 200, response
    return response.shard_iterator


def read(emulator, shard_iterator, limit=None):
    request = messages.GetStreamRecordRequest(shard_iterator=shard_iterator)
    if limit is not None:
        request.limit = limit
    status, response = call(emulator, "GetStreamRecord", request)
    assert status == 200, response
    return response


def drain(emulator, shard_iterator):
    """Records from the iterator on, and where reading stopped (None: the shard is closed and drained)."""
    records = []
    while shard_iterator:
        response = read(emulator, shard_iterator, limit=2)
        records += [(r.action_type, decode_row(r.record)) for r in response.stream_records]
        shard_iterator = response.next_shard_iterator if response.HasField("next_shard_iterator") else None
        if not response.stream_records:
            break
    return records, shard_iterator


def describe_all(emulator, stream_id, limit):
    shards, start = [], None
    while True:
        request = messages.DescribeStreamRequest(stream_id=stream_id, shard_limit=limit)
        if start is not None:
            request.inclusive_start_shard_id = start
        status, response = call(emulator, "DescribeStream", request)
        assert status == 200, response
        shards += [(s.shard_id, s.parent_id or None, s.parent_sibling_id or None) for s in response.shards]
        if not response.HasField("next_shard_id"):
            return response, shards
        start = response.next_shard_id


def all_records(emulator, stream_id):
    _, shards = describe_all(emulator, stream_id, 100)
    records = []
    for shard_id, _, _ in shards:
        records += drain(emulator, iterator(emulator, stream_id, shard_id))[0]
    return records


def test_list_and_describe_with_paging(emulator):
    stream_id = emulator.create_table("orders", [("id", "INTEGER")], expiration_hours=12)
    emulator.create_table("users", [("name", "STRING")])
    status, listed = call(emulator, "ListStream", messages.ListStreamRequest())
    assert status == 200
    assert [s.table_name for s in listed.streams] == ["orders", "users"]
    status, one = call(emulator, "ListStream", messages.ListStreamRequest(table_name="orders"))
    assert [(s.stream_id, s.creation_time) for s in one.streams] == [(stream_id, START_US)]

    first = emulator.shards("orders")[0]["shard_id"]
    emulator.split_shard("orders", first)
    response, shards = describe_all(emulator, stream_id, limit=1)
    assert (response.table_name, response.expiration_time, response.stream_status) == (
        "orders",
        12,
        messages.STREAM_ACTIVE,
    )
    truth = [(s["shard_id"], s["parent_id"], s["parent_sibling_id"]) for s in emulator.shards("orders")]
    assert shards == truth and len(shards) == 4

    status, error = call(emulator, "ListStream", messages.ListStreamRequest(table_name="nope"))
    assert (status, error.code) == (404, "OTSObjectNotExist")
    status, error = call(
        emulator, "DescribeStream", messages.DescribeStreamRequest(stream_id=stream_id, shard_limit=0)
    )
    assert (status, error.code) == (400, "OTSParameterInvalid")


def test_records_carry_every_action_and_op(emulator):
    stream_id = emulator.create_table("t", [("id", "INTEGER"), ("k", "STRING")])
    key = {"id": 1, "k": "a"}
    emulator.put_row("t", key, {"n": 5, "f": 1.5, "b": True, "s": "x", "y": b"\x00"})
    emulator.clock.advance(1)
    emulator.update_row("t", key, put={"n": 6}, delete_all=["f"], delete_one={"s": START_US // 1000})
    emulator.clock.advance(1)
    emulator.update_row("t", {"id": 2, "k": "b"}, put={"n": 1})
    emulator.delete_row("t", {"id": 2, "k": "b"})

    records = sorted(all_records(emulator, stream_id), key=lambda item: item[1].sequence.timestamp_us)
    put, update, other_put, delete = sorted(
        records, key=lambda item: (item[1].sequence.timestamp_us, item[1].sequence.row_index)
    )
    assert put[0] == messages.PUT_ROW
    assert put[1].primary_key == (("id", 1), ("k", "a"))
    assert {c.name: c.value for c in put[1].cells} == {"n": 5, "f": 1.5, "b": True, "s": "x", "y": b"\x00"}
    assert {c.timestamp_ms for c in put[1].cells} == {START_US // 1000}
    assert put[1].sequence == SequenceInfo(1, START_US, 0)
    assert update[0] == messages.UPDATE_ROW
    assert update[1].cells == (
        Cell("n", 6, "PUT", START_US // 1000 + 1000),
        Cell("f", None, "DELETE_ALL_VERSION"),
        Cell("s", None, "DELETE_ONE_VERSION", START_US // 1000),
    )
    assert other_put[0] == messages.UPDATE_ROW
    assert delete[0] == messages.DELETE_ROW
    assert delete[1].cells == () and delete[1].primary_key == (("id", 2), ("k", "b"))
    assert emulator.rows("t") == {(1, "a"): {"n": 6, "b": True, "y": b"\x00"}}


def test_iterator_by_time_and_limit_and_may_more_record():
    emulator = TablestoreEmulator(ManualClock(START_US))
    with emulator:
        stream_id = emulator.create_table("t", [("id", "INTEGER")])
        for value in range(5):
            emulator.put_row("t", {"id": value}, {"v": value})
            emulator.clock.advance(10)
        shard = emulator.shards("t")[0]["shard_id"]
        at = iterator(emulator, stream_id, shard, timestamp_us=START_US + 15_000_000)
        first = read(emulator, at, limit=2)
        assert [decode_row(r.record).primary_key for r in first.stream_records] == [
            (("id", 2),),
            (("id", 3),),
        ]
        assert first.may_more_record is True
        rest = read(emulator, first.next_shard_iterator, limit=10)
        assert len(rest.stream_records) == 1 and rest.may_more_record is False
        caught_up = read(emulator, rest.next_shard_iterator)
        assert list(caught_up.stream_records) == [] and caught_up.HasField("next_shard_iterator")
        emulator.put_row("t", {"id": 9}, {"v": 9})
        assert len(read(emulator, caught_up.next_shard_iterator).stream_records) == 1


def test_split_and_merge_lineage_and_closed_drained_shards():
    emulator = TablestoreEmulator(ManualClock(START_US), shards=1)
    with emulator:
        stream_id = emulator.create_table("t", [("id", "INTEGER")])
        parent = emulator.shards("t")[0]["shard_id"]
        for value in range(4):
            emulator.put_row("t", {"id": value}, {"v": value})
        parent_iterator = iterator(emulator, stream_id, parent)
        left, right = emulator.split_shard("t", parent)
        emulator.clock.advance(1)
        for value in range(4, 40):
            emulator.put_row("t", {"id": value}, {"v": value})
        records, end = drain(emulator, parent_iterator)
        assert len(records) == 4 and end is None
        child_records = [drain(emulator, iterator(emulator, stream_id, s))[0] for s in (left, right)]
        assert all(child_records) and sum(map(len, child_records)) == 36
        merged = emulator.merge_shards("t", left, right)
        emulator.clock.advance(1)
        emulator.put_row("t", {"id": 100}, {"v": 1})
        assert [s for s in emulator.shards("t") if s["shard_id"] == merged] == [
            {"shard_id": merged, "parent_id": left, "parent_sibling_id": right, "closed": False}
        ]
        _, shards = describe_all(emulator, stream_id, 100)
        assert shards == [
            (parent, None, None),
            (left, parent, None),
            (right, parent, None),
            (merged, left, right),
        ]
        for closed in (left, right):
            assert drain(emulator, iterator(emulator, stream_id, closed))[1] is None
        records, open_end = drain(emulator, iterator(emulator, stream_id, merged))
        assert [row.primary_key for _, row in records] == [(("id", 100),)] and open_end is not None
        assert len(emulator.rows("t")) == 41


def test_retention_trims_records_and_old_iterators():
    emulator = TablestoreEmulator(ManualClock(START_US))
    with emulator:
        stream_id = emulator.create_table("t", [("id", "INTEGER")], expiration_hours=1)
        shard = emulator.shards("t")[0]["shard_id"]
        emulator.put_row("t", {"id": 1}, {"v": 1})
        old = iterator(emulator, stream_id, shard)
        emulator.clock.advance(1800)
        emulator.put_row("t", {"id": 2}, {"v": 2})
        emulator.clock.advance(1801)
        status, error = call(emulator, "GetStreamRecord", messages.GetStreamRecordRequest(shard_iterator=old))
        assert (status, error.code) == (404, "OTSTrimmedDataAccess")
        records, _ = drain(emulator, iterator(emulator, stream_id, shard))
        assert [row.primary_key for _, row in records] == [(("id", 2),)]


def test_bad_signature_and_skew_are_refused(emulator):
    request = messages.ListStreamRequest()
    status, error = call(emulator, "ListStream", request, secret="wrong")
    assert (status, error.code) == (403, "OTSAuthFailed")
    assert "x-ots-signature does not match" in error.message
    status, error = call(emulator, "ListStream", request, skew=timedelta(minutes=20))
    assert (status, error.code) == (403, "OTSAuthFailed")
    reply = requests.post(f"{emulator.endpoint}/ListStream", data=b"", timeout=10)
    assert reply.status_code == 403
    assert messages.Error.FromString(reply.content).code == "OTSAuthFailed"


def test_parameter_errors(emulator):
    stream_id = emulator.create_table("t", [("id", "INTEGER")])
    status, error = call(emulator, "GetStreamRecord", messages.GetStreamRecordRequest(shard_iterator="%%%"))
    assert (status, error.code) == (400, "OTSParameterInvalid")
    status, error = call(
        emulator, "GetShardIterator", messages.GetShardIteratorRequest(stream_id=stream_id, shard_id="nope")
    )
    assert (status, error.code) == (404, "OTSObjectNotExist")


def test_injected_faults_fail_the_next_calls(emulator):
    emulator.create_table("t", [("id", "INTEGER")])
    emulator.inject("ListStream", "OTSServerBusy", times=2)
    for _ in range(2):
        status, error = call(emulator, "ListStream", messages.ListStreamRequest())
        assert (status, error.code) == (503, "OTSServerBusy")
    assert call(emulator, "ListStream", messages.ListStreamRequest())[0] == 200
    with pytest.raises(ValueError, match="cannot inject into 'PutRow'"):
        emulator.inject("PutRow", "OTSServerBusy")
