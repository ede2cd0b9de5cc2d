"""The Table Store staged row built from cached pieces equals the one built value by value."""

from __future__ import annotations

import random

import pytest

from airflow_provider_cdc.core.types import LogicalType
from airflow_provider_cdc.sources.tablestore.client import StreamRecord
from airflow_provider_cdc.sources.tablestore.protocol.plainbuffer import Cell, PlainBufferRow, SequenceInfo
from airflow_provider_cdc.sources.tablestore.records import ShardWindowRows, StagedRecordError

WINDOW = (1_767_225_600_000_000, 1_767_225_660_000_000)
VALUES = [
    0,
    -7,
    2**62,
    1.5,
    -0.0,
    3.25e-12,
    float("nan"),
    float("inf"),
    True,
    False,
    "",
    "plain",
    'quote " back \\ slash',
    "é ü 漢字 \U0001f600",
    "\x00\x1f",
    b"",
    b"\x00\xffbytes",
]


def _records(seed: int, count: int) -> list[StreamRecord]:
    rng = random.Random(seed)
    names = ["amount", "note", "Zeta", "älter", "b", "a_1"]
    records = []
    for index in range(count):
        action = rng.choice(["PUT_ROW", "UPDATE_ROW", "UPDATE_ROW", "DELETE_ROW"])
        key = (("region", rng.choice(["amer", "emea", "ü"])), ("order_id", rng.randrange(5)))
        if rng.random() < 0.1:
            key = (("region", rng.choice([1, b"k", 2.5])), ("order_id", rng.randrange(5)))
        cells = []
        for name in rng.sample(names, rng.randrange(len(names) + 1)):
            op = rng.choice(["PUT", "PUT", "INCREMENT", "DELETE_ALL_VERSION", "DELETE_ONE_VERSION"])
            version = rng.choice([1000, 2000, 3000])
            value = rng.choice(VALUES) if op in ("PUT", "INCREMENT") else None
            cells.append(Cell(name, value, op, version if op != "DELETE_ALL_VERSION" else None))
        sequence = SequenceInfo(rng.randrange(3), WINDOW[0] + rng.randrange(-5, 70_000_000), index)
        records.append(
            StreamRecord(action, PlainBufferRow(key, tuple(cells), action == "DELETE_ROW", sequence))
        )
    return records


def _pair() -> tuple[ShardWindowRows, ShardWindowRows]:
    declared = {"note": LogicalType("STRING"), "amount": LogicalType("FLOAT64")}
    return tuple(  # type: ignore[return-value]
        ShardWindowRows("orders", 'shard-"1"-ü', *WINDOW, 2, declared) for _ in range(2)
    )


@pytest.mark.parametrize("seed", range(8))
def test_fast_rows_equal_the_reference_rows(seed: int) -> None:
    fast, reference = _pair()
    for record in _records(seed, 400):
        assert fast.row(record) == reference._row_reference(record)
    assert fast.position == reference.position


def test_the_emulator_workload_rows_are_unchanged() -> None:
    """Rows as the benchmark's workload writes them (integers, floats, booleans, strings)."""
    fast, reference = _pair()
    rng = random.Random(5)
    for index in range(2000):
        cells = (
            Cell("amount", round(rng.uniform(1, 5000), 2), "PUT", 5),
            Cell("paid", rng.random() < 0.5, "PUT", 5),
            Cell("note", None, "DELETE_ALL_VERSION"),
            Cell("quantity", rng.randint(1, 40), "PUT", 5),
        )
        record = StreamRecord(
            rng.choice(["PUT_ROW", "UPDATE_ROW"]),
            PlainBufferRow(
                (("region", "amer"), ("order_id", index)), cells, False, SequenceInfo(1, WINDOW[0] + index, 0)
            ),
        )
        assert fast.row(record) == reference._row_reference(record)


def test_unknown_actions_and_operations_are_refused_alike() -> None:
    fast, reference = _pair()
    sequence = SequenceInfo(0, WINDOW[0], 0)
    bad_action = StreamRecord("MERGE_ROW", PlainBufferRow((("k", 1),), (), False, sequence))
    bad_op = StreamRecord(
        "UPDATE_ROW", PlainBufferRow((("k", 1),), (Cell("c", 1, "SWAP", 1),), False, sequence)
    )
    no_sequence = StreamRecord("PUT_ROW", PlainBufferRow((("k", 1),), (), False, None))
    for record in (bad_action, bad_op, no_sequence):
        with pytest.raises(StagedRecordError) as fast_error:
            fast.row(record)
        with pytest.raises(StagedRecordError) as reference_error:
            reference._row_reference(record)
        assert str(fast_error.value) == str(reference_error.value)
