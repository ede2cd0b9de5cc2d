"""Writes and reads one Table Store table through the official ``tablestore`` SDK.

Run by ``tests/sources/tablestore/test_tablestore_sdk.py`` with the SDK's own interpreter
(``.venv-tablestore-sdk/bin/python``: the SDK pins ``protobuf<6``, so it cannot live in the project's
environment). Argument: a JSON object with ``endpoint``, ``instance``, ``access_key_id``,
``access_key_secret``, ``table`` and ``region`` (``null``: V2 signing; a region: V4 signing, as the SDK
does when given one). Output (stdout): a JSON object with

- ``stream``: the stream details ``DescribeTable`` answered, as the SDK parsed them;
- ``writes``: every accepted write in the order it was made, as the stream record it must become:
  ``action``, ``key`` and ``cells`` (``[name, op, value, version]``; version ``null`` where the service
  assigns it);
- ``refused``: ``[call, HTTP status, error code]`` of every refusal the SDK raised (``OTSServiceError``),
  and ``batch``: ``[is_ok, error code]`` of every row of the ``BatchWriteRow``;
- ``rows``: what ``GetRow`` returned (``[key, [[name, value, version], ...]]`` or ``null``), per key at
  the end and at a few points between the writes; ``forward`` / ``backward`` / ``pages``: what
  ``GetRange`` returned (rows in order; the primary keys it gave to go on from).

Values are tagged for JSON: ``{"int": 1}``, ``{"float": 1.5}``, ``{"bool": true}``, ``{"str": "x"}``,
``{"bytes": "<base64>"}``.
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

from tablestore import (
    INF_MAX,
    INF_MIN,
    BatchWriteRowRequest,
    CapacityUnit,
    Condition,
    DeleteRowItem,
    OTSClient,
    OTSServiceError,
    PutRowItem,
    ReservedThroughput,
    Row,
    RowExistenceExpectation,
    TableInBatchWriteRowItem,
    TableMeta,
    TableOptions,
    UpdateRowItem,
)

IGNORE = Condition(RowExistenceExpectation.IGNORE)
EXPECT_EXIST = Condition(RowExistenceExpectation.EXPECT_EXIST)
EXPECT_NOT_EXIST = Condition(RowExistenceExpectation.EXPECT_NOT_EXIST)
STREAM_HOURS = 24
#: A cell version given by the writer (ms), so the stream must carry exactly it.
VERSION = 1_700_000_000_000


def tagged(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, float):
        return {"float": value}
    if isinstance(value, str):
        return {"str": value}
    return {"bytes": base64.b64encode(bytes(value)).decode("ascii")}


def key_of(primary_key: list[tuple[str, Any]]) -> list[list[Any]]:
    return [[name, tagged(value)] for name, value in primary_key]


def columns_of(columns: list[tuple[str, Any, int]]) -> list[list[Any]]:
    """A read row's columns as ``[name, value, version]``."""
    return [[name, tagged(value), version] for name, value, version in columns]


def row_of(read: Any) -> list[Any] | None:
    """A row ``GetRow`` or ``GetRange`` returned, as ``[key, columns]`` (``None``: no row)."""
    return None if read is None else [key_of(read.primary_key), columns_of(read.attribute_columns)]


def put_cells(columns: list[tuple]) -> list[list[Any]]:
    """The PUT_ROW cells of a put's columns (``(name, value)`` or ``(name, value, version)``)."""
    return [
        [column[0], "PUT", tagged(column[1]), column[2] if len(column) == 3 else None] for column in columns
    ]


def update_cells(change: dict[str, list]) -> list[list[Any]]:
    """The UPDATE_ROW cells of an update, in the order the SDK writes them (its dict's order)."""
    cells: list[list[Any]] = []
    for kind, columns in change.items():
        for column in columns:
            if kind == "put":
                cells.append([column[0], "PUT", tagged(column[1]), column[2] if len(column) == 3 else None])
            elif kind == "delete_all":
                cells.append([column, "DELETE_ALL_VERSION", None, None])
            else:
                cells.append([column[0], "DELETE_ONE_VERSION", None, column[2]])
    return cells


def create_table_with_stream(client: OTSClient, table: str) -> None:
    """``CreateTable`` with a stream: the SDK's own request, plus the ``stream_spec`` its message has
    but its ``create_table`` does not take."""
    encoders = client.protocol.encoder.api_encode_map
    plain = encoders["CreateTable"]

    def with_stream(*args: Any, **kwargs: Any) -> Any:
        request = plain(*args, **kwargs)
        request.stream_spec.enable_stream = True
        request.stream_spec.expiration_time = STREAM_HOURS
        return request

    encoders["CreateTable"] = with_stream
    try:
        meta = TableMeta(table, [("region", "STRING"), ("id", "INTEGER")])
        client.create_table(meta, TableOptions(), ReservedThroughput(CapacityUnit(0, 0)))
    finally:
        encoders["CreateTable"] = plain


def describe_stream_details(client: OTSClient, table: str) -> dict[str, Any]:
    """``DescribeTable``'s stream details, from the answer the SDK parsed (its ``describe_table``
    result leaves them out)."""
    decoders = client.protocol.decoder.api_decode_map
    plain = decoders["DescribeTable"]
    parsed: list[Any] = []

    def keeping(body: bytes, request_id: str) -> Any:
        response, proto = plain(body, request_id)
        parsed.append(proto)
        return response, proto

    decoders["DescribeTable"] = keeping
    try:
        described = client.describe_table(table)
    finally:
        decoders["DescribeTable"] = plain
    details = parsed[0].stream_details
    return {
        "table": described.table_meta.table_name,
        "primary_key": [list(column) for column in described.table_meta.schema_of_primary_key],
        "enable_stream": details.enable_stream,
        "stream_id": details.stream_id,
        "expiration_time": details.expiration_time,
    }


def main(config: dict[str, Any]) -> dict[str, Any]:
    region = config["region"]
    client = OTSClient(
        config["endpoint"],
        config["access_key_id"],
        config["access_key_secret"],
        config["instance"],
        region=region,
    )
    table = config["table"]
    out: dict[str, Any] = {"writes": [], "refused": [], "rows": {}}

    def wrote(action: str, primary_key: list[tuple[str, Any]], cells: list[list[Any]]) -> None:
        out["writes"].append({"action": action, "key": key_of(primary_key), "cells": cells})

    def refused(call: str, attempt: Any) -> None:
        try:
            attempt()
        except OTSServiceError as error:
            out["refused"].append([call, error.get_http_status(), error.get_error_code()])
        else:
            out["refused"].append([call, 200, None])

    create_table_with_stream(client, table)
    out["stream"] = describe_stream_details(client, table)
    out["tables"] = list(client.list_table())

    ann = [("region", "emea"), ("id", 1)]
    bob = [("region", "amer"), ("id", 2)]
    cat = [("region", "apac"), ("id", 3)]
    dan = [("region", "emea"), ("id", 4)]
    ann_columns = [
        ("name", "ann"),
        ("price", 9.5),
        ("paid", True),
        ("blob", bytearray(b"\x00\x01")),
        ("note", "n"),
    ]
    client.put_row(table, Row(ann, ann_columns), IGNORE)
    wrote("PUT_ROW", ann, put_cells(ann_columns))
    bob_columns = [("name", "bob"), ("qty", 3, VERSION)]
    client.put_row(table, Row(bob, bob_columns), EXPECT_NOT_EXIST)
    wrote("PUT_ROW", bob, put_cells(bob_columns))

    _, read, _ = client.get_row(table, ann, max_version=1)
    out["rows"]["ann_put"] = row_of(read)
    note_version = next(version for name, _, version in read.attribute_columns if name == "note")
    change = {
        "put": [("name", "anna"), ("qty", 4)],
        "delete_all": ["blob"],
        "delete": [("note", None, note_version)],
    }
    client.update_row(table, Row(ann, change), EXPECT_EXIST)
    wrote("UPDATE_ROW", ann, update_cells(change))
    missing_change = {"put": [("qty", 7)]}
    client.update_row(table, Row(cat, missing_change), IGNORE)  # a new row with just these columns
    wrote("UPDATE_ROW", cat, update_cells(missing_change))
    _, read, _ = client.get_row(table, cat, max_version=1)
    out["rows"]["cat_update"] = row_of(read)

    nobody = [("region", "apac"), ("id", 99)]
    refused("PutRow", lambda: client.put_row(table, Row(ann, [("name", "x")]), EXPECT_NOT_EXIST))
    refused(
        "UpdateRow", lambda: client.update_row(table, Row(nobody, {"put": [("name", "x")]}), EXPECT_EXIST)
    )
    refused("DeleteRow", lambda: client.delete_row(table, Row(nobody), EXPECT_EXIST))

    client.delete_row(table, Row(bob), IGNORE)
    wrote("DELETE_ROW", bob, [])

    dan_columns = [("name", "dan"), ("price", 1.25, VERSION + 1)]
    ann_change = {"put": [("paid", False)]}
    batch = BatchWriteRowRequest()
    batch.add(
        TableInBatchWriteRowItem(
            table,
            [
                PutRowItem(Row(dan, dan_columns), IGNORE),
                UpdateRowItem(Row(ann, ann_change), EXPECT_EXIST),
                DeleteRowItem(Row(cat), IGNORE),
                PutRowItem(Row(ann, [("name", "x")]), EXPECT_NOT_EXIST),
            ],
        )
    )
    answer = client.batch_write_row(batch)
    out["batch"] = [
        [item.is_ok, item.error_code]
        for kind in ("put", "update", "delete")
        for item in getattr(answer, f"get_{kind}_by_table")(table)
    ]
    wrote("PUT_ROW", dan, put_cells(dan_columns))
    wrote("UPDATE_ROW", ann, update_cells(ann_change))
    wrote("DELETE_ROW", cat, [])

    for name, key in (("ann", ann), ("bob", bob), ("cat", cat), ("dan", dan)):
        _, read, _ = client.get_row(table, key, max_version=1)
        out["rows"][name] = row_of(read)

    start = [("region", INF_MIN), ("id", INF_MIN)]
    end = [("region", INF_MAX), ("id", INF_MAX)]
    forward, pages, following = [], [], start
    while following is not None:
        _, following, rows, _ = client.get_range(table, "FORWARD", following, end, limit=1, max_version=1)
        forward += [row_of(row) for row in rows]
        pages.append(None if following is None else key_of(following))
    out["forward"], out["pages"] = forward, pages
    _, following, rows, _ = client.get_range(table, "BACKWARD", end, start, max_version=1)
    out["backward"] = [row_of(row) for row in rows]
    out["backward_next"] = following

    wrong = OTSClient(
        config["endpoint"], config["access_key_id"], "not-the-secret", config["instance"], region=region
    )
    refused("PutRow", lambda: wrong.put_row(table, Row(ann, [("name", "x")]), IGNORE))
    if region is not None:
        elsewhere = OTSClient(
            config["endpoint"],
            config["access_key_id"],
            config["access_key_secret"],
            config["instance"],
            region=f"{region}-elsewhere",
        )
        refused("GetRow", lambda: elsewhere.get_row(table, ann, max_version=1))
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
