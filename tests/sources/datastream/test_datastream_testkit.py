"""The Datastream test kit writes files as Datastream lays them out, and its truth is the source's."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import socket
from collections import Counter
from datetime import datetime, timezone

import fastavro
import pytest

from airflow_provider_cdc.testing.datastream import DATABASES, DatastreamScenario, LocalFolderSink, truth

NAME = re.compile(
    r"^(?P<object>shop_(customers|orders))/\d{4}/\d{2}/\d{2}/\d{2}/\d{2}/"
    r"(?P<sha>[0-9a-f]{40})_(?P<method>[a-z-]+)_(?P<signed>-?\d+)_(?P<task>\d+)_(?P<n>\d+)\.(?P<ext>avro|jsonl|jsonl\.gz)$"
)
TOP_LEVEL = [
    "uuid",
    "read_timestamp",
    "source_timestamp",
    "object",
    "read_method",
    "stream_name",
    "schema_key",
    "sort_keys",
    "source_metadata",
    "payload",
]
METADATA = {
    "mysql": ["table", "database", "primary_keys", "log_file", "log_position", "change_type", "is_deleted"],
    "oracle": [
        "schema",
        "table",
        "database",
        "row_id",
        "scn",
        "is_deleted",
        "change_type",
        "ssn",
        "rs_id",
        "tx_id",
        "log_file",
        "primary_keys",
    ],  # fmt: skip
    "postgresql": ["schema", "table", "is_deleted", "change_type", "tx_id", "lsn", "primary_keys"],
    "sqlserver": [
        "table",
        "database",
        "schema",
        "is_deleted",
        "lsn",
        "tx_id",
        "physical_location",
        "replication_index",
        "change_type",
    ],  # fmt: skip
}


@pytest.fixture(scope="module")
def scenarios() -> dict[str, DatastreamScenario]:
    return {database: DatastreamScenario(database, "avro", seed=11) for database in DATABASES}


def read_avro(data: bytes) -> tuple[dict, list[dict]]:
    reader = fastavro.reader(io.BytesIO(data))
    return json.loads(reader.metadata["avro.schema"]), list(reader)


def test_paths_names_and_minute_folders(scenarios) -> None:
    for database, scenario in scenarios.items():
        backfill_minute = scenario.history.backfill_start.replace(second=0, microsecond=0)
        methods = set()
        for planned in scenario.files:
            match = NAME.match(planned.path)
            assert match, planned.path
            assert match["method"] == planned.read_method and match["ext"] == "avro"
            methods.add(planned.read_method)
            for event in planned.events:
                assert event.object_name == match["object"] and event.read_method == planned.read_method
                minute = event.source_timestamp.replace(second=0, microsecond=0)
                assert planned.folder_minute == (backfill_minute if event.is_backfill else minute)
        assert len({f.path for f in scenario.files}) == len(scenario.files)
        assert methods == {
            {
                "mysql": "mysql-cdc-binlog",
                "oracle": "oracle-cdc-logminer",
                "postgresql": "postgresql-cdc",
                "sqlserver": "sqlserver-cdc",
            }[database],  # fmt: skip
            f"{'mysql-backfill-fulldump' if database == 'mysql' else database + '-backfill'}",
        }


def test_truth_of_every_delivered_event_is_the_source_final_state(scenarios) -> None:
    for scenario in scenarios.values():
        final = scenario.final_state()
        assert scenario.final_truth() == final
        assert scenario.truth_after(len(scenario.windows) - 1) == final
        assert all(len(rows) > 10 for rows in final.values())
        assert all("tier" in row for row in final["shop_customers"].values())
        # an earlier window lacks the late and not-yet-arrived files
        assert scenario.truth_after(0) != final


def test_truth_applies_true_order_not_arrival_and_counts_a_redelivery_once(scenarios) -> None:
    events = scenarios["mysql"].history.events
    assert truth(reversed(events)) == truth(events) == scenarios["mysql"].final_state()


def test_avro_schemas_match_real_files(scenarios) -> None:
    for database, scenario in scenarios.items():
        planned = next(
            f for f in scenario.files if f.object_name == "shop_customers" and f.columns[-1].name == "tier"
        )
        schema, records = read_avro(planned.encode())
        assert schema["name"] == "shop_customers"
        assert [f["name"] for f in schema["fields"]] == TOP_LEVEL
        metadata = next(f for f in schema["fields"] if f["name"] == "source_metadata")["type"]
        assert [f["name"] for f in metadata["fields"]] == METADATA[database]
        payload = {
            f["name"]: f
            for f in next(f for f in schema["fields"] if f["name"] == "payload")["type"]["fields"]
        }
        assert list(payload) == ["id", "name", "balance", "active", "updated_at", "notes", "tier"]
        assert all(field["type"][0] == "null" for field in payload.values())
        assert payload["balance"]["type"][1] == {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": 12,
            "scale": 2,
        }
        assert payload["updated_at"]["type"][1] == {"type": "long", "logicalType": "timestamp-micros"}
        if database == "mysql":
            assert payload["name"]["type"][1] == "string" and payload["name"]["default"] is None
            assert payload["active"]["type"][1] == "int"
        else:
            assert payload["name"]["type"][1] == {"type": "string", "logicalType": "varchar", "length": 64}
        assert records and records[0]["uuid"] == planned.events[0].uuid
        assert records[0]["payload"] == planned.events[0].payload
        orders = next(f for f in scenario.files if f.object_name == "shop_orders")
        schema, _ = read_avro(orders.encode())
        payload = next(f for f in schema["fields"] if f["name"] == "payload")["type"]["fields"]
        assert payload[-1] == {
            "name": "attributes",
            "type": ["null", {"type": "string", "logicalType": "json"}],
            **({"default": None} if database == "mysql" else {}),
        }


def test_source_metadata_and_ordering_fields(scenarios) -> None:
    mysql = [e for e in scenarios["mysql"].history.events]
    cdc = [e for e in mysql if not e.is_backfill]
    positions = [(e.source_metadata["log_file"], e.source_metadata["log_position"]) for e in cdc]
    assert positions == sorted(positions) and len({p[0] for p in positions}) > 1  # rolls over
    assert any(b.source_timestamp < a.source_timestamp for a, b in zip(cdc, cdc[1:], strict=False))
    assert {e.source_metadata["change_type"] for e in cdc} == {
        "INSERT",
        "UPDATE-INSERT",
        "DELETE",
        "UPDATE-DELETE",
    }
    pairs = [
        (a, b)
        for a, b in zip(cdc, cdc[1:], strict=False)
        if a.source_metadata["change_type"] == "UPDATE-DELETE"
    ]
    assert pairs and all(
        b.source_metadata["change_type"] == "UPDATE-INSERT" and a.sort_keys == b.sort_keys and a.key != b.key
        for a, b in pairs
    )
    backfill = [e for e in mysql if e.is_backfill]
    assert {(e.source_metadata["log_file"], e.source_metadata["log_position"]) for e in backfill} == {("", 0)}
    assert {e.source_timestamp for e in backfill} == {
        scenarios["mysql"].history.backfill_start.replace(microsecond=0)
    }

    oracle = scenarios["oracle"].history.events
    rs_ids = [e.source_metadata["rs_id"] for e in oracle if not e.is_backfill]
    assert all(
        re.fullmatch(r" 0x[0-9a-f]{6}\.[0-9a-f]{8}\.[0-9a-f]{4} ", r) for r in rs_ids
    ) and rs_ids == sorted(rs_ids)
    oracle_backfill = [e.source_metadata for e in oracle if e.is_backfill]
    assert {(m["change_type"], m["rs_id"], m["tx_id"]) for m in oracle_backfill} == {(None, None, None)}
    assert len({m["scn"] for m in oracle_backfill}) == 1

    for database, pattern in (
        ("postgresql", r"[0-9A-F]+/[0-9A-F]{8}"),
        ("sqlserver", r"[0-9a-f]{8}:[0-9a-f]{8}:[0-9a-f]{4}"),
    ):
        cdc = [e for e in scenarios[database].history.events if not e.is_backfill]
        assert {e.source_metadata["change_type"] for e in cdc} == {"INSERT", "UPDATE", "DELETE"}
        assert all(re.fullmatch(pattern, e.source_metadata["lsn"]) for e in cdc)
        stamps = [e.source_timestamp for e in cdc]
        assert stamps == sorted(stamps)


def test_rotation_by_time_size_and_schema() -> None:
    scenario = DatastreamScenario("postgresql", "jsonl", seed=3, rotation_seconds=20, rotation_mb=0.02)
    reasons = Counter(f.rotation for f in scenario.files)
    assert reasons["size"] and reasons["schema"] and reasons["time"]
    for planned in scenario.files:
        reads = [e.read_timestamp for e in planned.events]
        assert (max(reads) - min(reads)).total_seconds() < 20
        assert len(planned.encode()) <= 0.02 * 1024 * 1024
        assert len({e.columns for e in planned.events}) == 1
    with pytest.raises(ValueError, match="rotation_seconds=5 is outside"):
        DatastreamScenario("mysql", seed=3, rotation_seconds=5)


def test_jsonl_lines_and_gzip() -> None:
    plain = DatastreamScenario("oracle", "jsonl", seed=5, source_timestamps_with_zone=False)
    zipped = DatastreamScenario("oracle", "jsonl.gz", seed=5, source_timestamps_with_zone=True)
    assert [f.path.removesuffix(".gz") for f in zipped.files] == [f.path for f in plain.files]
    line = json.loads(plain.files[0].encode().decode("utf-8").splitlines()[0])
    assert list(line) == TOP_LEVEL
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["read_timestamp"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", line["source_timestamp"])
    zipped_file = zipped.files[0]
    assert zipped_file.path.endswith(".jsonl.gz")
    lines = gzip.decompress(zipped_file.encode()).decode("utf-8").splitlines()
    assert len(lines) == len(zipped_file.events)
    first = json.loads(lines[0])
    assert first["source_timestamp"].endswith("Z")
    customers = next(f for f in plain.files if f.object_name == "shop_customers")
    raw = customers.encode().decode("utf-8").splitlines()[0]
    event = customers.events[0]
    assert f'"balance":{event.payload["balance"]}' in raw  # a JSON number, exact
    assert json.loads(raw)["payload"]["updated_at"].startswith(
        event.payload["updated_at"].strftime("%Y-%m-%dT%H:%M:%S.")
    )
    assert set(plain.jsonl_column_types()["shop_customers"]) == {"balance", "updated_at", "notes", "tier"}


def test_local_sink_arrival_duplicates_late_files_and_backfill_overlap(tmp_path) -> None:
    scenario = DatastreamScenario("mysql", "avro", seed=7, windows=4)
    sink = LocalFolderSink(tmp_path)
    seen_uuids: Counter[str] = Counter()
    for index, (start, end) in enumerate(scenario.windows):
        written = scenario.write_window(index, sink)
        assert len(written) == len(scenario.files_for(index)) > 0
        for item in written:
            assert start <= item.arrival < end
            mtime = datetime.fromtimestamp(os.stat(item.location).st_mtime_ns / 1e9, tz=timezone.utc)
            assert abs((mtime - item.arrival).total_seconds()) < 1e-3
            _, records = read_avro(open(item.location, "rb").read())
            assert len(records) == item.events
            seen_uuids.update(r["uuid"] for r in records)
    assert any(count > 1 for count in seen_uuids.values())  # re-delivered events keep their uuid
    backfill_windows = {i for i in range(4) for f in scenario.files_for(i) if "backfill" in f.read_method}
    assert len(backfill_windows) >= 2
    first_end = scenario.windows[0][1]
    late = [
        f
        for i in range(2, 4)
        for f in scenario.files_for(i)
        if "cdc" in f.read_method and f.task == 1 and f.folder_minute < first_end
    ]
    assert late, "a CDC file for an old minute folder arrives windows later"


def test_deterministic_per_seed() -> None:
    first, again, other = (DatastreamScenario("sqlserver", "avro", seed=s) for s in (4, 4, 5))
    assert [f.path for f in first.files] == [f.path for f in again.files]
    assert first.files[3].encode() == again.files[3].encode()
    assert [f.path for f in first.files] != [f.path for f in other.files]


def test_mysql_gtid_field_names() -> None:
    scenario = DatastreamScenario("mysql", "avro", seed=1, mysql_gtid=True)
    schema, records = read_avro(scenario.files[0].encode())
    metadata = next(f for f in schema["fields"] if f["name"] == "source_metadata")["type"]
    assert [f["name"] for f in metadata["fields"]][3:5] == ["binlog_file", "binlog_position"]
    assert records[0]["source_metadata"]["binlog_file"].startswith("mysql-bin.")


@pytest.fixture
def gcs_client(monkeypatch):
    server_module = pytest.importorskip("gcp_storage_emulator.server")
    storage = pytest.importorskip("google.cloud.storage")
    from google.auth.credentials import AnonymousCredentials

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = server_module.create_server(
        "127.0.0.1", port, in_memory=True, default_bucket="datastream-bucket"
    )
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    try:
        yield storage.Client(project="test-project", credentials=AnonymousCredentials())
    finally:
        server.stop()


def test_gcs_sink_uploads_and_reports_time_created(gcs_client) -> None:
    from airflow_provider_cdc.testing.datastream import GcsSink

    scenario = DatastreamScenario("postgresql", "jsonl.gz", seed=2, windows=1)
    written = scenario.write_window(0, GcsSink(gcs_client, "datastream-bucket", "stream-root"))
    assert written
    blob = gcs_client.bucket("datastream-bucket").get_blob(f"stream-root/{written[0].path}")
    assert blob is not None and blob.time_created == written[0].arrival
    assert written[0].location == f"gs://datastream-bucket/stream-root/{written[0].path}"
    assert len(gzip.decompress(blob.download_as_bytes()).splitlines()) == written[0].events
