"""The merge job: per-key collapse over Arrow batches, its arguments, the operator, and real
``spark-submit`` runs whose change sets must equal the pure reference collapse."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import random
import re
import socket
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from airflow_provider_cdc.core.collapse import CollapseError, collapse_window
from airflow_provider_cdc.core.contract.change_set import CHANGE_SET_COLUMNS, change_set_schema
from airflow_provider_cdc.core.contract.locations import MANIFEST_NAME
from airflow_provider_cdc.core.contract.staged_rows import DEDUPLICATION_KEY
from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND, format_timestamp, to_micros
from airflow_provider_cdc.core.values import column_types_json, parse_column_types
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.merge import kernels as merge_kernels
from airflow_provider_cdc.merge import plan as merge_plan
from airflow_provider_cdc.staging import STAGED_CHANGE_SCHEMA
from tests.support.log_lines import LineLog
from tests.support.staged_changes import spanner_staged_row

START = datetime(2024, 6, 1, 12, 0, tzinfo=timezone.utc)
END = START + timedelta(minutes=10)
WINDOW_ID = f"{to_micros(START)}-{to_micros(END)}"

CHANGE_SET_SCHEMA = pa.schema(
    [
        ("_keys_json", pa.string()),
        ("_values_json", pa.string()),
        ("_present_columns", pa.list_(pa.string())),
        ("_full_image", pa.bool_()),
        ("_CHANGE_TYPE", pa.string()),
        ("_CHANGE_SEQUENCE_NUMBER", pa.string()),
        ("_commit_timestamp", pa.timestamp("us", tz="UTC")),
        ("_column_types_json", pa.string()),
    ]
)


def column_types(*names: str, key: str = "Id") -> str:
    columns = [{"name": key, "type": {"code": "STRING"}, "is_primary_key": True, "ordinal_position": 1}]
    columns += [
        {"name": name, "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": i}
        for i, name in enumerate(names, start=2)
    ]
    return json.dumps(columns, separators=(",", ":"))


def only(types: str, *names: str) -> str:
    """``types`` limited to the key and ``names``, as an UPDATE record lists them."""
    return json.dumps([c for c in json.loads(types) if c["is_primary_key"] or c["name"] in names],
                      separators=(",", ":"))


def retyped(types: str, name: str, code: str) -> str:
    """``types`` with column ``name`` of another type (an ALTER COLUMN between two records)."""
    return json.dumps([{**c, "type": {"code": code}} if c["name"] == name else c for c in json.loads(types)],
                      separators=(",", ":"))


ACCOUNTS = column_types("Name", "Balance")
ORDERS_V1 = column_types("Amount", "Note")
ORDERS_V2 = column_types("Amount", "Note", "Channel")
EVENTS = column_types("A", "B", "C")


def mod(
    commit: datetime,
    transaction: str,
    table: str,
    mod_type: str,
    key: str,
    values: dict | str | None = None,
    *,
    record: int = 0,
    index: int = 0,
    records: int = 1,
    partitions: int = 1,
    partition: str = "p1",
    types: str = ACCOUNTS,
) -> dict[str, Any]:
    """One staged change row (one mod of a data change record), as the read side writes it."""
    return spanner_staged_row(
        operation=mod_type,
        table=table,
        keys_json=json.dumps({"Id": key}, separators=(",", ":")),
        after_json=values if isinstance(values, str) else json.dumps(values or {}),
        commit_timestamp=commit,
        transaction=transaction,
        column_types_json=types,
        record_sequence=f"{record:08d}",
        mod_index=index,
        records_in_transaction=records,
        unit=f"token-{partition}",
        partitions_in_transaction=partitions,
    )


def uncounted(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` as a source without transaction record counts stages it (no transaction, no before)."""
    return {**row, "transaction_id": None, "transaction_record": None, "transaction_record_count": None,
            "before_json": None, "source_metadata_json": "{}"}


# Staging as a faulty writer could leave it: any value may be NULL.
NULLABLE_STAGED_SCHEMA = pa.schema([field.with_nullable(True) for field in STAGED_CHANGE_SCHEMA])


def write_staging(folder: Path, files: dict[str, list[list[dict]]],
                  schema: pa.Schema = STAGED_CHANGE_SCHEMA) -> None:
    """``files``: partition key → files, each a list of staged rows (written with plain pyarrow)."""
    for partition, parts in files.items():
        for number, rows in enumerate(parts):
            target = folder / f"partition={partition}" / f"part-{number:05d}.parquet"
            target.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.Table.from_pylist(rows, schema=schema), target)


def in_window(rows: list[dict]) -> list[dict]:
    return [row for row in rows if START <= row["commit_timestamp"] < END]


def random_chains(rng: random.Random, table: str, keys: int, changes: int, base: datetime,
                  partition: str = "p3") -> list[dict]:
    """Valid per-key histories (INSERT only when absent, UPDATE/DELETE when present), interleaved."""
    exists = {f"k{n:03d}": rng.random() < 0.5 for n in range(keys)}
    rows = []
    for number in range(changes):
        key = rng.choice(sorted(exists))
        if exists[key]:
            kind = rng.choice(["UPDATE", "UPDATE", "UPDATE", "DELETE"])
        else:
            kind = "INSERT"
        if kind == "INSERT":
            values: dict = {column: rng.choice([None, str(number), number / 4, True]) for column in "ABC"}
        elif kind == "UPDATE":
            values = {column: str(number) for column in rng.sample("ABC", rng.randint(1, 3))}
        else:
            values = {}
        exists[key] = kind != "DELETE"
        commit = base + timedelta(milliseconds=number)
        rows.append(mod(commit, f"ev-{number}", table, kind, key, values, partition=partition, types=EVENTS))
    return rows


def reference(rows: list[dict]) -> dict[str, list[dict]]:
    """The pure collapse of the in-window rows: what every change set must hold."""
    return collapse_window(in_window(rows))


def read_change_set(folder: Path) -> dict[str, list[dict]]:
    tables = {}
    for directory in sorted(folder.glob("table=*")):
        table = pq.read_table(directory)
        assert table.schema.remove_metadata() == CHANGE_SET_SCHEMA
        assert tuple(table.schema.names) == CHANGE_SET_COLUMNS
        tables[directory.name.split("=", 1)[1]] = sorted(table.to_pylist(), key=lambda r: r["_keys_json"])
    return tables


# ------------------------------------------------------------------------------------------
# The per-key collapse over Arrow batches (what runs in the Python workers), without Spark


def spark_order(rows: list[dict]) -> list[dict]:
    """The order the job's shuffle produces: by key hash, then key, then change order."""

    def key(row: dict) -> tuple:
        digest = hashlib.blake2b(f"{row['table_name']}/{row['keys_json']}".encode(), digest_size=8).digest()
        return (digest, *(row[column] for column in merge_kernels.SORT_COLUMNS))

    return sorted(rows, key=key)


def run_batches(rows: list[dict], rng: random.Random, order: Callable[[list[dict]], list[dict]] = spark_order
                ) -> list[dict]:
    table = pa.Table.from_pylist(order(rows), schema=STAGED_CHANGE_SCHEMA).select(
        list(merge_kernels.COLLAPSE_INPUT_COLUMNS)
    )
    batches, offset = [], 0
    while offset < table.num_rows:
        size = rng.randint(1, 9)
        batches.extend(table.slice(offset, size).to_batches())
        offset += size
    out = merge_kernels.collapse_sorted_batches(batches)
    return pa.Table.from_batches(list(out), merge_kernels.COLLAPSED_ARROW_SCHEMA).to_pylist()


@pytest.mark.parametrize("seed", range(6))
def test_arrow_batch_collapse_equals_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    rows = random_chains(rng, "Events", keys=15, changes=120, base=START)
    rows += random_chains(rng, "Tags", keys=5, changes=30, base=START, partition="p4")
    rows += [dict(row) for row in rng.sample(rows, 20)]  # retried reads: repeated mods
    got = run_batches(rows, rng)
    expected = collapse_window(rows)
    assert len(got) == sum(len(table_rows) for table_rows in expected.values())
    by_key = {(row["table"], row["_keys_json"]): row for row in got}
    for table, table_rows in expected.items():
        for row in table_rows:
            produced = by_key[(table, row["_keys_json"])]
            for column in ("_values_json", "_present_columns", "_full_image", "_CHANGE_TYPE",
                           "_CHANGE_SEQUENCE_NUMBER", "_commit_timestamp"):
                assert produced[column] == row[column], (table, row["_keys_json"], column)


def test_arrow_batch_collapse_drops_a_repeated_change_wherever_it_was_staged() -> None:
    # A change is its table, key and sequence number: a retried read's copy, staged in another
    # unit and in any order, is dropped; another sequence number is another change.
    first = mod(START, "t1", "Accounts", "UPDATE", "k1", {"Name": "first"})
    middle = mod(START + ONE_MICROSECOND, "t2", "Accounts", "UPDATE", "k1", {"Balance": "2"})
    repeat = {**first, "unit": "token-p9"}
    for seed in range(4):
        rows = [first, middle, repeat, dict(middle)]
        random.Random(seed).shuffle(rows)
        expected = collapse_window(rows)["Accounts"][0]
        got = run_batches(rows, random.Random(seed))
        assert expected["_values_json"] == '{"Balance":"2","Name":"first"}'
        assert [row["_values_json"] for row in got] == [expected["_values_json"]]
    later = {**first, "after_json": '{"Name": "later"}',
             "change_sequence_number": middle["change_sequence_number"] + "/1"}
    expected = collapse_window([first, middle, later])["Accounts"][0]
    assert expected["_values_json"] == '{"Balance":"2","Name":"later"}'
    assert [row["_values_json"] for row in run_batches([later, middle, first], random.Random(1))] == [
        expected["_values_json"]
    ]


def test_several_mods_of_one_row_in_one_record_keep_the_last() -> None:
    # One record (transaction t1, record 0) with two mods of key k1: told apart by the mod index.
    rows = [
        mod(START, "t1", "Accounts", "INSERT", "k1", {"Name": "first", "Balance": "1"}, index=0),
        mod(START, "t1", "Accounts", "UPDATE", "k1", {"Name": "last"}, index=1),
        mod(START, "t1", "Accounts", "UPDATE", "k2", {"Name": "other"}, index=2),
    ]
    expected = collapse_window(rows)["Accounts"]
    assert json.loads(expected[0]["_values_json"]) == {"Name": "last", "Balance": "1"}
    assert expected[0]["_full_image"] is True
    for rng_seed in range(3):
        retried = rows + [dict(rows[1]), dict(rows[0])]  # a retried read repeats both
        got = {row["_keys_json"]: row for row in run_batches(retried, random.Random(rng_seed))}
        assert [got[row["_keys_json"]]["_values_json"] for row in expected] == [
            row["_values_json"] for row in expected
        ]


def test_arrow_batch_collapse_of_an_update_after_a_delete_is_a_full_image() -> None:
    # After a DELETE the row starts empty (Table Store's UpdateRow of an absent row inserts it): the
    # image carries the updated columns and is full, so the target writes NULL to the others. Key
    # k0 ends in a DELETE just before k1's changes, which begin with an UPDATE: that one stays partial.
    at = [START + n * ONE_MICROSECOND for n in range(6)]
    rows = [
        mod(at[0], "t0", "Accounts", "DELETE", "k0"),
        mod(at[1], "t1", "Accounts", "UPDATE", "k1", {"Name": "kept"}),
        mod(at[2], "t2", "Accounts", "DELETE", "k2"),
        mod(at[3], "t3", "Accounts", "UPDATE", "k2", {"Balance": "5"}),
        mod(at[4], "t4", "Accounts", "INSERT", "k3", {"Name": "gone", "Balance": "1"}),
        mod(at[5], "t5", "Accounts", "DELETE", "k3"),
        mod(at[5] + ONE_MICROSECOND, "t6", "Accounts", "UPDATE", "k3", {"Name": "new"}),
    ]
    expected = {row["_keys_json"]: row for row in collapse_window(rows)["Accounts"]}
    assert {key: (row["_CHANGE_TYPE"], row["_values_json"], row["_full_image"])
            for key, row in expected.items()} == {
        '{"Id":"k0"}': ("DELETE", "{}", True),
        '{"Id":"k1"}': ("UPSERT", '{"Name": "kept"}', False),
        '{"Id":"k2"}': ("UPSERT", '{"Balance": "5"}', True),
        '{"Id":"k3"}': ("UPSERT", '{"Name": "new"}', True),
    }
    by_key = partial(sorted, key=lambda row: tuple(row[column] for column in merge_kernels.SORT_COLUMNS))
    for seed, order in itertools.product(range(3), (spark_order, by_key)):
        got = {row["_keys_json"]: row for row in run_batches(rows, random.Random(seed), order)}
        assert {key: (row["_CHANGE_TYPE"], row["_values_json"], row["_full_image"], row["_present_columns"])
                for key, row in got.items()} == {
            key: (row["_CHANGE_TYPE"], row["_values_json"], row["_full_image"], row["_present_columns"])
            for key, row in expected.items()
        }


def test_arrow_batch_collapse_of_nothing_is_nothing() -> None:
    assert list(merge_kernels.collapse_sorted_batches([])) == []


@pytest.mark.parametrize("chained", [False, True])
def test_arrow_batch_collapse_names_an_unknown_operation(chained: bool) -> None:
    rows = [mod(START, "t1", "Accounts", "MERGE", "k9", {"Name": "x"})]
    if chained:
        rows.append(mod(START + ONE_MICROSECOND, "t2", "Accounts", "UPDATE", "k9", {"Name": "y"}))
    problem = r"""table 'Accounts', key \{"Id":"k9"\}.*unknown operation 'MERGE'"""
    with pytest.raises(CollapseError, match=problem):
        run_batches(rows, random.Random(0))


def test_arrow_batch_collapse_names_bad_json_in_a_chain() -> None:
    rows = [mod(START, "t1", "Accounts", "INSERT", "k1", {"Name": "x"}),
            mod(START + ONE_MICROSECOND, "t2", "Accounts", "UPDATE", "k1", "{oops")]
    problem = r"""key \{"Id":"k1"\}: change 2: after_json is not valid JSON"""
    with pytest.raises(CollapseError, match=problem):
        run_batches(rows, random.Random(0))


@pytest.mark.parametrize("seed", range(4))
def test_arrow_batch_collapse_equals_the_reference_for_any_order_of_operations(seed: int) -> None:
    # Not only valid histories: UPDATE after DELETE, INSERT over INSERT, images with nested values,
    # repeated column names and other spellings of numbers (merged images are re-encoded).
    rng = random.Random(seed)
    images = ['{"A":1}', '{"B": [1, {"x": null}], "A": 2.50}', '{"A":"a","A":"b"}', '{"C":1E2}', "{}",
              '{"\\u00e9":"\\"q\\""}']
    rows = []
    for number in range(200):
        kind = rng.choice(["INSERT", "UPDATE", "UPDATE", "DELETE"])
        values = "{}" if kind == "DELETE" else rng.choice(images)
        rows.append(mod(START + timedelta(milliseconds=number), f"t{number}", "Events", kind,
                        f"k{rng.randrange(25)}", values, types=EVENTS))
    rows += [dict(row) for row in rng.sample(rows, 10)]
    got = {row["_keys_json"]: row for row in run_batches(rows, rng)}
    expected = collapse_window(rows)["Events"]
    assert len(got) == len(expected)
    for row in expected:
        produced = got[row["_keys_json"]]
        assert {column: produced[column] for column in row if column != "_column_types_json"} == {
            column: value for column, value in row.items() if column != "_column_types_json"
        }


@pytest.mark.parametrize("values", ["[1, 2]", "{oops", '{"A": NaN}'])
def test_arrow_batch_collapse_names_a_single_change_whose_image_is_not_an_object(values: str) -> None:
    rows = [mod(START, "t1", "Accounts", "UPDATE", "k8", values),
            mod(START, "t2", "Accounts", "INSERT", "k9", {"Name": "fine"})]
    with pytest.raises(CollapseError) as raised:
        run_batches(rows, random.Random(0))
    key = '{"Id":"k8"}'
    assert str(raised.value) == f"_values_json of table Accounts, key {key} is not a JSON object: {values}"


def test_arrow_batch_collapse_names_the_bad_last_image_of_a_chain() -> None:
    rows = [mod(START, "t1", "Accounts", "DELETE", "k1", {}),
            mod(START + ONE_MICROSECOND, "t2", "Accounts", "UPDATE", "k1", "[1]")]
    with pytest.raises(CollapseError) as raised:
        run_batches(rows, random.Random(0))
    problem = """table 'Accounts', key {"Id":"k1"}: change 2: after_json is not a JSON object: '[1]'"""
    assert str(raised.value) == problem


def test_kernels_import_without_spark() -> None:
    check = (
        "import sys; sys.modules['pyspark'] = None;"
        "import airflow_provider_cdc.merge.kernels;"
        "loaded = sorted(m for m in sys.modules if m.startswith('airflow_provider_cdc.'));"
        "allowed = ('airflow_provider_cdc.core', 'airflow_provider_cdc.merge');"
        "assert all(m.startswith(allowed) for m in loaded), loaded;"
        "assert [m for m in loaded if m.startswith('airflow_provider_cdc.merge.')] == "
        "['airflow_provider_cdc.merge.kernels'], loaded"
    )
    subprocess.run([sys.executable, "-c", check], check=True)


def test_collapse_yields_the_change_set_columns_it_computes() -> None:
    schema = merge_kernels.COLLAPSED_ARROW_SCHEMA
    assert schema.names == [merge_kernels.TABLE_PARTITION_COLUMN, *merge_kernels.COLLAPSED_COLUMNS]
    assert merge_kernels.TABLE_PARTITION_COLUMN == "table"
    assert set(merge_kernels.COLLAPSED_COLUMNS) < set(CHANGE_SET_COLUMNS)
    for name in merge_kernels.COLLAPSED_COLUMNS:
        assert schema.field(name) == change_set_schema().field(name)


def test_collapse_order_is_the_key_then_the_change_order() -> None:
    assert merge_kernels.SORT_COLUMNS == ("table_name", "keys_json", "change_sequence_number")
    assert set(DEDUPLICATION_KEY) <= set(merge_kernels.SORT_COLUMNS)
    assert set(merge_kernels.SORT_COLUMNS) <= set(merge_kernels.COLLAPSE_INPUT_COLUMNS)
    assert set(merge_kernels.COLLAPSE_INPUT_COLUMNS) <= set(STAGED_CHANGE_SCHEMA.names)


@pytest.mark.parametrize(
    ("changes", "cores", "partitions"),
    [(0, 2, 2), (150_000, 2, 2), (505_000, 2, 4), (2_020_000, 2, 12), (2_020_000, 8, 16), (10, 0, 1)],
)
def test_collapse_tasks_hold_a_bounded_number_of_changes_in_whole_waves(
    changes: int, cores: int, partitions: int
) -> None:
    assert merge_plan.collapse_partitions(changes, cores) == partitions
    assert changes / partitions <= merge_plan.CHANGES_PER_COLLAPSE_TASK


# ------------------------------------------------------------------------------------------
# Arguments


def arguments(**overrides: str) -> list[str]:
    values = {"--staging": "/s/x", "--changeset": "/c/x", "--window-start": format_timestamp(START),
              "--window-end": format_timestamp(END), **overrides}
    return [part for pair in values.items() for part in pair]


def test_arguments_are_parsed() -> None:
    from airflow_provider_cdc.merge.job import parse_arguments

    args = parse_arguments(arguments(**{"--staging": "gs://b/staging/s/1-2/"}))
    assert (args.staging, args.changeset) == ("gs://b/staging/s/1-2", "/c/x")
    assert args.window == Window(START, END) and args.window.window_id == WINDOW_ID
    assert not args.transfer_through_driver


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"--window-start": "yesterday"}, "not an RFC 3339 timestamp: 'yesterday'"),
        ({"--window-end": format_timestamp(START)}, "is not before --window-end"),
        ({"--changeset": "/s/x"}, "name the same folder"),
        ({"--staging": "  "}, "an empty location"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(overrides: dict, problem: str, capsys) -> None:
    from airflow_provider_cdc.merge.job import parse_arguments

    with pytest.raises(SystemExit):
        parse_arguments(arguments(**overrides))
    assert problem in capsys.readouterr().err


# ------------------------------------------------------------------------------------------
# The manifest and the transfers through the driver (without Spark)


def test_the_manifest_records_the_window_the_tables_and_the_source_counts() -> None:
    from airflow_provider_cdc.core.contract.change_set import manifest_bytes, manifest_tables
    from airflow_provider_cdc.merge.plan import change_set_manifest

    tables = {"Orders": {"rows": 2, "source_changes": 5}, "Accounts": {"rows": 1, "source_changes": 1}}
    manifest = change_set_manifest(Window(START, END), "gs://b/staging/s/w", tables, transactions=4,
                                   records=5, dropped=3)
    assert manifest == {
        "window_id": WINDOW_ID,
        "window_start": format_timestamp(START),
        "window_end": format_timestamp(END),
        "staging": "gs://b/staging/s/w",
        "tables": {"Accounts": {"rows": 1, "source_changes": 1}, "Orders": {"rows": 2, "source_changes": 5}},
        "rows": 3,
        "keys": 3,
        "source_records": 5,
        "source_changes": 6,
        "transactions": 4,
        "dropped_out_of_window": 3,
    }
    assert manifest_tables(json.loads(manifest_bytes(manifest))) == {"Accounts": 1, "Orders": 2}
    empty = change_set_manifest(Window(START, END), "/s", {}, 0, 0, 0)
    assert (empty["tables"], empty["rows"], empty["keys"], empty["source_changes"]) == ({}, 0, 0, 0)


def test_transfers_through_the_driver_copy_the_staging_in_and_replace_the_change_set(tmp_path: Path) -> None:
    from airflow_provider_cdc.merge.files import download_tree, upload_change_set

    staging = tmp_path / "remote" / "staging"
    for relative in ("partition=p1/claim=c1/part-00000.parquet", "partition=p2/part-00000.parquet"):
        (staging / relative).parent.mkdir(parents=True, exist_ok=True)
        (staging / relative).write_bytes(relative.encode())
    copy = tmp_path / "local" / "staging"
    assert download_tree(staging.as_uri(), str(copy))
    assert sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file()) == [
        "partition=p1/claim=c1/part-00000.parquet", "partition=p2/part-00000.parquet"
    ]
    assert (copy / "partition=p2" / "part-00000.parquet").read_bytes() == b"partition=p2/part-00000.parquet"
    assert not download_tree(str(tmp_path / "remote" / "missing"), str(tmp_path / "local" / "missing"))

    written = tmp_path / "local" / "changeset"
    (written / "table=Orders").mkdir(parents=True)
    (written / "table=Orders" / "part-0.parquet").write_bytes(b"rows")
    (written / "table=Orders" / ".part-0.parquet.crc").write_bytes(b"crc")
    (written / "_SUCCESS").write_bytes(b"")
    changeset = tmp_path / "remote" / "changeset"
    (changeset / "table=Gone").mkdir(parents=True)
    (changeset / "table=Gone" / "part-0.parquet").write_bytes(b"stale")
    upload_change_set(str(written), str(changeset), b"{}\n")
    assert sorted(p.relative_to(changeset).as_posix() for p in changeset.rglob("*") if p.is_file()) == [
        MANIFEST_NAME, "table=Orders/part-0.parquet"
    ]
    assert (changeset / MANIFEST_NAME).read_bytes() == b"{}\n"


def test_transfers_use_the_storage_options_of_the_environment(monkeypatch, tmp_path: Path) -> None:
    from airflow_provider_cdc import filesystems
    from airflow_provider_cdc.merge import files as merge_files
    from airflow_provider_cdc.merge.errors import MergeJobError
    from airflow_provider_cdc.merge.job import _storage_options

    monkeypatch.setenv(filesystems.STORAGE_OPTIONS_ENV, '{"google_service_account": "/keys/lake.json"}')
    options = _storage_options()
    assert options == {"google_service_account": "/keys/lake.json"}
    seen = []

    def resolve(location: str, storage_options: Any = None) -> tuple[pafs.FileSystem, str]:
        seen.append((location, storage_options))
        return filesystems.resolve(location)

    monkeypatch.setattr(merge_files, "resolve", resolve)
    merge_files.download_tree(str(tmp_path / "staging"), str(tmp_path / "copy"), options)
    merge_files.upload_change_set(str(tmp_path / "copy"), str(tmp_path / "changeset"), b"{}", options)
    assert seen == [(str(tmp_path / "staging"), options), (str(tmp_path / "changeset"), options)]

    monkeypatch.setenv(filesystems.STORAGE_OPTIONS_ENV, '{"google_service_account_key": "s3cr3t"')
    with pytest.raises(MergeJobError) as info:
        _storage_options()
    assert "s3cr3t" not in str(info.value)


# ------------------------------------------------------------------------------------------
# The operator (without running Spark)


def test_operator_renders_the_window_and_fills_the_window_id() -> None:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from airflow_provider_cdc.operators.merge import MERGE_JOB_PATH, SparkMergeWindowOperator

    op = SparkMergeWindowOperator(
        task_id="merge",
        locations={"staging_root": "gs://bucket/staging", "changeset_root": "gs://bucket/changesets"},
        stream_key="projects/p/instances/i/databases/d/{{ params.stream }}",
        params={"stream": "orders_stream"},
    )
    assert op.application == MERGE_JOB_PATH and Path(MERGE_JOB_PATH).is_file()
    assert set(SparkSubmitOperator.template_fields) < set(op.template_fields)
    assert {"locations", "stream_key", "window_start", "window_end"} < set(op.template_fields)
    assert op.spark_conn_id == "spark_default"
    op.render_template_fields({"data_interval_start": START, "data_interval_end": END,
                               "params": {"stream": "orders_stream"}})
    assert op.merge_arguments() == [
        "--staging", f"gs://bucket/staging/orders_stream/{WINDOW_ID}",
        "--changeset", f"gs://bucket/changesets/{WINDOW_ID}",
        "--window-start", "2024-06-01T12:00:00.000000Z",
        "--window-end", "2024-06-01T12:10:00.000000Z",
        "--window-basis", "commit_time",  # the default: rows committed in the window
    ]


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"window_start": "None"}, "window_start must be an RFC 3339 timestamp, got 'None'"),
        ({"window_end": "2024-06-01T11:00:00Z"}, "is not before window_end"),
        ({"locations": {"changeset_root": "/c"}}, r"locations lacks \['staging_root'\]"),
        ({"stream_key": " "}, "stream_key must name the stream"),
    ],
)
def test_operator_refuses_a_bad_window_before_submitting(fields: dict, problem: str) -> None:
    from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator

    values = {"locations": {"staging_root": "/s", "changeset_root": "/c"},
              "stream_key": "projects/p/instances/i/databases/d/s", "metastore_conn_id": None,
              "window_start": format_timestamp(START), "window_end": format_timestamp(END), **fields}
    op = SparkMergeWindowOperator(task_id="merge", **values)
    with pytest.raises(ValueError, match=problem):
        op.execute({})
    with pytest.raises(TypeError, match="bundled merge job"):
        SparkMergeWindowOperator(task_id="m2", application="other.py", **values)


def test_domain_zip_imports_without_airflow(tmp_path: Path) -> None:
    from airflow_provider_cdc.operators.merge import build_domain_zip

    archive = build_domain_zip(tmp_path)
    names = zipfile.ZipFile(archive).namelist()
    assert "airflow_provider_cdc/__init__.py" in names
    assert "airflow_provider_cdc/core/collapse.py" in names
    shipped = ("airflow_provider_cdc/core/", "airflow_provider_cdc/merge/")  # the core, the job's modules
    assert all(name.startswith(shipped) for name in names if name.count("/") > 1)
    check = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from airflow_provider_cdc.core.collapse import collapse_key;"
        "import airflow_provider_cdc.core.collapse as c;"
        "assert c.__file__.startswith(sys.argv[1]), c.__file__;"
        "assert 'airflow' not in sys.modules"
    )
    # -S: no site-packages, so nothing can come from the installed package.
    subprocess.run([sys.executable, "-S", "-c", check, archive], check=True, cwd=tmp_path)


# ------------------------------------------------------------------------------------------
# Real spark-submit runs


def scenario_rows(rng: random.Random) -> list[dict]:
    """Two tables with cross-partition transactions, retried reads, window edges, a schema change,
    plus a table of random histories."""
    t = START
    return [
        # tx1: two records in two partitions.
        mod(t + timedelta(seconds=1), "tx1", "Accounts", "INSERT", "a1", {"Name": "Ann", "Balance": "10"},
            record=0, index=0, records=2, partitions=2),
        mod(t + timedelta(seconds=1), "tx1", "Accounts", "INSERT", "a2", {"Name": "Bob", "Balance": "20"},
            record=0, index=1, records=2, partitions=2),
        mod(t + timedelta(seconds=1), "tx1", "Orders", "INSERT", "o1", {"Amount": "1.50", "Note": None},
            record=1, records=2, partitions=2, partition="p2", types=ORDERS_V1),
        # tx2: a partial update.
        mod(t + timedelta(seconds=2), "tx2", "Accounts", "UPDATE", "a1", {"Balance": "11"}),
        # tx3: two records of one partition: update and delete.
        mod(t + timedelta(seconds=3), "tx3", "Accounts", "UPDATE", "a1", {"Name": "Anna"},
            record=0, records=2, partition="p2"),
        mod(t + timedelta(seconds=3), "tx3", "Accounts", "DELETE", "a2", record=1, records=2, partition="p2"),
        # tx4: re-insert after delete; a partial order update with a newer schema.
        mod(t + timedelta(seconds=4), "tx4", "Accounts", "INSERT", "a2", {"Name": "Bea", "Balance": "0"},
            record=0, records=2, partitions=2),
        mod(t + timedelta(seconds=4), "tx4", "Orders", "UPDATE", "o2", {"Amount": "2"},
            record=1, records=2, partitions=2, partition="p2", types=ORDERS_V2),
        # Window edges: start is inside, end - 1µs is inside, end and start - 1µs are not.
        mod(t, "tx5", "Orders", "UPDATE", "o3", {"Note": "at start"}, partition="p2", types=ORDERS_V1),
        mod(END - ONE_MICROSECOND, "tx6", "Orders", "DELETE", "o4", types=ORDERS_V2),
        mod(END, "tx7", "Accounts", "UPDATE", "a1", {"Balance": "999"}),
        mod(START - ONE_MICROSECOND, "tx8", "Orders", "INSERT", "o5", {"Amount": "5"}, types=ORDERS_V1),
        *random_chains(rng, "Events", keys=40, changes=200, base=t + timedelta(seconds=10)),
    ]


def staging_files(rows: list[dict]) -> dict[str, list[list[dict]]]:
    files: dict[str, list[list[dict]]] = {}
    for row in rows:
        files.setdefault(row["unit"].removeprefix("token-"), [[]])[0].append(row)
    # A retried read wrote some of p1's mods again into a second file.
    files["p1"].append([dict(row) for row in files["p1"][0][:4]])
    return files


@contextlib.contextmanager
def captured_logs() -> Iterator[list[str]]:
    """Messages the operator and its hook log (structlog under Airflow 3, logging under Airflow 2)."""
    messages: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        try:
            from structlog.testing import capture_logs
        except ImportError:
            yield messages
        else:
            with capture_logs() as events:
                yield messages
            messages.extend(str(event.get("event", "")) for event in events)
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


def spark_submit() -> str:
    from pyspark import find_spark_home

    return str(Path(find_spark_home._find_spark_home()) / "bin" / "spark-submit")


@pytest.fixture(scope="module", params=["spark-submit", "spark-connect"])
def operator_run(request, tmp_path_factory) -> dict[str, Any]:
    """Scenario run through SparkMergeWindowOperator: a real spark-submit (``spark_default`` undefined:
    Spark on this worker), and a Spark Connect server (a ``spark_connect`` connection; spark-submit must
    not run)."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator

    root = tmp_path_factory.mktemp("operator_run")
    rows = scenario_rows(random.Random(11))
    write_staging(root / "staging" / "stream" / WINDOW_ID, staging_files(rows))
    stale = root / "changesets" / WINDOW_ID
    (stale / "table=Gone").mkdir(parents=True)
    (stale / "table=Gone" / "part-0.parquet").write_text("stale")
    (stale / MANIFEST_NAME).write_text("{}")

    path_before = list(sys.path)
    with pytest.MonkeyPatch.context() as patch, captured_logs() as records:
        patch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
        patch.delenv("PYSPARK_PYTHON", raising=False)
        if request.param == "spark-connect":
            from conftest import spark_connect_connection

            port = request.getfixturevalue("spark_connect_server").port
            patch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", spark_connect_connection(port))

            def no_spark_submit(*args: object, **kwargs: object) -> None:
                raise AssertionError("a spark_connect connection must not run spark-submit")

            patch.setattr(SparkSubmitOperator, "execute", no_spark_submit)
        SparkMergeWindowOperator(
            task_id="merge",
            conn_id="spark_default",
            locations={"staging_root": str(root / "staging"), "changeset_root": str(root / "changesets")},
            stream_key="projects/p/instances/i/databases/d/stream",
            metastore_conn_id=None,  # staging written without a metastore: every claim's files
            window_start=format_timestamp(START),
            window_end=format_timestamp(END),
            conf={"spark.ui.enabled": "false"},
        ).execute({})
    return {
        "rows": rows,
        "changeset": stale,
        "log": "\n".join(records),
        "runner": request.param,
        "path_added": [entry for entry in sys.path if entry not in path_before],
    }


@pytest.mark.spark
def test_operator_run_writes_the_reference_collapse(operator_run: dict) -> None:
    expected = reference(operator_run["rows"])
    got = read_change_set(operator_run["changeset"])
    assert sorted(got) == ["Accounts", "Events", "Orders"]  # the stale table is gone
    for table in expected:
        assert got[table] == expected[table], table
    accounts = {row["_keys_json"]: row for row in got["Accounts"]}
    assert json.loads(accounts['{"Id":"a1"}']["_values_json"]) == {"Name": "Anna", "Balance": "11"}
    assert accounts['{"Id":"a2"}']["_full_image"] is True  # delete, then insert
    orders = {row["_keys_json"]: row for row in got["Orders"]}
    assert orders['{"Id":"o4"}']["_CHANGE_TYPE"] == "DELETE"  # committed at end - 1µs
    assert '{"Id":"o5"}' not in orders  # committed at start - 1µs
    # Every key of a table carries the table's column types from all its records in the window.
    assert [json.loads(text) for text in {row["_column_types_json"] for row in got["Orders"]}] == [
        json.loads(ORDERS_V2)
    ]


@pytest.mark.spark
def test_operator_run_writes_a_manifest_with_the_counts(operator_run: dict) -> None:
    rows = in_window(operator_run["rows"])
    files = staging_files(operator_run["rows"])
    staged = [row for parts in files.values() for part in parts for row in part]
    manifest = json.loads((operator_run["changeset"] / MANIFEST_NAME).read_text())
    expected = reference(operator_run["rows"])
    assert manifest["window_id"] == WINDOW_ID
    assert manifest["tables"] == {
        table: {"rows": len(expected[table]),
                "source_changes": sum(1 for row in in_window(staged) if row["table_name"] == table)}
        for table in expected
    }
    assert manifest["rows"] == manifest["keys"] == sum(len(r) for r in expected.values())
    assert manifest["transactions"] == len({row["transaction_id"] for row in rows})
    records = {(row["transaction_id"], row["transaction_record"]) for row in rows}
    assert manifest["source_records"] == len(records)
    assert manifest["dropped_out_of_window"] == 2
    files_written = [path.name for path in operator_run["changeset"].rglob("*") if path.is_file()]
    assert "_SUCCESS" not in files_written


@pytest.mark.spark
def test_operator_ships_the_domain_package_with_py_files(operator_run: dict) -> None:
    if operator_run["runner"] == "spark-connect":
        # the driver is the task itself; the collapse kernels reach the executors as the
        # session's Python artifact (the zip), and the job's progress lines reach the task log
        assert "on the Spark Connect server sc://127.0.0.1:" in operator_run["log"]
        assert re.search(r"\[merge_job [0-9:]+\] wrote .*_manifest\.json", operator_run["log"])
        return
    assert "airflow_provider_cdc.core from " in operator_run["log"]
    location = operator_run["log"].split("airflow_provider_cdc.core from ")[1].splitlines()[0]
    assert "airflow_provider_cdc_domain.zip" in location


@pytest.mark.spark
def test_the_task_process_keeps_its_python_path(operator_run: dict) -> None:
    # The Spark Connect client puts a shipped zip on the local sys.path; left there, the domain zip
    # would shadow the installed package in every process the task spawns.
    assert operator_run["path_added"] == []


HARNESS = '''
import contextlib, io, json, sys
from airflow_provider_cdc.merge import job as merge_job

results = {}
for name, argv in json.load(open(sys.argv[1])).items():
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            code = merge_job.main(argv)
        results[name] = {"code": code, "stderr": stderr.getvalue()}
    except Exception as error:  # a failed Spark task surfaces here with the worker's message
        results[name] = {"code": "exception", "stderr": stderr.getvalue() + str(error)}
json.dump(results, open(sys.argv[2], "w"))
'''


def gcs_emulator() -> tuple[Any, str] | None:
    """A Cloud Storage emulator (``gcp-storage-emulator``) with bucket ``cdc-bucket``, if installed."""
    try:
        from gcp_storage_emulator.server import create_server
    except ImportError:
        return None
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="cdc-bucket")
    server.start()
    return server, f"127.0.0.1:{port}"


def run_on_spark_connect(url: str, scenarios: dict[str, list[str]], workdir: Path) -> tuple[dict, str]:
    """The scenarios' merges on a Spark Connect server, as the merge operator runs them: results in
    the shape of :data:`HARNESS`'s, and the job's progress lines."""
    from airflow_provider_cdc.operators.merge import build_domain_zip
    from airflow_provider_cdc.placement.connect.jobs import SparkConnectJobError, run_merge

    log = LineLog()
    artifacts = [build_domain_zip(workdir)]
    results: dict[str, dict[str, Any]] = {}
    for name, argv in scenarios.items():
        try:
            run_merge(url, argv, artifacts=artifacts, storage_options=None, log=log)
            results[name] = {"code": 0, "stderr": ""}
        except SparkConnectJobError as error:
            results[name] = {"code": 1, "stderr": str(error)}
        except Exception as error:  # a failed Spark task surfaces here with the worker's message
            results[name] = {"code": "exception", "stderr": str(error)}
    return results, "\n".join(log.lines)


#: The scenarios the spark-submit run merges (every scenario runs on Spark Connect, the same plan):
#: the job's exit codes and messages, an empty window, the transfer through the driver and gs://.
SUBMIT_SCENARIOS = frozenset(
    {"incomplete", "empty", "driver1", "driver2", "gcs", "tie_a", "units_lost", "bad_table", "bad_null"}
)


def scenario_result(harness_run: dict[str, Any], name: str) -> dict[str, Any]:
    """The result of scenario ``name``; a scenario the spark-submit run leaves to Spark Connect skips."""
    if name not in harness_run["results"] and harness_run["runner"] == "spark-submit":
        pytest.skip(f"scenario {name} runs on Spark Connect only (the spark-submit run merges "
                    f"{', '.join(sorted(SUBMIT_SCENARIOS))})")
    return harness_run["results"][name]


@pytest.fixture(scope="module", params=["spark-submit", "spark-connect"])
def harness_run(request, tmp_path_factory) -> dict[str, Any]:
    """Several windows through the merge job: inside one real spark-submit (``merge_job.main()``),
    and on a Spark Connect server as the merge operator runs it there (the same plan both ways)."""
    root = tmp_path_factory.mktemp("harness_run")
    t = START + timedelta(seconds=5)
    scenarios: dict[str, list[str]] = {}

    def window(name: str, rows: list[dict] | None, *extra: str, staging: str | None = None,
               changeset: str | None = None, nullable: bool = False) -> None:
        folder = root / name / "staging"
        if rows is not None:
            write_staging(folder, staging_files(rows) if name.startswith("driver") else
                          {"p1": [[r for r in rows if r["unit"] == "token-p1"]],
                           "p2": [[r for r in rows if r["unit"] == "token-p2"]]},
                          NULLABLE_STAGED_SCHEMA if nullable else STAGED_CHANGE_SCHEMA)
        scenarios[name] = ["--staging", staging or str(folder), "--changeset",
                           changeset or str(root / name / "changeset"),
                           "--window-start", format_timestamp(START), "--window-end", format_timestamp(END),
                           *extra]

    window("incomplete", [
        mod(t, "txA", "Accounts", "INSERT", "a1", {"Name": "A"}),
        mod(t, "txB", "Accounts", "UPDATE", "a2", {"Name": "B"}, record=0, records=3, partitions=2),
        mod(t, "txB", "Accounts", "UPDATE", "a3", {"Name": "B"}, record=1, records=3, partitions=2,
            partition="p2"),
        mod(t, "txC", "Accounts", "UPDATE", "a4", {"Name": "C"}, record=5, records=2, partition="p2"),
    ])
    # A source without transaction record counts (Datastream): nothing to check, the change set
    # is still built; beside it, a counted transaction that is complete.
    window("uncounted", [
        uncounted(mod(t, "e1", "Accounts", "INSERT", "a1", {"Name": "A"}, record=0, records=3)),
        uncounted(mod(t + ONE_MICROSECOND, "e2", "Accounts", "UPDATE", "a1", {"Balance": "1"}, records=9,
                      partition="p2")),
        mod(t, "txD", "Accounts", "INSERT", "a2", {"Name": "D"}),
    ])
    window("empty", None)
    (root / "empty" / "changeset" / "table=Old").mkdir(parents=True)
    (root / "empty" / "changeset" / "table=Old" / "part-0.parquet").write_text("stale")
    driver_rows = scenario_rows(random.Random(5))
    for name in ("driver1", "driver2"):
        window(name, driver_rows, "--transfer-through-driver",
               staging=(root / "driver1" / "staging").as_uri(),
               changeset=(root / "driver" / "changeset").as_uri())
    (root / "driver" / "changeset" / "table=Old").mkdir(parents=True)
    note_bytes = retyped(ORDERS_V2, "Note", "BYTES")
    for name, (first, second) in {"tie_a": (ORDERS_V2, note_bytes), "tie_b": (note_bytes, ORDERS_V2)}.items():
        # Two transactions commit at one timestamp with other types of Note; an earlier, narrower one.
        window(name, [
            mod(t - timedelta(seconds=1), "tx0", "Orders", "INSERT", "o0", {"Amount": "0"}, types=ORDERS_V1),
            mod(t, "txA", "Orders", "INSERT", "o1", {"Amount": "1"}, types=first),
            mod(t, "txB", "Orders", "INSERT", "o2", {"Amount": "2"}, types=second),
        ])
    # Only partial UPDATEs, each record listing the key and the column it changes (as Spanner does).
    window("partial", [
        mod(t, "tx1", "Accounts", "UPDATE", "a1", {"Name": "A"}, types=only(ACCOUNTS, "Name")),
        mod(t + ONE_MICROSECOND, "tx2", "Accounts", "UPDATE", "a2", {"Balance": "2"},
            types=only(ACCOUNTS, "Balance")),
        mod(t + 2 * ONE_MICROSECOND, "tx3", "Accounts", "UPDATE", "a1", {"Balance": "3"},
            types=only(ACCOUNTS, "Balance")),
    ])
    # Each partition's recorded claim; a stale reader's claim wrote other rows beside it, and a
    # partition whose recorded claim staged nothing has only a stale claim's folder.
    recorded = {"p1": [mod(t, "tx1", "Accounts", "INSERT", "a1", {"Name": "kept"})],
                "p2": [mod(t, "tx2", "Accounts", "INSERT", "a2", {"Name": "kept"}, partition="p2")]}
    stale = {"p1": [mod(t, "tx1", "Accounts", "INSERT", "a1", {"Name": "stale"}),
                    mod(t, "tx9", "Accounts", "INSERT", "a9", {"Name": "stale"})],
             "p3": [mod(t, "tx8", "Accounts", "INSERT", "a8", {"Name": "stale"}, partition="p3")]}
    for claim, staged in (("c1", recorded), ("c0", stale)):
        for key, rows in staged.items():
            target = root / "claims" / "staging" / f"partition={key}" / f"claim={claim}" / "part-0.parquet"
            target.parent.mkdir(parents=True)
            pq.write_table(pa.Table.from_pylist(rows, schema=STAGED_CHANGE_SCHEMA), target)
    window("claims", None, "--partition-claims", json.dumps({"p1": "c1", "p2": "c1", "p3": "c7"}))
    # Units as their readers recorded them (claim, files, rows): intact, a lost file, a file
    # replaced by one with fewer rows, a claim folder gone, and a lost file of a table batch.
    unit_files = {
        "k1": [[mod(t, "u1", "Accounts", "INSERT", "a1", {"Name": "one"})],
               [mod(t, "u2", "Accounts", "INSERT", "a2", {"Name": "two"}),
                mod(t, "u3", "Accounts", "INSERT", "a3", {"Name": "three"})]],
        "k2": [[mod(t, "u4", "Orders", "INSERT", "o1", {"Amount": "1"}, partition="p2", types=ORDERS_V1)]],
        "k3": [],  # a unit that staged nothing has no folder
    }
    units = json.dumps({"k1": ["c1", 2, 3], "k2": ["c2", 1, 1], "k3": ["c3", 0, 0]})
    previous = json.dumps({"tables": {"Accounts": 1700000000000000}, "recorded_from_us": None})
    for name in ("units_ok", "units_lost", "units_fewer", "units_gone"):
        for key, parts in unit_files.items():
            for number, rows in enumerate(parts):
                folder = root / name / "staging" / f"partition={key}" / f"claim=c{key[1]}"
                target = folder / f"part-{number:05d}.parquet"
                target.parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(pa.Table.from_pylist(rows, schema=STAGED_CHANGE_SCHEMA), target)
        window(name, None, "--staged-units", units, "--epoch", "3", "--previous-windows", previous)
    (root / "units_lost" / "staging" / "partition=k1" / "claim=c1" / "part-00001.parquet").unlink()
    pq.write_table(pa.Table.from_pylist([], schema=STAGED_CHANGE_SCHEMA),
                   root / "units_fewer" / "staging" / "partition=k2" / "claim=c2" / "part-00000.parquet")
    for path in sorted((root / "units_gone" / "staging" / "partition=k2").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    # A stale claim's rows beside the recorded one are not read.
    stale_target = root / "units_ok" / "staging" / "partition=k1" / "claim=c0" / "part-00000.parquet"
    stale_target.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([mod(t, "u9", "Accounts", "INSERT", "a9", {"Name": "stale"})],
                                        schema=STAGED_CHANGE_SCHEMA), stale_target)
    window("bad_table", [mod(t, "t1", "Bad-Name", "INSERT", "k", {"A": "1"})])
    window("bad_mod", [mod(t, "t1", "Accounts", "MERGE", "k7", {"Name": "x"})])
    window("bad_json", [mod(t, "t1", "Accounts", "UPDATE", "k8", "[1, 2]")])
    unsequenced = {**mod(t, "t2", "Accounts", "INSERT", "k10", {"Name": "y"}), "change_sequence_number": None}
    window("bad_null", [mod(t, "t1", "Accounts", "INSERT", "k9", {"Name": "x"}), unsequenced], nullable=True)
    untyped = {**mod(t, "t1", "Accounts", "INSERT", "k11", {"Name": "z"}), "column_types_json": None}
    window("bad_types", [untyped], nullable=True)

    emulator = gcs_emulator()
    if emulator is not None:
        window("gcs", None, staging="gs://cdc-bucket/staging/stream/w", changeset="gs://cdc-bucket/changesets/w")
        gcs = pafs.GcsFileSystem(anonymous=True, endpoint_override=emulator[1], scheme="http")
        local_staging = root / "gcs" / "local-staging"
        write_staging(local_staging, staging_files(driver_rows))
        pafs.copy_files(str(local_staging), "cdc-bucket/staging/stream/w",
                        source_filesystem=pafs.LocalFileSystem(), destination_filesystem=gcs)
        with gcs.open_output_stream("cdc-bucket/changesets/w/table=Old/part-0.parquet") as stale:
            stale.write(b"stale")

    if request.param == "spark-submit":
        scenarios = {name: argv for name, argv in scenarios.items() if name in SUBMIT_SCENARIOS}
    (root / "scenarios.json").write_text(json.dumps(scenarios))
    (root / "harness.py").write_text(HARNESS)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    if emulator is not None:
        env["STORAGE_EMULATOR_HOST"] = f"http://{emulator[1]}"
    try:
        if request.param == "spark-connect":
            server = request.getfixturevalue("spark_connect_server")
            with pytest.MonkeyPatch.context() as patch:
                if emulator is not None:
                    patch.setenv("STORAGE_EMULATOR_HOST", env["STORAGE_EMULATOR_HOST"])
                results, stdout = run_on_spark_connect(server.url, scenarios, root)
            (root / "results.json").write_text(json.dumps(results))
            completed = subprocess.CompletedProcess([], 0, stdout, "")
        else:
            from airflow_provider_cdc.placement.spark_submit import LOCAL_SPARK_CONF

            completed = subprocess.run(
                [spark_submit(), "--master", "local[2]",
                 *[part for key, value in LOCAL_SPARK_CONF.items() for part in ("--conf", f"{key}={value}")],
                 str(root / "harness.py"), str(root / "scenarios.json"), str(root / "results.json")],
                env=env, capture_output=True, text=True, timeout=540,
            )
        assert completed.returncode == 0, completed.stderr[-4000:]
        gcs_files = {}
        if emulator is not None:
            download = root / "gcs" / "changeset"
            listing = gcs.get_file_info(pafs.FileSelector("cdc-bucket/changesets/w", recursive=True))
            gcs_files = {info.path for info in listing if info.type == pafs.FileType.File}
            pafs.copy_files("cdc-bucket/changesets/w", str(download), source_filesystem=gcs,
                            destination_filesystem=pafs.LocalFileSystem())
    finally:
        if emulator is not None:
            emulator[0].stop()
    return {"root": root, "results": json.loads((root / "results.json").read_text()),
            "driver_rows": driver_rows, "stdout": completed.stdout, "gcs_files": gcs_files,
            "runner": request.param}


@pytest.mark.spark
def test_changes_without_transaction_counts_merge_without_a_completeness_check(harness_run: dict) -> None:
    result = scenario_result(harness_run, "uncounted")
    assert result["code"] == 0, result["stderr"]
    staged = pq.read_table(harness_run["root"] / "uncounted" / "staging", partitioning=None).to_pylist()
    changes = read_change_set(harness_run["root"] / "uncounted" / "changeset")
    assert changes == {"Accounts": reference(staged)["Accounts"]}
    rows = {row["_keys_json"]: row for row in changes["Accounts"]}
    assert json.loads(rows['{"Id":"a1"}']["_values_json"]) == {"Name": "A", "Balance": "1"}
    manifest = json.loads((harness_run["root"] / "uncounted" / "changeset" / MANIFEST_NAME).read_text())
    assert (manifest["transactions"], manifest["source_records"]) == (1, 1)  # only the counted one


@pytest.mark.spark
def test_incomplete_transactions_fail_naming_them_and_write_nothing(harness_run: dict) -> None:
    result = scenario_result(harness_run, "incomplete")
    assert result["code"] == 1
    assert "2 incomplete transaction(s)" in result["stderr"]
    assert "txB (2 of 3 records)" in result["stderr"] and "txC (1 of 2 records)" in result["stderr"]
    assert "txA" not in result["stderr"]
    assert not (harness_run["root"] / "incomplete" / "changeset").exists()


@pytest.mark.spark
def test_an_empty_window_writes_an_empty_manifest(harness_run: dict) -> None:
    assert scenario_result(harness_run, "empty")["code"] == 0
    changeset = harness_run["root"] / "empty" / "changeset"
    assert [path.name for path in changeset.iterdir() if not path.name.startswith(".")] == ["_manifest.json"]
    manifest = json.loads((changeset / "_manifest.json").read_text())
    assert (manifest["tables"], manifest["rows"], manifest["transactions"]) == ({}, 0, 0)


@pytest.mark.spark
def test_transfer_through_driver_writes_the_reference_and_reruns_identically(harness_run: dict) -> None:
    results = harness_run["results"]
    assert results["driver1"]["code"] == results["driver2"]["code"] == 0
    changeset = harness_run["root"] / "driver" / "changeset"
    assert not (changeset / "table=Old").exists()
    assert read_change_set(changeset) == reference(harness_run["driver_rows"])
    manifest = json.loads((changeset / "_manifest.json").read_text())
    assert manifest["staging"] == (harness_run["root"] / "driver1" / "staging").as_uri()
    assert manifest["dropped_out_of_window"] == 2
    assert "through the driver" in harness_run["stdout"]


@pytest.mark.spark
def test_gs_uris_without_a_connector_go_through_the_driver(harness_run: dict) -> None:
    if "gcs" not in harness_run["results"]:
        pytest.skip("gcp-storage-emulator is not installed")
    assert harness_run["results"]["gcs"]["code"] == 0, harness_run["results"]["gcs"]["stderr"]
    files = harness_run["gcs_files"]
    assert "cdc-bucket/changesets/w/_manifest.json" in files
    assert not any("table=Old" in path for path in files)
    changeset = harness_run["root"] / "gcs" / "changeset"
    assert read_change_set(changeset) == reference(harness_run["driver_rows"])
    manifest = json.loads((changeset / "_manifest.json").read_text())
    assert manifest["staging"] == "gs://cdc-bucket/staging/stream/w"
    assert manifest["rows"] == sum(len(rows) for rows in reference(harness_run["driver_rows"]).values())


@pytest.mark.spark
@pytest.mark.parametrize("name", ["tie_a", "tie_b"])
def test_a_columns_newest_type_wins_also_when_commit_timestamps_tie(harness_run: dict, name: str) -> None:
    result = scenario_result(harness_run, name)
    assert result["code"] == 0, result["stderr"]
    staged = pq.read_table(harness_run["root"] / name / "staging", partitioning=None).to_pylist()
    newest = json.loads(max(staged, key=lambda row: row["change_sequence_number"])["column_types_json"])
    changes = read_change_set(harness_run["root"] / name / "changeset")
    (text,) = {row["_column_types_json"] for row in changes["Orders"]}
    # Every column of the window (the older record's too), Note typed as the newest record says.
    assert json.loads(text) == sorted(newest, key=lambda c: c["ordinal_position"])
    assert changes == {"Orders": reference(staged)["Orders"]}


@pytest.mark.spark
def test_only_each_partitions_recorded_claim_is_read(harness_run: dict) -> None:
    result = scenario_result(harness_run, "claims")
    assert result["code"] == 0, result["stderr"]
    changes = read_change_set(harness_run["root"] / "claims" / "changeset")
    assert {row["_keys_json"]: json.loads(row["_values_json"])["Name"] for row in changes["Accounts"]} == {
        '{"Id":"a1"}': "kept", '{"Id":"a2"}': "kept"
    }


@pytest.mark.spark
def test_units_holding_what_their_readers_recorded_merge_with_the_epoch_in_the_manifest(
    harness_run: dict,
) -> None:
    result = scenario_result(harness_run, "units_ok")
    assert result["code"] == 0, result["stderr"]
    changes = read_change_set(harness_run["root"] / "units_ok" / "changeset")
    assert {table: [row["_keys_json"] for row in rows] for table, rows in changes.items()} == {
        "Accounts": ['{"Id":"a1"}', '{"Id":"a2"}', '{"Id":"a3"}'], "Orders": ['{"Id":"o1"}']
    }  # the stale claim's a9 is not read
    manifest = json.loads((harness_run["root"] / "units_ok" / "changeset" / MANIFEST_NAME).read_text())
    assert manifest["epoch"] == 3
    previous = {"tables": {"Accounts": 1700000000000000}, "recorded_from_us": None}
    assert manifest["previous_windows"] == previous
    assert "3 unit(s) hold the 3 file(s) and 4 row(s) their readers recorded" in harness_run["stdout"]


@pytest.mark.spark
@pytest.mark.parametrize(
    ("name", "problems"),
    [
        ("units_lost", ["partition key k1, claim c1: recorded 2 file(s) with 3 row(s); "
                        "missing file(s) part-00001.parquet"]),
        ("units_fewer", ["partition key k2, claim c2: recorded 1 row(s) in 1 file(s); the files hold 0"]),
        ("units_gone", ["partition key k2, claim c2: recorded 1 file(s) with 1 row(s); "
                        "missing file(s) part-00000.parquet (its claim folder is missing)"]),
    ],
)
def test_a_unit_whose_staged_files_differ_from_its_record_fails_naming_it_and_writes_nothing(
    harness_run: dict, name: str, problems: list[str]
) -> None:
    result = scenario_result(harness_run, name)
    assert result["code"] == 1
    staging = harness_run["root"] / name / "staging"
    assert f"window {Window(START, END)}: the staging at {staging}" in result["stderr"]
    assert "for 1 of 3 unit(s)" in result["stderr"]
    for problem in problems:
        assert problem in result["stderr"]
    assert "Nothing was written" in result["stderr"]
    assert not (harness_run["root"] / name / "changeset").exists()


@pytest.mark.spark
def test_column_types_are_the_union_of_partial_update_records(harness_run: dict) -> None:
    result = scenario_result(harness_run, "partial")
    assert result["code"] == 0, result["stderr"]
    staged = pq.read_table(harness_run["root"] / "partial" / "staging", partitioning=None).to_pylist()
    changes = read_change_set(harness_run["root"] / "partial" / "changeset")
    # No record lists both Name and Balance; the change set's column types have both.
    assert {row["_column_types_json"] for row in changes["Accounts"]} == {
        column_types_json(parse_column_types(ACCOUNTS))
    }
    rows = {row["_keys_json"]: row for row in changes["Accounts"]}
    assert rows['{"Id":"a1"}']["_present_columns"] == ["Balance", "Name"]
    assert rows['{"Id":"a1"}']["_full_image"] is False
    assert changes == {"Accounts": reference(staged)["Accounts"]}


@pytest.mark.spark
@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("bad_table", "invalid table name 'Bad-Name'"),
        ("bad_mod", """table 'Accounts', key {"Id":"k7"}: change"""),
        ("bad_mod", "unknown operation 'MERGE'"),
        ("bad_json", """_values_json of table Accounts, key {"Id":"k8"} is not a JSON object: [1, 2]"""),
        ("bad_null", "staged rows of table 'Accounts' lack required values in: change_sequence_number"),
        ("bad_types", "staged rows of table 'Accounts' lack column_types_json"),
    ],
)
def test_bad_staging_fails_with_a_message_naming_the_problem(
    harness_run: dict, name: str, problem: str
) -> None:
    result = scenario_result(harness_run, name)
    assert result["code"] != 0
    assert problem in result["stderr"]
    assert not (harness_run["root"] / name / "changeset" / MANIFEST_NAME).exists()


AIRFLOW2_PYTHON = Path(__file__).resolve().parents[3] / ".venv-airflow2" / "bin" / "python"


@pytest.mark.airflow2
@pytest.mark.skipif(not AIRFLOW2_PYTHON.exists(), reason="no .venv-airflow2 (scripts/setup.sh --airflow2)")
def test_operator_imports_and_builds_arguments_under_airflow_2() -> None:
    check = (
        "import airflow, json;"
        "from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator as Op;"
        "op = Op(task_id='m', locations={'staging_root': '/s', 'changeset_root': '/c'},"
        "        stream_key='projects/p/instances/i/databases/d/st',"
        "        window_start='2024-06-01T12:00:00Z', window_end='2024-06-01T12:10:00Z');"
        "print(json.dumps([airflow.__version__, op.merge_arguments(), list(op.template_fields)]))"
    )
    completed = subprocess.run([str(AIRFLOW2_PYTHON), "-c", check], capture_output=True, text=True,
                               timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    version, args, fields = json.loads(completed.stdout.strip().splitlines()[-1])
    assert version.startswith("2.")
    assert args[:4] == ["--staging", f"/s/st/{WINDOW_ID}", "--changeset", f"/c/{WINDOW_ID}"]
    assert {"application", "conf", "locations", "window_end"} <= set(fields)


def test_staged_files_with_other_columns_are_refused_naming_unit_file_and_columns(tmp_path: Path) -> None:
    """Staging written with another version's columns (a window read before an upgrade) is refused
    before anything is read, instead of being read as NULLs."""
    from airflow_provider_cdc.core.contract.locations import claim_folder
    from airflow_provider_cdc.merge.input import StagedInputError, StagedUnit, check_staged_units

    start = datetime(2024, 6, 1, tzinfo=timezone.utc)
    window = Window(start, start + timedelta(minutes=10))
    staging = str(tmp_path / "staging")
    folder = Path(claim_folder(staging, "k1", "c1"))
    folder.mkdir(parents=True)
    earlier = pa.table({"server_transaction_id": ["t"], "mod_type": ["INSERT"], "keys_json": ['{"Id":"1"}']})
    pq.write_table(earlier, folder / "part-00000.parquet")
    with pytest.raises(StagedInputError) as info:
        check_staged_units(staging, window, [StagedUnit("k1", "c1", 1, 1)])
    message = str(info.value)
    assert f"window {window}" in message
    assert "partition key k1, claim c1" in message and "part-00000.parquet" in message
    assert "lacks the staged change column(s)" in message and "operation" in message
    assert "Nothing was written" in message
