"""Hook for a pipeline's windows: what the merge reads, what the upsert may apply, the commit.

Operators stay thin: the metastore reads and compare-and-sets of a window step, and the checks of
the change set around them, happen here. The commit takes the target apply steps' outputs
(``targets.protocol.TargetApplied``), hands each to its target's commit part (found through the
registry) and records the results and apply watermarks it gives under the pipeline, the target and
the table.

Every opening of a window is an **epoch** (the window's ``attempt`` in the metastore, counted up by
each opening). The open operator hands it to the window's merge, upsert and commit; a step whose
epoch is no longer the window's changes nothing (:class:`StaleEpochError`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_provider_cdc._compat import BaseHook
from airflow_provider_cdc._errors import metastore_errors, redact
from airflow_provider_cdc.core.contract.locations import WindowLocations, partition_key
from airflow_provider_cdc.core.contract.target import (
    CommitContext,
    TableApplyResult,
    TargetApplied,
    WindowNotHeldError,
)
from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.hooks.storage import storage_options
from airflow_provider_cdc.metastore.model import validate_target
from airflow_provider_cdc.plugins import target_kind, target_kinds


class WindowStepError(RuntimeError):
    """A window step cannot run: the message names the window and what is missing."""


class StaleEpochError(WindowStepError):
    """The window was opened again since this run opened it: this run's step changes nothing."""


class StagedInputMissingError(WindowStepError):
    """The staging lacks files or rows a reader recorded for a unit of the window."""


@dataclass(frozen=True)
class MergeInput:
    """What the merge of a window reads and records: every unit as its reader recorded it, the
    epoch, and per table the end of the last earlier window that changed it (``None``: no pipeline
    given, nothing known)."""

    units: list[Any]
    epoch: int | None
    previous_windows: dict[str, Any] | None = None


def pending_manifest_name(epoch: int) -> str:
    """The name an epoch's merge writes its manifest under until the merge publishes it."""
    return f"_manifest.pending-{int(epoch)}.json"


def require_epoch(store: Any, pipeline: str, window: Window, epoch: int, step: str) -> Any:
    """The recorded window, once ``epoch`` is found to be its current one; else
    :class:`StaleEpochError` naming the window, both epochs and ``step`` (which changes nothing)."""
    record = store.get_window(pipeline, window.start, window.end)
    if record.attempt != epoch:
        raise StaleEpochError(
            f"window {window} of pipeline {pipeline!r} was opened again (it is in epoch {record.attempt}, "
            f"{record.state.value}) since this run opened it in epoch {epoch}: the {step} of epoch {epoch} "
            "changes nothing; the run of the newer opening carries the window on"
        )
    return record


class TargetNotAppliedError(WindowStepError):
    """The commit found a table that must hold the window in its target and does not."""


#: The former name of :class:`TargetNotAppliedError`.
LakeNotAppliedError = TargetNotAppliedError


class StorageUnavailableError(WindowStepError):
    """A location of the window (its change set, a target's tables) could not be read: the message names
    the window, the step, the location and the storage's own error (retried: storage may come back)."""


@contextmanager
def storage_errors(
    what: str, location: str, consequence: str, errors: tuple[type[BaseException], ...] = ()
) -> Iterator[None]:
    """Re-raise an I/O error (``OSError``, or one of ``errors``: a target storage's own) met while
    reading ``location`` as :class:`StorageUnavailableError` naming ``what`` (the window and the step),
    the location, the error's first line (credentials removed) and ``consequence``."""
    try:
        yield
    except (OSError, *errors) as exc:
        lines = str(exc).strip().splitlines()
        detail = redact(lines[0] if lines else "")
        raise StorageUnavailableError(
            f"{what}: {location!r} could not be read ({type(exc).__name__}: {detail}); check that the "
            f"location exists and that the gcp_conn_id credentials reach it. {consequence}"
        ) from exc


class StaleTablesError(WindowStepError):
    """A table's apply watermark (in any target) lags more than ``max_staleness``."""


def stale_tables(
    watermarks: Mapping[str, datetime], now: datetime, max_staleness: timedelta
) -> dict[str, timedelta]:
    """Tables whose apply watermark lags ``now`` by more than ``max_staleness``, with their lag."""
    return {table: now - mark for table, mark in sorted(watermarks.items()) if now - mark > max_staleness}


def read_summaries(value: Any) -> list[Mapping[str, Any]]:
    """The readers' summaries (XCom) as a list; ignores anything that is not a mapping."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [value]
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        # A slice of Airflow's lazy XCom sequence is one fetch; iterating fetches item by item
        # until a lookup past the end fails (and logs that failure).
        value = value[:]
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        return [v for v in value if isinstance(v, Mapping)]
    return []


def applied_outputs(
    applied: Any,
    window: Window,
    locations: WindowLocations,
    reported: Mapping[str, Any] | None = None,
) -> list[TargetApplied]:
    """What the commit commits, one :class:`TargetApplied` per target: the apply steps' outputs
    (``applied``: a list, or a list of lists from several tasks; each a ``TargetApplied`` or its
    ``to_dict``) and the deprecated ``{target}_watermarks`` values (``reported``: target → value, each
    converted by its target). Without ``applied`` (``None``), every registered target whose location
    field (its root) is set in ``locations`` is committed from what it holds. A target given
    twice, or an output of another window, fails before anything is written."""
    outputs: list[TargetApplied] = []
    if applied is None:
        for kind in target_kinds():
            root = locations.target_roots.get(kind.location_field) if kind.location_field else None
            if root:
                outputs.append(TargetApplied(kind.name, window.end_micros, str(root)))
    else:
        if isinstance(applied, (Mapping, TargetApplied)) or not isinstance(applied, Iterable):
            applied = [applied]
        for item in applied:
            for output in item if isinstance(item, (list, tuple)) else [item]:
                if output is None:
                    raise ValueError(
                        f"the commit of window {window} is given an apply step output of None: give "
                        "applied=[each target apply step's .output] (an apply step returns its TargetApplied)"
                    )
                outputs.append(TargetApplied.from_dict(output))
    for target, value in sorted((reported or {}).items()):
        if value is not None:
            outputs.append(target_kind(validate_target(target)).from_reported(value, window.end_micros))
    seen: set[str] = set()
    for output in outputs:
        target_kind(output.target)  # an unknown target fails naming the registered ones
        if output.target in seen:
            raise ValueError(
                f"the commit of window {window} is given the {output.target} target twice; give each apply "
                "step's output once (applied=[...], or the deprecated {target}_watermarks, not both)"
            )
        seen.add(output.target)
        if output.window != window.end_micros:
            raise ValueError(
                f"the {output.target} output given to the commit of window {window} is of window version "
                f"{output.window}, not {window.end_micros}: give the apply step of this window's run"
            )
    return outputs


class CdcPipelineHook(BaseHook):
    """A pipeline's window steps against its metastore and storage.

    :param metastore_conn_id: the metastore (see :class:`CdcMetastoreHook`).
    :param gcp_conn_id: Google Cloud connection whose credentials open ``gs://`` locations.
    :param impersonation_chain: service account(s) to impersonate with ``gcp_conn_id``.
    """

    def __init__(
        self,
        metastore_conn_id: str = CdcMetastoreHook.default_conn_name,
        gcp_conn_id: str | None = None,
        *,
        impersonation_chain: str | Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.metastore_conn_id = metastore_conn_id
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain

    def storage_options(self) -> dict[str, str]:
        """Storage options of ``gcp_conn_id`` (masked in logs; empty without a connection)."""
        return storage_options(self.gcp_conn_id, self.impersonation_chain)

    def partition_claims(self, stream_key: str, window: Window) -> dict[str, str]:
        """Partition key → the claim whose staged files are the partition's output.

        Every partition of the window must have been read to its end.
        """
        with metastore_errors(f"window {window} of {stream_key}: reading its partitions' claims"):
            with CdcMetastoreHook(self.metastore_conn_id) as metastore:
                items = metastore.metastore.window_partitions(stream_key, window.start, window.end)
        items = self._read_items(stream_key, window, items)
        return {partition_key(item.token): item.claim_id for item in items if item.claim_id}

    @staticmethod
    def _read_items(stream_key: str, window: Window, items: Sequence[Any]) -> Sequence[Any]:
        """``items``, once every one is read to the window end (else a :class:`WindowStepError`)."""
        if not items:
            raise WindowStepError(f"window {window} of {stream_key}: no partitions recorded; read it first")
        unread = [item.token for item in items if not item.is_done]
        if unread:
            raise WindowStepError(
                f"window {window}: {len(unread)} partition(s) not read to the window end yet: "
                + ", ".join(unread[:5])
            )
        return items

    def merge_input(
        self, stream_key: str, window: Window, pipeline: str | None = None, epoch: int | None = None
    ) -> MergeInput:
        """Every unit of the window as its reader recorded it (claim, files, rows), after checking
        that each is read; with ``pipeline``, that ``epoch`` (default: the window's current one) is
        the window's, and per table the end of the last earlier applied window that changed it, as
        any of the pipeline's targets recorded it (which needs the window before this one applied, or
        this one the pipeline's first)."""
        from airflow_provider_cdc.merge.input import StagedUnit

        what = f"window {window} of {stream_key}: reading its units"
        with metastore_errors(what), CdcMetastoreHook(self.metastore_conn_id) as metastore:
            store = metastore.metastore
            previous = None
            if pipeline is not None:
                if epoch is None:
                    epoch = store.get_window(pipeline, window.start, window.end).attempt
                else:
                    require_epoch(store, pipeline, window, epoch, "merge")
                store.require_predecessor_applied(pipeline, window.start, window.end)
                versions = store.table_versions(pipeline, target=None, before=window.start)
                previous = {
                    "tables": dict(sorted(versions.tables.items())),
                    "recorded_from_us": versions.recorded_from_us,
                }
            items = self._read_items(
                stream_key, window, store.window_partitions(stream_key, window.start, window.end)
            )
        units = [
            StagedUnit(partition_key(item.token), item.claim_id, item.output_files, item.rows, item.token)
            for item in items
            if item.claim_id
        ]
        return MergeInput(units, epoch if pipeline is not None else None, previous)

    def check_staging(self, staging: str, window: Window, units: Sequence[Any]) -> int:
        """Check that the staging holds every unit's recorded files and rows (Parquet footers);
        returns the rows. Fails naming the window, the units and what is missing."""
        from airflow_provider_cdc.merge.input import StagedInputError, check_staged_units

        try:
            checked = check_staged_units(staging, window, units, self.storage_options())
        except StagedInputError as exc:
            raise StagedInputMissingError(str(exc)) from None
        return sum(unit.rows for unit in checked)

    def check_epoch(self, pipeline: str, window: Window, epoch: int, step: str) -> None:
        """Fail with :class:`StaleEpochError` unless ``epoch`` is the window's current one."""
        with metastore_errors(f"window {window} of pipeline {pipeline!r}: checking its epoch"):
            with CdcMetastoreHook(self.metastore_conn_id) as metastore:
                require_epoch(metastore.metastore, pipeline, window, epoch, step)

    def publish_manifest(self, pipeline: str, window: Window, epoch: int, change_set: str) -> None:
        """Publish the manifest the merge of ``epoch`` wrote under its pending name in its epoch's
        folder as the change set's ``_manifest.json``, naming that folder, after checking that
        ``epoch`` is still the window's (a merge of an older opening publishes nothing)."""
        from airflow_provider_cdc.core.contract.change_set import manifest_bytes
        from airflow_provider_cdc.core.contract.locations import MANIFEST_FOLDER, MANIFEST_NAME, epoch_folder
        from airflow_provider_cdc.filesystems import join, resolve

        filesystem, root = resolve(change_set, self.storage_options())
        pending = join(join(root, epoch_folder(epoch)), pending_manifest_name(epoch))
        try:
            self.check_epoch(pipeline, window, epoch, "merge")
        except StaleEpochError:
            filesystem.delete_file(pending)
            raise
        with filesystem.open_input_stream(pending) as stream:
            manifest = {**json.loads(stream.read()), MANIFEST_FOLDER: epoch_folder(epoch)}
        target = join(root, MANIFEST_NAME)
        if filesystem.type_name == "local":  # written beside, then renamed: readers see all or nothing
            staged = f"{target}.{epoch_folder(epoch)}.tmp"
            with filesystem.open_output_stream(staged) as out:
                out.write(manifest_bytes(manifest))
            filesystem.move(staged, target)
        else:
            with filesystem.open_output_stream(target) as out:  # one object write
                out.write(manifest_bytes(manifest))
        filesystem.delete_file(pending)

    def expected_versions(self, pipeline: str, window: Window, target: str, epoch: int | None = None) -> str:
        """What the metastore says each table of ``target`` holds (JSON for its apply job), after
        checking the window may apply: ``epoch`` (when given) is the window's, and the pipeline's
        previous window is applied, or this is its first."""
        with metastore_errors(f"window {window} of pipeline {pipeline!r}: checking it can apply"):
            with CdcMetastoreHook(self.metastore_conn_id) as metastore:
                store = metastore.metastore
                if epoch is not None:
                    require_epoch(store, pipeline, window, epoch, "upsert")
                store.require_predecessor_applied(pipeline, window.start, window.end)
                return store.table_versions(pipeline, target=target).to_json()

    def commit_window(
        self,
        pipeline: str,
        window: Window,
        locations: WindowLocations,
        summaries: Any = None,
        *,
        max_staleness: timedelta | None = None,
        now: datetime | None = None,
        log: Any = None,
        applied: Any = None,
        epoch: int | None = None,
        reported: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Mark the window applied, record per target and table what applied it, and advance the
        tables' apply watermarks.

        ``epoch`` (the opening of the window this run belongs to; default the epoch the change
        set's manifest records) fences the commit: a window opened again since changes nothing and
        the commit fails with :class:`StaleEpochError`, as does a change set of another epoch.

        ``applied`` are the target apply steps' outputs (see :func:`applied_outputs`, which also
        takes the deprecated ``reported`` watermarks). The change set's manifest (with
        ``locations.changeset_root``) names the window's tables; each target's commit part checks what
        it must hold (a table that does not hold the window fails with
        :class:`TargetNotAppliedError`) and gives the results the ledger records under (pipeline,
        target, table) and the tables' apply watermarks, recorded only forward and checked against
        ``max_staleness``; a table a target has applied nothing to yet is logged as a warning.
        Idempotent: a window already applied only refreshes the watermarks.

        Returns the window id, its source's metastore key (``source_key``), its ``rows`` and
        ``transactions``, ``watermarks`` (target → table → apply watermark, RFC 3339, ``None``: none
        yet) and ``tables`` (target → table → its ``watermark``, the window's change ``rows`` and its
        names: asset ``uri``, OpenLineage ``namespace`` and ``name``).
        """
        log = log or self.log
        outputs = applied_outputs(applied, window, locations, reported)  # malformed: nothing written
        with metastore_errors(f"window {window} of pipeline {pipeline!r}: committing the window"):
            with CdcMetastoreHook(self.metastore_conn_id) as metastore:
                return self._commit(
                    metastore.metastore,
                    pipeline,
                    window,
                    locations,
                    read_summaries(summaries),
                    max_staleness,
                    now,
                    log,
                    outputs,
                    epoch,
                )

    def _commit(
        self,
        store: Any,
        pipeline: str,
        window: Window,
        locations: WindowLocations,
        summaries: list[Mapping[str, Any]],
        max_staleness: timedelta | None,
        now: datetime | None,
        log: Any,
        outputs: Sequence[TargetApplied],
        epoch: int | None = None,
    ) -> dict[str, Any]:
        from airflow_provider_cdc.metastore import WindowState

        if epoch is not None:  # a stale run is refused before it reads anything
            require_epoch(store, pipeline, window, epoch, "commit")
        step = f"window {window} of pipeline {pipeline!r}: the commit"
        unchanged = "Nothing was committed; a retry reads it again."
        with storage_errors(step, str(locations.changeset_root), unchanged):
            changed, merged = self._change_set(locations, window)  # before the window is marked applied
        if epoch is not None and merged is not None and merged != epoch:
            raise StaleEpochError(
                f"window {window} of pipeline {pipeline!r}: the change set at {locations.change_set(window)} "
                f"was merged in epoch {merged}, not in this run's epoch {epoch}: the commit changes nothing"
            )
        epoch = merged if epoch is None else epoch
        if epoch is not None:
            record = require_epoch(store, pipeline, window, epoch, "commit")
        else:
            record = store.get_window(pipeline, window.start, window.end)
            log.info(
                "Window %s of %s: the commit carries no epoch (neither given nor in the change set's "
                "manifest): a re-opening of the window meanwhile is only caught by its state",
                window,
                pipeline,
            )
        parts = [(output, target_kind(output.target).committer()) for output in outputs]
        options = self.storage_options() if any(output.location for output in outputs) else {}

        def context(target: str) -> CommitContext:
            recorded = sorted(store.table_watermarks(pipeline, target=target))
            return CommitContext(pipeline, window, changed, options, recorded, log)

        if record.state is not WindowState.APPLIED:
            store.require_predecessor_applied(pipeline, window.start, window.end)
            results: list[TableApplyResult] = []
            for output, part in parts:
                with storage_errors(step, str(output.location), unchanged, part.storage_errors):
                    try:
                        results += part.window_results(output, context(output.target))
                    except WindowNotHeldError as exc:
                        raise TargetNotAppliedError(str(exc)) from exc
            record_results(store, pipeline, window, results)
        rows = sum(int(s.get("rows", 0)) for s in summaries)
        transactions = round(sum(float(s.get("transactions", 0.0)) for s in summaries))
        if record.state is WindowState.APPLIED:
            log.info("Window %s of %s was already applied (attempt %d)", window, pipeline, record.attempt)
        elif not store.transition_window(
            pipeline,
            window.start,
            window.end,
            record.state,
            WindowState.APPLIED,
            attempt=record.attempt if epoch is None else epoch,
            record_count=rows if summaries else None,
            transaction_count=transactions if summaries else None,
        ):
            # Lost the compare-and-set: another run of this window may have committed it meanwhile.
            current = store.get_window(pipeline, window.start, window.end)
            if current.state is not WindowState.APPLIED:
                raise WindowStepError(
                    f"window {window} of {pipeline} changed state to {current.state.value} (attempt "
                    f"{current.attempt}) while it was being committed"
                )
            log.info("Window %s of %s was applied by another run meanwhile", window, pipeline)
        log.info("Window %s applied: %d change rows, %d transactions", window, rows, transactions)
        summary: dict[str, Any] = {
            "window_id": window.window_id,
            "source_key": record.stream,
            "rows": rows,
            "transactions": transactions,
            "watermarks": {},
            "tables": {},
        }
        checked: dict[str, dict[str, datetime]] = {}
        for output, part in parts:
            with storage_errors(
                step, str(output.location),
                "The window is applied; its tables' apply watermarks did not advance: a retry advances them.",
                part.storage_errors,
            ):  # fmt: skip
                marks = part.apply_watermarks(output, context(output.target))
            recorded = record_watermarks(store, pipeline, output.target, marks, log)
            checked[output.target] = {t: recorded[t] for t, mark in marks.items() if mark is not None}
            shown = {
                t: format_timestamp(recorded[t]) if t in recorded else None
                for t in sorted(set(recorded) | set(marks))
            }
            summary["watermarks"][output.target] = shown
            summary["tables"][output.target] = self._table_entries(
                store, pipeline, window, output, part, shown
            )
        if max_staleness is not None:
            moment = now or datetime.now(timezone.utc)
            stale = []
            for target, marks in sorted(checked.items()):
                kind = target_kind(target)
                stale += [
                    f"{kind.title} table {t} lags {lag} ({kind.watermark} {format_timestamp(marks[t])})"
                    for t, lag in stale_tables(marks, moment, max_staleness).items()
                ]
            if stale:
                raise StaleTablesError(
                    f"apply watermark older than max_staleness={max_staleness}: {', '.join(stale)}"
                )
        return summary

    @staticmethod
    def _table_entries(
        store: Any, pipeline: str, window: Window, output: TargetApplied, part: Any, marks: Mapping[str, Any]
    ) -> dict[str, dict[str, Any]]:
        """Table → its watermark, the window's change rows (the ledger's record of the window, else the
        step's result; 0: none recorded) and its names (asset URI, OpenLineage dataset)."""
        held = store.window_tables(pipeline, target=output.target, window=(window.start, window.end))
        ledger = {r.table: r.rows for r in held}
        stepped = {r.table: r.rows for r in output.tables}
        names = part.table_names(output, sorted(marks))
        entries = {}
        for table, mark in sorted(marks.items()):
            name = names.get(table)
            entries[table] = {
                "watermark": mark,
                "rows": ledger.get(table, stepped.get(table, 0)),
                "uri": name.uri if name else None,
                "namespace": name.namespace if name else None,
                "name": name.name if name else None,
            }
        return entries

    def _change_set(
        self, locations: WindowLocations, window: Window
    ) -> tuple[dict[str, int | None], int | None]:
        """The tables the window's change set holds with their rows, its manifest checked against
        its folders and row counts (a manifest that omits a table or miscounts one is refused), and
        the epoch the manifest records (``None``: no change set, or merged without one)."""
        if not locations.changeset_root:
            return {}, None
        from airflow_provider_cdc.changesets.reader import ChangeSetReader

        reader = ChangeSetReader(locations.change_set(window), self.storage_options())
        changed = {table.name: table.expected_rows for table in reader.tables()}
        epoch = reader.manifest().get("epoch")
        return changed, epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None


def record_results(store: Any, pipeline: str, window: Window, results: Iterable[TableApplyResult]) -> None:
    """Record each result in the ledger under its target and table (a table the ledger already records
    for the window keeps its record)."""
    by_target: dict[str, dict[str, tuple[int | None, int | None]]] = {}
    for result in results:
        if result.window != window.end_micros:
            raise WindowStepError(
                f"window {window} of pipeline {pipeline!r}: the {result.target} result of table "
                f"{result.table!r} is of window version {result.window}, not {window.end_micros}"
            )
        by_target.setdefault(result.target, {})[result.table] = result.ledger_entry()
    for target, tables in sorted(by_target.items()):
        store.record_window_tables(pipeline, window.start, window.end, tables, target=target)


def record_watermarks(
    store: Any, pipeline: str, target: str, marks: Mapping[str, datetime | None], log: Any
) -> dict[str, datetime]:
    """Advance the recorded watermarks of ``target``'s tables to what the target reported (only
    forward); returns every recorded watermark of the pipeline's ``target``."""
    kind = target_kind(target)
    for table, mark in sorted(marks.items()):
        if mark is None:
            log.warning(
                "%s table %s has no %s yet: %s has not applied any of its row modifications (staleness is "
                "not checked for it)",
                kind.title,
                table,
                kind.watermark,
                kind.title,
            )
        else:
            store.advance_table_watermark(pipeline, table, mark, target=target)
    recorded = store.table_watermarks(pipeline, target=target)
    log.info(
        "%s apply watermarks of %s (%s): %s",
        kind.title,
        pipeline,
        kind.watermark,
        ", ".join(f"{t}={format_timestamp(w)}" for t, w in sorted(recorded.items())) or "none",
    )
    return recorded
