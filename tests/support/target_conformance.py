"""Checks every target of change sets must pass (``targets.protocol.Target``), given a harness.

A :class:`TargetHarness` opens the target under test on its own storage and reads its tables back as a
user would, and gives what the target's apply step returns (its ``TargetApplied``), which the commit
takes. Each ``check_*`` function takes a harness and a folder for change sets; a test module runs
every check in :data:`CHECKS` for each harness (see tests/targets/test_target_conformance.py).

The windows change the Orders table of tests/support/change_sets.py: each window's change set is
written with the change-set writer, the way the merge writes it.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from unittest import mock

import pyarrow as pa
import pytest

from airflow_provider_cdc.changesets.reader import ChangeSetReader, ChangeSetTable
from airflow_provider_cdc.changesets.writer import Change, change_set_table, write_change_set
from airflow_provider_cdc.core.collapse import collapse_window
from airflow_provider_cdc.core.contract.change_set import change_set_schema
from airflow_provider_cdc.core.contract.target import (
    ALREADY_APPLIED,
    APPLIED,
    OlderWindowError,
    TableApplyResult,
    Target,
    TargetApplied,
)
from airflow_provider_cdc.core.timestamps import to_micros
from airflow_provider_cdc.core.window import Window
from tests.support.change_sets import ORDERS, START, seq
from tests.support.staged_changes import spanner_staged_row

PIPELINE = "conformance"
TABLE = "Orders"
NOTE = {"name": "Note", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 4}
WINDOWS = [Window(START + i * timedelta(minutes=5), START + (i + 1) * timedelta(minutes=5)) for i in range(3)]


class TargetHarness(ABC):
    """Opens one target under test and reads its tables back."""

    #: The target's metastore key.
    name: str

    @abstractmethod
    def target(self) -> Target:
        """A new handle on the target's storage (what a new task run would open)."""

    @abstractmethod
    def rows(self, table: str) -> list[dict[str, Any]]:
        """The table's rows as a reader sees them: its columns, without bookkeeping columns."""

    @abstractmethod
    def writes(self, table: str) -> int:
        """A count that grows with every write to the table (0 before the first)."""

    def before_apply(self, change_sets: Path, window: Window) -> None:  # noqa: B027 - optional step
        """What the pipeline runs before the target applies ``window`` (BigQuery: the Delta upsert)."""

    @abstractmethod
    def applied(self, results: list[TableApplyResult], window: Window) -> TargetApplied:
        """What the target's apply step returns after ``results`` (its output, the commit's ``applied``)."""

    @abstractmethod
    def metastore_url(self) -> str:
        """The metastore of the pipeline's windows (the one the target's ledger is in, if it has one)."""


def _upsert(key: str, n: int, present: list[str] | None = None, **values: Any) -> Change:
    return Change({"OrderId": key}, "UPSERT", seq(n), START + timedelta(seconds=n), values, present)


def _delete(key: str, n: int) -> Change:
    return Change({"OrderId": key}, "DELETE", seq(n), START + timedelta(seconds=n))


def _order(n: int, amount: str) -> dict[str, Any]:
    return {"Amount": Decimal(amount), "PlacedAt": START + timedelta(seconds=n)}


def _write(root: Path, window: Window, changes: list[Change], columns: list[dict] = ORDERS) -> ChangeSetTable:
    path = root / window.window_id
    write_change_set(str(path), {TABLE: change_set_table(columns, changes)})
    (table,) = ChangeSetReader(str(path)).tables()
    return table


def _apply(harness: TargetHarness, root: Path, window: Window, table: ChangeSetTable) -> TableApplyResult:
    harness.before_apply(root, window)
    return harness.target().apply_window(table, PIPELINE, window)


def _by_key(harness: TargetHarness, columns: list[str]) -> dict[str, dict[str, Any]]:
    """The table's rows by key, with ``columns`` (a column the target lacks reads as NULL)."""
    return {row["OrderId"]: {c: row.get(c) for c in columns} for row in harness.rows(TABLE)}


def _first_window() -> list[Change]:
    return [
        _upsert("o1", 1, **_order(1, "1.25")),
        _upsert("o2", 2, **_order(2, "2.50")),
        _upsert("o3", 3, **_order(3, "3.75")),
    ]


FIRST_ROWS = {
    "o1": _order(1, "1.25"),
    "o2": _order(2, "2.50"),
    "o3": _order(3, "3.75"),
}


def check_applies_a_window(harness: TargetHarness, root: Path) -> None:
    """The window's rows land; the result names target, table, window and rows; the target reports
    the window as the one the table holds."""
    target = harness.target()
    assert isinstance(target, Target) and target.name == harness.name
    assert target.applied_window(TABLE, PIPELINE) is None
    table = _write(root, WINDOWS[0], _first_window())
    result = _apply(harness, root, WINDOWS[0], table)
    assert (result.target, result.table, result.window, result.outcome) == (
        harness.name,
        TABLE,
        WINDOWS[0].end_micros,
        APPLIED,
    )
    assert result.rows == 3
    assert _by_key(harness, ["Amount", "PlacedAt"]) == FIRST_ROWS
    assert target.applied_window(TABLE, PIPELINE) == WINDOWS[0].end_micros
    held = target.window_result(TABLE, PIPELINE, WINDOWS[0])
    assert held is not None and (held.target, held.table, held.window) == (harness.name, TABLE, result.window)
    assert target.window_result(TABLE, PIPELINE, WINDOWS[1]) is None


def check_reapplying_a_window_changes_nothing(harness: TargetHarness, root: Path) -> None:
    """A window applied again (a retry, a clear, a backfill) reports ``already_applied`` and writes
    nothing."""
    table = _write(root, WINDOWS[0], _first_window())
    assert _apply(harness, root, WINDOWS[0], table).outcome == APPLIED
    writes, rows = harness.writes(TABLE), harness.rows(TABLE)
    again = _apply(harness, root, WINDOWS[0], table)
    assert (again.outcome, again.window, again.rows) == (ALREADY_APPLIED, WINDOWS[0].end_micros, 0)
    assert harness.writes(TABLE) == writes
    assert harness.rows(TABLE) == rows


def check_an_older_window_is_refused(harness: TargetHarness, root: Path) -> None:
    """A window older than the one the table holds, never applied to it, is refused naming window,
    table and target, and changes nothing."""
    first = _write(root, WINDOWS[0], [_upsert("o1", 1, **_order(1, "1.25"))])
    second = _write(root, WINDOWS[1], [_delete("o1", 2), _upsert("o2", 3, **_order(3, "2.50"))])
    _apply(harness, root, WINDOWS[1], second)  # the first window's apply was lost
    writes, rows = harness.writes(TABLE), harness.rows(TABLE)
    with pytest.raises(OlderWindowError) as refused:
        harness.target().apply_window(first, PIPELINE, WINDOWS[0])
    message = str(refused.value)
    assert str(WINDOWS[0].end_micros) in message and f"'{TABLE}'" in message
    assert harness.name in message.lower()
    assert harness.writes(TABLE) == writes and harness.rows(TABLE) == rows
    assert _by_key(harness, ["Amount"]) == {"o2": {"Amount": Decimal("2.50")}}


def check_partial_images_are_completed(harness: TargetHarness, root: Path) -> None:
    """An UPDATE that carries some columns changes those and keeps the others."""
    _apply(harness, root, WINDOWS[0], _write(root, WINDOWS[0], _first_window()))
    partial = [
        _upsert("o1", 4, ["Amount"], Amount=Decimal("9.50")),
        _upsert("o3", 5, ["PlacedAt"], PlacedAt=START),
    ]
    assert _apply(harness, root, WINDOWS[1], _write(root, WINDOWS[1], partial)).outcome == APPLIED
    assert _by_key(harness, ["Amount", "PlacedAt"]) == {
        "o1": {"Amount": Decimal("9.50"), "PlacedAt": START + timedelta(seconds=1)},
        "o2": _order(2, "2.50"),
        "o3": {"Amount": Decimal("3.75"), "PlacedAt": START},
    }


def check_an_update_after_a_delete_does_not_bring_deleted_columns_back(
    harness: TargetHarness, root: Path
) -> None:
    """A key deleted and then updated in one window (a source whose update of an absent row inserts
    it, such as Table Store's UpdateRow) holds only the updated columns: the deleted row's other
    columns read as NULL. The change set is the merge's collapse of the staged changes."""
    _apply(harness, root, WINDOWS[0], _write(root, WINDOWS[0], _first_window()))
    at = WINDOWS[1].start
    staged = [
        _staged("DELETE", "o1", at, {}),
        _staged("UPDATE", "o1", at + timedelta(seconds=1), {"Amount": "7.00"}),
        _staged("DELETE", "o2", at + timedelta(seconds=2), {}),
        _staged("UPDATE", "o2", at + timedelta(seconds=3), {"PlacedAt": "2024-06-01T12:00:00.000000Z"}),
        _staged("UPDATE", "o2", at + timedelta(seconds=4), {"Amount": "8.00"}),
    ]
    (rows,) = collapse_window(staged).values()
    path = root / WINDOWS[1].window_id
    write_change_set(str(path), {TABLE: pa.Table.from_pylist(rows, schema=change_set_schema())})
    (table,) = ChangeSetReader(str(path)).tables()
    assert _apply(harness, root, WINDOWS[1], table).outcome == APPLIED
    assert _by_key(harness, ["Amount", "PlacedAt"]) == {
        "o1": {"Amount": Decimal("7.00"), "PlacedAt": None},
        "o2": {"Amount": Decimal("8.00"), "PlacedAt": START},
        "o3": _order(3, "3.75"),
    }


def _staged(operation: str, key: str, at: datetime, after: dict[str, Any]) -> dict[str, Any]:
    """A staged change of the Orders table committed ``at``."""
    return spanner_staged_row(
        operation=operation,
        table=TABLE,
        keys_json=json.dumps({"OrderId": key}, separators=(",", ":")),
        after_json=json.dumps(after, separators=(",", ":")),
        commit_timestamp=at,
        transaction=f"tx-{key}-{to_micros(at)}",
        column_types_json=json.dumps(ORDERS),
    )


def check_a_new_column_in_a_later_window_evolves_the_table(harness: TargetHarness, root: Path) -> None:
    """A column first seen in a later window is added; rows written before read it as NULL."""
    _apply(harness, root, WINDOWS[0], _write(root, WINDOWS[0], _first_window()))
    changes = [
        _upsert("o2", 4, **_order(4, "4.00"), Note="gift"),
        _upsert("o4", 5, **_order(5, "5.00"), Note=None),
    ]
    table = _write(root, WINDOWS[1], changes, [*ORDERS, NOTE])
    assert _apply(harness, root, WINDOWS[1], table).outcome == APPLIED
    assert _by_key(harness, ["Amount", "Note"]) == {
        "o1": {"Amount": Decimal("1.25"), "Note": None},
        "o2": {"Amount": Decimal("4.00"), "Note": "gift"},
        "o3": {"Amount": Decimal("3.75"), "Note": None},
        "o4": {"Amount": Decimal("5.00"), "Note": None},
    }


def check_the_watermark_advances(harness: TargetHarness, root: Path) -> None:
    """The table's applied window and apply watermark move forward with each window."""
    target = harness.target()
    assert target.apply_watermark(TABLE, PIPELINE) is None
    marks = []
    for n, window in enumerate(WINDOWS[:2]):
        _apply(harness, root, window, _write(root, window, [_upsert("o1", n + 1, **_order(n + 1, f"{n}.5"))]))
        assert harness.target().applied_window(TABLE, PIPELINE) == window.end_micros
        mark = harness.target().apply_watermark(TABLE, PIPELINE)
        assert mark is not None
        marks.append(mark)
    assert marks[0] <= marks[1]


def _commit(harness: TargetHarness, root: Path, window: Window, applied: TargetApplied) -> dict[str, Any]:
    """Commit ``window`` as the pipeline's commit step does, given the apply step's output (as an XCom)."""
    from airflow_provider_cdc.core.contract.locations import WindowLocations
    from airflow_provider_cdc.hooks.pipeline import CdcPipelineHook

    connection = json.dumps(
        {"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": harness.metastore_url()}}
    )
    with mock.patch.dict(os.environ, {"AIRFLOW_CONN_CDC_CONFORMANCE": connection}):
        return CdcPipelineHook("cdc_conformance").commit_window(
            PIPELINE, window, WindowLocations(changeset_root=str(root)), applied=[applied.to_dict()]
        )


def check_the_commit_takes_the_apply_steps_output(harness: TargetHarness, root: Path) -> None:
    """Each window's apply step output, committed: the window is applied, the ledger and the apply
    watermarks are kept under (pipeline, target, table) and the table is named for assets and lineage;
    through partial images, a delete (its tombstone), a DELETE→UPDATE and a re-run of a window."""
    from airflow_provider_cdc.metastore import Metastore, WindowState

    store = Metastore(harness.metastore_url())
    store.create_schema()
    at = WINDOWS[2].start
    windows = [
        (WINDOWS[0], _write(root, WINDOWS[0], _first_window())),
        (
            WINDOWS[1],
            _write(
                root, WINDOWS[1], [_upsert("o1", 4, ["Amount"], Amount=Decimal("9.50")), _delete("o3", 5)]
            ),
        ),  # fmt: skip
    ]
    staged = [
        _staged("DELETE", "o2", at, {}),
        _staged("UPDATE", "o2", at + timedelta(seconds=1), {"Amount": "8.00"}),
    ]
    (rows,) = collapse_window(staged).values()
    write_change_set(
        str(root / WINDOWS[2].window_id), {TABLE: pa.Table.from_pylist(rows, schema=change_set_schema())}
    )
    windows.append((WINDOWS[2], ChangeSetReader(str(root / WINDOWS[2].window_id)).tables()[0]))
    marks = []
    for window, table in [*windows, windows[1]]:  # the second window runs again (a clear)
        store.open_window(PIPELINE, "conformance_source", window.start, window.end, reopen=True)
        result = _apply(harness, root, window, table)
        applied = TargetApplied.from_dict(harness.applied([result], window).to_dict())  # through XCom
        summary = _commit(harness, root, window, applied)
        assert store.get_window(PIPELINE, window.start, window.end).state is WindowState.APPLIED
        entry = summary["tables"][harness.name][TABLE]
        assert entry["uri"] and entry["namespace"] and entry["name"], entry
        held = store.window_tables(PIPELINE, target=harness.name, window=(window.start, window.end))
        assert [r.table for r in held] == [TABLE]
        mark = store.table_watermarks(PIPELINE, target=harness.name).get(TABLE)
        assert mark is not None
        marks.append(mark)
    assert marks == sorted(marks)  # only forward, a re-run included
    assert _by_key(harness, ["Amount", "PlacedAt"]) == {
        "o1": {"Amount": Decimal("9.50"), "PlacedAt": START + timedelta(seconds=1)},
        "o2": {"Amount": Decimal("8.00"), "PlacedAt": None},
    }


CHECKS: Mapping[str, Callable[[TargetHarness, Path], None]] = {
    check.__name__: check
    for check in (
        check_applies_a_window,
        check_reapplying_a_window_changes_nothing,
        check_an_older_window_is_refused,
        check_partial_images_are_completed,
        check_an_update_after_a_delete_does_not_bring_deleted_columns_back,
        check_a_new_column_in_a_later_window_evolves_the_table,
        check_the_watermark_advances,
        check_the_commit_takes_the_apply_steps_output,
    )
}
