"""What a Delta table's log records about a pipeline's windows.

Every apply commits with the app transaction ``(app_id_for(pipeline_id), window_version)`` and
commit metadata naming the app id and the window (and whether the commit loaded a snapshot).
:func:`held_window` reads which window the table's data holds, RESTOREs taken into account;
:func:`find_window_commit` finds the commit that applied an older window, and
:func:`applied_window_detail` decides from both whether a window is to be applied.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from deltalake import CommitProperties, DeltaTable, Transaction

from airflow_provider_cdc.core.contract.target import OlderWindowError
from airflow_provider_cdc.core.identifiers import validate_pipeline_id

log = logging.getLogger(__name__)

APP_ID_PREFIX = "airflow-provider-cdc:"
COMMIT_METADATA_APP_ID = "airflow-provider-cdc.appId"
COMMIT_METADATA_WINDOW_VERSION = "airflow-provider-cdc.windowVersion"
COMMIT_METADATA_SNAPSHOT = "airflow-provider-cdc.snapshot"
#: A compaction's commit (deferred apply): the windows it folded, as a JSON list of window versions.
COMMIT_METADATA_FOLDED_WINDOWS = "airflow-provider-cdc.foldedWindows"
#: A commit adding columns before a window's MERGE: that window's version (the window is not recorded).
COMMIT_METADATA_COLUMNS_ADDED_FOR = "airflow-provider-cdc.columnsAddedForWindow"
#: Commits read first when looking for the held window; the whole retained log only when needed.
_RECENT_COMMITS = 16


class LakeError(RuntimeError):
    """The lake refuses an apply (order, schema); the message names table and window."""


class WindowOrderError(LakeError, OlderWindowError):
    """A window older than the table's applied window that was never applied to it."""


def app_id_for(pipeline_id: str) -> str:
    """The Delta app transaction id of a pipeline (the id validated first)."""
    return APP_ID_PREFIX + validate_pipeline_id(pipeline_id)


def check_window_version(window_version: Any) -> int:
    """``window_version`` if it is a positive integer (a window end in µs), else ``ValueError``."""
    if isinstance(window_version, bool) or not isinstance(window_version, int) or window_version <= 0:
        raise ValueError(
            f"window_version must be a positive integer (window end in µs), got {window_version!r}"
        )
    return window_version


def commit_properties(app_id: str, window_version: int, *, snapshot: bool = False) -> CommitProperties:
    """The app transaction and commit metadata of a window's commit (``snapshot``: an initial load)."""
    metadata = {COMMIT_METADATA_APP_ID: app_id, COMMIT_METADATA_WINDOW_VERSION: str(window_version)}
    if snapshot:
        metadata[COMMIT_METADATA_SNAPSHOT] = "true"
    # No silent retry at a later version: a concurrent commit fails ours, and the apply starts
    # over from the new snapshot (delta-rs would otherwise re-commit a table creation as an
    # append, and does not treat an equal app transaction as a conflict).
    return CommitProperties(
        app_transactions=[Transaction(app_id, window_version)],
        custom_metadata=metadata,
        max_commit_retries=0,
    )


def held_window(dt: DeltaTable, app_id: str) -> int | None:
    """The last window version of ``app_id`` whose commit the table's data still holds.

    Delta keeps the newest app transaction version of each app id across a RESTORE, so after a
    restore to an older version ``transaction_version`` still names windows whose data is gone. The
    log tells: walking it from the newest commit, a RESTORE to version ``r`` undoes the commits
    between ``r`` and itself; the newest commit of ``app_id`` not undone is the held window. The
    newest commits are read first (usually the held window is among them), the whole retained log
    only when needed.
    """
    if dt.transaction_version(app_id) is None:
        return None
    ceiling: int | None = None
    for limit in (_RECENT_COMMITS, None):
        entries = dt.history(limit) if limit else dt.history()
        for entry in sorted(entries, key=lambda e: e.get("version", -1), reverse=True):
            version = entry.get("version")
            if not isinstance(version, int) or (ceiling is not None and version > ceiling):
                continue
            if entry.get("operation") == "RESTORE":
                restored = int((entry.get("operationParameters") or {}).get("version", version))
                ceiling = restored if ceiling is None else min(ceiling, restored)
            elif entry.get(COMMIT_METADATA_APP_ID) == app_id and entry.get(COMMIT_METADATA_WINDOW_VERSION):
                return int(entry[COMMIT_METADATA_WINDOW_VERSION])
        if limit is not None and len(entries) < limit:
            break  # that was the whole retained log
    # None of the app's commits is in the retained log: without a restore its version stands.
    return dt.transaction_version(app_id) if ceiling is None else None


def find_window_commit(
    dt: DeltaTable, app_id: str, window_version: int
) -> tuple[int | None, int | None, bool]:
    """Where the log accounts for an older window of ``app_id``.

    Returns the table version whose commit applied the window, the version of a snapshot load
    at or past the window (which covers it), and whether the retained log reaches version 0.
    """
    versions = []
    for entry in dt.history():
        version = entry.get("version")
        if isinstance(version, int):
            versions.append(version)
        if entry.get(COMMIT_METADATA_APP_ID) != app_id:
            continue
        committed = entry.get(COMMIT_METADATA_WINDOW_VERSION)
        if committed == str(window_version) or window_version in folded_windows(entry):
            return version, None, True
        if entry.get(COMMIT_METADATA_SNAPSHOT) == "true" and committed and int(committed) >= window_version:
            return None, version, True
    return None, None, bool(versions) and min(versions) == 0


def folded_windows(entry: dict[str, Any]) -> list[int]:
    """The windows a compaction's commit folded into the table (none for any other commit)."""
    recorded = entry.get(COMMIT_METADATA_FOLDED_WINDOWS)
    if not recorded:
        return []
    try:
        windows = json.loads(recorded)
    except (TypeError, ValueError):
        return []
    return [w for w in windows if isinstance(w, int)] if isinstance(windows, list) else []


def applied_window_detail(dt: DeltaTable, table: str, app_id: str, window_version: int) -> str | None:
    """Why the table already holds window ``window_version`` of ``app_id``, or ``None`` when the
    window is to be applied; a never applied window older than the held one is a
    :class:`WindowOrderError` (windows apply in order)."""
    applied = dt.transaction_version(app_id)
    if applied is None or window_version > applied:
        return None
    # A RESTORE keeps the app transaction versions of the commits it undoes: ask the log.
    applied = held_window(dt, app_id)
    if applied is None or window_version > applied:
        log.info("table %s: window %s was undone by a restore; applying it again", table, window_version)
        return None
    if window_version == applied:
        return f"window {window_version} is the table's last applied window"
    found, snapshot, complete = find_window_commit(dt, app_id, window_version)
    if found is not None:
        return f"window {window_version} was applied in table version {found}"
    if snapshot is not None:
        return f"window {window_version} is covered by the snapshot loaded in table version {snapshot}"
    if not complete:
        return (
            f"window {window_version} is older than the applied window {applied}; its commit is no "
            "longer in the retained log, so it is taken as applied"
        )
    raise WindowOrderError(
        f"Delta table {table!r}: window version {window_version} was never applied and is older than the "
        f"table's applied window version {applied} (app id {app_id!r}); windows must be applied in "
        "order, so this window cannot be applied any more"
    )
