"""Bring Delta tables back in agreement with the metastore by re-applying windows they lack.

A table restored or rolled back to an older version holds fewer windows than the metastore
recorded for it; the next upsert refuses to go on (``domain.apply_order.version_problem``). The
repair re-applies, in order and for that table only, every applied window recorded for the table
after the last one it still holds, from the windows' change sets (each a Delta commit tagged with
its window, as the upsert makes it), and records the new versions. A window whose change set is
gone cannot be re-applied: the repair then names it and changes nothing for that table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from airflow_provider_cdc.changesets.reader import ChangeSetError, ChangeSetReader
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore, WindowState


@dataclass
class TableRepair:
    """What the repair found and did for one table."""

    table: str
    expected: int
    found: int | None
    reapplied: list[str] = field(default_factory=list)  # window ids re-applied
    missing: list[str] = field(default_factory=list)  # change sets that are gone
    problem: str | None = None  # why the table cannot be repaired here

    @property
    def agrees(self) -> bool:
        return self.problem is None and not self.missing


def repair_pipeline(
    store: Metastore,
    pipeline: str,
    lake_root: str,
    changeset_root: str,
    storage_options: Mapping[str, str] | None = None,
    *,
    dry_run: bool = False,
    log: Callable[[str], None] = print,
) -> list[TableRepair]:
    """Re-apply what each of the pipeline's Delta tables lacks; return one report per table that
    disagreed."""
    from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

    target = DeltaLakeTarget(lake_root, storage_options)
    applied = {(w.start, w.end) for w in store.list_windows(pipeline, state=WindowState.APPLIED)}
    by_table: dict[str, list[Window]] = {}
    for record in store.window_tables(pipeline, target=target.name):
        if (record.window_start, record.window_end) in applied:
            by_table.setdefault(record.table, []).append(Window(record.window_start, record.window_end))
    reports = []
    for table, windows in sorted(by_table.items()):
        expected = windows[-1].end_micros
        found = target.applied_window(table, pipeline)
        if found == expected:
            continue
        report = TableRepair(table, expected, found)
        reports.append(report)
        if found is not None and found > expected:
            report.problem = (
                f"table {table!r} holds window version {found}, past the last window the metastore "
                f"applied to it ({expected}): it was written by someone else; restore it to a version at "
                f"or before {expected} (or re-create it) and repair again"
            )
            log(report.problem)
            continue
        lacking = [w for w in windows if found is None or w.end_micros > found]
        root = changeset_root.rstrip("/")
        readers = {w.window_id: ChangeSetReader(f"{root}/{w.window_id}", storage_options) for w in lacking}
        sets = {}
        for window_id, reader in readers.items():
            try:
                sets[window_id] = {t.name: t for t in reader.tables()}[table]
            except (ChangeSetError, KeyError, OSError) as error:
                report.missing.append(window_id)
                log(f"table {table}: the change set of window {window_id} cannot be read ({error})")
        if report.missing:
            log(f"table {table}: {len(report.missing)} window(s) cannot be re-applied; it is left as it is")
            continue
        log(
            f"table {table}: holds window version {found}, the metastore applied {expected}; re-applying "
            f"{len(lacking)} window(s)" + (" (dry run)" if dry_run else "")
        )
        if dry_run:
            continue
        for window in lacking:
            change_set = sets[window.window_id]
            result = target.apply_window(change_set, pipeline, window)
            store.record_window_tables(
                pipeline,
                window.start,
                window.end,
                {table: (result.version, change_set.expected_rows)},
                target=result.target,
                replace=True,
            )
            report.reapplied.append(window.window_id)
            log(f"table {table}: window {window.window_id} {result.outcome} as version {result.version}")
    return reports
