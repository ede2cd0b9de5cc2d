"""The official ``tablestore`` SDK against the Table Store emulator, signed V2 and V4.

The SDK (in ``.venv-tablestore-sdk``: it pins ``protobuf<6``) creates a table with a stream, writes it
(``PutRow``, ``UpdateRow``, ``DeleteRow``, ``BatchWriteRow``), reads it (``GetRow``, ``GetRange``) and
meets failed row conditions and wrong signatures (``tests/sources/tablestore/tablestore_sdk_writer.py``). The
stream is then read back through the project's own client: it must hold exactly the SDK's writes.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_cdc.sources.tablestore.client import StreamRecord, TablestoreStreamClient
from airflow_provider_cdc.testing.tablestore_emulator import TablestoreEmulator

ROOT = Path(__file__).resolve().parents[3]
SDK_VENV = ROOT / ".venv-tablestore-sdk"
WRITER = Path(__file__).with_name("tablestore_sdk_writer.py")
INSTANCE, REGION = "sdk", "cn-hangzhou"
KEY_ID, SECRET = "test-key", "test-secret"

pytestmark = pytest.mark.skipif(
    not (SDK_VENV / "bin" / "python").exists(),
    reason=f"{SDK_VENV.name} (the official tablestore SDK) does not exist: scripts/setup.sh creates it",
)

ANN = (("region", "emea"), ("id", 1))
DAN = (("region", "emea"), ("id", 4))
#: The table's rows after the SDK's writes.
FINAL_ROWS = {
    ANN: {"name": "anna", "price": 9.5, "paid": False, "qty": 4},
    DAN: {"name": "dan", "price": 1.25},
}
Key = tuple[tuple[str, Any], ...]
Written = tuple[str, Key, list[tuple[str, str, Any, int | None]]]


@dataclass(frozen=True)
class SdkRun:
    """What the SDK wrote and read (its JSON output), and the stream the project's client read after."""

    region: str | None
    table: str
    out: dict[str, Any]
    stream_id: str
    shards: dict[str, list[StreamRecord]]
    started_ms: int
    ended_ms: int


@pytest.fixture(scope="module")
def emulator() -> Iterator[TablestoreEmulator]:
    # On real time (the default clock): the SDK dates its requests and checks the answers' dates itself.
    with TablestoreEmulator(
        instance=INSTANCE, access_keys={KEY_ID: SECRET}, region=REGION, shards=2
    ) as running:
        yield running


@pytest.fixture(scope="module", params=[None, REGION], ids=["v2-signed", "v4-signed"])
def sdk_run(request: pytest.FixtureRequest, emulator: TablestoreEmulator) -> SdkRun:
    region = request.param
    table = "orders_v4" if region else "orders_v2"
    config = {
        "endpoint": emulator.endpoint,
        "instance": INSTANCE,
        "access_key_id": KEY_ID,
        "access_key_secret": SECRET,
        "table": table,
        "region": region,
    }
    started_ms = time.time_ns() // 1_000_000
    done = subprocess.run(
        [str(SDK_VENV / "bin" / "python"), str(WRITER), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    ended_ms = time.time_ns() // 1_000_000
    assert done.returncode == 0, done.stderr[-4000:]
    stream_id, shards = read_stream(emulator, table)
    return SdkRun(region, table, json.loads(done.stdout), stream_id, shards, started_ms, ended_ms)


def read_stream(emulator: TablestoreEmulator, table: str) -> tuple[str, dict[str, list[StreamRecord]]]:
    """The table's stream id and every shard's records, read with the project's client (real time)."""
    client = TablestoreStreamClient(emulator.endpoint, INSTANCE, KEY_ID, SECRET)
    try:
        [stream] = client.list_streams(table)
        shards: dict[str, list[StreamRecord]] = {}
        for shard in client.describe_stream(stream.stream_id).shards:
            records = shards.setdefault(shard.shard_id, [])
            iterator: str | None = client.get_shard_iterator(stream.stream_id, shard.shard_id)
            while iterator is not None:
                batch = client.get_stream_records(iterator, 2)
                records.extend(batch.records)
                if not batch.records and not batch.may_more_record:
                    break
                iterator = batch.next_iterator
        return stream.stream_id, shards
    finally:
        client.close()


def untag(tagged: dict[str, Any] | None) -> Any:
    if tagged is None:
        return None
    [(kind, value)] = tagged.items()
    return base64.b64decode(value) if kind == "bytes" else value


def key_of(tagged_key: list[list[Any]]) -> Key:
    return tuple((name, untag(value)) for name, value in tagged_key)


def read_row(row: list[Any] | None) -> tuple[Key, dict[str, Any]] | None:
    """A row the SDK read (``[key, [[name, value, version], ...]]``) as ``(key, {name: value})``."""
    if row is None:
        return None
    return key_of(row[0]), {name: untag(value) for name, value, _ in row[1]}


def writes(run: SdkRun) -> list[Written]:
    """What the SDK wrote, as the records it must become; a version the service assigns is ``None``."""
    return [
        (
            write["action"],
            key_of(write["key"]),
            [(name, op, untag(value), version) for name, op, value, version in write["cells"]],
        )
        for write in run.out["writes"]
    ]


def records(run: SdkRun) -> dict[str, list[Written]]:
    """The stream as the project's client decoded it, shard by shard, in the same shape."""
    return {
        shard_id: [
            (r.action, r.key, [(c.name, c.op, c.value, c.timestamp_ms) for c in r.cells])
            for r in shard_records
        ]
        for shard_id, shard_records in run.shards.items()
    }


def test_describe_table_shows_the_stream_the_project_client_lists(sdk_run: SdkRun) -> None:
    assert sdk_run.out["stream"] == {
        "table": sdk_run.table,
        "primary_key": [["region", "STRING"], ["id", "INTEGER"]],
        "enable_stream": True,
        "stream_id": sdk_run.stream_id,
        "expiration_time": 24,
    }
    assert sdk_run.table in sdk_run.out["tables"]


def test_every_accepted_write_is_one_record_in_its_shard_in_write_order(sdk_run: SdkRun) -> None:
    written = writes(sdk_run)
    assert [action for action, _, _ in written] == [
        "PUT_ROW", "PUT_ROW", "UPDATE_ROW", "UPDATE_ROW", "DELETE_ROW", "PUT_ROW", "UPDATE_ROW", "DELETE_ROW",
    ]  # fmt: skip
    read = records(sdk_run)
    assert sum(map(len, read.values())) == len(written)  # refused writes left no record
    assigned: list[int] = []
    for shard_id, shard_records in read.items():
        keys = {key for _, key, _ in shard_records}
        elsewhere = {key for other, rows in read.items() if other != shard_id for _, key, _ in rows}
        assert not keys & elsewhere, "a key's records are all in one shard"
        expected = [write for write in written if write[1] in keys]
        assert len(shard_records) == len(expected)
        for (action, key, cells), (want_action, want_key, want_cells) in zip(
            shard_records, expected, strict=True
        ):
            assert (action, key) == (want_action, want_key)
            assert [cell[:3] for cell in cells] == [
                cell[:3] for cell in want_cells
            ]  # name, op, value (and type)
            for cell, want in zip(cells, want_cells, strict=True):
                if want[3] is None and want[1] == "PUT":
                    assigned.append(cell[3])
                else:
                    assert cell[3] == want[3], f"{key} {cell[0]}: version"
        stamps = [(r.sequence.timestamp_us, r.sequence.row_index) for r in sdk_run.shards[shard_id]]
        assert stamps == sorted(set(stamps))
    assert assigned and all(sdk_run.started_ms <= version <= sdk_run.ended_ms for version in assigned)
    first_put = next(cells for rows in read.values() for action, key, cells in rows if key == ANN)
    versions_read = {name: version for name, _, version in sdk_run.out["rows"]["ann_put"][1]}
    assert {name: version for name, _, _, version in first_put} == versions_read


def test_reads_return_what_was_written(sdk_run: SdkRun, emulator: TablestoreEmulator) -> None:
    rows = sdk_run.out["rows"]
    assert emulator.rows(sdk_run.table) == {tuple(v for _, v in key): row for key, row in FINAL_ROWS.items()}
    assert read_row(rows["ann_put"]) == (
        ANN,
        {"name": "ann", "price": 9.5, "paid": True, "blob": b"\x00\x01", "note": "n"},
    )
    # UpdateRow of a missing row made a row of just its columns.
    assert read_row(rows["cat_update"]) == ((("region", "apac"), ("id", 3)), {"qty": 7})
    assert [read_row(rows[name]) for name in ("ann", "bob", "cat", "dan")] == [
        (ANN, FINAL_ROWS[ANN]),
        None,
        None,
        (DAN, FINAL_ROWS[DAN]),
    ]
    forward = [read_row(row) for row in sdk_run.out["forward"]]
    assert forward == [(ANN, FINAL_ROWS[ANN]), (DAN, FINAL_ROWS[DAN])]
    assert [key_of(key) if key else None for key in sdk_run.out["pages"]] == [DAN, None]  # limit 1
    assert [read_row(row) for row in sdk_run.out["backward"]] == forward[::-1]
    assert sdk_run.out["backward_next"] is None


def test_refusals_reach_the_sdk_as_service_errors(sdk_run: SdkRun) -> None:
    expected = [
        ["PutRow", 403, "OTSConditionCheckFail"],  # EXPECT_NOT_EXIST on a row that exists
        ["UpdateRow", 403, "OTSConditionCheckFail"],  # EXPECT_EXIST on a row that does not
        ["DeleteRow", 403, "OTSConditionCheckFail"],
        ["PutRow", 403, "OTSAuthFailed"],  # a wrong secret
    ]
    if sdk_run.region is not None:
        expected.append(["GetRow", 403, "OTSAuthFailed"])  # signed for another region
    assert sdk_run.out["refused"] == expected
    # BatchWriteRow: put, put refused by its condition (alone), update, delete.
    assert sdk_run.out["batch"] == [
        [True, None],
        [False, "OTSConditionCheckFail"],
        [True, None],
        [True, None],
    ]
