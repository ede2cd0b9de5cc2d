"""BigQuery CDC over time and over every Spanner key: the real clients against the loopback fake.

* A window the ledger (target ``bigquery``) records is never sent again, also after BigQuery has
  forgotten a later DELETE (the fake's delete retention on its own clock); after a partial failure
  only the missing tables are sent; rows later windows superseded are never sent again.
* Keys BigQuery refuses as primary keys (BYTES, FLOAT64, FLOAT32) get the derived key ``_cdc_key``,
  or, with ``derived_key="never"``, the window is refused before anything is sent.
* NULL key values: completed from Delta like any key, carried by the derived key (which ``auto``
  chooses for a new table whose key column the source says is nullable), refused (before anything is
  sent) in a table keyed on its Spanner key.
"""

from __future__ import annotations

import base64
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pyarrow as pa
import pytest
from google.cloud import bigquery
from support.changes import spanner_columns
from support.metastores import connected_metastore

from airflow_provider_cdc.changesets.writer import Change, change_set_table, write_change_set
from airflow_provider_cdc.core.values import parse_column_types
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore
from airflow_provider_cdc.targets import images
from airflow_provider_cdc.targets.bigquery.commit import BIGQUERY as BIGQUERY_TARGET
from airflow_provider_cdc.targets.bigquery.keys import DERIVED_KEY_COLUMN, canonical_key
from airflow_provider_cdc.targets.bigquery.schema import BigQuerySchemaError
from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget
from airflow_provider_cdc.testing.bigquery_fake import DELETE_RETENTION, FakeBigQuery
from tests.targets.bigquery import test_bigquery_target as target_tests
from tests.targets.bigquery.test_bigquery_target import (
    DATASET,
    LINES,
    ORDERS,
    PIPELINE,
    PROJECT,
    START,
    WINDOW,
    History,
    _apply_delta,
    _bq_rows,
    _clients,
    _create_table,
    _expected,
    _operator,
    _sorted,
)

fake = target_tests.fake
store = target_tests.store

OTHER_CONN_ID = "cdc_metastore_bq_other"


def _windows(count: int) -> list[Window]:
    return [Window(START + i * WINDOW, START + (i + 1) * WINDOW) for i in range(count)]


def _upsert(keys: dict[str, Any], sequence: int, present: list[str] | None = None, **values: Any) -> Change:
    return Change(keys, "UPSERT", f"{sequence:016X}", START, values, present)


def _delete(keys: dict[str, Any], sequence: int) -> Change:
    return Change(keys, "DELETE", f"{sequence:016X}", START)


def _write(root: Path, window: Window, tables: dict[str, tuple[list[dict], list[Change]]]) -> None:
    write_change_set(
        str(root / window.window_id),
        {name: change_set_table(types, rows) for name, (types, rows) in tables.items()},
    )


@pytest.fixture
def other_store(tmp_path: Path, monkeypatch) -> Metastore:
    """A second, empty metastore (a new deployment): its ledger records no window."""
    return connected_metastore(monkeypatch, OTHER_CONN_ID, f"sqlite:///{tmp_path / 'other-metastore.db'}")


# ------------------------------------------------------------------------------------- exactly once
def test_a_rerun_after_the_delete_retention_leaves_a_row_a_later_window_deleted_deleted(
    fake: FakeBigQuery, store: Metastore, other_store: Metastore, tmp_path: Path
) -> None:
    first, second = _windows(2)
    columns = ORDERS[:2]
    _write(
        tmp_path,
        first,
        {"Orders": (columns, [_upsert({"Id": 1}, 1, Name="a"), _upsert({"Id": 2}, 2, Name="b")])},
    )
    _write(tmp_path, second, {"Orders": (columns, [_delete({"Id": 1}, 3)])})
    lake_root = str(tmp_path / "lake")
    lake = DeltaLakeTarget(lake_root)
    for window in (first, second):
        _apply_delta(lake, tmp_path, window)
        _operator(fake, tmp_path, lake_root, window).execute({})
    assert _bq_rows(fake, "Orders") == [{"Id": 2, "Name": "b"}]
    fake.advance_clock(DELETE_RETENTION + timedelta(days=1))  # BigQuery has forgotten the DELETE
    appended = fake.table(PROJECT, DATASET, "Orders").appended_rows

    # a clear or a backfill of window 1
    step = _operator(fake, tmp_path, lake_root, first)
    summary = step.execute({})["details"]

    assert _bq_rows(fake, "Orders") == [{"Id": 2, "Name": "b"}]
    assert summary["tables"]["Orders"]["already_sent"] is True and summary["tables"]["Orders"]["rows"] == 0
    assert fake.table(PROJECT, DATASET, "Orders").appended_rows == appended
    # A ledger that lacks the window (another metastore): the Delta table has applied window 2, so
    # window 1's image of key 1 is superseded and not sent.
    step = _operator(fake, tmp_path, lake_root, first, metastore_conn_id=OTHER_CONN_ID)
    again = step.execute({})["details"]
    assert again["tables"]["Orders"]["superseded"] == 1 and again["tables"]["Orders"]["rows"] == 1
    assert _bq_rows(fake, "Orders") == [{"Id": 2, "Name": "b"}]
    assert [r.window_end for r in other_store.window_tables(PIPELINE, target=BIGQUERY_TARGET)] == [first.end]


def test_after_a_partial_failure_only_the_tables_the_ledger_lacks_are_sent(
    fake: FakeBigQuery, store: Metastore, tmp_path: Path
) -> None:
    (window,) = _windows(1)
    lines = [_upsert({"OrderId": 1, "Sku": "a"}, 1, Units=2, Note="x")]
    _write(
        tmp_path, window, {"Lines": (LINES, lines), "Orders": (ORDERS[:2], [_upsert({"Id": 1}, 2, Name="a")])}
    )
    bq, _write_client = _clients(fake)
    broken = [bigquery.SchemaField("Id", "INT64"), bigquery.SchemaField("Name", "INT64")]
    _create_table(fake, "Orders", broken, ["Id"])
    with pytest.raises(BigQuerySchemaError, match=r"column 'Name' is INT64 in BigQuery but .* needs STRING"):
        _operator(fake, tmp_path, None, window).execute({})
    # Lines was sent before Orders failed, and the ledger says so.
    assert [r.table for r in store.window_tables(PIPELINE, target=BIGQUERY_TARGET)] == ["Lines"]
    sent = fake.table(PROJECT, DATASET, "Lines").appended_rows
    assert sent == 1

    bq.delete_table(f"{PROJECT}.{DATASET}.Orders")  # the operator fixes the table, then retries
    summary = _operator(fake, tmp_path, None, window).execute({})["details"]

    assert summary["tables"]["Lines"]["already_sent"] is True
    assert summary["tables"]["Orders"]["already_sent"] is False and summary["tables"]["Orders"]["rows"] == 1
    assert fake.table(PROJECT, DATASET, "Lines").appended_rows == sent
    assert _bq_rows(fake, "Orders") == [{"Id": 1, "Name": "a"}]
    assert [r.table for r in store.window_tables(PIPELINE, target=BIGQUERY_TARGET)] == ["Lines", "Orders"]


def test_a_resend_never_sends_an_image_a_later_window_superseded(
    fake: FakeBigQuery, store: Metastore, other_store: Metastore, tmp_path: Path
) -> None:
    first, second = _windows(2)
    columns = ORDERS[:3]
    _write(
        tmp_path,
        first,
        {
            "Orders": (
                columns,
                [_upsert({"Id": 1}, 1, Name="a", Qty=1), _upsert({"Id": 2}, 2, Name="b", Qty=2)],
            )
        },
    )
    _write(tmp_path, second, {"Orders": (columns, [_upsert({"Id": 1}, 3, ["Qty"], Qty=10)])})
    lake_root = str(tmp_path / "lake")
    lake = DeltaLakeTarget(lake_root)
    lookup = DeltaLakeTarget.current_rows
    with mock.patch.object(DeltaLakeTarget, "current_rows", autospec=True, side_effect=lookup) as lookups:
        for window in (first, second):
            _apply_delta(lake, tmp_path, window)
            _operator(fake, tmp_path, lake_root, window).execute({})
    assert (
        lookups.call_count == 1
    )  # window 2's partial image only: full images at their window need no lookup
    appended = fake.table(PROJECT, DATASET, "Orders").appended_rows

    step = _operator(fake, tmp_path, lake_root, first, metastore_conn_id=OTHER_CONN_ID)
    summary = step.execute({})["details"]

    orders = summary["tables"]["Orders"]
    assert (orders["rows"], orders["upserts"], orders["superseded"]) == (1, 1, 1)  # key 2 only
    assert fake.table(PROJECT, DATASET, "Orders").appended_rows == appended + 1
    assert _bq_rows(fake, "Orders") == _sorted(
        [{"Id": 1, "Name": "a", "Qty": 10}, {"Id": 2, "Name": "b", "Qty": 2}]
    )


def test_a_backfill_of_a_history_sends_nothing_and_a_new_ledger_sends_only_current_rows(
    fake: FakeBigQuery, store: Metastore, other_store: Metastore, tmp_path: Path
) -> None:
    history = History(seed=5, windows=5)
    changesets, lake_root, lake = history.write_beside_a_lake(tmp_path)
    for window, _changes in history.windows:
        _apply_delta(lake, changesets, window)
        _operator(fake, changesets, lake_root, window).execute({})
    expected = {t: _expected(history.snapshot[t]) for t in ("Orders", "Lines")}
    assert {t: _bq_rows(fake, t) for t in expected} == expected
    fake.advance_clock(DELETE_RETENTION * 2)
    appended = {t: fake.table(PROJECT, DATASET, t).appended_rows for t in expected}
    for window, _changes in history.windows:
        summary = _operator(fake, changesets, lake_root, window).execute({})["details"]
        assert all(entry["already_sent"] for entry in summary["tables"].values())
    assert {t: fake.table(PROJECT, DATASET, t).appended_rows for t in expected} == appended
    superseded = 0
    for window, _changes in history.windows:  # the same backfill on a ledger that records nothing
        step = _operator(fake, changesets, lake_root, window, metastore_conn_id=OTHER_CONN_ID)
        summary = step.execute({})["details"]
        superseded += sum(entry["superseded"] for entry in summary["tables"].values())
    assert superseded > 0
    assert {t: _bq_rows(fake, t) for t in expected} == expected


def test_without_a_lake_a_table_sent_for_a_later_window_is_not_sent_again(
    fake: FakeBigQuery, store: Metastore, tmp_path: Path
) -> None:
    first, second = _windows(2)
    columns = ORDERS[:2]
    _write(tmp_path, first, {"Orders": (columns, [_upsert({"Id": 1}, 1, Name="a")])})
    _write(tmp_path, second, {"Orders": (columns, [_delete({"Id": 1}, 2)])})
    _operator(fake, tmp_path, None, second).execute({})  # window 1's send was lost
    with pytest.raises(
        Exception, match=r"table 'Orders': window .* is not recorded as sent but later windows"
    ):
        _operator(fake, tmp_path, None, first).execute({})
    assert _bq_rows(fake, "Orders") == []


# ------------------------------------------------------------------------------------- key types
HASHES = spanner_columns(
    2, ("Hash", "BYTES"), ("Version", "FLOAT64"), ("Label", "STRING"), ("Count", "INT64")
)
GAUGES = spanner_columns(1, ("Reading", "FLOAT32"), ("Note", "STRING"))


def _derived(types: list[dict], **key: Any) -> str:
    columns = [c for c in parse_column_types(types) if c.is_primary_key]
    return canonical_key(columns, [key[c.name] for c in columns])


def test_keys_bigquery_refuses_get_the_derived_key_column(
    fake: FakeBigQuery, store: Metastore, tmp_path: Path
) -> None:
    windows = _windows(3)
    a, b = {"Hash": b"\x00\xff", "Version": 1.5}, {"Hash": b"", "Version": -0.25}
    changes = [
        {
            "Hashes": (HASHES, [_upsert(a, 1, Label="a", Count=1), _upsert(b, 2, Label="b", Count=2)]),
            "Gauges": (GAUGES, [_upsert({"Reading": 0.5}, 3, Note="half")]),
        },
        {"Hashes": (HASHES, [_upsert(a, 4, ["Count"], Count=10), _delete(b, 5)])},
        {"Hashes": (HASHES, [_upsert(b, 6, Label="b2", Count=3)])},
    ]
    lake_root = str(tmp_path / "lake")
    lake = DeltaLakeTarget(lake_root)
    for window, tables in zip(windows, changes, strict=True):
        _write(tmp_path, window, tables)
        _apply_delta(lake, tmp_path, window)
        summary = _operator(fake, tmp_path, lake_root, window).execute({})["details"]
        assert all(entry["derived_key"] for entry in summary["tables"].values())

    hashes = fake.table(PROJECT, DATASET, "Hashes")
    assert hashes.primary_key == [DERIVED_KEY_COLUMN] and hashes.clustering == [DERIVED_KEY_COLUMN]
    types = {f["name"]: f["type"] for f in hashes.fields}
    assert types == {DERIVED_KEY_COLUMN: "STRING", "Hash": "BYTES", "Version": "FLOAT64", "Label": "STRING",
                     "Count": "INT64"}  # fmt: skip
    key_a = '{"Hash":"' + base64.b64encode(b"\x00\xff").decode() + '","Version":1.5}'
    assert _derived(HASHES, **a) == key_a
    assert _bq_rows(fake, "Hashes") == _sorted(
        [
            {DERIVED_KEY_COLUMN: key_a, **a, "Label": "a", "Count": 10},
            {DERIVED_KEY_COLUMN: _derived(HASHES, **b), **b, "Label": "b2", "Count": 3},
        ]
    )
    assert fake.table(PROJECT, DATASET, "Gauges").primary_key == [DERIVED_KEY_COLUMN]
    assert _bq_rows(fake, "Gauges") == [
        {DERIVED_KEY_COLUMN: '{"Reading":0.5}', "Reading": 0.5, "Note": "half"}
    ]


def test_never_refuses_a_table_bigquery_cannot_key_before_any_table_is_sent(
    fake: FakeBigQuery, store: Metastore, tmp_path: Path
) -> None:
    (window,) = _windows(1)
    _write(
        tmp_path,
        window,
        {
            "Alpha": (ORDERS[:2], [_upsert({"Id": 1}, 1, Name="a")]),
            "Zeta": (HASHES, [_upsert({"Hash": b"x", "Version": 1.0}, 2, Label="z", Count=1)]),
        },
    )
    with pytest.raises(
        BigQuerySchemaError,
        match=r"table 'Zeta': column 'Hash' is BYTES, column 'Version' is FLOAT64, which BigQuery does not "
        r"allow in a primary key .*derived_key='never' refuses the table",
    ):
        _operator(fake, tmp_path, None, window, derived_key="never").execute({})
    assert (PROJECT, DATASET, "Alpha") not in fake.state.tables  # nothing of the window was applied
    assert store.window_tables(PIPELINE, target=BIGQUERY_TARGET) == []
    # Per table: Zeta keyed on _cdc_key, the rest as before.
    summary = _operator(
        fake, tmp_path, None, window, derived_key={"Zeta": "always", "Alpha": "never"}
    ).execute({})["details"]
    assert (summary["tables"]["Alpha"]["derived_key"], summary["tables"]["Zeta"]["derived_key"]) == (
        False,
        True,
    )
    assert fake.table(PROJECT, DATASET, "Alpha").primary_key == ["Id"]


def test_existing_tables_keep_their_key_and_a_disagreeing_one_is_refused(
    fake: FakeBigQuery, store: Metastore, other_store: Metastore, tmp_path: Path
) -> None:
    first, second = _windows(2)
    _write(tmp_path, first, {"Orders": (ORDERS[:2], [_upsert({"Id": 1}, 1, Name="a")])})
    _write(tmp_path, second, {"Orders": (ORDERS[:2], [_upsert({"Id": 2}, 2, Name="b")])})
    _operator(fake, tmp_path, None, first, derived_key="always").execute({})
    # "auto" follows a table already keyed on _cdc_key.
    summary = _operator(fake, tmp_path, None, second).execute({})["details"]
    assert summary["tables"]["Orders"]["derived_key"] is True
    assert _bq_rows(fake, "Orders") == _sorted(
        [
            {DERIVED_KEY_COLUMN: '{"Id":"1"}', "Id": 1, "Name": "a"},
            {DERIVED_KEY_COLUMN: '{"Id":"2"}', "Id": 2, "Name": "b"},
        ]
    )
    with pytest.raises(
        BigQuerySchemaError,
        match=r"table 'demo-project.cdc.Orders' declares primary key \(_cdc_key\) but the source table "
        r"'Orders' has key \(Id\), which with derived_key='never' is the BigQuery key \(Id\)",
    ):
        _operator(fake, tmp_path, None, second, derived_key="never", metastore_conn_id=OTHER_CONN_ID).execute(
            {}
        )


@pytest.mark.usefixtures("other_store")
def test_an_unknown_derived_key_mode_is_refused(fake: FakeBigQuery, store: Metastore, tmp_path: Path) -> None:
    (window,) = _windows(1)
    _write(tmp_path, window, {"Orders": (ORDERS[:2], [_upsert({"Id": 1}, 1, Name="a")])})
    with pytest.raises(
        BigQuerySchemaError, match=r"derived_key must be one of \('auto', 'always', 'never'\)"
    ):
        _operator(fake, tmp_path, None, window, derived_key="sometimes").execute({})


# ------------------------------------------------------------------------------------- NULL keys
def test_a_partial_update_of_a_row_with_a_null_key_is_completed_from_delta(
    fake: FakeBigQuery, store: Metastore, tmp_path: Path
) -> None:
    first, second = _windows(2)
    null_sku, other = {"OrderId": 1, "Sku": None}, {"OrderId": 1, "Sku": "a"}
    _write(
        tmp_path,
        first,
        {"Lines": (LINES, [_upsert(null_sku, 1, Units=1, Note="n"), _upsert(other, 2, Units=2, Note="o")])},
    )
    _write(tmp_path, second, {"Lines": (LINES, [_upsert(null_sku, 3, ["Units"], Units=5)])})
    lake_root = str(tmp_path / "lake")
    lake = DeltaLakeTarget(lake_root)
    for window in (first, second):
        _apply_delta(lake, tmp_path, window)
        step = _operator(fake, tmp_path, lake_root, window, derived_key={"Lines": "always"})
        summary = step.execute({})["details"]
    assert summary["tables"]["Lines"]["superseded"] == 0 and summary["tables"]["Lines"]["rows"] == 1
    assert _bq_rows(fake, "Lines") == _sorted(
        [
            {DERIVED_KEY_COLUMN: '{"OrderId":"1","Sku":null}', **null_sku, "Units": 5, "Note": "n"},
            {DERIVED_KEY_COLUMN: '{"OrderId":"1","Sku":"a"}', **other, "Units": 2, "Note": "o"},
        ]
    )


def test_a_null_key_value_in_a_table_keyed_on_its_spanner_key_is_refused_before_anything_is_sent(
    fake: FakeBigQuery, store: Metastore, tmp_path: Path
) -> None:
    (window,) = _windows(1)
    _write(
        tmp_path,
        window,
        {
            "Alpha": (ORDERS[:2], [_upsert({"Id": 1}, 1, Name="a")]),
            "Lines": (
                LINES,
                [_upsert({"OrderId": 1, "Sku": "a"}, 2, Units=1), _upsert({"OrderId": 2, "Sku": None}, 3)],
            ),
        },
    )
    with pytest.raises(
        BigQuerySchemaError,
        match=r"table 'Lines': key column 'Sku' is NULL in 1 change\(s\) "
        r"\(keys \{\"OrderId\":\"2\",\"Sku\":null\}\) and BigQuery primary-key values must not be NULL; "
        r".*derived_key=\{'Lines': 'always'\}",
    ):
        _operator(fake, tmp_path, None, window).execute({})
    assert (PROJECT, DATASET, "Alpha") not in fake.state.tables
    assert store.window_tables(PIPELINE, target=BIGQUERY_TARGET) == []


NULLABLE_LINES = [{**column, "is_nullable": column["name"] != "OrderId"} for column in LINES]


def test_auto_keys_a_table_with_a_nullable_key_column_on_the_derived_key(
    fake: FakeBigQuery, store: Metastore, tmp_path: Path
) -> None:
    """The source says ``Sku`` may be NULL: with the default ``derived_key="auto"`` the new table is
    keyed on ``_cdc_key``, so its NULL key values land; a table whose key is not nullable keeps it."""
    first, second = _windows(2)
    null_sku, other = {"OrderId": 1, "Sku": None}, {"OrderId": 1, "Sku": "a"}
    _write(
        tmp_path,
        first,
        {
            "Lines": (NULLABLE_LINES, [_upsert(null_sku, 1, Units=1, Note="n"), _upsert(other, 2, Units=2)]),
            "Orders": (
                [{**c, "is_nullable": not c["is_primary_key"]} for c in ORDERS[:2]],
                [_upsert({"Id": 1}, 3, Name="a")],
            ),
        },
    )
    _write(tmp_path, second, {"Lines": (NULLABLE_LINES, [_upsert(null_sku, 4, ["Units"], Units=5)])})
    lake_root = str(tmp_path / "lake")
    lake = DeltaLakeTarget(lake_root)
    for window in (first, second):
        _apply_delta(lake, tmp_path, window)
        summary = _operator(fake, tmp_path, lake_root, window).execute({})["details"]
        assert summary["tables"]["Lines"]["derived_key"] is True
    assert fake.table(PROJECT, DATASET, "Lines").primary_key == [DERIVED_KEY_COLUMN]
    assert fake.table(PROJECT, DATASET, "Orders").primary_key == ["Id"]
    assert _bq_rows(fake, "Lines") == _sorted(
        [
            {DERIVED_KEY_COLUMN: '{"OrderId":"1","Sku":null}', **null_sku, "Units": 5, "Note": "n"},
            {DERIVED_KEY_COLUMN: '{"OrderId":"1","Sku":"a"}', **other, "Units": 2, "Note": None},
        ]
    )
    assert _bq_rows(fake, "Orders") == [{"Id": 1, "Name": "a"}]


def test_a_table_already_keyed_on_its_source_key_keeps_it_when_the_key_turns_out_nullable(
    fake: FakeBigQuery, store: Metastore, tmp_path: Path
) -> None:
    """A BigQuery table created while the key's nullability was unknown (change sets staged before the
    source said) stays keyed on its source key: ``auto`` does not re-key an existing table."""
    first, second = _windows(2)
    _write(tmp_path, first, {"Lines": (LINES, [_upsert({"OrderId": 1, "Sku": "a"}, 1, Units=1)])})
    _write(tmp_path, second, {"Lines": (NULLABLE_LINES, [_upsert({"OrderId": 2, "Sku": "b"}, 2, Units=2)])})
    for window in (first, second):
        summary = _operator(fake, tmp_path, None, window).execute({})["details"]
        assert summary["tables"]["Lines"]["derived_key"] is False
    assert fake.table(PROJECT, DATASET, "Lines").primary_key == ["OrderId", "Sku"]
    assert [(row["OrderId"], row["Sku"]) for row in _bq_rows(fake, "Lines")] == [(1, "a"), (2, "b")]


def test_the_delta_lookup_matches_null_key_values(tmp_path: Path) -> None:
    """A partial image of a row whose key has a NULL is completed from its Delta row, not dropped."""
    from airflow_provider_cdc.changesets.reader import ChangeSetReader, TableColumns, to_merge_source

    first, second = _windows(2)
    null_sku = {"OrderId": 1, "Sku": None}
    _write(tmp_path, first, {"Lines": (LINES, [_upsert(null_sku, 1, Units=1, Note="n")])})
    _write(tmp_path, second, {"Lines": (LINES, [_upsert(null_sku, 2, ["Units"], Units=5)])})
    lake = DeltaLakeTarget(str(tmp_path / "lake"))
    for window in (first, second):
        _apply_delta(lake, tmp_path, window)
    (table,) = ChangeSetReader(str(tmp_path / second.window_id)).tables()
    columns = TableColumns.from_column_types("Lines", table.column_types())
    decoded = to_merge_source(table.dataset.to_table(), columns)
    completed, superseded = images.complete_images(
        pa.Table.from_batches([decoded]), columns, ["OrderId", "Sku", "Units", "Note"], lake
    )
    assert superseded == 0
    assert completed.select(["OrderId", "Sku", "Units", "Note"]).to_pylist() == [
        {"OrderId": 1, "Sku": None, "Units": 5, "Note": "n"}
    ]


def test_the_derived_key_text_is_canonical_for_every_key_type() -> None:
    from datetime import date, datetime, timezone
    from decimal import Decimal

    types = [
        {"name": name, "type": {"code": code}, "is_primary_key": True, "ordinal_position": i}
        for i, (name, code) in enumerate(
            [("I", "INT64"), ("N", "NUMERIC"), ("F", "FLOAT64"), ("G", "FLOAT32"), ("B", "BOOL"),
             ("S", "STRING"), ("Y", "BYTES"), ("D", "DATE"), ("T", "TIMESTAMP"), ("U", "UUID")],
            start=1,
        )
    ]  # fmt: skip
    key = parse_column_types(types)
    at = datetime(2026, 3, 1, 12, 0, 0, 5, tzinfo=timezone.utc)
    values = [-7, Decimal("10.500000000"), -0.0, 0.10000000149011612, True, "ü\"", b"\x00\xff",
              date(1, 1, 1), at, "3f9e…"]  # fmt: skip
    assert canonical_key(key, values) == (
        '{"B":true,"D":"0001-01-01","F":0.0,"G":0.1,"I":"-7","N":"10.5","S":"\\u00fc\\"",'
        '"T":"2026-03-01T12:00:00.000005Z","U":"3f9e\\u2026","Y":"AP8="}'
    )
    assert canonical_key(key[:3], [None, Decimal("0E-9"), float("nan")]) == '{"F":"NaN","I":null,"N":"0"}'
    assert canonical_key(key[2:3], [float("-inf")]) == '{"F":"-Infinity"}'


def test_a_run_of_an_earlier_opening_of_the_window_sends_nothing(
    fake: FakeBigQuery, store: Metastore, tmp_path: Path
) -> None:
    from airflow_provider_cdc._compat import AirflowFailException

    (window,) = _windows(1)
    _write(tmp_path, window, {"Orders": (ORDERS[:2], [_upsert({"Id": 1}, 1, Name="a")])})
    store.open_window(PIPELINE, "projects/p/instances/i/databases/d/S", window.start, window.end)
    opened = store.reopen_window(PIPELINE, window.start, window.end)  # another run opened it again
    assert opened.attempt == 2

    with pytest.raises(AirflowFailException, match=r"opened again .* epoch 2.* epoch 1"):
        _operator(fake, tmp_path, None, window, epoch="1").execute({})
    assert store.window_tables(PIPELINE, target=BIGQUERY_TARGET) == []
    assert (PROJECT, DATASET, "Orders") not in fake.state.tables  # nothing was created or sent

    summary = _operator(fake, tmp_path, None, window, epoch="2").execute({})["details"]
    assert summary["tables"]["Orders"]["rows"] == 1
    assert _bq_rows(fake, "Orders") == [{"Id": 1, "Name": "a"}]
