"""Deferred apply on the Delta target: pending changes, compaction, merge-on-read, exactly once."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from support.changes import at, seq, spanner_columns, version

from airflow_provider_cdc import cli
from airflow_provider_cdc.changesets.writer import Change, change_set_table, write_change_set
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.targets.delta import upsert_job
from airflow_provider_cdc.targets.delta.compaction import compaction_due
from airflow_provider_cdc.targets.delta.log import WindowOrderError
from airflow_provider_cdc.targets.delta.pending import PENDING_FOLDER
from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

ORDERS = spanner_columns(1, ("ID", "INT64"), ("Name", "STRING"), ("Amount", "INT64"))
# A column added from a later window on (nullable, as the target adds it).
ORDERS_WITH_NOTE = spanner_columns(
    1, ("ID", "INT64"), ("Name", "STRING"), ("Amount", "INT64"), ("Note", "STRING")
)
PIPELINE = "orders"
TABLE = "Orders"


def full(key: int, n: int, name: str, amount: int, **extra: Any) -> Change:
    return Change({"ID": key}, "UPSERT", seq(n), at(n), {"Name": name, "Amount": amount, **extra})


def partial(key: int, n: int, **values: Any) -> Change:
    return Change({"ID": key}, "UPSERT", seq(n), at(n), values, list(values))


def delete(key: int, n: int) -> Change:
    return Change({"ID": key}, "DELETE", seq(n), at(n))


def rows(data: Any) -> list[dict]:
    return sorted(data.to_pylist(), key=lambda r: r["ID"])


def apply(target: DeltaLakeTarget, changes: list[Change], end: int, types: list[dict] = ORDERS) -> Any:
    return target.apply_change_set(TABLE, change_set_table(types, changes), types, PIPELINE, version(end))


def random_windows(seed: int, count: int = 10) -> list[tuple[list[dict], list[Change]]]:
    """Windows of random changes over 24 keys: full and partial images, deletes, re-inserts, a column
    added halfway, and a quarter of the changes late (older than changes of their key in earlier
    windows)."""
    rng = random.Random(seed)
    clock, windows = 1_000, []
    for w in range(count):
        types = ORDERS_WITH_NOTE if w >= count // 2 else ORDERS
        changes = []
        for key in rng.sample(range(24), 12):
            clock += 1
            late = w and rng.random() < 0.25
            n = clock - (rng.randint(1, 60) if late else 0)
            draw = rng.random()
            if w and draw < 0.25:
                changes.append(delete(key, n))
            elif draw < 0.45:
                changes.append(partial(key, n, Name=f"p{key}.{w}"))
            elif draw < 0.6:
                changes.append(partial(key, n, Amount=w))
            elif draw < 0.7 and types is ORDERS_WITH_NOTE:
                changes.append(partial(key, n, Note=f"note {w}"))
            else:
                extra = {"Note": f"full {w}"} if types is ORDERS_WITH_NOTE and draw > 0.9 else {}
                changes.append(full(key, n, f"f{key}.{w}", w * 10, **extra))
        windows.append((types, changes))
    return windows


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_deferred_apply_gives_the_per_window_upserts_table(tmp_path: Path, seed: int) -> None:
    immediate = DeltaLakeTarget(str(tmp_path / "immediate"), apply_mode="immediate")
    deferred = DeltaLakeTarget(str(tmp_path / "deferred"), apply_mode="deferred", compact_every=4)
    compacted = []
    for i, (types, changes) in enumerate(random_windows(seed)):
        end = 60 * (i + 1)
        assert apply(immediate, changes, end, types).status == "applied"
        result = apply(deferred, changes, end, types)
        assert result.status == "applied" and result.deferred == (i > 0)  # the first window creates it
        compacted += result.compacted_windows
        # merge-on-read equals the per-window upsert after every window, compacted or not
        assert rows(deferred.read_latest(TABLE, PIPELINE)) == rows(immediate.read_table(TABLE))
    assert compacted == [version(60 * i) for i in range(2, 10)]  # every fourth window
    assert deferred.pending_windows(TABLE, PIPELINE) == [version(600)]
    done = deferred.compact(TABLE, PIPELINE)
    assert done.status == "compacted" and done.folded_windows == (version(600),)
    assert rows(deferred.read_table(TABLE)) == rows(immediate.read_table(TABLE))
    assert deferred.apply_watermark(TABLE, PIPELINE) == at(600)
    assert deferred.compact(TABLE, PIPELINE).status == "nothing_pending"


def test_deletes_of_rows_only_in_pending_and_the_fast_path(tmp_path: Path) -> None:
    immediate = DeltaLakeTarget(str(tmp_path / "immediate"), apply_mode="immediate")
    deferred = DeltaLakeTarget(str(tmp_path / "deferred"), apply_mode="deferred", compact_every=None)
    windows = [
        [full(1, 1, "a", 1), full(2, 2, "b", 2)],
        [full(100, 10, "new", 5), partial(1, 11, Amount=7)],  # a row only in pending …
        [delete(100, 20), delete(2, 21), partial(101, 22, Name="partial insert")],  # … deleted there
        [full(100, 30, "back", 6), partial(2, 31, Amount=9)],  # re-inserted: NULLs where not carried
    ]
    for i, changes in enumerate(windows):
        apply(immediate, changes, 60 * (i + 1))
        apply(deferred, changes, 60 * (i + 1))
    latest = rows(deferred.read_latest(TABLE))  # the pipeline found from the pending changes
    assert latest == rows(immediate.read_table(TABLE))
    assert [(r["ID"], r["Name"], r["Amount"]) for r in latest] == [
        (1, "a", 7),
        (2, None, 9),
        (100, "back", 6),
        (101, "partial insert", None),
    ]
    assert len(rows(deferred.read_table(TABLE))) == 2  # nothing compacted yet
    # partial images (BigQuery target) are completed from the latest state, not the stale table
    current = deferred.current_rows(TABLE)
    assert current is not None and rows(current.to_table()) == latest
    done = deferred.compact(TABLE, PIPELINE)
    assert done.folded_windows == (version(120), version(180), version(240))
    assert not done.read_stored_keys  # every pending change is newer than the table: statistics tell
    assert rows(deferred.read_table(TABLE)) == rows(immediate.read_table(TABLE))


def test_reruns_before_and_after_compaction_change_nothing(tmp_path: Path) -> None:
    target = DeltaLakeTarget(str(tmp_path / "lake"), apply_mode="deferred", compact_every=None)
    apply(target, [full(1, 1, "a", 1)], 60)
    first = apply(target, [partial(1, 70, Name="b")], 120)
    assert first.deferred and first.status == "applied" and first.pending_version == 0
    again = apply(target, [partial(1, 70, Name="b")], 120)
    assert again.status == "already_applied" and "pending changes" in again.detail
    assert DeltaTable(str(tmp_path / "lake" / PENDING_FOLDER / TABLE)).version() == 0
    assert target.applied_window_version(TABLE, PIPELINE) == version(120)  # the target holds it …
    assert target.apply_watermark(TABLE, PIPELINE) == at(60)  # … the table not yet
    pending = target.window_result(TABLE, PIPELINE, Window(at(60), at(120)))
    assert pending is not None and pending.version is None and "pending" in pending.detail
    apply(target, [partial(1, 130, Amount=3)], 180)
    with pytest.raises(WindowOrderError, match="pending changes hold"):
        apply(target, [partial(1, 100, Amount=4)], 150)  # never appended, older than what is pending
    done = target.compact(TABLE, PIPELINE)
    assert done.folded_windows == (version(120), version(180))
    for end, n in ((120, 70), (180, 130)):  # re-runs of folded windows: the compaction's commit holds them
        rerun = apply(target, [partial(1, n, Name="changed by a re-run")], end)
        assert rerun.status == "already_applied"
        held = target.window_result(TABLE, PIPELINE, Window(at(end - 60), at(end)))
        assert held is not None and held.version == done.table_version
    assert rows(target.read_table(TABLE))[0] | {"_commit_timestamp": None} == {
        "ID": 1,
        "Name": "b",
        "Amount": 3,
        "_change_sequence_number": seq(130),
        "_commit_timestamp": None,
    }
    assert target.pending_windows(TABLE, PIPELINE) == []


def test_folded_rows_left_in_pending_by_a_crash_are_not_applied_again(tmp_path: Path) -> None:
    immediate = DeltaLakeTarget(str(tmp_path / "immediate"), apply_mode="immediate")
    deferred = DeltaLakeTarget(str(tmp_path / "deferred"), apply_mode="deferred", compact_every=None)
    windows = [[full(1, 1, "a", 1)], [full(2, 10, "b", 2), partial(1, 11, Amount=5)], [delete(2, 20)]]
    for i, changes in enumerate(windows):
        apply(immediate, changes, 60 * (i + 1))
        apply(deferred, changes, 60 * (i + 1))
    deferred.compact(TABLE, PIPELINE)
    # The state a crash between the table's commit and the pending clean-up leaves behind.
    pending = DeltaTable(str(tmp_path / "deferred" / PENDING_FOLDER / TABLE))
    pending.restore(pending.version() - 1)
    assert deferred.pending(TABLE).windows(None) == [version(120), version(180)]
    assert deferred.pending_windows(TABLE, PIPELINE) == []
    later = [partial(1, 30, Name="later"), full(2, 31, "again", 3)]
    apply(immediate, later, 240)
    apply(deferred, later, 240)
    assert rows(deferred.read_latest(TABLE, PIPELINE)) == rows(immediate.read_table(TABLE))
    done = deferred.compact(TABLE, PIPELINE)
    assert done.folded_windows == (version(240),) and done.pending_rows == 2
    assert rows(deferred.read_table(TABLE)) == rows(immediate.read_table(TABLE))
    assert deferred.pending(TABLE).windows(None) == []  # the clean-up caught up


def test_a_compaction_adding_a_column_leaves_it_null_where_a_late_change_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    immediate = DeltaLakeTarget(str(tmp_path / "immediate"), apply_mode="immediate")
    deferred = DeltaLakeTarget(str(tmp_path / "deferred"), apply_mode="deferred", compact_every=None)
    first = [full(1, 10, "a", 1), full(2, 10, "b", 2), full(4, 10, "d", 4), full(5, 10, "e", 5)]
    evolving = [
        full(1, 5, "late", 9, Note="late note"),
        full(3, 20, "c", 3, Note="n3"),
        partial(2, 20, Name="p"),
        delete(4, 20),
        partial(5, 6, Note="late partial"),
    ]
    for target in (immediate, deferred):
        apply(target, first, 60)
        assert apply(target, evolving, 120, ORDERS_WITH_NOTE).status == "applied"
    expected = [
        ("a", None),  # the late full image is ignored: Note stays NULL
        ("p", None),
        ("c", "n3"),
        ("e", None),  # so is the late partial image carrying Note
    ]
    assert [(r["Name"], r["Note"]) for r in rows(immediate.read_table(TABLE))] == expected
    assert rows(deferred.read_latest(TABLE, PIPELINE)) == rows(immediate.read_table(TABLE))

    def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("killed before the MERGE")

    with monkeypatch.context() as patch:  # a compaction dying between adding Note and its MERGE
        patch.setattr(DeltaTable, "merge", crash)
        with pytest.raises(RuntimeError, match="killed before the MERGE"):
            deferred.compact(TABLE, PIPELINE)
    assert "Note" in deferred.read_table(TABLE).column_names
    assert deferred.apply_watermark(TABLE, PIPELINE) == at(60)
    assert deferred.pending_windows(TABLE, PIPELINE) == [version(120)]
    assert rows(deferred.read_latest(TABLE, PIPELINE)) == rows(immediate.read_table(TABLE))
    done = deferred.compact(TABLE, PIPELINE)
    assert done.folded_windows == (version(120),) and deferred.apply_watermark(TABLE, PIPELINE) == at(120)
    assert rows(deferred.read_table(TABLE)) == rows(immediate.read_table(TABLE))


def test_compaction_when_due_by_staleness_with_window_ends_as_the_clock(tmp_path: Path) -> None:
    target = DeltaLakeTarget(
        str(tmp_path / "lake"),
        apply_mode="deferred",
        compact_every=None,
        max_staleness=timedelta(seconds=150),
    )
    apply(target, [full(1, 1, "a", 1)], 60)
    assert apply(target, [partial(1, 61, Amount=2)], 120).compacted_windows == ()  # 120 s stale at 180
    third = apply(target, [partial(1, 121, Amount=3)], 180)  # would be 180 s stale at 240: compacted
    assert third.compacted_windows == (version(120), version(180))
    assert target.apply_watermark(TABLE, PIPELINE) == at(180)
    assert rows(target.read_table(TABLE))[0]["Amount"] == 3
    assert compaction_due([version(240)], version(180), version(240), None, timedelta(seconds=150)) is False
    assert compaction_due([1, 2, 3], 0, 3, 3, None) and not compaction_due([1, 2], 0, 2, 3, None)


def test_auto_defers_windows_whose_keys_span_the_tables_files(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    builder = DeltaLakeTarget(lake, apply_mode="immediate")
    for i in range(8):  # eight windows inserting disjoint key ranges: eight files with narrow ranges
        apply(builder, [full(1000 * i + k, 1 + k, "x", k) for k in range(5)], 60 * (i + 1))
    target = DeltaLakeTarget(lake)  # apply_mode="auto"
    local = apply(target, [partial(7000 + k, 100, Amount=-1) for k in range(5)], 600)
    assert local.status == "applied" and not local.deferred  # one file's key range
    spread = apply(target, [partial(1000 * i, 200, Amount=-2) for i in range(8)], 660)
    assert spread.deferred and target.pending_windows(TABLE, PIPELINE) == [version(660)]
    latest = {r["ID"]: r["Amount"] for r in rows(target.read_latest(TABLE, PIPELINE))}
    assert [latest[1000 * i] for i in range(8)] == [-2] * 8 and latest[7001] == -1


def test_immediate_window_folds_what_is_pending_first(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    apply(DeltaLakeTarget(lake, apply_mode="immediate"), [full(1, 1, "a", 1)], 60)
    apply(DeltaLakeTarget(lake, apply_mode="deferred"), [partial(1, 10, Name="pending")], 120)
    result = apply(DeltaLakeTarget(lake, apply_mode="immediate"), [partial(1, 20, Amount=9)], 180)
    assert result.compacted_windows == (version(120), version(180))
    assert rows(DeltaLakeTarget(lake).read_table(TABLE))[0]["Name"] == "pending"
    with pytest.raises(ValueError, match="keeps no tombstones"):
        DeltaLakeTarget(lake, apply_mode="deferred", tombstone_horizon=timedelta(days=1))


def _window(root: Path, start: int, end: int, changes: list[Change]) -> Path:
    path = root / f"{version(start)}-{version(end)}"
    write_change_set(str(path), {TABLE: change_set_table(ORDERS, changes)})
    return path


def test_upsert_job_and_the_cli(tmp_path: Path, capsys) -> None:
    lake = tmp_path / "lake"
    windows = [
        _window(tmp_path / "cs", 0, 60, [full(1, 1, "a", 1), full(2, 2, "b", 2)]),
        _window(tmp_path / "cs", 60, 120, [partial(1, 61, Amount=5), delete(2, 62)]),
    ]
    base = [
        "--lake-root",
        str(lake),
        "--pipeline-id",
        PIPELINE,
        "--apply-mode",
        "deferred",
        "--compact-every",
        "0",
    ]
    summaries = []
    for changeset in [*windows, windows[1]]:
        assert upsert_job.main(["--changeset", str(changeset), *base]) == 0
        summaries.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
    assert summaries[1]["deferred_tables"] == [TABLE] and summaries[1]["tables_applied"] == [TABLE]
    assert summaries[2]["skipped_as_applied"] == [TABLE]
    output = tmp_path / "latest.parquet"
    assert cli.main(["latest", "--lake-root", str(lake), "--table", TABLE, "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    assert f"{TABLE}: 1 rows" in printed and "1 pending window(s)" in printed
    import pyarrow.parquet as pq

    assert [(r["ID"], r["Amount"]) for r in pq.read_table(output).to_pylist()] == [(1, 5)]
    assert cli.main(["compact", "--lake-root", str(lake), "--table", TABLE, "--pipeline", PIPELINE]) == 0
    assert json.loads(capsys.readouterr().out)["folded_windows"] == [version(120)]
    assert cli.main(["tables", "--lake-root", str(lake)]) == 0  # the pending folder is not a table
    assert f"{TABLE}: 1 rows" in capsys.readouterr().out


def test_the_upsert_operator_passes_deferred_apply_to_the_job() -> None:
    from support.change_sets import interval_context

    from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator

    def arguments(**kwargs: Any) -> list[str]:
        op = SparkUpsertWindowOperator(
            task_id="upsert",
            pipeline_id="shop",
            locations={"changeset_root": "/c", "lake_root": "/l"},
            metastore_conn_id=None,
            **kwargs,
        )
        op.render_template_fields(interval_context())
        args = op.build_application_args()
        return args[args.index("--window-version") + 2 :]

    assert arguments() == []  # the job's defaults: auto, every 10 windows
    assert arguments(apply_mode="deferred", max_staleness=timedelta(minutes=15), compact_every=None) == [
        *("--apply-mode", "deferred", "--max-staleness-seconds", "900", "--compact-every", "0"),
    ]
    parsed = upsert_job.build_parser().parse_args(
        ["--changeset", "c", "--lake-root", "l", "--pipeline-id", "p", "--apply-mode", "deferred"]
        + ["--max-staleness-seconds", "900", "--compact-every", "0"]
    )
    assert (parsed.apply_mode, parsed.max_staleness_seconds, parsed.compact_every) == (
        "deferred",
        timedelta(seconds=900),
        None,
    )
    with pytest.raises(ValueError, match="max_staleness must be a positive"):
        SparkUpsertWindowOperator(
            task_id="bad",
            pipeline_id="shop",
            locations={"changeset_root": "/c", "lake_root": "/l"},
            max_staleness=-1,
        )


SHIPMENTS = [
    {"name": "Region", "type": {"code": "STRING"}, "is_primary_key": True, "ordinal_position": 1},
    {"name": "Number", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 2},
    {"name": "Status", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 3},
]


@pytest.mark.parametrize("keys", [["Region", "Number"], ["Region"]], ids=["composite", "string"])
def test_deferred_apply_with_string_and_composite_keys(tmp_path: Path, keys: list[str]) -> None:
    types = [
        c if c["name"] in keys or not c["is_primary_key"] else {**c, "is_primary_key": False}
        for c in SHIPMENTS
    ]
    rng = random.Random(len(keys))
    immediate = DeltaLakeTarget(str(tmp_path / "immediate"), apply_mode="immediate")
    deferred = DeltaLakeTarget(str(tmp_path / "deferred"), apply_mode="deferred", compact_every=3)
    clock = 100
    for w in range(6):
        changes = []
        for k in rng.sample(range(12), 6):
            clock += 1
            n = clock - (rng.randint(1, 20) if w and rng.random() < 0.2 else 0)
            region = None if k == 0 else f"r{k % 4}" if len(keys) == 2 else f"r{k}"
            key = {"Region": region, "Number": k}
            key = {name: key[name] for name in keys}
            if w and rng.random() < 0.3:
                changes.append(Change(key, "DELETE", seq(n), at(n)))
            else:
                values = {"Status": f"s{w}"} if len(keys) == 2 else {"Status": f"s{w}", "Number": w}
                changes.append(Change(key, "UPSERT", seq(n), at(n), values, ["Status"] if w % 2 else None))
        for target in (immediate, deferred):
            cs = change_set_table(types, changes)
            target.apply_change_set("Shipments", cs, types, PIPELINE, version(60 * (w + 1)))
        order = [(k, "ascending") for k in keys]
        assert deferred.read_latest("Shipments", PIPELINE).sort_by(order).to_pylist() == (
            immediate.read_table("Shipments").sort_by(order).to_pylist()
        )
    deferred.compact("Shipments", PIPELINE)
    order = [(k, "ascending") for k in keys]
    assert deferred.read_table("Shipments").sort_by(order) == immediate.read_table("Shipments").sort_by(order)
