"""BigQuery CDC target: the real BigQuery clients against the loopback fake (Storage Write API + REST).

A window history with inserts, partial updates, deletes and re-inserts is cut into windows, each
applied to Delta first (so partial images can be completed) and then to BigQuery; the table must
equal the committed history, also after re-running every window and after a backfill (which the
ledger answers without sending; see test_bigquery_windows_and_keys.py for re-sends).
"""

from __future__ import annotations

import json
import os
import random
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any
from unittest import mock

import grpc
import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud import bigquery
from google.cloud.bigquery.table import PrimaryKey, TableConstraints
from google.cloud.bigquery_storage_v1 import BigQueryWriteClient
from support.changes import spanner_columns
from support.fake_bigquery import fake_clients
from support.metastores import connected_metastore

from airflow_provider_cdc.changesets.reader import ChangeSetReader
from airflow_provider_cdc.changesets.writer import Change, change_set_table, write_change_set
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore
from airflow_provider_cdc.targets.bigquery.commit import BIGQUERY as BIGQUERY_TARGET
from airflow_provider_cdc.targets.bigquery.operators import BigQueryCdcUpsertOperator
from airflow_provider_cdc.targets.bigquery.schema import (
    BigQueryColumn,
    BigQuerySchemaError,
    message_class,
    proto_descriptor,
)
from airflow_provider_cdc.targets.bigquery.writer import AppendError, DefaultStreamWriter, default_stream
from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget
from airflow_provider_cdc.targets.images import ImageError
from airflow_provider_cdc.testing.bigquery_fake import FakeBigQuery

PROJECT = "demo-project"
DATASET = "cdc"
PIPELINE = "shop"
CONN_ID = "cdc_metastore_bq_test"
START = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
WINDOW = timedelta(minutes=10)

ORDERS = spanner_columns(
    1,
    ("Id", "INT64"),
    ("Name", "STRING"),
    ("Qty", "INT64"),
    ("Price", "NUMERIC"),
    ("Ratio", "FLOAT64"),
    ("Small", "FLOAT32"),
    ("Paid", "BOOL"),
    ("Day", "DATE"),
    ("At", "TIMESTAMP"),
    ("Doc", "JSON"),
    ("Blob", "BYTES"),
    ("Tags", {"code": "ARRAY", "array_element_type": {"code": "STRING"}}),
)
LINES = spanner_columns(2, ("OrderId", "INT64"), ("Sku", "STRING"), ("Units", "INT64"), ("Note", "STRING"))
SCHEMAS = {"Orders": ORDERS, "Lines": LINES}


# ------------------------------------------------------------------------------------- fixtures
@pytest.fixture
def fake():
    with FakeBigQuery() as server:
        server.create_dataset(PROJECT, DATASET)
        yield server


@pytest.fixture
def store(tmp_path: Path, monkeypatch) -> Metastore:
    return connected_metastore(monkeypatch, CONN_ID, f"sqlite:///{tmp_path / 'metastore.db'}")


def _clients(fake: FakeBigQuery) -> tuple[bigquery.Client, BigQueryWriteClient]:
    return fake_clients(fake, PROJECT)


# ------------------------------------------------------------------------------------- history
def _value(column: str, rng: random.Random) -> Any:
    return {
        "Name": lambda: rng.choice(["ana", "bo", "chen", "dua", None]),
        "Qty": lambda: rng.randint(-5, 1000),
        "Price": lambda: Decimal(rng.randint(0, 10**6)) / 100,
        "Ratio": lambda: rng.choice([0.5, -1.25, 3.0, None]),
        "Small": lambda: rng.choice([0.5, 2.0, -8.0]),
        "Paid": lambda: rng.choice([True, False, None]),
        "Day": lambda: date(2026, 1, 1) + timedelta(days=rng.randint(0, 400)),
        "At": lambda: START + timedelta(microseconds=rng.randint(0, 10**12)),
        "Doc": lambda: rng.choice(['{"a":1}', '{"b":[1,2]}', None]),
        "Blob": lambda: rng.randbytes(rng.randint(0, 8)),
        "Tags": lambda: rng.sample(["x", "y", "z", "w"], rng.randint(0, 3)),
        "Units": lambda: rng.randint(1, 9),
        "Note": lambda: rng.choice(["gift", "rush", None]),
    }[column]()


class History:
    """Committed changes cut into windows; ``truth`` is the table after every window."""

    def __init__(self, seed: int, windows: int, keys: int = 30) -> None:
        rng = random.Random(seed)
        self.windows: list[tuple[Window, dict[str, list[Change]]]] = []
        self.truth: dict[str, dict[tuple, dict[str, Any]]] = {t: {} for t in SCHEMAS}
        commit = 0
        for index in range(windows):
            window = Window(START + index * WINDOW, START + (index + 1) * WINDOW)
            changes: dict[str, list[Change]] = {}
            for table, schema in SCHEMAS.items():
                key_names = [c["name"] for c in schema if c["is_primary_key"]]
                values = [c["name"] for c in schema if not c["is_primary_key"]]
                rows = self.truth[table]
                chains: dict[tuple, dict[str, Any]] = {}
                for _ in range(keys):
                    key = (
                        (rng.randint(1, keys),)
                        if table == "Orders"
                        else (rng.randint(1, 6), rng.choice("ab"))
                    )
                    commit += 1
                    chain = chains.setdefault(key, {"full": False, "present": set()})
                    if key in rows and rng.random() < 0.3:
                        del rows[key]
                        chain.update(full=True, present=set(values))
                    elif key not in rows:
                        rows[key] = {
                            **dict(zip(key_names, key, strict=True)),
                            **{c: _value(c, rng) for c in values},
                        }
                        chain.update(full=True, present=set(values))
                    else:
                        changed = rng.sample(values, rng.randint(1, len(values) - 1 or 1))
                        for column in changed:
                            rows[key][column] = _value(column, rng)
                        chain["present"] |= set(changed)
                    chain["sequence"] = f"{commit:016X}/{0:016X}/{0:016X}/{0:016X}"
                    chain["at"] = window.start + timedelta(microseconds=commit)
                out = []
                for key, chain in chains.items():
                    keys_dict = dict(zip(key_names, key, strict=True))
                    if key not in rows:
                        out.append(Change(keys_dict, "DELETE", chain["sequence"], chain["at"]))
                        continue
                    row = rows[key]
                    present = None if chain["full"] else sorted(chain["present"])
                    shown = values if present is None else present
                    out.append(
                        Change(
                            keys_dict,
                            "UPSERT",
                            chain["sequence"],
                            chain["at"],
                            {c: row[c] for c in shown},
                            present,
                        )
                    )
                changes[table] = out
            self.windows.append((window, changes))
            self.snapshot = {t: {k: dict(v) for k, v in rows.items()} for t, rows in self.truth.items()}

    def write(self, root: Path) -> None:
        for window, changes in self.windows:
            write_change_set(
                str(root / window.window_id), {t: change_set_table(SCHEMAS[t], c) for t, c in changes.items()}
            )

    def write_beside_a_lake(self, root: Path) -> tuple[Path, str, DeltaLakeTarget]:
        """Writes the change sets under ``root/changesets``; that folder, and the lake root ``root/lake``
        with its (empty) Delta target."""
        changesets, lake_root = root / "changesets", str(root / "lake")
        self.write(changesets)
        return changesets, lake_root, DeltaLakeTarget(lake_root)


def _expected(rows: dict[tuple, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for row in rows.values():
        item = dict(row)
        if "Small" in item and item["Small"] is not None:
            item["Small"] = float(item["Small"])
        if "Price" in item and item["Price"] is not None:
            item["Price"] = Decimal(item["Price"]).quantize(Decimal("1e-9"))
        if "Tags" in item and item["Tags"] is None:
            item["Tags"] = []
        out.append(item)
    return _sorted(out)


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def _bq_rows(fake: FakeBigQuery, table: str) -> list[dict[str, Any]]:
    return _sorted(fake.rows(PROJECT, DATASET, table))


def _apply_delta(lake: DeltaLakeTarget, changesets: Path, window: Window) -> None:
    reader = ChangeSetReader(str(changesets / window.window_id))
    for table in reader.tables():
        lake.apply_change_set(table.name, table.dataset, table.column_types(), PIPELINE, window.end_micros)


def _operator(
    fake: FakeBigQuery, changesets: Path, lake_root: str | None, window: Window, **kwargs: Any
) -> BigQueryCdcUpsertOperator:
    return BigQueryCdcUpsertOperator(
        task_id="bigquery_upsert",
        locations={"changeset_root": str(changesets), "lake_root": lake_root},
        dataset=DATASET,
        project_id=PROJECT,
        pipeline_id=PIPELINE,
        window_start=window.start,
        window_end=window.end,
        api_endpoint=fake.rest_endpoint,
        write_endpoint=fake.write_endpoint,
        **{"metastore_conn_id": CONN_ID, **kwargs},
    )


# ------------------------------------------------------------------------------------- history tests
def test_windows_land_equal_to_the_committed_history_and_reruns_change_nothing(
    fake: FakeBigQuery, store: Metastore, tmp_path: Path
) -> None:
    history = History(seed=7, windows=6)
    changesets, lake_root, lake = history.write_beside_a_lake(tmp_path)
    partial_rows = 0
    for window, changes in history.windows:
        partial_rows += sum(1 for c in changes["Orders"] if c.present is not None)
        _apply_delta(lake, changesets, window)
        operator = _operator(fake, changesets, lake_root, window)
        applied = operator.execute({})  # the commit's applied entry; its details are the send's report
        summary = applied["details"]
        assert summary["tables"]["Orders"]["upsert_stream_apply_watermark"] is not None
        orders = next(t for t in applied["tables"] if t["table"] == "Orders")
        assert (applied["target"], orders["watermark"]) == ("bigquery", summary["tables"]["Orders"][
            "upsert_stream_apply_watermark"])
        assert applied["names"]["Orders"]["uri"] == f"bigquery://{PROJECT}/{DATASET}/Orders"
        # OpenLineage: each table's change-set folder in, the BigQuery table out, the window as a run facet
        lineage = operator.get_openlineage_facets_on_complete(None)
        assert {(d.namespace, d.name) for d in lineage.outputs} == {
            ("bigquery", f"{PROJECT}.{DATASET}.{t}") for t in summary["tables"]
        }
        assert {(d.namespace, d.name) for d in lineage.inputs} == {
            ("file", f"{changesets}/{window.window_id}/table={t}") for t in summary["tables"]
        }
        assert lineage.run_facets["cdcWindow"].windowId == window.window_id
    assert partial_rows > 10  # the history exercises image completion
    for table in SCHEMAS:
        assert _bq_rows(fake, table) == _expected(history.snapshot[table]), table
    table = bq_table = fake.table(PROJECT, DATASET, "Orders")
    assert table.primary_key == ["Id"] and table.clustering == ["Id"]
    assert table.max_staleness == "0-0 0 0:15:0"
    assert fake.table(PROJECT, DATASET, "Lines").primary_key == ["OrderId", "Sku"]
    types = {f["name"]: (f["type"], f["mode"]) for f in bq_table.fields}
    assert types["Price"] == ("NUMERIC", "NULLABLE") and types["Small"] == ("FLOAT64", "NULLABLE")
    assert types["Tags"] == ("STRING", "REPEATED") and types["Doc"] == ("JSON", "NULLABLE")
    recorded = store.window_tables(PIPELINE, target=BIGQUERY_TARGET, table="Orders")
    assert [r.window_end for r in recorded] == [w.end for w, _ in history.windows]

    before = {t: _bq_rows(fake, t) for t in SCHEMAS}
    appended = {t: fake.table(PROJECT, DATASET, t).appended_rows for t in SCHEMAS}
    # A backfill: every window again, in order (the Delta upsert skips them as applied, and the
    # ledger records every table of every window as sent, so nothing is sent again).
    for window, _changes in history.windows:
        _apply_delta(lake, changesets, window)
        summary = _operator(fake, changesets, lake_root, window).execute({})["details"]
        assert {t: e["already_sent"] for t, e in summary["tables"].items()} == dict.fromkeys(SCHEMAS, True)
        assert summary["tables"]["Orders"]["upsert_stream_apply_watermark"] is not None
    assert {t: fake.table(PROJECT, DATASET, t).appended_rows for t in SCHEMAS} == appended
    assert {t: _bq_rows(fake, t) for t in SCHEMAS} == before
    # One middle window again, alone.
    _operator(fake, changesets, lake_root, history.windows[2][0]).execute({})
    assert {t: _bq_rows(fake, t) for t in SCHEMAS} == before


def test_partial_images_of_a_string_keyed_table_are_completed_from_merged_delta_files(
    fake: FakeBigQuery, store: Metastore, tmp_path: Path
) -> None:
    """Delta files written by a MERGE hold their strings as string_view; the key lookup reads them."""
    sensors = spanner_columns(
        2, ("SensorId", "STRING"), ("Seq", "INT64"), ("Label", "STRING"), ("Value", "INT64")
    )
    windows = [Window(START + i * WINDOW, START + (i + 1) * WINDOW) for i in range(3)]

    def change(key: str, seq: int, number: int, present: list[str] | None = None, **values: Any) -> Change:
        return Change({"SensorId": key, "Seq": seq}, "UPSERT", f"{number:016X}", START, values, present)

    changes = [
        [change("a", 1, 1, Label="x", Value=1), change("b", 1, 2, Label="y", Value=2)],
        [change("a", 1, 3, ["Value"], Value=10), change("c", 1, 4, Label="z", Value=3)],
        [change("b", 1, 5, ["Label"], Label="yy"), change("c", 1, 6, ["Value"], Value=30)],
    ]
    changesets, lake_root = tmp_path / "changesets", str(tmp_path / "lake")
    lake = DeltaLakeTarget(lake_root)
    for window, window_changes in zip(windows, changes, strict=True):
        table = change_set_table(sensors, window_changes)
        write_change_set(str(changesets / window.window_id), {"Sensors": table})
        _apply_delta(lake, changesets, window)
        _operator(fake, changesets, lake_root, window).execute({})
    assert _bq_rows(fake, "Sensors") == _sorted(
        [
            {"SensorId": "a", "Seq": 1, "Label": "x", "Value": 10},
            {"SensorId": "b", "Seq": 1, "Label": "yy", "Value": 2},
            {"SensorId": "c", "Seq": 1, "Label": "z", "Value": 30},
        ]
    )


def test_a_retryable_failure_is_retried_and_the_table_is_still_exact(
    fake: FakeBigQuery, store: Metastore, tmp_path: Path
) -> None:
    history = History(seed=11, windows=3)
    changesets, lake_root, lake = history.write_beside_a_lake(tmp_path)
    fake.write.fail_appends(2, grpc.StatusCode.UNAVAILABLE)
    retries = 0
    for window, _changes in history.windows:
        _apply_delta(lake, changesets, window)
        summary = _operator(
            fake,
            changesets,
            lake_root,
            window,
            writer_options={"max_request_bytes": 96 * 1024, "backoff_seconds": 0.01},
        ).execute({})["details"]
        retries += sum(t["retries"] for t in summary["tables"].values())
    assert retries == 2
    for table in SCHEMAS:
        assert _bq_rows(fake, table) == _expected(history.snapshot[table])


def test_partial_images_without_a_lake_fail_naming_table_and_keys(
    fake: FakeBigQuery, store: Metastore, tmp_path: Path
) -> None:
    window = Window(START, START + WINDOW)
    change = Change({"Id": 4}, "UPSERT", f"{9:016X}", START, {"Name": "x"}, present=["Name"])
    write_change_set(str(tmp_path / window.window_id), {"Orders": change_set_table(ORDERS, [change])})
    with pytest.raises(
        ImageError, match=r"table 'Orders'.*partial row images \(keys \{\"Id\":\"4\"\}\).*lake_root"
    ):
        _operator(fake, tmp_path, None, window).execute({})
    assert fake.rows(PROJECT, DATASET, "Orders") == []


def test_the_delta_upsert_must_run_first(fake: FakeBigQuery, store: Metastore, tmp_path: Path) -> None:
    history = History(seed=3, windows=1)
    history.write(tmp_path / "cs")
    window = history.windows[0][0]
    with pytest.raises(
        Exception, match=r"the delta tables .* have not applied window .*run the delta apply step first"
    ):
        _operator(fake, tmp_path / "cs", str(tmp_path / "lake"), window).execute({})


def test_a_change_set_without_manifest_is_refused(
    fake: FakeBigQuery, store: Metastore, tmp_path: Path
) -> None:
    window = Window(START, START + WINDOW)
    write_change_set(str(tmp_path / window.window_id), {"Orders": change_set_table(ORDERS, [])})
    (tmp_path / window.window_id / "_manifest.json").unlink()
    with pytest.raises(Exception, match="no _manifest.json"):
        _operator(fake, tmp_path, None, window).execute({})


def test_templated_arguments_render_and_blank_endpoints_are_unset(
    fake: FakeBigQuery, store: Metastore, tmp_path: Path
) -> None:
    """What a DAG passes: params rendered into the dataset, project, window and endpoints."""
    window = Window(START, START + WINDOW)
    rows = [_full(1, 1, Name="a")]
    write_change_set(str(tmp_path / window.window_id), {"Orders": change_set_table(ORDERS[:2], rows)})
    operator = BigQueryCdcUpsertOperator(
        task_id="to_bigquery",
        locations={"changeset_root": "{{ params.changeset_root }}"},
        project_id="{{ params.project }}",
        dataset="{{ params.dataset }}",
        pipeline_id="{{ params.pipeline }}",
        api_endpoint="{{ params.api }}",
        write_endpoint="{{ params.write }}",
        metastore_conn_id=CONN_ID,
    )
    assert all(hasattr(operator, name) for name in operator.template_fields)
    params = {
        "changeset_root": str(tmp_path),
        "project": PROJECT,
        "dataset": DATASET,
        "pipeline": PIPELINE,
        "api": fake.rest_endpoint,
        "write": fake.write_endpoint,
    }
    context = {"params": params, "data_interval_start": window.start, "data_interval_end": window.end}
    operator.render_template_fields(context)
    assert operator.execute(context)["details"]["tables"]["Orders"]["rows"] == 1
    assert _bq_rows(fake, "Orders") == [{"Id": 1, "Name": "a"}]
    # Blank endpoints (a DAG param left empty) mean BigQuery itself: the hook reads the connection.
    blank = _operator(fake, tmp_path, None, window)
    blank.api_endpoint, blank.write_endpoint = "", " "
    with mock.patch("airflow_provider_cdc.targets.bigquery.operators.BigQueryCdcHook") as hook:
        hook.return_value.apply_window.return_value = {"tables": {}}
        blank.execute({})
    assert hook.call_args.kwargs["api_endpoint"] is None and hook.call_args.kwargs["write_endpoint"] is None


def test_a_table_without_changes_sends_nothing(fake: FakeBigQuery, store: Metastore, tmp_path: Path) -> None:
    window = Window(START, START + WINDOW)
    write_change_set(str(tmp_path / window.window_id), {"Orders": change_set_table(ORDERS[:2], [])})
    summary = _operator(fake, tmp_path, None, window).execute({})["details"]
    assert summary["tables"]["Orders"]["rows"] == 0
    assert summary["tables"]["Orders"]["upsert_stream_apply_watermark"] is None
    assert (PROJECT, DATASET, "Orders") not in fake.state.tables


# ------------------------------------------------------------------------------------- schema
def _full(key: int, sequence: int, **values: Any) -> Change:
    return Change({"Id": key}, "UPSERT", f"{sequence:016X}", START, values)


def test_added_columns_evolve_the_table_and_a_changed_type_fails_naming_it(
    fake: FakeBigQuery, store: Metastore, tmp_path: Path
) -> None:
    base = ORDERS[:2]
    first, second, third = (Window(START + i * WINDOW, START + (i + 1) * WINDOW) for i in range(3))
    write_change_set(
        str(tmp_path / first.window_id), {"Orders": change_set_table(base, [_full(1, 1, Name="a")])}
    )
    wider = [
        *base,
        {"name": "Extra", "type": {"code": "INT64"}, "is_primary_key": False, "ordinal_position": 3},
    ]
    write_change_set(
        str(tmp_path / second.window_id),
        {"Orders": change_set_table(wider, [_full(2, 2, Name="b", Extra=5)])},
    )
    changed = [
        *base,
        {"name": "Extra", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 3},
    ]
    write_change_set(
        str(tmp_path / third.window_id),
        {"Orders": change_set_table(changed, [_full(3, 3, Name="c", Extra="x")])},
    )
    _operator(fake, tmp_path, None, first).execute({})
    summary = _operator(fake, tmp_path, None, second).execute({})["details"]
    assert summary["tables"]["Orders"]["added_columns"] == ["Extra"]
    assert _bq_rows(fake, "Orders") == _sorted(
        [{"Id": 1, "Name": "a", "Extra": None}, {"Id": 2, "Name": "b", "Extra": 5}]
    )
    with pytest.raises(BigQuerySchemaError, match=r"column 'Extra' is INT64 in BigQuery but .* needs STRING"):
        _operator(fake, tmp_path, None, third).execute({})


def test_appends_wait_until_a_new_table_or_column_reaches_the_write_api(
    store: Metastore, tmp_path: Path
) -> None:
    base = ORDERS[:2]
    wider = [
        *base,
        {"name": "Extra", "type": {"code": "INT64"}, "is_primary_key": False, "ordinal_position": 3},
    ]
    first, second = (Window(START + i * WINDOW, START + (i + 1) * WINDOW) for i in range(2))
    write_change_set(
        str(tmp_path / first.window_id), {"Orders": change_set_table(base, [_full(1, 1, Name="a")])}
    )
    write_change_set(
        str(tmp_path / second.window_id),
        {"Orders": change_set_table(wider, [_full(2, 2, Name="b", Extra=5)])},
    )
    with FakeBigQuery(schema_delay_seconds=1.0) as fake:
        fake.create_dataset(PROJECT, DATASET)
        options = {"writer_options": {"backoff_seconds": 0.05}}
        created = _operator(fake, tmp_path, None, first, **options).execute({})["details"]
        widened = _operator(fake, tmp_path, None, second, **options).execute({})["details"]
        assert created["tables"]["Orders"]["retries"] > 0 and widened["tables"]["Orders"]["retries"] > 0
        assert _bq_rows(fake, "Orders") == _sorted(
            [{"Id": 1, "Name": "a", "Extra": None}, {"Id": 2, "Name": "b", "Extra": 5}]
        )


def test_an_existing_table_without_primary_key_is_refused(
    fake: FakeBigQuery, store: Metastore, tmp_path: Path
) -> None:
    bq, _write = _clients(fake)
    bq.create_table(
        bigquery.Table(
            f"{PROJECT}.{DATASET}.Orders",
            schema=[bigquery.SchemaField("Id", "INT64"), bigquery.SchemaField("Name", "STRING")],
        )
    )
    window = Window(START, START + WINDOW)
    write_change_set(
        str(tmp_path / window.window_id), {"Orders": change_set_table(ORDERS[:2], [_full(1, 1)])}
    )
    with pytest.raises(BigQuerySchemaError, match=r"has no primary key.*PRIMARY KEY \(Id\) NOT ENFORCED"):
        _operator(fake, tmp_path, None, window).execute({})


def test_more_than_sixteen_key_columns_are_refused(
    fake: FakeBigQuery, store: Metastore, tmp_path: Path
) -> None:
    wide = [
        {"name": f"K{i}", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": i}
        for i in range(1, 18)
    ]
    window = Window(START, START + WINDOW)
    change = Change({f"K{i}": i for i in range(1, 18)}, "DELETE", f"{1:016X}", START)
    write_change_set(str(tmp_path / window.window_id), {"Wide": change_set_table(wide, [change])})
    with pytest.raises(BigQuerySchemaError, match="primary key has 17 columns.*at most 16"):
        _operator(fake, tmp_path, None, window).execute({})


def test_an_oversize_row_fails_naming_its_key(fake: FakeBigQuery, store: Metastore, tmp_path: Path) -> None:
    window = Window(START, START + WINDOW)
    rows = [_full(1, 1, Name="small"), _full(2, 2, Name="x" * 200_000)]
    write_change_set(str(tmp_path / window.window_id), {"Orders": change_set_table(ORDERS[:2], rows)})
    with pytest.raises(
        Exception, match=r"key \{\"Id\":\"2\"\} encodes to \d+ bytes, more than an AppendRows"
    ):
        _operator(fake, tmp_path, None, window, writer_options={"max_request_bytes": 128 * 1024}).execute({})


def test_array_with_null_element_is_refused(fake: FakeBigQuery, store: Metastore, tmp_path: Path) -> None:
    window = Window(START, START + WINDOW)
    columns = [ORDERS[0], ORDERS[-1]]
    write_change_set(
        str(tmp_path / window.window_id),
        {"Orders": change_set_table(columns, [_full(1, 1, Tags=["a", None])])},
    )
    with pytest.raises(Exception, match="column 'Tags' holds an array with a NULL element"):
        _operator(fake, tmp_path, None, window).execute({})


# ------------------------------------------------------------------------------------- the wire
def _create_table(
    fake: FakeBigQuery, name: str, schema: list[bigquery.SchemaField], key: list[str] | None
) -> None:
    """Creates the table ``name`` of the dataset in ``fake`` with ``schema`` and primary key ``key``."""
    bq, _write = _clients(fake)
    table = bigquery.Table(f"{PROJECT}.{DATASET}.{name}", schema=schema)
    if key:
        table.table_constraints = TableConstraints(primary_key=PrimaryKey(columns=key), foreign_keys=None)
    bq.create_table(table)


def _raw_table(fake: FakeBigQuery, name: str, key: list[str] | None, columns: int = 2) -> None:
    _create_table(fake, name, [bigquery.SchemaField(f"C{i}", "INT64") for i in range(columns)], key)


def _raw_writer(
    fake: FakeBigQuery, name: str, columns: list[BigQueryColumn], stream: str | None = None, **options: Any
) -> tuple[DefaultStreamWriter, type]:
    _bq, write = _clients(fake)
    descriptor = proto_descriptor(columns)
    writer = DefaultStreamWriter(
        write, stream or default_stream(PROJECT, DATASET, name), descriptor, backoff_seconds=0.01, **options
    )
    return writer, message_class(descriptor)


def _row(message: type, change_type: str, sequence: str, **values: Any) -> bytes:
    return message(_CHANGE_TYPE=change_type, _CHANGE_SEQUENCE_NUMBER=sequence, **values).SerializeToString()


def test_the_fake_applies_the_greater_sequence_number_and_keeps_deletes(fake: FakeBigQuery) -> None:
    _raw_table(fake, "T", ["C0"])
    writer, message = _raw_writer(fake, "T", [BigQueryColumn("C0", "INT64"), BigQueryColumn("C1", "INT64")])
    writer.append(
        [
            _row(message, "UPSERT", "7B", C0=1, C1=1),
            _row(message, "UPSERT", "77", C0=1, C1=2),  # older: ignored
            _row(message, "UPSERT", "FFF/ABC", C0=2, C1=3),
            _row(message, "UPSERT", "ABC", C0=2, C1=4),  # 'ABC' < 'FFF/ABC'
            _row(message, "UPSERT", "BA/FFFFFFFF", C0=3, C1=5),
            _row(message, "UPSERT", "abc", C0=3, C1=6),  # 'ABC' > 'BA/FFFFFFFF'; lower case accepted
            _row(message, "DELETE", "10", C0=4),
            _row(message, "UPSERT", "F", C0=4, C1=7),  # older than the delete: stays deleted
        ]
    )
    assert _sorted(fake.rows(PROJECT, DATASET, "T")) == _sorted(
        [{"C0": 1, "C1": 1}, {"C0": 2, "C1": 3}, {"C0": 3, "C1": 6}]
    )


@pytest.mark.parametrize(
    ("change_type", "sequence", "message"),
    [
        ("INSERT", "1", "not a valid CHANGE_TYPE"),
        ("UPSERT", "1/2/3/4/5", "Invalid _CHANGE_SEQUENCE_NUMBER"),
        ("UPSERT", "12345678901234567", "Invalid _CHANGE_SEQUENCE_NUMBER"),
        ("DELETE", "G", "non-hex"),
    ],
)
def test_the_fake_refuses_bad_change_types_and_sequence_numbers(
    fake: FakeBigQuery, change_type: str, sequence: str, message: str
) -> None:
    _raw_table(fake, "T", ["C0"])
    writer, cls = _raw_writer(fake, "T", [BigQueryColumn("C0", "INT64"), BigQueryColumn("C1", "INT64")])
    with pytest.raises(AppendError, match=rf"refused 1 row\(s\) of a request; row 1: .*{message}"):
        writer.append([_row(cls, "UPSERT", "1", C0=1, C1=1), _row(cls, change_type, sequence, C0=2, C1=2)])
    assert fake.rows(PROJECT, DATASET, "T") == []  # a request with a bad row applies nothing


def test_the_fake_refuses_cdc_writes_without_primary_key_or_with_more_than_16_columns(
    fake: FakeBigQuery,
) -> None:
    _raw_table(fake, "NoKey", None)
    _raw_table(fake, "Wide", [f"C{i}" for i in range(17)], columns=17)
    writer, cls = _raw_writer(fake, "NoKey", [BigQueryColumn("C0", "INT64")])
    with pytest.raises(api_exceptions.InvalidArgument, match="has no primary key"):
        writer.append([_row(cls, "UPSERT", "1", C0=1)])
    writer, cls = _raw_writer(fake, "Wide", [BigQueryColumn(f"C{i}", "INT64") for i in range(17)])
    with pytest.raises(
        api_exceptions.InvalidArgument, match="primary key of 17 columns; CDC supports at most 16"
    ):
        writer.append([_row(cls, "UPSERT", "1", C0=1)])


def test_the_fake_refuses_unknown_columns_other_streams_and_large_requests(fake: FakeBigQuery) -> None:
    _raw_table(fake, "T", ["C0"])
    writer, cls = _raw_writer(fake, "T", [BigQueryColumn("C0", "INT64"), BigQueryColumn("Nope", "INT64")])
    with pytest.raises(api_exceptions.InvalidArgument, match="extra fields: 'Nope'"):
        writer.append([_row(cls, "UPSERT", "1", C0=1)])
    columns = [BigQueryColumn("C0", "INT64")]
    stream = f"projects/{PROJECT}/datasets/{DATASET}/tables/T/streams/mystream"
    writer, cls = _raw_writer(fake, "T", columns, stream=stream)
    with pytest.raises(api_exceptions.InvalidArgument, match="default stream"):
        writer.append([_row(cls, "UPSERT", "1", C0=1)])
    writer, cls = _raw_writer(fake, "Missing", columns)
    with pytest.raises(api_exceptions.NotFound, match="Table demo-project:cdc.Missing"):
        writer.append([_row(cls, "UPSERT", "1", C0=1)])
    # The writer keeps requests under 10 MB; one built by hand above the limit is refused.
    _bq, write = _clients(fake)
    big = [bigquery.SchemaField("C0", "INT64"), bigquery.SchemaField("S", "STRING")]
    _create_table(fake, "Big", big, ["C0"])
    writer, cls = _raw_writer(fake, "Big", [BigQueryColumn("C0", "INT64"), BigQueryColumn("S", "STRING")])
    rows = [_row(cls, "UPSERT", "1", C0=i, S=f"{i:04d}" * 250) for i in range(11_000)]
    assert sum(len(r) for r in rows) > 10 * 1024 * 1024
    request = writer._request(rows, first=True)
    with pytest.raises(api_exceptions.InvalidArgument, match="AppendRows request too large"):
        list(write.append_rows(requests=iter([request]), retry=None))
    assert fake.rows(PROJECT, DATASET, "Big") == []
    stats = writer.append(rows)
    assert stats.requests >= 2 and len(fake.rows(PROJECT, DATASET, "Big")) == 11_000


# ------------------------------------------------------------------------------------- real BigQuery
REAL = ("CDC_BIGQUERY_PROJECT", "CDC_BIGQUERY_DATASET")


@pytest.mark.skipif(
    not all(os.environ.get(v) for v in REAL),
    reason="real BigQuery test: set CDC_BIGQUERY_PROJECT, CDC_BIGQUERY_DATASET and Google credentials",
)
def test_real_bigquery_applies_a_window(
    tmp_path: Path, store: Metastore, monkeypatch
) -> None:  # pragma: no cover - needs a Google Cloud project
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        google.auth.default()
    except DefaultCredentialsError as exc:
        pytest.skip(f"real BigQuery test: no Google credentials ({exc})")
    project, dataset = (os.environ[v] for v in REAL)
    if not os.environ.get("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT"):  # Application Default Credentials
        monkeypatch.setenv(
            "AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", json.dumps({"conn_type": "google_cloud_platform"})
        )
    table = f"cdc_test_{random.randrange(10**9)}"
    window = Window(START, START + WINDOW)
    changes = [_full(1, 1, Name="a"), _full(2, 2, Name="b"), Change({"Id": 2}, "DELETE", f"{3:016X}", START)]
    write_change_set(str(tmp_path / window.window_id), {table: change_set_table(ORDERS[:2], changes)})
    op = BigQueryCdcUpsertOperator(
        task_id="bq",
        locations={"changeset_root": str(tmp_path)},
        dataset=dataset,
        project_id=project,
        pipeline_id=PIPELINE,
        window_start=window.start,
        window_end=window.end,
        metastore_conn_id=CONN_ID,
        max_staleness=None,
    )
    client = bigquery.Client(project=project)
    try:
        summary = op.execute({})
        assert summary["tables"][table]["rows"] == 3
        rows = list(client.query_and_wait(f"SELECT Id, Name FROM `{project}.{dataset}.{table}` ORDER BY Id"))
        assert [(r.Id, r.Name) for r in rows] == [(1, "a")]
    finally:
        client.delete_table(f"{project}.{dataset}.{table}", not_found_ok=True)


# ------------------------------------------------------------------------------------- encoding
def test_the_vectorised_encoder_writes_what_protobuf_writes() -> None:
    import pyarrow as pa

    from airflow_provider_cdc.core.values import parse_column_types
    from airflow_provider_cdc.targets.bigquery.schema import (
        bigquery_columns,
        encode_batch,
        encode_rows,
        python_columns,
    )

    # Twenty filler columns push the later field numbers past 15 (two-byte tags).
    filler = [
        {"name": f"F{i}", "type": {"code": "INT64"}, "is_primary_key": False, "ordinal_position": 20 + i}
        for i in range(20)
    ]
    columns = bigquery_columns(parse_column_types([*ORDERS, *filler]), "Orders")
    before_epoch = datetime(1960, 5, 1, 3, 4, 5, 6, tzinfo=timezone.utc)
    rows = [
        {
            "Id": -(2**63),
            "Name": "",
            "Qty": -1,
            "Price": Decimal("-12345678901234567890.123456789"),
            "Ratio": float("nan"),
            "Small": float("-inf"),
            "Paid": False,
            "Day": date(1900, 1, 1),
            "At": before_epoch,
            "Doc": "{}",
            "Blob": b"",
            "Tags": [],
            **{f"F{i}": 2**62 for i in range(20)},
        },
        {
            "Id": 2**63 - 1,
            "Name": "ünïcode",
            "Qty": 0,
            "Price": Decimal(0),
            "Ratio": 1e300,
            "Small": 0.1,
            "Paid": True,
            "Day": date(9999, 12, 31),
            "At": START,
            "Doc": '{"a":[1]}',
            "Blob": b"\x00\xff",
            "Tags": ["", "x" * 300],
            **{f"F{i}": -i for i in range(20)},
        },
        {"Id": 3, **{c.name: None for c in columns if c.name != "Id"}},
    ]
    arrow_types = {
        "Id": pa.int64(),
        "Name": pa.string(),
        "Qty": pa.int64(),
        "Price": pa.decimal128(38, 9),
        "Ratio": pa.float64(),
        "Small": pa.float32(),
        "Paid": pa.bool_(),
        "Day": pa.date32(),
        "At": pa.timestamp("us", tz="UTC"),
        "Doc": pa.string(),
        "Blob": pa.binary(),
        "Tags": pa.list_(pa.string()),
        **{f"F{i}": pa.int64() for i in range(20)},
    }
    batch = pa.Table.from_pylist(rows, schema=pa.schema(list(arrow_types.items())))
    change_types = pa.array(["UPSERT", "UPSERT", "DELETE"])
    sequences = pa.array(["1", "FFFFFFFFFFFFFFFF/0", "A/B/C/D"])
    message = message_class(proto_descriptor(columns))
    reference = encode_rows(
        message,
        [c.name for c in columns],
        python_columns(batch, columns, "Orders"),
        change_types.to_pylist(),
        sequences.to_pylist(),
    )
    assert encode_batch(batch, columns, change_types, sequences, "Orders") == reference
    decoded = message.FromString(reference[0])
    assert decoded.Id == -(2**63) and decoded.HasField("Name") and decoded.Name == ""
    assert decoded.Day == (date(1900, 1, 1) - date(1970, 1, 1)).days


def test_type_mapping_clustering_and_staleness_text() -> None:
    from airflow_provider_cdc.core.values import parse_column_types
    from airflow_provider_cdc.targets.bigquery.schema import (
        bigquery_columns,
        clustering_columns,
        interval_text,
        numeric_type,
    )

    mapped = {c.name: (c.type, c.mode) for c in bigquery_columns(parse_column_types(ORDERS), "Orders")}
    assert mapped == {
        "Id": ("INT64", "NULLABLE"), "Name": ("STRING", "NULLABLE"), "Qty": ("INT64", "NULLABLE"),
        "Price": ("NUMERIC", "NULLABLE"), "Ratio": ("FLOAT64", "NULLABLE"), "Small": ("FLOAT64", "NULLABLE"),
        "Paid": ("BOOL", "NULLABLE"), "Day": ("DATE", "NULLABLE"), "At": ("TIMESTAMP", "NULLABLE"),
        "Doc": ("JSON", "NULLABLE"), "Blob": ("BYTES", "NULLABLE"), "Tags": ("STRING", "REPEATED"),
    }  # fmt: skip
    assert numeric_type(38, 9) == "NUMERIC" and numeric_type(40, 9) == "BIGNUMERIC"
    assert numeric_type(38, 10) == "BIGNUMERIC"
    keys = [
        BigQueryColumn(n, t) for n, t in [("A", "STRING"), ("B", "INT64"), ("C", "FLOAT64"), ("D", "INT64")]
    ]
    assert clustering_columns(keys) == ["A", "B"]  # FLOAT64 cannot cluster; order matters, so stop there
    assert clustering_columns([BigQueryColumn(f"K{i}", "INT64") for i in range(6)]) == [
        "K0",
        "K1",
        "K2",
        "K3",
    ]
    assert interval_text(timedelta(minutes=15)) == "0-0 0 0:15:0"
    assert interval_text(timedelta(days=1, hours=2, seconds=3)) == "0-0 1 2:0:3"
    with pytest.raises(BigQuerySchemaError, match="positive"):
        interval_text(timedelta(0))
