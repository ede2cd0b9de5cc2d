"""Datastream windows by arrival: which files a window holds, when it may be listed, and that an opening
again reads the files the first opening recorded (local folders by modification time, Cloud Storage by
``timeCreated`` on the loopback emulator)."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from support.clock import ManualClock

from airflow_provider_cdc.core.timestamps import to_micros
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore
from airflow_provider_cdc.sources.datastream.hook import (
    EMPTY_WINDOW_TOKEN,
    DatastreamHook,
    DatastreamSourceError,
    WindowNotArrivedError,
    lateness_margin_for,
    source_key_of,
)
from airflow_provider_cdc.sources.datastream.listing import FolderBounds, split_token
from airflow_provider_cdc.sources.datastream.settings import DatastreamSettingsError

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
MINUTE = timedelta(minutes=1)
HEX = "0123456789abcdef0123456789abcdef01234567"


def data_file(name_index: int, read_method: str = "mysql-cdc-binlog") -> str:
    return f"{HEX[:-4]}{name_index:04d}_{read_method}_1296257282_6_{name_index}.avro"


def put_local(root: Path, obj: str, minute: datetime, name: str, arrival: datetime) -> str:
    """A file in ``obj``'s minute folder, arrived at ``arrival`` (its modification time)."""
    relative = f"{obj}/{minute:%Y/%m/%d/%H/%M}/{name}"
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"events")
    os.utime(path, ns=(to_micros(arrival) * 1000, to_micros(arrival) * 1000))
    return relative


def clocked_hook(url: str, root: str, now: list[datetime], **arguments: Any) -> DatastreamHook:
    store = Metastore(url, clock=ManualClock())
    store.ensure_schema()

    class Clocked(DatastreamHook):
        @property
        def metastore(self) -> Metastore:
            return store

    arguments.setdefault("source", "orders_stream")
    return Clocked(root, clock=lambda: now[0], **arguments)


def names(tokens: list[str]) -> list[str]:
    return sorted(split_token(token)[0] for token in tokens)


def test_a_window_holds_the_files_that_arrived_in_it_whatever_their_minute_folder(
    tmp_path: Path, sqlite_url: str
) -> None:
    window = Window(T0, T0 + 10 * MINUTE)
    inside = put_local(tmp_path, "shop_orders", T0 + MINUTE, data_file(1), T0 + 2 * MINUTE)
    # A late CDC file for a minute long before the window, and a backfill still writing into the
    # folder of the minute it started in, both arrive in the window.
    late = put_local(tmp_path, "shop_orders", T0 - timedelta(hours=5), data_file(2), T0 + 3 * MINUTE)
    backfill = put_local(
        tmp_path, "shop_customers", T0 - timedelta(days=2), data_file(3, "mysql-backfill-fulldump"), T0
    )
    # Arrived before the window, or at its end (exclusive): not in it.
    put_local(tmp_path, "shop_orders", T0 - MINUTE, data_file(4), T0 - timedelta(microseconds=1))
    put_local(tmp_path, "shop_orders", T0 + 9 * MINUTE, data_file(5), window.end)
    (tmp_path / "shop_orders" / "README").write_text("not a data file")
    now = [window.end + timedelta(hours=1)]
    hook = clocked_hook(sqlite_url, str(tmp_path), now)
    assert [f.name for f in hook.list_window(window)] == sorted([inside, late, backfill])
    only_orders = clocked_hook(sqlite_url, str(tmp_path), now, objects=["shop_orders"])
    assert [f.name for f in only_orders.list_window(window)] == sorted([inside, late])


def test_a_window_is_listed_only_once_its_lateness_margin_passed(tmp_path: Path, sqlite_url: str) -> None:
    window = Window(T0, T0 + 10 * MINUTE)
    now = [window.end + timedelta(seconds=30)]
    hook = clocked_hook(sqlite_url, str(tmp_path), now, file_rotation_interval=30)
    assert hook.lateness_margin == lateness_margin_for(timedelta(seconds=30)) == timedelta(seconds=120)
    with pytest.raises(WindowNotArrivedError) as refused:
        hook.open_window_epoch("pipe", window, str(tmp_path / "staging"), "owner")
    assert str(window) in str(refused.value) and "lateness margin" in str(refused.value)
    assert not hook.metastore.is_known_stream(hook.source_key)  # nothing recorded
    now[0] = hook.readable_at(window)
    hook.check_readable(window)
    explicit = clocked_hook(sqlite_url, str(tmp_path), now, lateness_margin="5")
    assert explicit.readable_at(window) == window.end + timedelta(seconds=5)


def test_an_opening_again_reads_the_files_recorded_at_the_first_opening(
    tmp_path: Path, sqlite_url: str
) -> None:
    window = Window(T0, T0 + 10 * MINUTE)
    first = put_local(tmp_path, "shop_orders", T0, data_file(1), T0 + MINUTE)
    now = [window.end + timedelta(hours=1)]
    hook = clocked_hook(sqlite_url, str(tmp_path), now)
    epoch, tokens = hook.open_window_epoch("pipe", window, str(tmp_path / "staging"), "owner")
    assert names(tokens) == [first]
    # A file whose modification time is set into the window afterwards (a copy, a restore) does not
    # change what the window holds: the re-run reads what the first opening listed.
    put_local(tmp_path, "shop_orders", T0, data_file(2), T0 + 2 * MINUTE)
    again, tokens_again = hook.open_window_epoch("pipe", window, str(tmp_path / "staging"), "owner")
    assert again == epoch + 1 and sorted(tokens_again) == sorted(tokens)
    units = hook.metastore.window_partitions(hook.source_key, window.start, window.end)
    assert sorted(u.token for u in units) == sorted(tokens)


def test_a_window_no_file_arrived_in_has_one_empty_unit(tmp_path: Path, sqlite_url: str) -> None:
    (tmp_path / "shop_orders").mkdir()
    window = Window(T0, T0 + MINUTE)
    hook = clocked_hook(sqlite_url, str(tmp_path), [window.end + timedelta(hours=1)])
    _, tokens = hook.open_window_epoch("pipe", window, str(tmp_path / "staging"), "owner")
    assert len(tokens) == 1 and tokens[0].startswith(EMPTY_WINDOW_TOKEN)
    summary = hook.read_window(window, str(tmp_path / "staging"), "reader")
    assert summary.to_dict()["rows"] == 0
    assert hook.window_complete(window)


def put_events(root: Path, obj: str, index: int, rows: list[dict[str, Any]], arrival: datetime) -> str:
    """A PostgreSQL CDC JSONL file of ``obj`` upserting ``rows`` (key ``id``), arrived at ``arrival``."""
    events = [
        {
            "uuid": f"{obj}-{index}-{n}",
            "read_timestamp": "2026-03-01T12:00:00.000Z",
            "source_timestamp": "2026-03-01T12:00:00.000Z",
            "object": obj,
            "read_method": "postgresql-cdc",
            "stream_name": "projects/p/locations/l/streams/s",
            "schema_key": HEX,
            "source_metadata": {
                "schema": obj.split("_")[0],
                "table": obj.split("_", 1)[-1],
                "change_type": "INSERT",
                "is_deleted": False,
                "lsn": f"0/{index * 100 + n:X}",
                "primary_keys": ["id"],
            },
            "payload": row,
        }
        for n, row in enumerate(rows)
    ]
    name = data_file(index, "postgresql-cdc").replace(".avro", ".jsonl")
    relative = put_local(root, obj, T0, name, arrival)
    path = root / relative
    path.write_text("".join(json.dumps(event) + "\n" for event in events))
    os.utime(path, ns=(to_micros(arrival) * 1000, to_micros(arrival) * 1000))
    return relative


def staged_tables(hook: DatastreamHook, staging: Path, window: Window) -> list[tuple[str, str]]:
    """``(table_name, keys_json)`` of the window's staged rows, sorted."""
    from airflow_provider_cdc.staging.reading import read_staged_changes

    claims = {
        unit.token: unit.claim_id
        for unit in hook.metastore.window_partitions(hook.source_key, window.start, window.end)
    }
    rows = read_staged_changes(str(staging), hook.staging_folder, window, claims=claims).to_table()
    return sorted(zip(rows["table_name"].to_pylist(), rows["keys_json"].to_pylist(), strict=True))


def test_objects_named_with_dashes_are_read_into_tables_of_their_names_with_underscores(
    tmp_path: Path, sqlite_url: str
) -> None:
    stream, staging = tmp_path / "stream", tmp_path / "staging"
    window = Window(T0, T0 + 10 * MINUTE)
    put_events(stream, "ea-main_users", 1, [{"id": 1, "name": "Ada"}, {"id": 2, "name": "Bo"}], T0 + MINUTE)
    put_events(stream, "ea-main_orders", 2, [{"id": 7, "total": 12}], T0 + 2 * MINUTE)
    hook = clocked_hook(sqlite_url, str(stream), [window.end + timedelta(hours=1)])
    hook.open_window_epoch("pipe", window, str(staging), "owner")
    hook.read_window(window, str(staging), "reader")
    assert staged_tables(hook, staging, window) == [
        ("ea_main_orders", '{"id":"7"}'),
        ("ea_main_users", '{"id":"1"}'),
        ("ea_main_users", '{"id":"2"}'),
    ]
    # Given by name, and mapped by hand, too.
    named = clocked_hook(
        sqlite_url,
        str(stream),
        [window.end + timedelta(hours=1)],
        source="users_only",
        objects=["ea-main_users"],
        settings={"table_names": {"ea-main_users": "users"}},
    )
    named.open_window_epoch("pipe_users", window, str(staging), "owner")
    named.read_window(window, str(staging), "reader")
    assert staged_tables(named, staging, window) == [("users", '{"id":"1"}'), ("users", '{"id":"2"}')]


def test_two_objects_on_one_table_are_refused_at_opening_before_anything_is_recorded(
    tmp_path: Path, sqlite_url: str
) -> None:
    stream, staging = tmp_path / "stream", tmp_path / "staging"
    window = Window(T0, T0 + 10 * MINUTE)
    put_events(stream, "ea-main_users", 1, [{"id": 1, "name": "Ada"}], T0 + MINUTE)
    put_events(stream, "ea.main_users", 2, [{"id": 1, "name": "Old Ada"}], T0 + 2 * MINUTE)
    now = [window.end + timedelta(hours=1)]
    hook = clocked_hook(sqlite_url, str(stream), now)
    with pytest.raises(DatastreamSourceError) as refused:
        hook.open_window_epoch("pipe", window, str(staging), "owner")
    assert (
        "Datastream objects 'ea-main_users' and 'ea.main_users' both map to table 'ea_main_users'; "
        "map one of them to another table in table_names"
    ) in str(refused.value)
    assert not hook.metastore.is_known_stream(hook.source_key)  # nothing recorded
    with pytest.raises(DatastreamSettingsError, match="'ea-main_users' and 'ea.main_users' both map"):
        clocked_hook(sqlite_url, str(stream), now, objects=["ea.main_users", "ea-main_users"])
    mapped = clocked_hook(
        sqlite_url, str(stream), now, settings={"table_names": {"ea.main_users": "legacy_users"}}
    )
    mapped.open_window_epoch("pipe", window, str(staging), "owner")
    mapped.read_window(window, str(staging), "reader")
    assert staged_tables(mapped, staging, window) == [
        ("ea_main_users", '{"id":"1"}'),
        ("legacy_users", '{"id":"1"}'),
    ]


def test_minute_folders_prune_only_what_cannot_hold_the_window() -> None:
    start, end = T0, T0 + 10 * MINUTE
    unbounded = FolderBounds.of(start, end, timedelta(minutes=10), None)
    assert unbounded.admits(("2020",)) and unbounded.admits(("2026", "03", "01", "12", "19"))
    assert not unbounded.admits(("2026", "03", "01", "12", "21"))
    assert not unbounded.admits(("2027",))
    assert unbounded.admits(("not-a-minute",))
    bounded = FolderBounds.of(start, end, timedelta(0), timedelta(hours=1))
    assert not bounded.admits(("2026", "03", "01", "10")) and bounded.admits(("2026", "03", "01", "11"))


def test_source_keys_name_the_root_and_the_source() -> None:
    assert (
        source_key_of("gs://bucket/datastream/prefix/", "orders")
        == "datastream/gs/bucket/datastream/prefix/orders"
    )
    assert source_key_of("/data/streams", "orders") == "datastream/local/data/streams/orders"
    odd = source_key_of("/data/my streams", "orders")
    assert odd.startswith("datastream/root/") and odd.endswith("/orders")
    with pytest.raises(ValueError, match="source"):
        source_key_of("/data", "not valid")


def test_cloud_storage_windows_by_creation_time(
    cloud_storage: Any, sqlite_url: str, monkeypatch: Any
) -> None:
    """On Cloud Storage a file's arrival is its ``timeCreated``; tokens carry the listed generation."""
    bucket = cloud_storage.bucket("datastream-bucket")
    root = "gs://datastream-bucket/streams/shop"

    def upload(relative: str) -> Any:
        blob = bucket.blob(f"streams/shop/{relative}")
        blob.upload_from_string(b"events")
        blob.reload()
        return blob

    first = [upload(f"shop_orders/2026/03/01/12/0{i}/{data_file(i)}") for i in range(3)]
    boundary = max(blob.time_created for blob in first) + timedelta(microseconds=1)
    while datetime.now(timezone.utc) <= boundary:  # the emulator stamps creation with its clock
        time.sleep(0.001)
    later = [upload(f"shop_orders/2026/03/01/11/00/{data_file(9)}")]  # late, into an old folder
    start = min(blob.time_created for blob in first)
    end = max(blob.time_created for blob in later) + timedelta(microseconds=1)
    now = [end + timedelta(hours=1)]
    hook = clocked_hook(sqlite_url, root, now)
    monkeypatch.setattr(DatastreamHook, "_storage_client", lambda self: cloud_storage.client())
    assert hook.files.object_names() == ["shop_orders"]
    one = hook.list_window(Window(start, boundary))
    two = hook.list_window(Window(boundary, end))
    assert [f.name for f in one] == sorted(b.name.removeprefix("streams/shop/") for b in first)
    assert [f.name for f in two] == [later[0].name.removeprefix("streams/shop/")]
    assert all(split_token(f.token)[1] == f.generation and f.generation for f in one + two)
    with hook.files.open(two[0].token) as stream:
        assert stream.read() == b"events"


def test_a_window_on_cloud_storage_stages_the_files_that_arrived_in_it(
    cloud_storage: Any, sqlite_url: str, tmp_path: Path, monkeypatch: Any
) -> None:
    """Files uploaded to Cloud Storage as Datastream writes them are read back through the Google
    connection's client into staging: every event of the window's files, nothing of the next window's."""
    from airflow_provider_cdc.testing.datastream.scenario import DatastreamScenario
    from airflow_provider_cdc.testing.datastream.writer import GcsSink, write_file

    cloud_storage.bucket("datastream-bucket")
    scenario = DatastreamScenario("oracle", "avro", seed=3, windows=2)
    sink = GcsSink(cloud_storage.client(), "datastream-bucket", "streams/hr")
    first = [write_file(planned, sink) for planned in scenario.files_for(0)]
    boundary = max(written.arrival for written in first) + timedelta(microseconds=1)
    while datetime.now(timezone.utc) <= boundary:  # the emulator stamps creation with its clock
        time.sleep(0.001)
    second = [write_file(planned, sink) for planned in scenario.files_for(1)]
    start = min(written.arrival for written in first)
    now = [max(written.arrival for written in second) + timedelta(hours=1)]
    hook = clocked_hook(sqlite_url, "gs://datastream-bucket/streams/hr", now)
    monkeypatch.setattr(DatastreamHook, "_storage_client", lambda self: cloud_storage.client())
    window = Window(start, boundary)
    _, tokens = hook.open_window_epoch("pipe", window, str(tmp_path / "staging"), "owner")
    assert len(tokens) == len(first)
    summary = hook.read_window(window, str(tmp_path / "staging"), "reader").to_dict()
    assert summary["rows"] == sum(written.events for written in first) > 0
    assert summary["partitions"] == len(first)
