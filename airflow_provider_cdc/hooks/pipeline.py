"""Hook for a pipeline's windows: what the merge reads, what the upsert may apply, the commit.

Operators stay thin: the metastore reads and compare-and-sets of a window step, and the checks of
the change set and the lake around them, happen here. The commit takes the targets' results
(``targets.protocol.TableApplyResult``) and the watermarks they reported (BigQuery's
``upsert_stream_apply_watermark``) and records each under the pipeline, its target and its table.

Every opening of a window is an **epoch** (the window's ``attempt`` in the metastore, counted up by
each opening). The open operator hands it to the window's merge, upsert and commit; a step whose
epoch is no longer the window's changes nothing (:class:`StaleEpochError`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_provider_cdc._compat import BaseHook
from airflow_provider_cdc._errors import metastore_errors, redact
from airflow_provider_cdc.core.contract.locations import WindowLocations, partition_key
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.timestamps import coerce_timestamp, format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.hooks.storage import storage_options
from airflow_provider_cdc.metastore.model import BIGQUERY_TARGET, DELTA_TARGET, validate_target
from airflow_provider_cdc.targets.protocol import APPLIED, TableApplyResult
from airflow_provider_cdc.targets.registry import TargetKind, open_target, target_kind


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


class LakeNotAppliedError(WindowStepError):
    """The commit found a table of the change set that does not hold the window."""


class StorageUnavailableError(WindowStepError):
    """A location of the window (its change set, the lake) could not be read: the message names the
    window, the step, the location and the storage's own error (retried: storage may come back)."""


@contextmanager
def storage_errors(what: str, location: str, consequence: str) -> Iterator[None]:
    """Re-raise an I/O error of pyarrow or delta-rs (``OSError``, ``DeltaError``) met while reading
    ``location`` as :class:`StorageUnavailableError` naming ``what`` (the window and the step), the
    location, the error's first line (credentials removed) and ``consequence``."""
    from deltalake.exceptions import DeltaError

    try:
        yield
    except (OSError, DeltaError) as exc:
        lines = str(exc).strip().splitlines()
        detail = redact(lines[0] if lines else "")
        raise StorageUnavailableError(
            f"{what}: {location!r} could not be read ({type(exc).__name__}: {detail}); check that the "
            f"location exists and that the gcp_conn_id credentials reach it. {consequence}"
        ) from exc


class StaleTablesError(WindowStepError):
    """A table's apply watermark (Delta, or BigQuery's ``upsert_stream_apply_watermark``) lags more
    than ``max_staleness``."""


#: The key of a table's entry in the BigQuery upsert's return value that carries its watermark.
BIGQUERY_WATERMARK = target_kind(BIGQUERY_TARGET).watermark


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


def parse_bigquery_watermarks(value: Any) -> dict[str, datetime | None] | None:
    """BigQuery table → ``upsert_stream_apply_watermark`` (``None``: BigQuery has applied nothing yet).

    ``value`` is the BigQuery upsert's return value (``{"tables": {table: {...,
    "upsert_stream_apply_watermark": RFC 3339 text or None}}}``; a table without that key was not
    asked for its watermark and is left out) or a mapping ``{table: timestamp or None}``; ``None``
    gives ``None``. Anything else fails naming what is wrong.
    """
    return parse_watermarks(value, target_kind(BIGQUERY_TARGET), "bigquery_watermarks")


def parse_watermarks(value: Any, kind: TargetKind, argument: str) -> dict[str, datetime | None] | None:
    """Table → the watermark a target reported (``None``: it has applied nothing to the table yet),
    from the target's upsert return value (``{"tables": {table: {..., kind.watermark: …}}}``) or a
    mapping ``{table: timestamp or None}``; ``None`` gives ``None``. ``argument`` names the value in
    errors."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(
            f"{argument} must be the {kind.title} upsert's return value or a mapping of table to "
            f"{kind.watermark}, got {type(value).__name__}"
        )
    tables = value["tables"] if isinstance(value.get("tables"), Mapping) else value
    marks: dict[str, datetime | None] = {}
    for table, entry in tables.items():
        name = validate_identifier(table, f"{kind.title} table")
        if isinstance(entry, Mapping):
            if kind.watermark not in entry:
                continue
            entry = entry[kind.watermark]
        try:
            marks[name] = None if entry is None else coerce_timestamp(entry)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{argument}: table {table!r} has no valid {kind.watermark} ({exc})") from None
    return marks


def reported_watermarks(
    watermarks: Mapping[str, Any] | None, bigquery_watermarks: Any = None
) -> dict[str, dict[str, datetime | None]]:
    """Target → table → the watermark the target reported, each target's value read by
    :func:`parse_watermarks`; ``bigquery_watermarks`` is the value of the target ``bigquery``. A target
    whose watermarks are its committed window ends (Delta), or one given twice, is refused."""
    given: dict[str, Any] = dict(watermarks or {})
    if bigquery_watermarks is not None:
        if given.get(BIGQUERY_TARGET) is not None:
            raise ValueError("the watermarks of target 'bigquery' are given twice (bigquery_watermarks too)")
        given[BIGQUERY_TARGET] = bigquery_watermarks
    reported = {}
    for target, value in sorted(given.items()):
        kind = target_kind(validate_target(target))
        if kind.watermark_is_window_end:
            raise ValueError(
                f"the {kind.title} target's watermarks are the ends of the windows the commit records; "
                "they are not reported"
            )
        argument = "bigquery_watermarks" if target == BIGQUERY_TARGET else f"watermarks[{target!r}]"
        marks = parse_watermarks(value, kind, argument)
        if marks is not None:
            reported[target] = marks
    return reported


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
        the window's, and per table the end of the last earlier applied window that changed it
        (which needs the window before this one applied, or this one the pipeline's first)."""
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
                versions = store.table_versions(pipeline, before=window.start)
                previous = {"tables": dict(sorted(versions.tables.items())),
                            "recorded_from_us": versions.recorded_from_us}
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

    def expected_versions(self, pipeline: str, window: Window, epoch: int | None = None) -> str:
        """What the metastore says each table holds (JSON for the upsert job), after checking the
        window may apply: ``epoch`` (when given) is the window's, and the pipeline's previous window
        is applied, or this is its first."""
        with metastore_errors(f"window {window} of pipeline {pipeline!r}: checking it can apply"):
            with CdcMetastoreHook(self.metastore_conn_id) as metastore:
                store = metastore.metastore
                if epoch is not None:
                    require_epoch(store, pipeline, window, epoch, "upsert")
                store.require_predecessor_applied(pipeline, window.start, window.end)
                return store.table_versions(pipeline).to_json()

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
        bigquery_watermarks: Any = None,
        epoch: int | None = None,
        results: Iterable[Any] | None = None,
        watermarks: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Mark the window applied, record per target and table what applied it, and advance the
        tables' apply watermarks.

        ``epoch`` (the opening of the window this run belongs to; default the epoch the change
        set's manifest records) fences the commit: a window opened again since changes nothing and
        the commit fails with :class:`StaleEpochError`, as does a change set of another epoch.

        The change set's manifest (with ``locations.changeset_root``) names the window's tables;
        with ``locations.lake_root`` each must hold the window in the Delta target, whose result (the
        version that applied it) is recorded with the ``results`` the targets returned
        (``TableApplyResult`` or its ``to_dict``), each under its target and table. The apply
        watermarks of the Delta target advance to the window end. Idempotent: a window already applied
        only refreshes the watermarks.

        ``watermarks`` (target → the watermarks that target reported, see
        :func:`reported_watermarks`) are recorded only forward under the pipeline and their target and
        checked against ``max_staleness``; a table the target has applied nothing to yet is logged as a
        warning. ``bigquery_watermarks`` (the BigQuery upsert's return value, see
        :func:`parse_bigquery_watermarks`) are the watermarks of the target ``bigquery``.

        Returns the window id, its source's metastore key (``source_key``), its ``rows`` and
        ``transactions``, the Delta tables' apply ``watermarks`` and each reporting target's
        (``{target}_watermarks``), as RFC 3339 text.
        """
        log = log or self.log
        # A malformed value fails before anything is written.
        reported = reported_watermarks(watermarks, bigquery_watermarks)
        given = [TableApplyResult.from_dict(result) for result in results or ()]
        with metastore_errors(f"window {window} of pipeline {pipeline!r}: committing the window"):
            with CdcMetastoreHook(self.metastore_conn_id) as metastore:
                return self._commit(
                    metastore.metastore, pipeline, window, locations, read_summaries(summaries),
                    max_staleness, now, log, reported, epoch, given,
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
        reported: Mapping[str, Mapping[str, datetime | None]],
        epoch: int | None = None,
        results: Sequence[TableApplyResult] = (),
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
                window, pipeline,
            )
        if record.state is not WindowState.APPLIED:
            store.require_predecessor_applied(pipeline, window.start, window.end)
            with storage_errors(step, str(locations.lake_root), unchanged):
                held = self._window_results(locations, pipeline, window, changed)
            record_results(store, pipeline, window, [*held, *results])
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
        tables = sorted(set(store.table_watermarks(pipeline, target=DELTA_TARGET)) | set(changed))
        with storage_errors(
            step, str(locations.lake_root),
            "The window is applied; its tables' apply watermarks did not advance: a retry advances them.",
        ):
            delta_marks = self._delta_watermarks(locations, pipeline, window, tables)
        for table, mark in delta_marks.items():
            if mark is not None:
                store.advance_table_watermark(pipeline, table, mark, target=DELTA_TARGET)
        watermarks = store.table_watermarks(pipeline, target=DELTA_TARGET)
        log.info(
            "Window %s applied: %d change rows, %d transactions; apply watermarks: %s",
            window,
            rows,
            transactions,
            ", ".join(f"{t}={format_timestamp(w)}" for t, w in sorted(watermarks.items())) or "none",
        )
        summary: dict[str, Any] = {
            "window_id": window.window_id,
            "source_key": record.stream,
            "rows": rows,
            "transactions": transactions,
            "watermarks": {t: format_timestamp(w) for t, w in sorted(watermarks.items())},
        }
        checked: dict[str, dict[str, datetime]] = {}
        for target, marks in sorted(reported.items()):
            recorded = record_watermarks(store, pipeline, target, marks, log)
            checked[target] = {t: recorded[t] for t, mark in marks.items() if mark is not None}
            summary[f"{target}_watermarks"] = {
                t: format_timestamp(recorded[t]) if t in recorded else None
                for t in sorted(set(recorded) | set(marks))
            }
        if max_staleness is not None:
            moment = now or datetime.now(timezone.utc)
            stale = [f"{t} lags {lag}" for t, lag in stale_tables(watermarks, moment, max_staleness).items()]
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

    def _delta_watermarks(
        self, locations: WindowLocations, pipeline: str, window: Window, tables: Sequence[str]
    ) -> dict[str, datetime | None]:
        """Per table, the Delta apply watermark after this window: the window end, except for a table
        with windows pending (deferred apply), whose watermark is the end of the last window folded into
        it (``None``: none yet), as BigQuery's ``upsert_stream_apply_watermark`` lags its appends."""
        if not locations.lake_root or not tables:
            return dict.fromkeys(tables, window.end)
        target = open_target(DELTA_TARGET, str(locations.lake_root), self.storage_options())
        marks: dict[str, datetime | None] = {}
        for table in tables:
            deferred = bool(target.pending_windows(table, pipeline))
            marks[table] = target.apply_watermark(table, pipeline) if deferred else window.end
        return marks

    def _window_results(
        self, locations: WindowLocations, pipeline: str, window: Window, changed: Mapping[str, int | None]
    ) -> list[TableApplyResult]:
        """Per changed table, what the Delta target (``lake_root``) records about the window (checked
        to hold it), with the change set's rows; without a lake, the change set's tables and rows."""
        if not locations.lake_root:
            return [
                TableApplyResult(DELTA_TARGET, table, window.end_micros, APPLIED, rows or 0)
                for table, rows in sorted(changed.items())
            ]
        target = open_target(DELTA_TARGET, str(locations.lake_root), self.storage_options())
        results = []
        for table, rows in sorted(changed.items()):
            result = target.window_result(table, pipeline, window)
            if result is None:
                held = target.applied_window(table, pipeline)
                raise LakeNotAppliedError(
                    f"window {window} of pipeline {pipeline!r}: table {table!r} does not hold it (its last "
                    f"applied window version is {held}); the upsert must apply the window before it commits"
                )
            results.append(replace(result, rows=rows or 0))
        return results


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
