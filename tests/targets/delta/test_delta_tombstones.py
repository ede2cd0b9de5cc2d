"""Delta target tombstones: an older change arriving after a delete never brings the row back."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from support.changes import BASE, at, seq, spanner_columns, version

from airflow_provider_cdc.changesets.reader import ChangeSetReader
from airflow_provider_cdc.changesets.writer import Change, change_set_table, write_change_set
from airflow_provider_cdc.targets.delta import upsert_job
from airflow_provider_cdc.targets.delta.target import APP_ID_PREFIX, DeltaLakeTarget
from airflow_provider_cdc.targets.delta.tombstones import TOMBSTONES_FOLDER

EMPLOYEES = spanner_columns(1, ("ID", "INT64"), ("Name", "STRING"))
SHIPMENTS = spanner_columns(2, ("Region", "STRING"), ("Number", "INT64"), ("Status", "STRING"))
HORIZON = timedelta(seconds=100)
PIPELINE = "orders"
# Materialised (whole change set in memory) and streamed (batch by batch) merge sources.
SOURCES = pytest.mark.parametrize("max_materialized_rows", [2_000_000, 0], ids=["materialised", "streamed"])


def upsert(key: Any, n: int, name: str, **keys: Any) -> Change:
    return Change(keys or {"ID": key}, "UPSERT", seq(n), at(n), {"Name": name})


def delete(key: Any, n: int, **keys: Any) -> Change:
    return Change(keys or {"ID": key}, "DELETE", seq(n), at(n))


def lake(tmp_path: Path, horizon: timedelta | None = HORIZON, **options: Any) -> DeltaLakeTarget:
    return DeltaLakeTarget(str(tmp_path / "lake"), tombstone_horizon=horizon, **options)


def apply(target: DeltaLakeTarget, end: int, changes: list[Change], columns=EMPLOYEES, table="Employees"):
    return target.apply_change_set(table, change_set_table(columns, changes), columns, PIPELINE, version(end))


def stored(target: DeltaLakeTarget, table: str = "Employees") -> list[dict]:
    return sorted(target.read_table(table).to_pylist(), key=lambda r: json.dumps(r, default=str))


def names(target: DeltaLakeTarget, table: str = "Employees") -> dict[Any, str]:
    return {r["ID"]: r["Name"] for r in target.read_table(table, ["ID", "Name"]).to_pylist()}


def tombstones(target: DeltaLakeTarget, table: str = "Employees") -> list[dict]:
    rows = DeltaTable(f"{target.lake_root}/{TOMBSTONES_FOLDER}/{table}").to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: json.dumps(r, default=str))


def history(target: DeltaLakeTarget) -> list[Change]:
    """Window 10 inserts 1 and 2, window 20 deletes 1 (change 15), window 30 brings a late, older
    upsert of 1 (change 12) and a new key 3."""
    apply(target, 10, [upsert(1, 5, "first"), upsert(2, 6, "two")])
    apply(target, 20, [delete(1, 15)])
    return [upsert(1, 12, "late"), upsert(3, 25, "three")]


@SOURCES
def test_an_older_upsert_after_a_delete_stays_deleted(tmp_path: Path, max_materialized_rows: int) -> None:
    target = lake(tmp_path, max_materialized_rows=max_materialized_rows)
    result = apply(target, 30, history(target))
    assert names(target) == {2: "two", 3: "three"}
    assert (result.status, result.rows_tombstoned, result.rows_inserted) == ("applied", 1, 1)


def test_without_tombstones_an_older_upsert_brings_a_deleted_row_back(tmp_path: Path) -> None:
    # Why the option exists: the table alone cannot tell a late older upsert from a new row.
    target = lake(tmp_path, horizon=None)
    apply(target, 30, history(target))
    assert names(target) == {1: "late", 2: "two", 3: "three"}
    assert not (tmp_path / "lake" / TOMBSTONES_FOLDER).exists()  # nothing extra written


@SOURCES
def test_a_newer_upsert_after_the_delete_inserts_the_row_again(
    tmp_path: Path, max_materialized_rows: int
) -> None:
    target = lake(tmp_path, max_materialized_rows=max_materialized_rows)
    history(target)
    result = apply(target, 30, [upsert(1, 16, "back")])
    assert names(target) == {1: "back", 2: "two"}
    assert result.rows_tombstoned == 0
    # The tombstone stays: a still older upsert arriving later changes nothing.
    apply(target, 40, [upsert(1, 14, "older")])
    assert names(target) == {1: "back", 2: "two"}


def test_an_equal_sequence_number_is_blocked_and_a_later_delete_keeps_the_greater(tmp_path: Path) -> None:
    target = lake(tmp_path)
    history(target)
    apply(target, 30, [delete(1, 13)])  # a late delete older than the tombstone
    assert [(r["ID"], r["_change_sequence_number"]) for r in tombstones(target)] == [(1, seq(15))]
    apply(target, 40, [upsert(1, 15, "same")])
    assert names(target) == {2: "two"}


def test_a_tombstone_past_the_horizon_no_longer_blocks_and_is_purged(tmp_path: Path) -> None:
    target = lake(tmp_path)
    history(target)  # the delete (committed at second 15) applied by the window ending at 20; 100 s horizon
    apply(target, 120, [upsert(1, 13, "within")])  # 120 - 100 = 20: still within the horizon
    assert names(target) == {2: "two"}
    apply(target, 125, [upsert(9, 121, "nine")])  # 125 - 100 > 20: the tombstone is past the horizon
    assert tombstones(target) == []
    apply(target, 130, [upsert(1, 14, "after the horizon")])
    assert names(target) == {1: "after the horizon", 2: "two", 9: "nine"}


# Files replayed long after their source commits (a backfill over last month's Datastream files, a
# stream read again from its start): their commit timestamps are a month older than the windows that
# carry them (arrival windows), far beyond the horizon.
MONTH_AGO = BASE - timedelta(days=30)


def replayed(key: int, n: int, name: str | None = None) -> Change:
    """A change committed at second ``n`` of a month ago, arriving now."""
    if name is None:
        return Change({"ID": key}, "DELETE", seq(n), MONTH_AGO + timedelta(seconds=n))
    return Change({"ID": key}, "UPSERT", seq(n), MONTH_AGO + timedelta(seconds=n), {"Name": name})


@SOURCES
def test_replayed_old_changes_keep_a_deleted_row_deleted_for_the_horizon_after_their_window(
    tmp_path: Path, max_materialized_rows: int
) -> None:
    target = lake(tmp_path, max_materialized_rows=max_materialized_rows)
    apply(target, 10, [replayed(1, 5, "first"), replayed(2, 6, "two")])
    apply(target, 20, [replayed(1, 15)])  # the delete arrives in the window ending at 20
    result = apply(target, 30, [replayed(1, 12, "late"), replayed(3, 25, "three")])
    assert names(target) == {2: "two", 3: "three"}
    assert (result.rows_tombstoned, result.rows_inserted) == (1, 1)
    assert [(r["ID"], r["_commit_timestamp"], r["_deleted_in_window"]) for r in tombstones(target)] == [
        (1, MONTH_AGO + timedelta(seconds=15), version(20))
    ]
    apply(target, 120, [replayed(1, 13, "still late")])  # the horizon's last window
    assert names(target) == {2: "two", 3: "three"}
    apply(target, 121, [replayed(1, 14, "after the horizon")])
    assert names(target) == {1: "after the horizon", 2: "two", 3: "three"}


@SOURCES
def test_a_rerun_of_every_window_changes_nothing(tmp_path: Path, max_materialized_rows: int) -> None:
    target = lake(tmp_path, max_materialized_rows=max_materialized_rows)
    windows = [
        (10, [upsert(1, 5, "first"), upsert(2, 6, "two"), delete(7, 7)]),
        (20, [delete(1, 15), upsert(7, 3, "seven")]),
        (30, [upsert(1, 12, "late"), delete(2, 25)]),
        (40, [upsert(2, 21, "late two"), upsert(1, 35, "new")]),
    ]
    for end, changes in windows:
        apply(target, end, changes)
    lake_table = DeltaTable(target.table_uri("Employees"))
    marks = DeltaTable(f"{target.lake_root}/{TOMBSTONES_FOLDER}/Employees")
    before = (lake_table.version(), marks.version(), stored(target), tombstones(target))
    for end, changes in windows:
        assert apply(target, end, changes).status == "already_applied"
    lake_table.update_incremental()
    marks.update_incremental()
    assert (lake_table.version(), marks.version(), stored(target), tombstones(target)) == before
    assert names(target) == {1: "new"}


@SOURCES
def test_composite_keys_with_a_null_part(tmp_path: Path, max_materialized_rows: int) -> None:
    target = lake(tmp_path, max_materialized_rows=max_materialized_rows)

    def ship(n: int, region: str | None, number: int, status: str | None = None) -> Change:
        keys = {"Region": region, "Number": number}
        if status is None:
            return Change(keys, "DELETE", seq(n), at(n))
        return Change(keys, "UPSERT", seq(n), at(n), {"Status": status})

    def shipments() -> set[tuple]:
        rows = target.read_table("Shipments", ["Region", "Number", "Status"]).to_pylist()
        return {(r["Region"], r["Number"], r["Status"]) for r in rows}

    apply(target, 10, [ship(1, "eu", 1, "new"), ship(2, "us", 1, "new"), ship(3, None, 1, "new")], SHIPMENTS,
          "Shipments")  # fmt: skip
    apply(target, 20, [ship(11, "eu", 1), ship(12, None, 1)], SHIPMENTS, "Shipments")
    # Late upserts of the deleted keys, and of keys sharing one key part with them.
    late = [
        ship(5, "eu", 1, "late"),
        ship(6, None, 1, "late"),
        ship(7, "eu", 2, "other"),
        ship(8, "us", 1, "x"),
    ]
    result = apply(target, 30, late, SHIPMENTS, "Shipments")
    assert result.rows_tombstoned == 2
    assert shipments() == {("us", 1, "x"), ("eu", 2, "other")}


def test_tombstones_never_appear_in_the_table(tmp_path: Path) -> None:
    target = lake(tmp_path)
    apply(target, 30, history(target))
    assert target.read_table("Employees").column_names == ["ID", "Name", "_change_sequence_number",
                                                           "_commit_timestamp"]  # fmt: skip
    assert [r["ID"] for r in stored(target)] == [2, 3]
    assert tombstones(target) == [
        {
            "ID": 1,
            "_change_sequence_number": seq(15),
            "_commit_timestamp": at(15),
            "_deleted_in_window": version(20),
        }
    ]


def test_a_table_with_tombstones_keeps_them_when_the_option_is_left_out(tmp_path: Path, caplog) -> None:
    history(lake(tmp_path))
    forgetful = lake(tmp_path, horizon=None)
    with caplog.at_level(logging.INFO, logger="airflow_provider_cdc.targets.delta.tombstones"):
        apply(forgetful, 30, [upsert(1, 12, "late"), delete(2, 26)])
    assert names(forgetful) == {}
    assert "has tombstones" in caplog.text and "0:01:40" in caplog.text  # the recorded horizon
    assert [r["ID"] for r in tombstones(forgetful)] == [1, 2]


def test_the_first_window_of_a_table_leaves_tombstones_too(tmp_path: Path) -> None:
    target = lake(tmp_path)
    apply(target, 10, [delete(1, 5), upsert(2, 6, "two")])  # creates the table
    apply(target, 20, [upsert(1, 3, "before the delete")])
    assert names(target) == {2: "two"}


@pytest.mark.parametrize("horizon", [timedelta(0), timedelta(seconds=-1)])
def test_a_horizon_that_is_not_positive_is_refused_naming_the_fix(horizon: timedelta) -> None:
    with pytest.raises(ValueError, match="tombstone_horizon must be a positive") as refused:
        DeltaLakeTarget("/lake", tombstone_horizon=horizon)
    assert "leave it unset to keep no tombstones; 0 does not turn them off" in str(refused.value)


# --------------------------------------------------------------------------- the upsert job


def _write(changesets: Path, start: int, end: int, changes: list[Change]) -> Path:
    path = changesets / f"{version(start)}-{version(end)}"
    write_change_set(str(path), {"Employees": change_set_table(EMPLOYEES, changes)})
    return path


WINDOWS = [
    (0, 10, [upsert(1, 5, "first"), upsert(2, 6, "two")]),
    (10, 20, [delete(1, 15), upsert(2, 16, "two again")]),
    (20, 30, [upsert(1, 12, "late"), upsert(3, 25, "three"), delete(2, 26)]),
]


def test_the_upsert_job_keeps_replayed_deletes_for_the_horizon_after_their_window(tmp_path: Path) -> None:
    # A week's horizon; the files' source times are a month old.
    windows = [
        (0, 10, [replayed(1, 5, "first"), replayed(2, 6, "two")]),
        (10, 20, [replayed(1, 15)]),
        (20, 30, [replayed(1, 12, "late")]),
    ]
    for window in windows:
        path = _write(tmp_path / "changesets", *window)
        summary = upsert_job.run(
            str(path), str(tmp_path / "lake"), PIPELINE, None, tombstone_horizon=timedelta(days=7)
        )
    assert summary["rows_tombstoned"] == 1
    assert names(DeltaLakeTarget(str(tmp_path / "lake"))) == {2: "two"}


def test_the_upsert_job_refuses_a_horizon_of_zero(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        upsert_job.build_parser().parse_args(
            ["--changeset", "c", "--lake-root", "l", "--pipeline-id", "p", "--tombstone-horizon-seconds", "0"]
        )
    error = capsys.readouterr().err
    assert "--tombstone-horizon-seconds" in error and "leave the option out instead of 0" in error


def test_the_upsert_job_applies_with_tombstones(tmp_path: Path) -> None:
    paths = [_write(tmp_path / "changesets", *window) for window in WINDOWS]
    for path in paths:
        summary = upsert_job.run(str(path), str(tmp_path / "lake"), PIPELINE, None, tombstone_horizon=HORIZON)
    assert summary["rows_tombstoned"] == 1
    assert names(DeltaLakeTarget(str(tmp_path / "lake"))) == {3: "three"}
    assert upsert_job.build_parser().parse_args(
        ["--changeset", "c", "--lake-root", "l", "--pipeline-id", "p", "--tombstone-horizon-seconds", "86400"]
    ).tombstone_horizon_seconds == timedelta(days=1)


# --------------------------------------------------------------------------- crash safety

# Applies a change set to the lake; CDC_CRASH_AFTER names the commit after which the process dies.
_APPLY = textwrap.dedent(
    """
    import os, sys
    from datetime import timedelta
    from airflow_provider_cdc.changesets.reader import ChangeSetReader
    from airflow_provider_cdc.targets.delta import target as delta_target
    from airflow_provider_cdc.targets.delta.tombstones import TableTombstones

    lake, changeset, window, streamed = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
    crash_after = os.environ.get("CDC_CRASH_AFTER")

    def dying(function):
        def wrapper(*args, **kwargs):
            result = function(*args, **kwargs)
            os._exit(137)
        return wrapper

    if crash_after == "tombstones":
        TableTombstones.record_window = dying(TableTombstones.record_window)
    elif crash_after == "table":  # the MERGE, or the write creating the table in its first window
        delta_target.merge_into = dying(delta_target.merge_into)
        delta_target.DeltaLakeTarget._write_new_table = dying(delta_target.DeltaLakeTarget._write_new_table)
    target = delta_target.DeltaLakeTarget(
        lake, tombstone_horizon=timedelta(seconds=100), max_materialized_rows=0 if streamed else 2_000_000
    )
    for part in ChangeSetReader(changeset).tables():
        print(target.apply_change_set(part.name, part.dataset, part.column_types(), "orders", window).status)
    """
)


def _run(lake_root: Path, changeset: Path, window: int, streamed: bool, crash_after: str | None = None):
    env = {**os.environ, "CDC_STORAGE_OPTIONS": ""}
    env.pop("CDC_CRASH_AFTER", None)
    if crash_after:
        env["CDC_CRASH_AFTER"] = crash_after
    args = [
        sys.executable,
        "-c",
        _APPLY,
        str(lake_root),
        str(changeset),
        str(window),
        "1" if streamed else "0",
    ]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("streamed", [False, True], ids=["materialised", "streamed"])
@pytest.mark.parametrize("crash_after", ["tombstones", "table"])
def test_a_crash_after_either_commit_then_a_rerun_lands_as_a_clean_run(
    tmp_path: Path, crash_after: str, streamed: bool
) -> None:
    paths = [_write(tmp_path / "changesets", *window) for window in WINDOWS]
    reference = DeltaLakeTarget(str(tmp_path / "reference"), tombstone_horizon=HORIZON)
    for path, (_, end, _) in zip(paths, WINDOWS, strict=True):
        for part in ChangeSetReader(str(path)).tables():
            reference.apply_change_set(part.name, part.dataset, part.column_types(), PIPELINE, version(end))

    crashed = tmp_path / "lake"
    for path, (_, end, _) in zip(paths, WINDOWS, strict=True):
        killed = _run(crashed, path, version(end), streamed, crash_after)
        assert killed.returncode == 137, killed.stderr
        table = DeltaTable(str(crashed / TOMBSTONES_FOLDER / "Employees"))
        assert table.transaction_version(APP_ID_PREFIX + PIPELINE) == version(end)
        rerun = _run(crashed, path, version(end), streamed)
        assert rerun.returncode == 0, rerun.stderr
        assert rerun.stdout.split() == ["applied" if crash_after == "tombstones" else "already_applied"]

    recovered = DeltaLakeTarget(str(crashed))
    assert stored(recovered) == stored(reference)
    assert tombstones(recovered) == tombstones(reference)
    assert names(recovered) == {3: "three"}


@pytest.mark.parametrize(
    ("horizon", "argument"),
    [(timedelta(days=2), "172800"), (90, "90"), ("{{ 45 * 2 }}", "90"), ("1.5", "1.5"), (None, None)],
)
def test_the_upsert_operator_passes_the_horizon_to_the_job(horizon: Any, argument: str | None) -> None:
    from support.change_sets import interval_context

    from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator

    op = SparkUpsertWindowOperator(
        task_id="upsert",
        locations={"changeset_root": "/c", "lake_root": "/l"},
        pipeline_id="shop",
        tombstone_horizon=horizon,
    )
    op.render_template_fields(interval_context())
    args = op.build_application_args()
    given = args[args.index("--tombstone-horizon-seconds") + 1] if argument else None
    assert given == argument and ("--tombstone-horizon-seconds" in args) == (argument is not None)


def test_the_upsert_operator_refuses_a_horizon_that_is_no_duration() -> None:
    from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator

    with pytest.raises(ValueError, match="tombstone_horizon"):
        SparkUpsertWindowOperator(
            task_id="upsert", locations={"changeset_root": "/c", "lake_root": "/l"}, pipeline_id="p",
            tombstone_horizon=-5,
        )  # fmt: skip


@pytest.mark.parametrize("horizon", [0, timedelta(0), "0", "{{ 0 * 86400 }}"])
def test_the_upsert_operator_refuses_a_horizon_of_zero_naming_the_fix(horizon: Any) -> None:
    from support.change_sets import interval_context

    from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator

    def build() -> SparkUpsertWindowOperator:  # a literal is checked here, when the DAG is parsed
        return SparkUpsertWindowOperator(
            task_id="upsert", locations={"changeset_root": "/c", "lake_root": "/l"}, pipeline_id="p",
            tombstone_horizon=horizon,
        )  # fmt: skip

    with pytest.raises(ValueError, match="tombstone_horizon must be a positive") as refused:
        if isinstance(horizon, str) and "{{" in horizon:  # a template is checked once rendered
            op = build()
            op.render_template_fields(interval_context())
            op.build_application_args()
        else:
            build()
    assert "leave it unset to keep no tombstones; 0 does not turn them off" in str(refused.value)
