"""Table Store windows over the emulator: shards with splits and merges staged shard by shard, folded in
sequence-number order, equal the table the emulator holds; re-reads stage the same changes; windows too
recent or outside the retention are refused naming the window."""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_cdc.core.timestamps import from_micros, to_micros
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore
from airflow_provider_cdc.sources.tablestore.client import TablestoreStreamClient
from airflow_provider_cdc.sources.tablestore.hook import (
    TablestoreStreamHook,
    WindowNotSettledError,
    WindowTrimmedError,
)
from airflow_provider_cdc.staging.reading import read_staged_changes
from airflow_provider_cdc.testing.tablestore_emulator import ManualClock, TablestoreEmulator

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
MINUTE = timedelta(minutes=1)
TABLE = "orders"


@pytest.fixture
def emulator() -> Iterator[TablestoreEmulator]:
    with TablestoreEmulator(ManualClock(to_micros(T0)), shards=2, seed=7) as running:
        running.create_table(TABLE, [("id", "INTEGER")])
        yield running


def hook_of(emulator: TablestoreEmulator, url: str, **arguments: Any) -> TablestoreStreamHook:
    store = Metastore(url)
    store.ensure_schema()
    now = lambda: from_micros(emulator.clock())  # noqa: E731
    client = TablestoreStreamClient(
        emulator.endpoint, emulator.instance, "test-key", "test-secret", sleep=lambda _: None, clock=now
    )

    class Local(TablestoreStreamHook):
        @property
        def metastore(self) -> Metastore:
            return store

    return Local(TABLE, client=client, clock=now, **arguments)


def read(hook: TablestoreStreamHook, window: Window, root: Path, owner: str = "reader-1") -> dict:
    hook.open_window_epoch("orders_pipeline", window, str(root), owner)
    return hook.read_window(window, str(root), owner, poll_seconds=0, sleep=lambda _: None).to_dict()


def staged(hook: TablestoreStreamHook, window: Window, root: Path) -> list[dict[str, Any]]:
    claims = {
        p.token: p.claim_id
        for p in hook.metastore.window_partitions(hook.source_key, window.start, window.end)
    }
    assert claims and all(claims.values()), "a shard of the window was not read"
    table = read_staged_changes(str(root), hook.staging_folder, window, claims=claims).to_table()
    return table.to_pylist()


def encoded(value: Any) -> Any:
    if isinstance(value, bool) or isinstance(value, (float, str)):
        return value
    if isinstance(value, int):
        return str(value)
    return base64.b64encode(value).decode("ascii")


def fold(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The table the staged changes describe, each key's changes in sequence-number order."""
    table: dict[str, dict[str, Any]] = {}
    for row in sorted(rows, key=lambda r: (r["keys_json"], r["change_sequence_number"])):
        after = json.loads(row["after_json"])
        if row["operation"] == "INSERT":
            table[row["keys_json"]] = after
        elif row["operation"] == "UPDATE":
            table.setdefault(row["keys_json"], {}).update(after)
        else:
            table.pop(row["keys_json"], None)
    return {key: {k: v for k, v in image.items() if v is not None} for key, image in table.items()}


def truth(emulator: TablestoreEmulator) -> dict[str, dict[str, Any]]:
    return {
        json.dumps({"id": str(key[0])}, separators=(",", ":")): {k: encoded(v) for k, v in row.items()}
        for key, row in emulator.rows(TABLE).items()
    }


def write_round(emulator: TablestoreEmulator, ids: range, tag: str) -> int:
    """Puts, partial updates and deletes of ``ids``; returns how many records they wrote."""
    for i in ids:
        emulator.put_row(
            TABLE, {"id": i}, {"tag": tag, "n": i, "price": i / 4, "ok": i % 2 == 0, "b": bytes([i])}
        )
        emulator.clock.advance(0.5)
    for i in ids[::2]:
        emulator.update_row(TABLE, {"id": i}, put={"tag": f"{tag}-upd"}, delete_all=["b"])
        emulator.clock.advance(0.5)
    for i in ids[1::3]:
        emulator.delete_row(TABLE, {"id": i})
        emulator.clock.advance(0.5)
    return len(ids) + len(ids[::2]) + len(ids[1::3])


def open_shard(emulator: TablestoreEmulator, index: int = 0) -> str:
    return [s["shard_id"] for s in emulator.shards(TABLE) if not s["closed"]][index]


def test_windows_read_after_splits_and_merges_stage_the_table(
    emulator: TablestoreEmulator, tmp_path: Path, sqlite_url: str
) -> None:
    # Window 1: writes on two shards. Window 2: a split in the middle. Window 3: its children merge.
    written = write_round(emulator, range(1, 13), "w1")
    emulator.clock.advance(60 - (emulator.clock() - to_micros(T0)) / 1e6)
    written += write_round(emulator, range(5, 15), "w2a")
    left, right = emulator.split_shard(TABLE, open_shard(emulator))
    written += write_round(emulator, range(1, 20), "w2b")
    emulator.clock.advance(120 - (emulator.clock() - to_micros(T0)) / 1e6)
    written += write_round(emulator, range(3, 9), "w3a")
    emulator.merge_shards(TABLE, left, right)
    written += write_round(emulator, range(1, 25), "w3b")
    windows = [
        Window(T0, T0 + MINUTE),
        Window(T0 + MINUTE, T0 + 2 * MINUTE),
        Window(T0 + 2 * MINUTE, T0 + 10 * MINUTE),
    ]
    emulator.clock.advance(20 * 60)
    hook = hook_of(emulator, sqlite_url)
    rows: list[dict[str, Any]] = []
    for window in windows:
        summary = read(hook, window, tmp_path)
        window_rows = staged(hook, window, tmp_path)
        assert summary["rows"] == len(window_rows)
        assert all(window.start <= r["commit_timestamp"] < window.end for r in window_rows)
        assert hook.window_complete(window)
        rows += window_rows
    assert fold(rows) == truth(emulator)
    # Every record was staged exactly once, and each key's sequence numbers are distinct.
    assert len(rows) == written
    per_key = Counter((r["keys_json"], r["change_sequence_number"]) for r in rows)
    assert max(per_key.values()) == 1
    # The window with the split read the parent before its children (greater sequence numbers).
    split_rows = [r for r in staged(hook, windows[1], tmp_path) if r["unit"] in (left, right)]
    assert split_rows and all(r["change_sequence_number"].split("/")[1] != "0" * 16 for r in split_rows)


def test_windows_read_as_the_table_changes_continue_from_checkpoints(
    emulator: TablestoreEmulator, tmp_path: Path, sqlite_url: str
) -> None:
    hook = hook_of(emulator, sqlite_url)
    rows: list[dict[str, Any]] = []
    start = T0
    for index, (step, writes) in enumerate(
        [("plain", range(1, 10)), ("split", range(3, 16)), ("merge", range(1, 20)), ("plain", range(2, 6))]
    ):
        end = start + 10 * MINUTE
        write_round(emulator, writes, f"r{index}a")
        if step == "split":
            emulator.split_shard(TABLE, open_shard(emulator))
        if step == "merge":
            closed_parent = [s for s in emulator.shards(TABLE) if s["parent_id"] and not s["closed"]]
            emulator.merge_shards(TABLE, closed_parent[0]["shard_id"], closed_parent[1]["shard_id"])
        write_round(emulator, writes, f"r{index}b")
        emulator.clock.advance((to_micros(end) - emulator.clock()) / 1e6 + 5 * 60 + 1)
        window = Window(start, end)
        read(hook, window, tmp_path)
        rows += staged(hook, window, tmp_path)
        assert fold(rows) == truth(emulator), f"after window {window}"
        start = end


def test_deleting_the_version_just_written_clears_the_column(
    emulator: TablestoreEmulator, tmp_path: Path, sqlite_url: str
) -> None:
    version = emulator.clock() // 1000
    emulator.put_row(TABLE, {"id": 1}, {"n": 1, "note": "x"})
    emulator.clock.advance(1)
    emulator.update_row(TABLE, {"id": 1}, put={}, delete_one={"n": version})
    emulator.update_row(TABLE, {"id": 1}, put={}, delete_one={"note": version - 5})
    emulator.clock.advance(600)
    hook = hook_of(emulator, sqlite_url, column_types={"n": "INTEGER"})
    window = Window(T0, T0 + MINUTE)
    read(hook, window, tmp_path)
    rows = staged(hook, window, tmp_path)
    assert fold(rows) == truth(emulator) == {'{"id":"1"}': {"note": "x"}}
    deleted = [json.loads(r["source_metadata_json"]).get("deleted_versions") for r in rows]
    assert [d for d in deleted if d] == [{"n": [version]}, {"note": [version - 5]}]
    # Primary-key columns are never NULL in Table Store; attribute columns may be absent from a row.
    described = {(c["name"], c["is_nullable"]) for r in rows for c in json.loads(r["column_types_json"])}
    assert described == {("id", False), ("n", True), ("note", True)}


def test_a_window_read_again_stages_the_same_changes(
    emulator: TablestoreEmulator, tmp_path: Path, sqlite_url: str
) -> None:
    write_round(emulator, range(1, 30), "a")
    emulator.clock.advance(100)
    write_round(emulator, range(1, 30), "b")
    window = Window(T0, T0 + MINUTE)
    emulator.clock.advance(600)
    hook = hook_of(emulator, sqlite_url, batch_limit=7)
    read(hook, window, tmp_path)
    first = sorted(
        (r["keys_json"], r["change_sequence_number"], r["after_json"]) for r in staged(hook, window, tmp_path)
    )
    write_round(emulator, range(1, 5), "later")
    emulator.clock.advance(600)
    read(hook, window, tmp_path, owner="reader-2")
    again = sorted(
        (r["keys_json"], r["change_sequence_number"], r["after_json"]) for r in staged(hook, window, tmp_path)
    )
    assert first == again and first


def test_busy_shards_are_retried_and_trimmed_windows_refused(
    emulator: TablestoreEmulator, tmp_path: Path, sqlite_url: str
) -> None:
    write_round(emulator, range(1, 6), "a")
    window = Window(T0, T0 + MINUTE)
    hook = hook_of(emulator, sqlite_url)
    with pytest.raises(WindowNotSettledError, match=str(window).replace("[", r"\[").replace(")", r"\)")):
        read(hook, window, tmp_path)
    emulator.clock.advance(600)
    emulator.inject("GetStreamRecord", "OTSServerBusy", times=3)
    read(hook, window, tmp_path)
    assert fold(staged(hook, window, tmp_path)) == truth(emulator)
    emulator.clock.advance(24 * 3600)
    with pytest.raises(WindowTrimmedError) as refused:
        read(hook, Window(T0 + MINUTE, T0 + 2 * MINUTE), tmp_path)
    assert str(Window(T0 + MINUTE, T0 + 2 * MINUTE)) in str(refused.value) and "retention" in str(
        refused.value
    )
