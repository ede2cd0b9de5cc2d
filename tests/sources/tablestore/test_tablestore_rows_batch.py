"""A shard's records staged as one Arrow batch give the rows staged record by record, and a staging
writer fed batches writes the files it writes from rows."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS
from airflow_provider_cdc.core.types import LogicalType
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.sources.tablestore.client import StreamRecord
from airflow_provider_cdc.sources.tablestore.protocol.plainbuffer import Cell, PlainBufferRow, SequenceInfo
from airflow_provider_cdc.sources.tablestore.records import ShardWindowRows, StagedRecordError
from airflow_provider_cdc.staging.parquet import StagingWriter

WINDOW = (1_767_225_600_000_000, 1_767_225_660_000_000)
VALUES = [0, -7, 2**62, 1.5, -0.0, float("nan"), True, "", 'q " \\', "é 漢字 \U0001f600", b"\x00\xff"]


def _records(seed: int, count: int) -> list[StreamRecord]:
    rng = random.Random(seed)
    names = ["amount", "note", "Zeta", "älter"]
    records = []
    for index in range(count):
        action = rng.choice(["PUT_ROW", "UPDATE_ROW", "DELETE_ROW"])
        key = (("region", rng.choice(["amer", "ü"])), ("order_id", rng.randrange(5)))
        cells = []
        for name in rng.sample(names, rng.randrange(len(names) + 1)):
            op = rng.choice(["PUT", "INCREMENT", "DELETE_ALL_VERSION", "DELETE_ONE_VERSION"])
            value = rng.choice(VALUES) if op in ("PUT", "INCREMENT") else None
            cells.append(
                Cell(name, value, op, rng.choice([1000, 2000]) if op != "DELETE_ALL_VERSION" else None)
            )
        sequence = SequenceInfo(rng.randrange(3), WINDOW[0] + rng.randrange(-5, 70_000_000), index)
        records.append(
            StreamRecord(action, PlainBufferRow(key, tuple(cells), action == "DELETE_ROW", sequence))
        )
    return records


def _rows() -> ShardWindowRows:
    return ShardWindowRows("orders", 'shard-"1"', *WINDOW, 2, {"note": LogicalType("STRING")})


@pytest.mark.parametrize("seed", range(4))
def test_a_batch_holds_the_rows_of_its_records(seed: int) -> None:
    records = _records(seed, 300)
    by_row, by_batch = _rows(), _rows()
    expected = [by_row.row(record) for record in records]
    batches = [by_batch.batch(records[start : start + 64]) for start in range(0, len(records), 64)]
    got = [tuple(row[name] for name in STAGED_CHANGE_COLUMNS) for b in batches for row in b.to_pylist()]
    assert [row[1] for row in got] == [row[1] for row in expected]
    assert [row[:1] + row[2:] for row in got] == [row[:1] + row[2:] for row in expected]
    assert by_batch.position == by_row.position == len(records)


def test_a_record_the_rows_refuse_is_refused_in_a_batch() -> None:
    bad = StreamRecord("MERGE_ROW", PlainBufferRow((("k", 1),), (), False, SequenceInfo(0, WINDOW[0], 0)))
    with pytest.raises(StagedRecordError, match="unknown action 'MERGE_ROW'"):
        _rows().batch([*_records(1, 3), bad])


def test_batches_and_rows_write_the_same_staging(tmp_path: Path) -> None:
    window = Window(
        datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 1, 1, 0, 1, tzinfo=timezone.utc)
    )
    records = _records(7, 500)
    rows, batched = _rows(), _rows()
    with StagingWriter(str(tmp_path / "rows"), "s", window, 'shard-"1"', rows_per_file=180) as writer:
        writer.write_tuples(rows.row(record) for record in records)
    with StagingWriter(str(tmp_path / "batches"), "s", window, 'shard-"1"', rows_per_file=180) as writer:
        writer.write_tuples([batched.row(record) for record in records[:10]])
        for start in range(10, len(records), 128):
            writer.write_batch(batched.batch(records[start : start + 128]))
    written = [sorted((tmp_path / side).rglob("*.parquet")) for side in ("rows", "batches")]
    assert [path.name for path in written[0]] == [path.name for path in written[1]] != []
    for one, other in zip(*written, strict=True):
        assert pq.read_table(one).equals(pq.read_table(other))
