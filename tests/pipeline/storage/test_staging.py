"""Parquet staging of change rows: layout, retries, resume, types, local and GCS."""

from __future__ import annotations

import hashlib
import json
import socket
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from airflow_provider_cdc.core.identifiers import InvalidIdentifierError
from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.sources.spanner.change_row import StagedDataChange, change_rows
from airflow_provider_cdc.sources.spanner.record_parser import parse_record_dict
from airflow_provider_cdc.sources.spanner.records import DataChangeRecord
from airflow_provider_cdc.staging import (
    STAGED_CHANGE_SCHEMA,
    StagingWriter,
    discard_other_claims,
    iter_staged_batches,
    partition_key,
    read_staged_changes,
    staged_files,
    window_location,
)

UTC = timezone.utc
WINDOW = Window(datetime(2022, 9, 27, 12, 0, tzinfo=UTC), datetime(2022, 9, 27, 13, 0, tzinfo=UTC))
STREAM = "AccountsStream"

# The staged-row contract of ARCHITECTURE.md, column by column.
ARCHITECTURE_COLUMNS = [
    ("unit", pa.string()),
    ("commit_timestamp", pa.timestamp("us", tz="UTC")),
    ("transaction_id", pa.string()),
    ("transaction_record", pa.string()),
    ("transaction_record_count", pa.int64()),
    ("table_name", pa.string()),
    ("operation", pa.string()),
    ("keys_json", pa.string()),
    ("after_json", pa.string()),
    ("before_json", pa.string()),
    ("column_types_json", pa.string()),
    ("source_metadata_json", pa.string()),
    ("change_sequence_number", pa.string()),
]
#: The columns a source may leave NULL (no transactions, no record counts, no before image).
NULLABLE = {"transaction_id", "transaction_record", "transaction_record_count", "before_json"}


def make_record(index: int, mods: int = 3, mod_type: str = "UPDATE") -> DataChangeRecord:
    """A data change record of ``mods`` account updates, committed ``index`` seconds into the window."""
    return parse_record_dict(
        "data_change_record",
        {
            "commit_timestamp": format_timestamp(WINDOW.start + timedelta(seconds=index, microseconds=index)),
            "record_sequence": f"{index:08d}",
            "server_transaction_id": f"tx-{index}",
            "is_last_record_in_transaction_in_partition": True,
            "table_name": "AccountBalance",
            "column_types": [
                {
                    "name": "AccountId",
                    "type": {"code": "STRING"},
                    "is_primary_key": True,
                    "ordinal_position": 1,
                },
                {
                    "name": "Balance",
                    "type": {"code": "INT64"},
                    "is_primary_key": False,
                    "ordinal_position": 2,
                },
            ],
            "mods": [
                {
                    "keys": {"AccountId": f"Id{index}-{m}"},
                    "new_values": {"Balance": str(100 * index + m)},
                    "old_values": {"Balance": "0"},
                }
                for m in range(mods)
            ],
            "mod_type": mod_type,
            "value_capture_type": "OLD_AND_NEW_VALUES",
            "number_of_records_in_transaction": 1,
            "number_of_partitions_in_transaction": 1,
        },
    )


def expected_rows(records: list[DataChangeRecord], token: str) -> list[dict]:
    return [row for record in records for row in change_rows(record, token)]


def file_names(directory) -> list[str]:
    return sorted(path.name for path in directory.iterdir()) if directory.exists() else []


def partition_dir(root, token: str, window: Window = WINDOW):
    return root / STREAM / window.window_id / f"partition={hashlib.sha256(token.encode()).hexdigest()[:16]}"


def sort_key(row: dict) -> tuple:
    return (row["unit"], row["change_sequence_number"])


# --- local file system ---------------------------------------------------------------------------


def test_round_trip_with_deterministic_file_names(tmp_path):
    records = [make_record(i) for i in range(7)]  # 21 rows
    written = []
    with StagingWriter(
        str(tmp_path), STREAM, WINDOW, "token-A", rows_per_file=5, on_file_written=written.append
    ) as w:
        for record in records:
            w.write_record(StagedDataChange(record))
            assert w.buffered_rows < 5  # a full buffer is written out at once
    directory = partition_dir(tmp_path, "token-A")
    assert file_names(directory) == [f"part-0000{n}.parquet" for n in range(5)]
    assert [staged.rows for staged in written] == [5, 5, 5, 5, 1]
    assert written == w.files and w.rows_written == 21
    assert written[0].min_commit_timestamp == records[0].commit_timestamp
    assert written[0].max_commit_timestamp == records[1].commit_timestamp  # rows 3 and 4 come from record 1

    table = read_staged_changes(str(tmp_path), STREAM, WINDOW).to_table()
    assert table.schema == STAGED_CHANGE_SCHEMA
    assert sorted(table.to_pylist(), key=sort_key) == sorted(expected_rows(records, "token-A"), key=sort_key)


def test_claims_write_folders_of_their_own_and_readers_read_the_recorded_one(tmp_path):
    stale, winner = [make_record(i) for i in range(2)], [make_record(i) for i in range(2, 5)]
    for claim, records in (("stale1", stale), ("winner1", winner)):
        with StagingWriter(str(tmp_path), STREAM, WINDOW, "token-A", claim_id=claim) as writer:
            for record in records:
                writer.write_record(StagedDataChange(record))
    with StagingWriter(str(tmp_path), STREAM, WINDOW, "token-B", claim_id="b1") as other:
        other.write_record(StagedDataChange(make_record(9)))
    key = partition_key("token-A")
    assert writer.directory == f"{partition_dir(tmp_path, 'token-A')}/claim=winner1"
    claims = {"token-A": "winner1", "token-B": "b1"}
    table = read_staged_changes(str(tmp_path), STREAM, WINDOW, claims=claims).to_table()
    expected = expected_rows(winner, "token-A") + expected_rows([make_record(9)], "token-B")
    assert sorted(table.to_pylist(), key=sort_key) == sorted(expected, key=sort_key)
    assert len(staged_files(str(tmp_path), STREAM, WINDOW)) == 3  # unrecorded claims too, without claims
    # The recorded claim's writer removes what other claims staged; its own files stay.
    assert discard_other_claims(writer) == 1
    assert [
        p.split(f"partition={key}/")[1]
        for p in staged_files(str(tmp_path), STREAM, WINDOW)
        if f"partition={key}/" in p
    ] == ["claim=winner1/part-00000.parquet"]
    with pytest.raises(ValueError, match="claim id must be letters and digits"):
        StagingWriter(str(tmp_path), STREAM, WINDOW, "token-A", claim_id="../x")


def test_the_recorded_output_of_an_earlier_opening_is_kept_when_a_later_claim_is_recorded(tmp_path):
    """A change stream's partition keeps its token when the window opens again: the claim an earlier
    opening recorded (which a run of that opening may still be merging) survives the new claim's clean-up;
    a claim that lost its lease does not."""

    def stage(claim: str, number: int) -> StagingWriter:
        with StagingWriter(str(tmp_path), STREAM, WINDOW, "token-A", claim_id=claim) as writer:
            writer.write_record(StagedDataChange(make_record(number)))
        return writer

    first = stage("epoch1", 0)
    assert discard_other_claims(first) == 0  # recorded in the first opening: marked as such
    stage("lost2", 1)  # a reader of the second opening that lost its lease
    second = stage("epoch2", 2)
    assert discard_other_claims(second) == 1
    key = partition_key("token-A")
    assert sorted(p.split(f"partition={key}/")[1] for p in staged_files(str(tmp_path), STREAM, WINDOW)) == [
        "claim=epoch1/part-00000.parquet",
        "claim=epoch2/part-00000.parquet",
    ]
    rows = read_staged_changes(str(tmp_path), STREAM, WINDOW, claims={"token-A": "epoch1"}).to_table()
    assert rows.to_pylist() == expected_rows([make_record(0)], "token-A")


def test_layout_and_partition_key(tmp_path):
    assert partition_key("token-A") == hashlib.sha256(b"token-A").hexdigest()[:16]
    assert (
        window_location("gs://bucket/prefix/", STREAM, WINDOW)
        == f"gs://bucket/prefix/{STREAM}/{WINDOW.window_id}"
    )
    with StagingWriter(str(tmp_path), STREAM, WINDOW, "token-A") as writer:
        writer.write_record(StagedDataChange(make_record(1)))
    assert writer.directory == str(partition_dir(tmp_path, "token-A"))
    assert staged_files(str(tmp_path), STREAM, WINDOW) == [f"{writer.directory}/part-00000.parquet"]


def test_column_types_match_the_contract(tmp_path):
    assert [(field.name, field.type) for field in STAGED_CHANGE_SCHEMA] == ARCHITECTURE_COLUMNS
    assert {field.name for field in STAGED_CHANGE_SCHEMA if field.nullable} == NULLABLE
    with StagingWriter(str(tmp_path), STREAM, WINDOW, "token-A") as writer:
        writer.write_record(StagedDataChange(make_record(2, mod_type="DELETE")))
    schema = pq.read_schema(writer.files[0].path)
    assert [(field.name, field.type) for field in schema] == ARCHITECTURE_COLUMNS
    row = pq.read_table(writer.files[0].path).to_pylist()[0]
    assert row["commit_timestamp"] == WINDOW.start + timedelta(seconds=2, microseconds=2)
    assert row["commit_timestamp"].tzinfo is not None
    assert row["change_sequence_number"].endswith("/0000000000000000") and row["operation"] == "DELETE"
    assert (row["transaction_id"], row["transaction_record"], row["transaction_record_count"]) == (
        "tx-2",
        "00000002",
        1,
    )
    assert json.loads(row["source_metadata_json"])["is_last_record_in_transaction_in_partition"] is True


def test_retried_writer_replaces_the_first_attempt(tmp_path):
    root = str(tmp_path)
    with StagingWriter(root, STREAM, WINDOW, "token-B", rows_per_file=4) as other:
        other.write_record(StagedDataChange(make_record(50)))
    with StagingWriter(root, STREAM, WINDOW, "token-A", rows_per_file=4) as first:
        for i in range(4):
            first.write_record(StagedDataChange(make_record(i)))  # 12 rows, 3 files
    assert file_names(partition_dir(tmp_path, "token-A")) == [
        "part-00000.parquet",
        "part-00001.parquet",
        "part-00002.parquet",
    ]

    with StagingWriter(root, STREAM, WINDOW, "token-A", rows_per_file=4) as retry:
        retry.write_record(StagedDataChange(make_record(0)))
        retry.write_record(StagedDataChange(make_record(1)))  # 6 rows, 2 files
    assert file_names(partition_dir(tmp_path, "token-A")) == ["part-00000.parquet", "part-00001.parquet"]
    rows = read_staged_changes(root, STREAM, WINDOW).to_table().to_pylist()
    expected = expected_rows([make_record(0), make_record(1)], "token-A") + expected_rows(
        [make_record(50)], "token-B"
    )
    assert sorted(rows, key=sort_key) == sorted(expected, key=sort_key)  # token-B untouched, no duplicates


def test_resume_keeps_files_and_continues_numbering(tmp_path):
    root = str(tmp_path)
    with StagingWriter(root, STREAM, WINDOW, "token-A", rows_per_file=3) as first:
        first.write_record(StagedDataChange(make_record(0)))
        first.write_record(StagedDataChange(make_record(1)))
    directory = partition_dir(tmp_path, "token-A")
    (directory / ".part-00002.parquet.tmp").write_bytes(b"half a file from a crashed write")
    with StagingWriter(root, STREAM, WINDOW, "token-A", rows_per_file=3, resume=True) as resumed:
        resumed.write_record(StagedDataChange(make_record(2)))
    assert file_names(directory) == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    rows = read_staged_changes(root, STREAM, WINDOW).to_table().to_pylist()
    expected = expected_rows([make_record(i) for i in range(3)], "token-A")
    assert sorted(rows, key=sort_key) == sorted(expected, key=sort_key)


def test_failure_discards_unwritten_rows_and_keeps_written_files(tmp_path):
    with pytest.raises(RuntimeError, match="reader lost its partition"):
        with StagingWriter(str(tmp_path), STREAM, WINDOW, "token-A", rows_per_file=4) as writer:
            writer.write_record(StagedDataChange(make_record(0)))
            writer.write_record(StagedDataChange(make_record(1)))  # 6 rows: one file of 4, 2 buffered
            raise RuntimeError("reader lost its partition")
    assert file_names(partition_dir(tmp_path, "token-A")) == ["part-00000.parquet"]
    assert read_staged_changes(str(tmp_path), STREAM, WINDOW).count_rows() == 4


def test_empty_partition_writes_no_file(tmp_path):
    root = str(tmp_path)
    with StagingWriter(root, STREAM, WINDOW, "token-A"):
        pass
    assert not partition_dir(tmp_path, "token-A").exists()
    dataset = read_staged_changes(root, STREAM, WINDOW)
    assert dataset.schema == STAGED_CHANGE_SCHEMA and dataset.count_rows() == 0
    assert list(iter_staged_batches(root, STREAM, WINDOW)) == []

    with StagingWriter(root, STREAM, WINDOW, "token-A") as first:
        first.write_record(StagedDataChange(make_record(0)))
    with StagingWriter(root, STREAM, WINDOW, "token-A"):
        pass  # a retry that finds nothing replaces the earlier attempt's rows with none
    assert file_names(partition_dir(tmp_path, "token-A")) == []
    assert read_staged_changes(root, STREAM, WINDOW).count_rows() == 0


def test_batches_cover_all_partitions_in_bounded_pieces(tmp_path):
    root = str(tmp_path)
    for token, first in (("token-A", 0), ("token-B", 10)):
        with StagingWriter(root, STREAM, WINDOW, token, rows_per_file=4) as writer:
            for i in range(first, first + 5):
                writer.write_record(StagedDataChange(make_record(i)))
    other_window = Window(WINDOW.end, WINDOW.end + timedelta(hours=1))
    with StagingWriter(root, STREAM, other_window, "token-A") as writer:
        writer.write_record(StagedDataChange(make_record(99)))

    batches = list(iter_staged_batches(root, STREAM, WINDOW, batch_size=3, columns=["unit", "keys_json"]))
    assert all(batch.num_rows <= 3 for batch in batches)
    assert all(batch.schema.names == ["unit", "keys_json"] for batch in batches)
    table = pa.Table.from_batches(batches)
    assert table.num_rows == 30
    assert sorted(set(table.column("unit").to_pylist())) == ["token-A", "token-B"]


def test_relative_root_and_file_uri(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with StagingWriter("staging", STREAM, WINDOW, "token-A") as writer:
        writer.write_record(StagedDataChange(make_record(0)))
    assert writer.directory == str(partition_dir(tmp_path / "staging", "token-A"))
    assert read_staged_changes(f"file://{tmp_path}/staging", STREAM, WINDOW).count_rows() == 3


def test_bad_rows_and_misuse_are_refused(tmp_path):
    root = str(tmp_path)
    row = next(change_rows(make_record(0), "token-A"))
    with pytest.raises(InvalidIdentifierError, match="change stream"):
        StagingWriter(root, "../elsewhere", WINDOW, "token-A")
    with pytest.raises(ValueError, match="rows_per_file must be a positive integer"):
        StagingWriter(root, STREAM, WINDOW, "token-A", rows_per_file=0)
    with pytest.raises(ValueError, match="partition token must be a non-empty string"):
        StagingWriter(root, STREAM, WINDOW, "")
    with pytest.raises(RuntimeError, match="not opened"):
        StagingWriter(root, STREAM, WINDOW, "token-A").write_row(row)

    with StagingWriter(root, STREAM, WINDOW, "token-A") as writer:
        with pytest.raises(
            ValueError, match=r"missing columns \['operation'\] and unknown columns \['extra'\]"
        ):
            writer.write_row({**{k: v for k, v in row.items() if k != "operation"}, "extra": 1})
        with pytest.raises(ValueError, match="row of unit 'token-B'"):
            writer.write_row({**row, "unit": "token-B"})
        with pytest.raises(ValueError, match="'transaction_record_count' expects int, got str 'first'"):
            writer.write_row({**row, "transaction_record_count": "first"})
        with pytest.raises(ValueError, match="column 'transaction_record_count' expects int, got bool"):
            writer.write_row({**row, "transaction_record_count": True})
        with pytest.raises(ValueError, match="column 'operation' must not be null"):
            writer.write_row({**row, "operation": None})
        with pytest.raises(ValueError, match="column 'change_sequence_number' must not be null"):
            writer.write_row({**row, "change_sequence_number": None})
        with pytest.raises(ValueError, match="'commit_timestamp' must be timezone-aware"):
            writer.write_row({**row, "commit_timestamp": datetime(2022, 9, 27, 12, 0)})
        writer.write_row(row)
    assert writer.rows_written == 1  # refused rows never reached a file
    with pytest.raises(RuntimeError, match="closed"):
        writer.write_row(row)


def test_a_root_opened_with_storage_options_uses_paths_relative_to_it(tmp_path, monkeypatch):
    """Without a filesystem, a root is resolved with the storage options; a delta-rs object store
    resolves to paths relative to the root (path ""), as this stand-in does."""
    from airflow_provider_cdc import filesystems

    options = {"google_service_account_key": "{}"}
    opened = []

    def resolve(location, storage_options=None):
        opened.append((location, storage_options))
        (tmp_path / "bucket").mkdir(exist_ok=True)
        return pafs.SubTreeFileSystem(str(tmp_path / "bucket"), pafs.LocalFileSystem()), ""

    monkeypatch.setattr(filesystems, "resolve", resolve)
    root = "gs://bucket/cdc"
    key = partition_key("token-A")
    with StagingWriter(root, STREAM, WINDOW, "token-A", claim_id="a1", storage_options=options) as writer:
        writer.write_record(StagedDataChange(make_record(0)))
    with StagingWriter(root, STREAM, WINDOW, "token-A", claim_id="a2", storage_options=options) as stale:
        stale.write_record(StagedDataChange(make_record(1)))
    assert writer.directory == f"{STREAM}/{WINDOW.window_id}/partition={key}/claim=a1"
    assert staged_files(root, STREAM, WINDOW, claims={"token-A": "a1"}, storage_options=options) == [
        f"{writer.directory}/part-00000.parquet"
    ]
    rows = read_staged_changes(root, STREAM, WINDOW, claims={"token-A": "a1"}, storage_options=options)
    assert sorted(rows.to_table().to_pylist(), key=sort_key) == expected_rows([make_record(0)], "token-A")
    assert discard_other_claims(root, STREAM, WINDOW, "token-A", "a1", storage_options=options) == 1
    remaining = staged_files(root, STREAM, WINDOW, storage_options=options)
    assert remaining == [f"{writer.directory}/part-00000.parquet"]
    assert {location for location, _ in opened} == {root}
    assert all(given == options for _, given in opened)
    assert (tmp_path / "bucket" / STREAM / WINDOW.window_id / f"partition={key}" / "claim=a1").is_dir()


def test_an_explicit_filesystem_wins_over_storage_options(tmp_path, monkeypatch):
    from airflow_provider_cdc import filesystems

    monkeypatch.setattr(filesystems, "resolve", lambda *args: pytest.fail("the root must not be resolved"))
    root, local, options = str(tmp_path), pafs.LocalFileSystem(), {"a": "b"}
    with StagingWriter(root, STREAM, WINDOW, "token-A", filesystem=local, storage_options=options) as writer:
        writer.write_record(StagedDataChange(make_record(0)))
    assert staged_files(root, STREAM, WINDOW, local, storage_options=options) == [
        f"{partition_dir(tmp_path, 'token-A')}/part-00000.parquet"
    ]


# --- Google Cloud Storage (gcp-storage-emulator on loopback) ---------------------------------------


@pytest.fixture
def gcs_endpoint():
    """``host:port`` of a loopback Cloud Storage emulator holding the bucket ``staging-bucket``."""
    server_module = pytest.importorskip("gcp_storage_emulator.server")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = server_module.create_server("127.0.0.1", port, in_memory=True, default_bucket="staging-bucket")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def gcs(gcs_endpoint):
    return pafs.GcsFileSystem(
        anonymous=True,
        endpoint_override=gcs_endpoint,
        scheme="http",
        retry_time_limit=timedelta(seconds=10),
    )


def test_gcs_round_trip_retry_and_resume(gcs):
    root = "gs://staging-bucket/cdc"
    with StagingWriter(root, STREAM, WINDOW, "token-A", rows_per_file=4, filesystem=gcs) as first:
        for i in range(3):
            first.write_record(StagedDataChange(make_record(i)))  # 9 rows: 3 objects
    prefix = f"staging-bucket/cdc/{STREAM}/{WINDOW.window_id}/partition={partition_key('token-A')}"
    assert first.directory == prefix
    assert staged_files(root, STREAM, WINDOW, gcs) == [f"{prefix}/part-0000{n}.parquet" for n in range(3)]

    with StagingWriter(root, STREAM, WINDOW, "token-A", rows_per_file=4, filesystem=gcs) as retry:
        retry.write_record(StagedDataChange(make_record(0)))  # 3 rows: replaces all three objects
    with StagingWriter(
        root, STREAM, WINDOW, "token-A", rows_per_file=4, filesystem=gcs, resume=True
    ) as resumed:
        resumed.write_record(StagedDataChange(make_record(1)))
    assert staged_files(root, STREAM, WINDOW, gcs) == [
        f"{prefix}/part-00000.parquet",
        f"{prefix}/part-00001.parquet",
    ]

    dataset = read_staged_changes(root, STREAM, WINDOW, filesystem=gcs)
    assert dataset.schema == STAGED_CHANGE_SCHEMA
    rows = dataset.to_table().to_pylist()
    expected = expected_rows([make_record(0), make_record(1)], "token-A")
    assert sorted(rows, key=sort_key) == sorted(expected, key=sort_key)
    assert sum(batch.num_rows for batch in iter_staged_batches(root, STREAM, WINDOW, gcs, batch_size=2)) == 6


def test_gcs_root_without_a_filesystem_is_resolved_to_the_emulator(gcs_endpoint, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://{gcs_endpoint}")
    root = "gs://staging-bucket/resolved"
    with StagingWriter(root, STREAM, WINDOW, "token-A", rows_per_file=4) as writer:
        writer.write_record(StagedDataChange(make_record(0)))
    prefix = f"staging-bucket/resolved/{STREAM}/{WINDOW.window_id}/partition={partition_key('token-A')}"
    assert writer.directory == prefix
    assert staged_files(root, STREAM, WINDOW) == [f"{prefix}/part-00000.parquet"]
    assert read_staged_changes(root, STREAM, WINDOW).count_rows() == 3


def test_object_store_locations_take_pyarrow_writes(tmp_path) -> None:
    """delta-rs's object store (any URI with storage options) accepts what pyarrow writes: Parquet
    files and raw buffers, read back whole."""
    import pyarrow.parquet as pq

    from airflow_provider_cdc.filesystems import resolve

    fs, root = resolve(f"file://{tmp_path}/store", None)
    assert root == str(tmp_path / "store")
    fs, root = resolve("memory:///cdc/staging", {"allow_http": "true"})
    assert root == ""
    table = pa.table({"a": [1, 2, 3]})
    with fs.open_output_stream("part-00000.parquet") as out:
        pq.write_table(table, out)
    with fs.open_output_stream("note.txt") as out:
        out.write(b"hello")
        out.write(pa.py_buffer(b" world"))
    with fs.open_input_file("part-00000.parquet") as handle:
        assert pq.read_table(handle).equals(table)
    with fs.open_input_file("note.txt") as handle:
        assert handle.read() == b"hello world"


def test_a_source_without_transactions_stages_nulls_where_the_contract_allows_them(tmp_path):
    first, second = (
        {**_staged_row(WINDOW.start + timedelta(seconds=n), f'{{"Id":"{n}"}}', "x"), "unit": "token-A"}
        for n in (1, 2)
    )
    bare = {**first, **dict.fromkeys(NULLABLE)}
    with StagingWriter(str(tmp_path), STREAM, WINDOW, "token-A") as writer:
        writer.write_row(bare)
        writer.write_row(second)
    assert pq.read_table(writer.files[0].path).to_pylist() == [bare, second]


def test_record_batches_from_python_columns_take_every_path_with_the_same_values():
    from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS
    from airflow_provider_cdc.staging.batches import record_batch

    one = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        _staged_row(one, '{"Id":"1"}', "ascii"),
        _staged_row(one, '{"Id":"2"}', "naïve ü 日本"),
        _staged_row(one + timedelta(microseconds=1), '{"Id":"3"}', ""),
    ]
    for subset in (rows[:1], rows[::2], rows, rows * 3):
        columns = {name: [row[name] for row in subset] for name in STAGED_CHANGE_COLUMNS}
        batch = record_batch(columns)
        assert batch.schema == STAGED_CHANGE_SCHEMA
        for name in STAGED_CHANGE_COLUMNS:
            assert batch.column(name).to_pylist() == columns[name], name
    # A source without transactions or before images leaves those columns NULL.
    bare = [{**row, **dict.fromkeys(NULLABLE)} for row in rows]
    for subset in (bare, [rows[0], bare[1], rows[2]], [bare[0], rows[1]]):
        columns = {name: [row[name] for row in subset] for name in STAGED_CHANGE_COLUMNS}
        batch = record_batch(columns)
        batch.validate(full=True)
        for name in STAGED_CHANGE_COLUMNS:
            assert batch.column(name).to_pylist() == columns[name], name
    with pytest.raises(ValueError, match="must not be null"):
        record_batch({**{n: [rows[0][n]] for n in STAGED_CHANGE_COLUMNS}, "keys_json": [None]})
    with pytest.raises(TypeError):
        record_batch({**{n: [rows[0][n]] * 2 for n in STAGED_CHANGE_COLUMNS}, "transaction_id": [None, 7]})
    with pytest.raises(TypeError):
        record_batch({**{n: [rows[0][n]] for n in STAGED_CHANGE_COLUMNS}, "keys_json": [7]})
    with pytest.raises(TypeError):
        record_batch({**{n: [rows[0][n]] * 2 for n in STAGED_CHANGE_COLUMNS}, "commit_timestamp": [one, "x"]})


def _staged_row(commit: datetime, keys: str, name: str) -> dict:
    """A staged row of a table read (one record, one mod)."""
    return {
        "unit": "p",
        "commit_timestamp": commit,
        "transaction_id": f"T/{keys}",
        "transaction_record": "00000000",
        "transaction_record_count": 1,
        "table_name": "T",
        "operation": "INSERT",
        "keys_json": keys,
        "after_json": f'{{"Name":"{name}"}}',
        "before_json": "{}",
        "column_types_json": "[]",
        "source_metadata_json": '{"value_capture_type":"NEW_ROW"}',
        "change_sequence_number": keys,
    }


def test_record_batches_are_staged_as_the_rows_they_hold(tmp_path):
    """``write_batch`` (a columnar decoder's output) writes what ``write_tuples`` writes for the same
    rows: the same files, file boundaries and commit time bounds, rows held as Python values first."""
    from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS
    from airflow_provider_cdc.staging.batches import record_batch

    rows = [
        tuple(row[name] for name in STAGED_CHANGE_COLUMNS)
        for row in expected_rows([make_record(i) for i in range(9)], "token-A")
    ]
    sides = {}
    for side in ("tuples", "batches"):
        with StagingWriter(str(tmp_path / side), STREAM, WINDOW, "token-A", rows_per_file=4) as writer:
            if side == "tuples":
                writer.write_tuples(rows)
            else:
                writer.write_tuples(rows[:3])
                for start in (3, 10, 20):
                    part = rows[start : {3: 10, 10: 20, 20: len(rows)}[start]]
                    columns = dict(
                        zip(STAGED_CHANGE_COLUMNS, map(list, zip(*part, strict=True)), strict=True)
                    )
                    assert writer.write_batch(record_batch(columns)) == len(part)
        sides[side] = [
            (
                staged.rows,
                staged.min_commit_timestamp,
                staged.max_commit_timestamp,
                pq.read_table(staged.path),
            )
            for staged in writer.files
        ]
    assert [side[:3] for side in sides["batches"]] == [side[:3] for side in sides["tuples"]]
    for (*_, one), (*_, other) in zip(sides["batches"], sides["tuples"], strict=True):
        assert one.equals(other)


def test_record_batches_with_other_columns_or_missing_values_are_refused(tmp_path):
    from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS
    from airflow_provider_cdc.staging.batches import record_batch

    row = expected_rows([make_record(0, mods=1)], "token-A")[0]
    batch = record_batch({name: [row[name]] for name in STAGED_CHANGE_COLUMNS})
    with StagingWriter(str(tmp_path), STREAM, WINDOW, "token-A") as writer:
        with pytest.raises(ValueError, match="expected the columns"):
            writer.write_batch(batch.select(STAGED_CHANGE_COLUMNS[:-1]))
        missing = batch.set_column(
            STAGED_CHANGE_COLUMNS.index("keys_json"), "keys_json", pa.nulls(1, pa.string())
        )
        with pytest.raises(ValueError, match="'keys_json' must not be null"):
            writer.write_batch(missing)
        assert writer.write_batch(batch) == 1
    assert pq.read_table(writer.files[0].path).to_pylist() == [row]
