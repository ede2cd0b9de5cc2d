"""The Table Store emulator at the wire: signed protobuf POSTs (V2 and V4), message by message."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import requests

from airflow_provider_cdc.core.timestamps import from_micros
from airflow_provider_cdc.sources.tablestore.protocol import messages
from airflow_provider_cdc.sources.tablestore.protocol.plainbuffer import (
    INF_MAX,
    INF_MIN,
    Cell,
    PlainBufferRow,
    SequenceInfo,
    decode_row,
    decode_rows,
    encode_row,
)
from airflow_provider_cdc.sources.tablestore.protocol.signing import (
    request_headers,
    response_signing_key,
    verify_response,
)
from airflow_provider_cdc.testing.tablestore_emulator import ManualClock, SystemClock, TablestoreEmulator

START_US = 1_700_000_000_000_000


@pytest.fixture
def emulator():
    emulator = TablestoreEmulator(ManualClock(START_US), shards=2, seed=7)
    emulator.start()
    yield emulator
    emulator.stop()


def call(emulator, operation, request, *, secret="test-secret", skew=timedelta(0), region=None):
    """POST one signed call (V4 for ``region``); return (status, parsed response or Error)."""
    body = request.SerializeToString()
    now = from_micros(emulator.clock())
    headers = request_headers(
        f"/{operation}",
        body,
        access_key_id="test-key",
        access_key_secret=secret,
        instance="demo",
        now=now + skew,
        region=region,
    )
    reply = requests.post(f"{emulator.endpoint}/{operation}", data=body, headers=headers, timeout=10)
    if reply.status_code == 200:
        verify_response(
            f"/{operation}",
            reply.headers,
            reply.content,
            access_key_id="test-key",
            access_key_secret=response_signing_key(headers, "test-secret"),
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
    with pytest.raises(ValueError, match="cannot inject into 'UpdateTable'"):
        emulator.inject("UpdateTable", "OTSServerBusy")


# --- tables and rows ---------------------------------------------------------------------------------


def ok(emulator, operation, request, **kwargs):
    status, response = call(emulator, operation, request, **kwargs)
    assert status == 200, response
    return response


def refusal(emulator, operation, request, **kwargs):
    """(status, code, message) of a call that must fail."""
    status, error = call(emulator, operation, request, **kwargs)
    assert status != 200, error
    return status, error.code, error.message


def create_table(table, key, *, stream_hours=None, **options):
    request = messages.CreateTableRequest()
    request.table_meta.table_name = table
    for name, type_ in key:
        request.table_meta.primary_key.add(name=name, type=getattr(messages, type_))
    request.reserved_throughput.capacity_unit.read = 0
    request.reserved_throughput.capacity_unit.write = 0
    if stream_hours is not None:
        request.stream_spec.enable_stream = True
        request.stream_spec.expiration_time = stream_hours
    for name, value in options.items():
        setattr(request.table_options, name, value)
    return request


def put_request(table, key, *cells, condition=messages.IGNORE, return_pk=False):
    request = messages.PutRowRequest(table_name=table, row=encode_row(PlainBufferRow(key, cells)))
    request.condition.row_existence = condition
    if return_pk:
        request.return_content.return_type = messages.RT_PK
    return request


def update_request(table, key, *cells, condition=messages.IGNORE):
    request = messages.UpdateRowRequest(table_name=table, row_change=encode_row(PlainBufferRow(key, cells)))
    request.condition.row_existence = condition
    return request


def delete_request(table, key, condition=messages.IGNORE):
    request = messages.DeleteRowRequest(
        table_name=table, primary_key=encode_row(PlainBufferRow(key, deleted=True))
    )
    request.condition.row_existence = condition
    return request


def get_row(emulator, table, key, columns=()):
    request = messages.GetRowRequest(
        table_name=table, primary_key=encode_row(PlainBufferRow(key)), max_versions=1
    )
    request.columns_to_get.extend(columns)
    row = ok(emulator, "GetRow", request).row
    return decode_row(row) if row else None


def test_tables_are_created_described_listed_and_deleted(emulator):
    ok(
        emulator,
        "CreateTable",
        create_table("orders", [("id", "INTEGER"), ("k", "STRING")], stream_hours=12),
    )
    ok(emulator, "CreateTable", create_table("plain", [("b", "BINARY")]))
    described = ok(emulator, "DescribeTable", messages.DescribeTableRequest(table_name="orders"))
    assert [(c.name, c.type) for c in described.table_meta.primary_key] == [
        ("id", messages.INTEGER),
        ("k", messages.STRING),
    ]
    assert (described.table_options.max_versions, described.table_options.time_to_live) == (1, -1)
    [stream] = ok(emulator, "ListStream", messages.ListStreamRequest()).streams  # "plain" has none
    details = described.stream_details
    assert (details.enable_stream, details.stream_id, details.expiration_time, details.last_enable_time) == (
        True,
        stream.stream_id,
        12,
        START_US,
    )
    plain = ok(emulator, "DescribeTable", messages.DescribeTableRequest(table_name="plain")).stream_details
    assert not plain.enable_stream and not plain.HasField("stream_id")
    assert list(ok(emulator, "ListTable", messages.ListTableRequest()).table_names) == ["orders", "plain"]

    again = create_table("orders", [("id", "INTEGER")], stream_hours=12)
    assert refusal(emulator, "CreateTable", again) == (
        409,
        "OTSObjectAlreadyExist",
        "Requested table already exists.",
    )
    versions = create_table("versions", [("id", "INTEGER")], max_versions=2)
    status, code, message = refusal(emulator, "CreateTable", versions)
    assert (status, code) == (400, "OTSParameterInvalid") and "max_versions" in message

    ok(emulator, "DeleteTable", messages.DeleteTableRequest(table_name="orders"))
    gone = messages.DescribeTableRequest(table_name="orders")
    assert refusal(emulator, "DescribeTable", gone) == (
        404,
        "OTSObjectNotExist",
        "Requested table does not exist.",
    )
    stream_gone = messages.DescribeStreamRequest(stream_id=stream.stream_id)
    assert refusal(emulator, "DescribeStream", stream_gone)[:2] == (404, "OTSObjectNotExist")


def test_row_writes_are_the_stream_records_and_reads_see_them():
    with TablestoreEmulator(ManualClock(START_US)) as emulator:
        ok(emulator, "CreateTable", create_table("t", [("id", "INTEGER")], stream_hours=24))
        [stream] = ok(emulator, "ListStream", messages.ListStreamRequest(table_name="t")).streams
        one, two = (("id", 1),), (("id", 2),)
        put = ok(
            emulator, "PutRow", put_request("t", one, Cell("n", 5), Cell("s", "x", "PUT", 42), return_pk=True)
        )
        assert decode_row(put.row).primary_key == one
        emulator.clock.advance(1)
        ok(
            emulator,
            "UpdateRow",
            update_request(
                "t",
                one,
                Cell("n", 2, "INCREMENT"),
                Cell("s", None, "DELETE_ONE_VERSION", 42),
                Cell("gone", None, "DELETE_ALL_VERSION"),
                condition=messages.EXPECT_EXIST,
            ),
        )
        ok(emulator, "UpdateRow", update_request("t", two, Cell("only", True)))  # a missing row
        assert get_row(emulator, "t", two).cells == (Cell("only", True, "PUT", START_US // 1000 + 1000),)
        ok(emulator, "DeleteRow", delete_request("t", two))

        later = START_US // 1000 + 1000
        assert [
            (action, row.primary_key, row.cells) for action, row in all_records(emulator, stream.stream_id)
        ] == [
            (messages.PUT_ROW, one, (Cell("n", 5, "PUT", START_US // 1000), Cell("s", "x", "PUT", 42))),
            (
                messages.UPDATE_ROW,
                one,
                (
                    Cell("n", 7, "PUT", later),  # an increment is recorded as the value it made
                    Cell("s", None, "DELETE_ONE_VERSION", 42),
                    Cell("gone", None, "DELETE_ALL_VERSION"),
                ),
            ),
            (messages.UPDATE_ROW, two, (Cell("only", True, "PUT", later),)),
            (messages.DELETE_ROW, two, ()),
        ]
        assert get_row(emulator, "t", one) == PlainBufferRow(one, (Cell("n", 7, "PUT", later),))
        assert get_row(emulator, "t", one, columns=["nope"]) is None
        assert get_row(emulator, "t", two) is None

        ok(emulator, "CreateTable", create_table("quiet", [("id", "INTEGER")]))
        ok(emulator, "PutRow", put_request("quiet", one, Cell("v", 1.5)))
        assert get_row(emulator, "quiet", one).cells == (Cell("v", 1.5, "PUT", later),)
        assert list(ok(emulator, "ListStream", messages.ListStreamRequest(table_name="quiet")).streams) == []


def test_keys_conditions_and_cells_are_checked_as_the_service_checks_them(emulator):
    stream_id = emulator.create_table("t", [("id", "INTEGER"), ("k", "STRING")])
    good = (("id", 1), ("k", "a"))
    for key, message in [
        ((("id", 1),), "Validate PK size fail. Input: 1, Meta: 2."),
        ((("k", "a"), ("id", 1)), "Validate PK name fail. Input: k, Meta: id."),
        ((("id", "1"), ("k", "a")), "Validate PK type fail. Input: VT_STRING, Meta: VT_INTEGER."),
    ]:
        assert refusal(emulator, "PutRow", put_request("t", key, Cell("v", 1))) == (
            400,
            "OTSInvalidPK",
            message,
        )
    ok(emulator, "PutRow", put_request("t", good, Cell("v", 1), condition=messages.EXPECT_NOT_EXIST))
    exists = put_request("t", good, Cell("v", 2), condition=messages.EXPECT_NOT_EXIST)
    assert refusal(emulator, "PutRow", exists) == (403, "OTSConditionCheckFail", "Condition check failed.")
    missing = update_request("t", (("id", 2), ("k", "a")), Cell("v", 2), condition=messages.EXPECT_EXIST)
    assert refusal(emulator, "UpdateRow", missing) == (
        403,
        "OTSConditionCheckFail",
        "Condition check failed.",
    )
    assert refusal(emulator, "DeleteRow", delete_request("t", good, messages.EXPECT_NOT_EXIST)) == (
        400,
        "OTSParameterInvalid",
        "Invalid condition: EXPECT_NOT_EXIST while deleting row.",
    )
    twice = put_request("t", good, Cell("v", 1), Cell("v", 2))
    assert refusal(emulator, "PutRow", twice) == (
        400,
        "OTSParameterInvalid",
        "Duplicated attribute column name: 'v' while putting row.",
    )
    filtered = put_request("t", good, Cell("v", 3))
    filtered.condition.column_condition = b"\x08\x01"
    status, code, message = refusal(emulator, "PutRow", filtered)
    assert (status, code) == (
        400,
        "OTSParameterInvalid",
    ) and "not supported by the Table Store emulator" in message
    nowhere = put_request("nowhere", good, Cell("v", 1))
    assert refusal(emulator, "PutRow", nowhere) == (
        404,
        "OTSObjectNotExist",
        "Requested table does not exist.",
    )
    assert len(all_records(emulator, stream_id)) == 1  # only the accepted write
    assert emulator.rows("t") == {(1, "a"): {"v": 1}}


def test_get_range_pages_forward_and_backward_between_infinite_bounds(emulator):
    ok(emulator, "CreateTable", create_table("t", [("k", "STRING"), ("n", "INTEGER")]))
    for k, n in [("b", 2), ("a", 10), ("b", -1), ("a", 1)]:
        ok(emulator, "PutRow", put_request("t", (("k", k), ("n", n)), Cell("v", f"{k}{n}")))
    low, high = (("k", INF_MIN), ("n", INF_MIN)), (("k", INF_MAX), ("n", INF_MAX))

    def scan(start, end, direction=messages.FORWARD, limit=None, columns=()):
        request = messages.GetRangeRequest(
            table_name="t",
            direction=direction,
            inclusive_start_primary_key=encode_row(PlainBufferRow(start)),
            exclusive_end_primary_key=encode_row(PlainBufferRow(end)),
            max_versions=1,
        )
        request.columns_to_get.extend(columns)
        if limit is not None:
            request.limit = limit
        return request

    def values(response):
        following = response.next_start_primary_key
        return [row.cells[0].value for row in decode_rows(response.rows)], (
            decode_row(following).primary_key if following else None
        )

    first = ok(emulator, "GetRange", scan(low, high, limit=3))
    assert values(first) == (["a1", "a10", "b-1"], (("k", "b"), ("n", 2)))
    rest = ok(emulator, "GetRange", scan(decode_row(first.next_start_primary_key).primary_key, high, limit=3))
    assert values(rest) == (["b2"], None)
    assert values(ok(emulator, "GetRange", scan(high, low, messages.BACKWARD))) == (
        ["b2", "b-1", "a10", "a1"],
        None,
    )
    after_a = ((("k", "a"), ("n", INF_MAX)), (("k", "b"), ("n", INF_MAX)))
    assert values(ok(emulator, "GetRange", scan(*after_a))) == (["b-1", "b2"], None)
    assert values(ok(emulator, "GetRange", scan(low, high, columns=["nope"]))) == ([], None)
    assert refusal(emulator, "GetRange", scan(high, low)) == (
        400,
        "OTSParameterInvalid",
        "Begin key must less than end key in FORWARD",
    )
    assert refusal(emulator, "GetRange", scan(low, high, messages.BACKWARD))[2] == (
        "Begin key must more than end key in BACKWARD"
    )
    assert refusal(emulator, "GetRange", scan(low, high, limit=0))[2] == "The limit must be greater than 0."


def test_batch_write_row_writes_each_row_on_its_own_and_refuses_a_bad_request_whole(emulator):
    stream_id = emulator.create_table("t", [("id", "INTEGER")])

    def batch(*rows):
        request = messages.BatchWriteRowRequest()
        for table, kind, key, condition, cells in rows:
            item = next((t for t in request.tables if t.table_name == table), None) or request.tables.add(
                table_name=table
            )
            row = PlainBufferRow(key, cells, kind == messages.DELETE)
            added = item.rows.add(type=kind, row_change=encode_row(row))
            added.condition.row_existence = condition
        return request

    bad = batch(
        ("t", messages.PUT, (("id", 1),), messages.IGNORE, (Cell("v", 1),)),
        ("t", messages.DELETE, (("id", 2),), messages.EXPECT_NOT_EXIST, ()),
    )
    assert refusal(emulator, "BatchWriteRow", bad) == (
        400,
        "OTSParameterInvalid",
        "Invalid condition: EXPECT_NOT_EXIST while deleting row #1 in table: 't'.",
    )
    assert emulator.rows("t") == {} and all_records(emulator, stream_id) == []
    assert refusal(emulator, "BatchWriteRow", messages.BatchWriteRowRequest())[2] == (
        "No row is specified in BatchWriteRow."
    )
    response = ok(
        emulator,
        "BatchWriteRow",
        batch(
            ("t", messages.PUT, (("id", 1),), messages.IGNORE, (Cell("v", 1),)),
            ("t", messages.UPDATE, (("id", 3),), messages.EXPECT_EXIST, (Cell("v", 3),)),
            ("nowhere", messages.PUT, (("id", 1),), messages.IGNORE, (Cell("v", 1),)),
            ("t", messages.DELETE, (("id", 1),), messages.IGNORE, ()),
        ),
    )
    outcome = [
        (table.table_name, row.is_ok, row.error.code) for table in response.tables for row in table.rows
    ]
    assert outcome == [
        ("t", True, ""),
        ("t", False, "OTSConditionCheckFail"),
        ("t", True, ""),
        ("nowhere", False, "OTSObjectNotExist"),
    ]
    actions = [action for action, _ in all_records(emulator, stream_id)]
    assert actions == [messages.PUT_ROW, messages.DELETE_ROW]


def test_v4_signatures_are_checked_for_the_instance_region():
    with TablestoreEmulator(ManualClock(START_US), region="cn-hangzhou") as emulator:
        listed = ok(
            emulator, "ListTable", messages.ListTableRequest(), region="cn-hangzhou"
        )  # answer signed V4
        assert list(listed.table_names) == []
        status, code, message = refusal(
            emulator, "ListTable", messages.ListTableRequest(), region="cn-shanghai"
        )
        assert (status, code) == (403, "OTSAuthFailed") and "x-ots-signregion 'cn-shanghai'" in message
        status, code, message = refusal(
            emulator, "ListTable", messages.ListTableRequest(), region="cn-hangzhou", secret="wrong"
        )
        assert (status, code) == (403, "OTSAuthFailed") and "x-ots-signaturev4 does not match" in message


def test_the_default_clock_is_real_time_and_a_manual_clock_can_join_it():
    before_us = time.time_ns() // 1000
    emulator = TablestoreEmulator()
    assert isinstance(emulator.clock, SystemClock)
    assert before_us <= emulator.clock() <= time.time_ns() // 1000
    manual = ManualClock(START_US)
    assert manual.advance(5) == START_US + 5_000_000 == manual()
    manual.follow_real_time()
    assert before_us <= manual() <= time.time_ns() // 1000
    with pytest.raises(RuntimeError, match="follows real time"):
        manual.advance(1)
    with emulator:  # requests dated by real time are accepted
        assert list(ok(emulator, "ListTable", messages.ListTableRequest()).table_names) == []
