"""The Cloud Storage fake serves delta-rs (XML API), pyarrow and google-cloud-storage (JSON API).

Every check goes through a real client: delta-rs' ``object_store`` crate, pyarrow's
``GcsFileSystem`` (from a child process, as it holds the GIL in some calls) and
``google.cloud.storage.Client``; raw HTTP only where the point is the wire format of an answer.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from google.api_core import exceptions as api_exceptions
from google.cloud import storage
from pyarrow import fs

from airflow_provider_cdc.testing.gcs_fake import FakeGcs, FakeGcsProcess

BUCKET = "lake-bucket"
TABLE = f"gs://{BUCKET}/lake/table"
LOG = "lake/table/_delta_log/"


@pytest.fixture
def fake() -> Iterator[FakeGcs]:
    with FakeGcs() as fake:
        fake.create_bucket(BUCKET)
        yield fake


@pytest.fixture
def client(fake: FakeGcs, monkeypatch: pytest.MonkeyPatch) -> storage.Client:
    for key, value in fake.environ().items():
        monkeypatch.setenv(key, value)
    return storage.Client()


def _commit_versions(fake: FakeGcs) -> list[int]:
    return [int(n[len(LOG) : -len(".json")]) for n in fake.names(BUCKET, LOG) if n.endswith(".json")]


def _rows(options: dict[str, str]) -> list[dict[str, Any]]:
    table = DeltaTable(TABLE, storage_options=options).to_pyarrow_table()
    return sorted(table.to_pylist(), key=lambda row: row["id"])


def _http(
    method: str, url: str, headers: dict[str, str] | None = None, body: bytes = b""
) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body or None, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_delta_create_append_merge_read_over_the_xml_api(fake: FakeGcs) -> None:
    options = fake.delta_storage_options()
    write_deltalake(TABLE, pa.table({"id": [1, 2], "v": ["a", "b"]}), storage_options=options)
    write_deltalake(TABLE, pa.table({"id": [3], "v": ["c"]}), mode="append", storage_options=options)
    (
        DeltaTable(TABLE, storage_options=options)
        .merge(pa.table({"id": [1, 4], "v": ["A", "d"]}), "s.id = t.id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )

    assert _rows(options) == [
        {"id": 1, "v": "A"},
        {"id": 2, "v": "b"},
        {"id": 3, "v": "c"},
        {"id": 4, "v": "d"},
    ]
    assert DeltaTable(TABLE, storage_options=options).version() == 2
    assert _commit_versions(fake) == [0, 1, 2]
    requests = fake.requests
    assert {r.api for r in requests} == {"xml"}
    commits = [r for r in requests if r.method == "PUT" and "_delta_log" in r.path]
    assert len(commits) == 3
    assert all(r.headers.get("x-goog-if-generation-match") == "0" and r.status == 200 for r in commits)
    assert any(r.query.get("list-type") == "2" for r in requests)

    table = DeltaTable(TABLE, storage_options=options)
    table.create_checkpoint()
    removed = table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert removed
    assert not {f"lake/table/{name}" for name in removed} & set(fake.names(BUCKET, "lake/table/"))
    assert len(_rows(options)) == 4


def test_delta_multipart_upload_over_the_xml_api(fake: FakeGcs) -> None:
    options = fake.delta_storage_options()
    blobs = [os.urandom(16 * 1024) for _ in range(400)]
    write_deltalake(TABLE, pa.table({"id": list(range(400)), "blob": blobs}), storage_options=options)

    uploads = [r for r in fake.requests if "uploadId" in r.query or "uploads" in r.query]
    assert [r.method for r in uploads][0] == "POST" and "uploads" in uploads[0].query
    assert sum(1 for r in uploads if r.method == "PUT") >= 2
    assert uploads[-1].method == "POST" and "uploadId" in uploads[-1].query
    table = DeltaTable(TABLE, storage_options=options).to_pyarrow_table()
    assert table.column("blob").to_pylist() == blobs


def test_two_writers_racing_for_one_delta_version_leave_one_winner(fake: FakeGcs) -> None:
    options = fake.delta_storage_options()
    write_deltalake(TABLE, pa.table({"id": [0], "writer": ["init"]}), storage_options=options)
    # Both writers read version 0, then their PUTs of version 1 are held until both have arrived.
    fake.state.rendezvous(BUCKET, f"{LOG}00000000000000000001.json", parties=2, timeout=30)
    errors: list[BaseException] = []

    def append(writer: str, key: int) -> None:
        try:
            batch = pa.table({"id": [key], "writer": [writer]})
            write_deltalake(TABLE, batch, mode="append", storage_options=options)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(w, k)) for w, k in (("a", 1), ("b", 2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    version_one = [
        r
        for r in fake.requests
        if r.method == "PUT" and r.path.endswith("00000000000000000001.json") and r.api == "xml"
    ]
    assert sorted(r.status for r in version_one) == [200, 412]
    assert _commit_versions(fake) == [0, 1, 2]
    assert _rows(options) == [
        {"id": 0, "writer": "init"},
        {"id": 1, "writer": "a"},
        {"id": 2, "writer": "b"},
    ]
    log = [json.loads(line) for v in (1, 2) for line in fake.get(BUCKET, f"{LOG}{v:020d}.json").splitlines()]
    added = [entry["add"]["path"] for entry in log if "add" in entry]
    assert len(added) == len(set(added)) == 2


def test_xml_api_answers_preconditions_and_missing_objects_as_cloud_storage(fake: FakeGcs) -> None:
    url = f"{fake.endpoint}/{BUCKET}/dir%2Fa.txt"
    status, _ = _http("PUT", url, {"x-goog-if-generation-match": "0"}, b"one")
    assert status == 200
    generation = fake.state.get(BUCKET, "dir/a.txt").generation

    status, body = _http("PUT", url, {"x-goog-if-generation-match": "0"}, b"two")
    assert status == 412
    assert b"<Code>PreconditionFailed</Code>" in body
    status, _ = _http("PUT", url, {"x-goog-if-generation-match": str(generation + 1)}, b"two")
    assert status == 412
    status, _ = _http("PUT", url, {"x-goog-if-generation-match": str(generation)}, b"two")
    assert status == 200
    assert fake.get(BUCKET, "dir/a.txt") == b"two"

    status, body = _http("GET", url, {"Range": "bytes=1-", "Authorization": "Bearer secret-token"})
    assert (status, body) == (206, b"wo")
    assert "secret-token" not in repr(fake.requests)
    status, body = _http("GET", f"{fake.endpoint}/{BUCKET}/missing")
    assert status == 404 and b"<Code>NoSuchKey</Code>" in body
    status, body = _http("GET", f"{fake.endpoint}/no-such-bucket/x")
    assert status == 404 and b"<Code>NoSuchBucket</Code>" in body


def test_xml_listing_pages_with_delimiter_start_after_and_continuation(fake: FakeGcs) -> None:
    for name in ("a/1", "a/2", "b", "c/x/1", "d"):
        fake.put(BUCKET, name, b"x")

    def page(**params: str) -> tuple[list[str], list[str], str | None]:
        query = urllib.parse.urlencode({"list-type": "2", **params})
        status, body = _http("GET", f"{fake.endpoint}/{BUCKET}?{query}")
        assert status == 200
        root = ElementTree.fromstring(body)
        keys = [e.findtext("Key") or "" for e in root.iter("Contents")]
        prefixes = [e.findtext("Prefix") or "" for e in root.iter("CommonPrefixes")]
        return keys, prefixes, root.findtext("NextContinuationToken")

    assert page(delimiter="/") == (["b", "d"], ["a/", "c/"], None)
    assert page(prefix="a/", **{"start-after": "a/1"}) == (["a/2"], [], None)
    first = page(delimiter="/", **{"max-keys": "2"})
    assert first[:2] == (["b"], ["a/"]) and first[2]
    assert page(delimiter="/", **{"max-keys": "2", "continuation-token": first[2]}) == (["d"], ["c/"], None)


def test_google_cloud_storage_round_trip_preconditions_and_listing(client: storage.Client) -> None:
    bucket = client.bucket(BUCKET)
    blob = bucket.blob("dir/a.txt")
    blob.upload_from_string(b"hello world", content_type="text/plain", if_generation_match=0)
    assert blob.generation and blob.metageneration == 1 and blob.size == 11
    assert blob.md5_hash and blob.crc32c

    assert bucket.blob("dir/a.txt").download_as_bytes() == b"hello world"
    assert bucket.blob("dir/a.txt").download_as_bytes(start=6, end=8) == b"wor"
    with pytest.raises(api_exceptions.PreconditionFailed):
        bucket.blob("dir/a.txt").upload_from_string(b"again", if_generation_match=0)
    with pytest.raises(api_exceptions.PreconditionFailed):
        bucket.blob("dir/a.txt").delete(if_generation_match=blob.generation + 1)

    fetched = bucket.get_blob("dir/a.txt")
    assert fetched is not None
    fetched.metadata = {"window": "7"}
    fetched.patch(if_metageneration_match=1)
    assert fetched.metageneration == 2
    with pytest.raises(api_exceptions.PreconditionFailed):
        fetched.patch(if_metageneration_match=1)

    payload = os.urandom(700 * 1024)
    with bucket.blob("big.bin").open("wb", chunk_size=256 * 1024, if_generation_match=0) as writer:
        writer.write(payload)
    assert bucket.blob("big.bin").download_as_bytes() == payload
    bucket.copy_blob(fetched, bucket, "dir/b.txt", if_generation_match=0)
    for name in ("dir/c/1", "e"):
        bucket.blob(name).upload_from_string(b"x")

    listing = client.list_blobs(BUCKET, delimiter="/")
    assert [b.name for b in listing] == ["big.bin", "e"]
    assert listing.prefixes == {"dir/"}
    names = [b.name for b in client.list_blobs(BUCKET, start_offset="big.bin", end_offset="dir/c")]
    assert names == ["big.bin", "dir/a.txt", "dir/b.txt"]
    paged = client.list_blobs(BUCKET, max_results=None, page_size=2)
    assert [b.name for b in paged] == ["big.bin", "dir/a.txt", "dir/b.txt", "dir/c/1", "e"]

    bucket.blob("dir/a.txt").delete(if_generation_match=blob.generation)
    with pytest.raises(api_exceptions.NotFound):
        bucket.blob("dir/a.txt").download_as_bytes()
    with pytest.raises(api_exceptions.NotFound):
        client.get_bucket("no-such-bucket")


def test_pinned_generation_reads_need_a_versioned_bucket(fake: FakeGcs, client: storage.Client) -> None:
    fake.create_bucket("versioned", versioning=True)
    for name in (BUCKET, "versioned"):
        bucket = client.bucket(name)
        first = bucket.blob("o")
        first.upload_from_string(b"v1")
        bucket.blob("o").upload_from_string(b"v2", if_generation_match=first.generation)
        pinned = bucket.blob("o", generation=first.generation)
        if name == "versioned":
            assert pinned.download_as_bytes() == b"v1"
            assert len(list(client.list_blobs(name, versions=True))) == 2
        else:
            with pytest.raises(api_exceptions.NotFound):
                pinned.download_as_bytes()
        assert bucket.blob("o").download_as_bytes() == b"v2"


def test_pyarrow_gcs_filesystem_round_trip_from_the_command_line_server(tmp_path: Path) -> None:
    with FakeGcsProcess([BUCKET], port_file=tmp_path / "port") as served:
        assert served.endpoint == f"http://127.0.0.1:{(tmp_path / 'port').read_text()}"
        gcs = fs.GcsFileSystem(**served.pyarrow_options(), retry_time_limit=timedelta(seconds=2))
        payload = os.urandom(600 * 1024) + b"tail"
        with gcs.open_output_stream(f"{BUCKET}/staging/a.bin") as out:
            out.write(payload)
        info = gcs.get_file_info(f"{BUCKET}/staging/a.bin")
        assert (info.type, info.size) == (fs.FileType.File, len(payload))
        with gcs.open_input_file(f"{BUCKET}/staging/a.bin") as source:
            source.seek(len(payload) - 6)
            assert source.read(6) == payload[-6:]

        pq.write_table(pa.table({"id": [1, 2, 3]}), f"{BUCKET}/staging/t.parquet", filesystem=gcs)
        assert pq.read_table(f"{BUCKET}/staging/t.parquet", filesystem=gcs).column("id").to_pylist() == [
            1,
            2,
            3,
        ]
        gcs.move(f"{BUCKET}/staging/t.parquet", f"{BUCKET}/staging/u.parquet")
        selector = fs.FileSelector(f"{BUCKET}/staging", recursive=True)
        assert sorted(i.path for i in gcs.get_file_info(selector)) == [
            f"{BUCKET}/staging/a.bin",
            f"{BUCKET}/staging/u.parquet",
        ]
        assert gcs.get_file_info(f"{BUCKET}/staging/t.parquet").type == fs.FileType.NotFound
        assert gcs.get_file_info("no-such-bucket/x").type == fs.FileType.NotFound

        # delta-rs writes through the XML API of the same server; pyarrow lists its log.
        write_deltalake(TABLE, pa.table({"id": [1]}), storage_options=served.delta_storage_options())
        log = gcs.get_file_info(fs.FileSelector(f"{BUCKET}/{LOG}"))
        assert [i.base_name for i in log] == ["00000000000000000000.json"]

        # The same server answers the JSON API's precondition failure to any client.
        url = f"{served.endpoint}/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name=staging%2Fa.bin"
        status, body = _http("POST", url + "&ifGenerationMatch=0", {"Content-Type": "text/plain"}, b"x")
        assert status == 412
        assert json.loads(body)["error"]["errors"][0]["reason"] == "conditionNotMet"


def test_the_tables_command_lists_a_lake_on_gs(monkeypatch, capsys) -> None:
    """``tables`` opens a gs:// lake as the pipeline's steps do (``filesystems.resolve`` with the
    storage options), not through a filesystem that ignores them."""
    from airflow_provider_cdc.cli import main

    with FakeGcsProcess([BUCKET]) as served:
        monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)  # the options alone name the store
        options = served.delta_storage_options()
        rows = pa.table({"Id": pa.array([1, 2], pa.int64()), "Name": ["a", "b"]})
        write_deltalake(f"gs://{BUCKET}/lake/Orders", rows, storage_options=options)
        lake = ["--lake-root", f"gs://{BUCKET}/lake", "--storage-options", json.dumps(options)]
        assert main(["tables", *lake, "--rows", "1"]) == 0
    assert "Orders: 2 rows, 2 columns, Delta version 0" in capsys.readouterr().out
