"""The workload's own ground-truth logic: value encoding, projections, history and state."""

from __future__ import annotations

import math
import random
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from airflow_provider_cdc.testing.workload import (
    BULK_TABLE,
    DELETE,
    INSERT,
    TABLES_BY_NAME,
    UPDATE,
    WORKLOAD_TABLES,
    BulkWorkload,
    CommittedTransaction,
    ExpectedMod,
    Workload,
    _History,
    _random_value,
    apply_mod,
    decode_json_value,
    encode_json_value,
    schema_ddl,
)

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_schema_covers_the_column_types_and_streams() -> None:
    codes = {
        (column.code, column.type_json.get("array_element_type", {}).get("code"))
        for table in WORKLOAD_TABLES
        for column in table.columns
    }
    for code in ("INT64", "STRING", "FLOAT64", "BOOL", "NUMERIC", "TIMESTAMP", "DATE", "BYTES", "JSON"):
        assert (code, None) in codes
    assert ("ARRAY", "STRING") in codes
    assert all(len(table.key_columns) >= 2 for table in WORKLOAD_TABLES)
    assert any(column.commit_timestamp for table in WORKLOAD_TABLES for column in table.columns)
    ddl = schema_ddl()
    assert "CREATE CHANGE STREAM WorkloadChanges FOR ALL OPTIONS (retention_period = '7d')" in ddl
    assert (
        "CREATE CHANGE STREAM OrderStatusChanges FOR Orders(Status, Amount) OPTIONS (retention_period = '7d')"
        in ddl
    )
    assert "UpdatedAt TIMESTAMP OPTIONS (allow_commit_timestamp=true)" in ddl[0]
    assert "PRIMARY KEY (Region, CustomerId)" in ddl[0]
    with pytest.raises(ValueError, match="invalid retention period"):
        schema_ddl(retention="7d'); DROP TABLE Orders; --")


def test_encoding_round_trips_every_generated_value() -> None:
    rng = random.Random(1)
    for table in WORKLOAD_TABLES:
        for column in table.value_columns:
            if column.commit_timestamp:
                continue
            for _ in range(200):
                value = _random_value(rng, column)
                encoded = encode_json_value(value, column.type_json)
                assert decode_json_value(encoded, column.type_json) == value, (column.name, value, encoded)


@pytest.mark.parametrize(
    ("type_json", "value", "encoded"),
    [
        ({"code": "INT64"}, -(2**63), "-9223372036854775808"),
        ({"code": "NUMERIC"}, Decimal("-12.500"), "-12.500"),
        ({"code": "FLOAT64"}, float("inf"), "Infinity"),
        ({"code": "FLOAT64"}, 0.25, 0.25),
        ({"code": "BYTES"}, b"\x00\xff", "AP8="),
        ({"code": "DATE"}, date(2026, 2, 28), "2026-02-28"),
        ({"code": "TIMESTAMP"}, T0 + timedelta(microseconds=5), "2026-01-01T00:00:00.000005Z"),
        ({"code": "JSON"}, {"b": [1, None], "a": "ü"}, '{"a":"ü","b":[1,null]}'),
        ({"code": "ARRAY", "array_element_type": {"code": "INT64"}}, [1, None], ["1", None]),
        ({"code": "BOOL"}, None, None),
    ],
)
def test_spanner_json_encoding(type_json: dict, value: object, encoded: object) -> None:
    assert encode_json_value(value, type_json) == encoded
    assert decode_json_value(encoded, type_json) == value


def test_decoding_rejects_values_of_the_wrong_shape() -> None:
    with pytest.raises(ValueError, match=r"Orders\.Quantity"):
        TABLES_BY_NAME["Orders"].decode_values({"Quantity": 1.5})
    with pytest.raises(ValueError, match="has no column 'Nope'"):
        TABLES_BY_NAME["Orders"].decode_values({"Nope": "1"})
    assert decode_json_value(7, {"code": "INT64"}) == 7  # an INT64 given as a JSON number is accepted


def test_projection_to_watched_columns() -> None:
    keys = {"CustomerId": 1, "OrderId": "o-1"}
    update = ExpectedMod(
        "Orders", UPDATE, keys, {"Status": "paid", "Paid": True}, {"Status": "new", "Paid": False}
    )
    assert update.project(("Status", "Amount")) == ExpectedMod(
        "Orders", UPDATE, keys, {"Status": "paid"}, {"Status": "new"}
    )
    assert ExpectedMod("Orders", UPDATE, keys, {"Paid": True}, {"Paid": False}).project(("Status",)) is None
    insert = ExpectedMod("Orders", INSERT, keys, {"Status": "new", "Paid": None}, {})
    assert insert.project(("Status",)) == ExpectedMod("Orders", INSERT, keys, {"Status": "new"}, {})
    delete = ExpectedMod("Orders", DELETE, keys, {}, {"Status": "new", "Paid": None})
    assert delete.project(("Status",)) == ExpectedMod("Orders", DELETE, keys, {}, {"Status": "new"})
    assert update.project(None) is update


def test_apply_mod_refuses_impossible_changes() -> None:
    keys = {"Shard": 1, "EntryId": 1}
    state: dict = {}
    apply_mod(state, ExpectedMod("Ledger", INSERT, keys, {"Memo": "a", "Kind": "fee"}, {}))
    # a replaced (or deleted and re-inserted) row comes as an INSERT of the new row, which replaces it
    apply_mod(state, ExpectedMod("Ledger", INSERT, keys, {"Memo": "a"}, {}))
    assert state == {"Ledger": {(1, 1): {"Shard": 1, "EntryId": 1, "Memo": "a"}}}
    apply_mod(state, ExpectedMod("Ledger", UPDATE, keys, {"Memo": "b"}, {"Memo": "a"}))
    assert state == {"Ledger": {(1, 1): {"Shard": 1, "EntryId": 1, "Memo": "b"}}}
    apply_mod(state, ExpectedMod("Ledger", DELETE, keys, {}, {"Memo": "b"}))
    with pytest.raises(ValueError, match="UPDATE of missing key"):
        apply_mod(state, ExpectedMod("Ledger", UPDATE, keys, {"Memo": "c"}, {}))


def test_history_windows_are_half_open() -> None:
    history = _History()
    stamps = [T0 + timedelta(seconds=s) for s in (1, 2, 2.000001, 5)]
    for index, stamp in enumerate(stamps):
        history.append(CommittedTransaction(index, stamp, ()))
    assert [t.index for t in history.between(T0 + timedelta(seconds=2), T0 + timedelta(seconds=5))] == [1, 2]
    assert [t.index for t in history.between(T0, T0 + timedelta(seconds=2))] == [0]
    with pytest.raises(AssertionError, match="is not after the previous commit"):
        history.append(CommittedTransaction(4, stamps[-1], ()))


def test_workload_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="split_every needs an emulator"):
        Workload(object(), None, seed=1).run(changes=10, split_every=5)
    with pytest.raises(ValueError, match="changes must be at least 1"):
        Workload(object(), None, seed=1).run(changes=0)
    with pytest.raises(ValueError, match="update_share and delete_share"):
        BulkWorkload(object(), None, update_share=0.7, delete_share=0.5)


def test_bulk_rows_change_every_written_column_with_the_revision() -> None:
    for entry in (0, 1, 63, 64, 999_999):
        row, next_row = BulkWorkload.row(entry, 4), BulkWorkload.row(entry, 5)
        assert BULK_TABLE.key_of(row) == BulkWorkload.key(entry) == BULK_TABLE.key_of(next_row)
        for column in ("Amount", "Kind", "Revision", "Memo"):
            assert row[column] != next_row[column]
        assert set(row) == set(BULK_TABLE.column_names)


def test_google_emulator_profile_draws_only_values_that_emulator_reports_faithfully() -> None:
    rng = random.Random(3)
    drawn: dict[str, list] = {}
    for table in WORKLOAD_TABLES:
        for column in table.value_columns:
            values = [_random_value(rng, column, "google-emulator") for _ in range(400)]
            drawn[f"{table.name}.{column.name}"] = values
            for value in values:
                if value is None:
                    continue
                assert encode_json_value(value, column.type_json) is not None
                items = value if column.code == "ARRAY" else [value]
                assert None not in items, (column.name, value)
                for item in items:
                    if isinstance(item, float):
                        assert math.isfinite(item)
                    if isinstance(item, datetime):
                        assert item.microsecond == 0 and item.year >= 1000
                    if isinstance(item, date):
                        assert item.year >= 1000
    # commit-timestamp columns get explicit whole-second timestamps in the past, not the sentinel
    updated = [v for v in drawn["Customers.UpdatedAt"] if v is not None]
    assert updated and all(isinstance(v, datetime) and v < datetime.now(timezone.utc) for v in updated)
    # NUMERIC uses its full 29 integer and 9 fractional digits
    balances = [v for v in drawn["Customers.Balance"] if v is not None]
    assert any(abs(v) >= Decimal("1e28") and v.as_tuple().exponent == -9 for v in balances)
    # the default profile keeps the commit timestamp sentinel and NULL array elements
    full = [_random_value(rng, WORKLOAD_TABLES[0].column("Tags")) for _ in range(400)]
    assert any(value and None in value for value in full)
    assert repr(_random_value(rng, WORKLOAD_TABLES[0].column("UpdatedAt"))) == "COMMIT_TIMESTAMP"


def test_workload_options_are_checked() -> None:
    with pytest.raises(ValueError, match="max_writes_per_row"):
        Workload(None, max_writes_per_row=0)
    with pytest.raises(ValueError, match="value_profile"):
        Workload(None, value_profile="fast")
