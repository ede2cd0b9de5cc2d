"""Values the metastore stores and returns, their states, and the pure rules that govern them.

Nothing here touches a database: the rules (forward-only states, lineage readiness, drain checks,
name validation) are plain functions so they can be tested and reused without SQL.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from airflow_provider_cdc.core.identifiers import (
    MAX_PIPELINE_ID_LENGTH,
    validate_identifier,
    validate_pipeline_id,
)
from airflow_provider_cdc.core.timestamps import coerce_timestamp, from_micros, to_micros
from airflow_provider_cdc.core.window import Window

MAX_STREAM_LENGTH = 512
MAX_TOKEN_LENGTH = 1024
MAX_OWNER_LENGTH = 256
MAX_PIPELINE_LENGTH = MAX_PIPELINE_ID_LENGTH
MAX_TARGET_LENGTH = 32

_TARGET = re.compile(rf"^[a-z][a-z0-9_]{{0,{MAX_TARGET_LENGTH - 1}}}$")

_DATABASE_PATH_SEGMENT = re.compile(r"^[A-Za-z0-9_.:\-]+$")


class PartitionState(str, Enum):
    """Life of a change-stream partition: ``created`` → ``running`` → ``finished``."""

    CREATED = "created"
    RUNNING = "running"
    FINISHED = "finished"


class WindowState(str, Enum):
    """Life of a window: ``reading`` → ``applied``."""

    READING = "reading"
    APPLIED = "applied"


class WindowPartitionState(str, Enum):
    """A partition's reading within one window: ``pending`` → ``running`` → ``done``."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"

    def __str__(self) -> str:
        return self.value


_WINDOW_ORDER = {state: rank for rank, state in enumerate(WindowState)}


def is_forward_window_transition(expected: WindowState, new: WindowState) -> bool:
    """A window only moves forward (``reading`` → ``applied``)."""
    return _WINDOW_ORDER[new] > _WINDOW_ORDER[expected]


def window_state(value: WindowState | str, what: str = "window state") -> WindowState:
    """Parse a window state, naming the valid ones when ``value`` is not one."""
    try:
        return WindowState(value)
    except ValueError:
        valid = ", ".join(s.value for s in WindowState)
        raise ValueError(f"invalid {what} {value!r}: expected one of {valid}") from None


# --------------------------------------------------------------------------------------------------
# Validation of names and values that reach the database (always as bound parameters).


def is_stream_path_segment(segment: str) -> bool:
    """Whether ``segment`` may stand in a stream key's path (letters, digits, '_', '-', '.' or ':')."""
    return bool(_DATABASE_PATH_SEGMENT.match(segment))


def validate_stream(stream: object) -> str:
    """Validate a stream's qualified name ``{database_path}/{stream}`` (the path may be omitted)."""
    if not isinstance(stream, str) or not stream:
        raise ValueError(f"invalid change stream name {stream!r}: expected a non-empty string")
    if len(stream) > MAX_STREAM_LENGTH:
        raise ValueError(f"change stream name {stream[:40]!r}… is longer than {MAX_STREAM_LENGTH} characters")
    *path, name = stream.split("/")
    validate_identifier(name, "change stream")
    for segment in path:
        if not is_stream_path_segment(segment):
            raise ValueError(
                f"invalid database path in change stream name {stream!r}: segment {segment!r} must be "
                "non-empty letters, digits, '_', '-', '.' or ':'"
            )
    return stream


def validate_token(token: object, stream: str = "") -> str:
    """Validate a partition token: a non-empty printable string of at most 1024 characters."""
    where = f" of change stream {stream!r}" if stream else ""
    if not isinstance(token, str) or not token:
        raise ValueError(f"invalid partition token {token!r}{where}: expected a non-empty string")
    if len(token) > MAX_TOKEN_LENGTH or not token.isprintable():
        raise ValueError(
            f"invalid partition token {token[:40]!r}{where}: expected at most {MAX_TOKEN_LENGTH} "
            "printable characters"
        )
    return token


def validate_owner(owner: object) -> str:
    """Validate a lease owner name (a reader's identity)."""
    if not isinstance(owner, str) or not owner or len(owner) > MAX_OWNER_LENGTH or not owner.isprintable():
        raise ValueError(
            f"invalid lease owner {owner!r}: expected 1 to {MAX_OWNER_LENGTH} printable characters"
        )
    return owner


def validate_pipeline(pipeline: object) -> str:
    """Validate a pipeline id (:func:`~airflow_provider_cdc.core.identifiers.validate_pipeline_id`)."""
    return validate_pipeline_id(pipeline)


def validate_target(target: object) -> str:
    """Validate a target name (a registered target's key): a lowercase letter, then lowercase letters,
    digits or underscores, at most 32 in all."""
    if not isinstance(target, str) or not _TARGET.match(target):
        raise ValueError(
            f"invalid target {target!r}: expected a lowercase letter followed by up to "
            f"{MAX_TARGET_LENGTH - 1} lowercase letters, digits or underscores"
        )
    return target


_CLAIM_ID = re.compile(r"^[A-Za-z0-9]{1,32}$")


def validate_claim_id(claim_id: object) -> str | None:
    """A claim id names a directory: 1 to 32 letters or digits (None: no claim id)."""
    if claim_id is None:
        return None
    if not isinstance(claim_id, str) or not _CLAIM_ID.match(claim_id):
        raise ValueError(f"invalid claim id {claim_id!r}: expected 1 to 32 letters or digits")
    return claim_id


def lease_micros(lease_seconds: object) -> int:
    """Lease length in whole microseconds; must be positive."""
    if isinstance(lease_seconds, bool) or not isinstance(lease_seconds, (int, float)) or lease_seconds <= 0:
        raise ValueError(f"invalid lease_seconds {lease_seconds!r}: expected a positive number of seconds")
    return max(1, int(round(lease_seconds * 1_000_000)))


def validate_count(name: str, value: object) -> int | None:
    """A non-negative integer count, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"invalid {name} {value!r}: expected a non-negative integer")
    return value


def validate_transactions(value: object) -> float:
    """A non-negative, finite transaction count (fractional: a transaction spans several partitions)."""
    valid = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not valid or not math.isfinite(value) or value < 0:
        raise ValueError(f"invalid transactions {value!r}: expected a non-negative finite number")
    return float(value)


def timestamp_micros(value: datetime | str, what: str) -> int:
    """Microseconds of an aware datetime or RFC 3339 text, naming ``what`` when it is neither.

    Naive datetimes are refused: their zone is unknown.
    """
    if isinstance(value, datetime) and (value.tzinfo is None or value.utcoffset() is None):
        raise ValueError(f"invalid {what}: naive datetime {value.isoformat()} (expected timezone-aware UTC)")
    try:
        return to_micros(coerce_timestamp(value))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid {what}: {exc}") from None


# --------------------------------------------------------------------------------------------------
# Partitions.


@dataclass(frozen=True)
class PartitionSpec:
    """A partition to record: its token, the first commit timestamp it holds, and its parents."""

    token: str
    start_timestamp: datetime
    parent_tokens: tuple[str, ...] = ()
    heartbeat_ms: int | None = None


def _attr(obj: object, *names: str) -> object:
    for name in names:
        if isinstance(obj, Mapping):
            if name in obj:
                return obj[name]
        elif hasattr(obj, name):
            return getattr(obj, name)
    return None


def coerce_partition_spec(
    obj: object,
    stream: str,
    *,
    default_start: datetime | None = None,
    default_parent: str | None = None,
) -> PartitionSpec:
    """Build a validated ``PartitionSpec`` from a spec, a mapping, a child-partition record or a token.

    Accepted attribute/key names: ``token``; ``start_timestamp``; ``parent_tokens`` or
    ``parent_partition_tokens`` (``None`` entries, as the first query returns them, are dropped);
    ``heartbeat_ms``. A bare token string takes ``default_start`` and ``default_parent``.
    """
    if isinstance(obj, str):
        token, start, parents, heartbeat = obj, default_start, None, None
    else:
        token = _attr(obj, "token")
        start = _attr(obj, "start_timestamp") or default_start
        parents = _attr(obj, "parent_tokens", "parent_partition_tokens")
        heartbeat = _attr(obj, "heartbeat_ms", "heartbeat_milliseconds")
    token = validate_token(token, stream)
    if start is None:
        raise ValueError(f"partition token {token!r} of change stream {stream!r} has no start_timestamp")
    start_dt = from_micros(timestamp_micros(start, f"start_timestamp of partition token {token!r}"))
    if parents is None:
        parent_tokens: tuple[str, ...] = (default_parent,) if default_parent else ()
    elif isinstance(parents, (str, bytes)) or not isinstance(parents, Iterable):
        raise ValueError(f"parent tokens of partition token {token!r} must be a list, got {parents!r}")
    else:
        parent_tokens = tuple(dict.fromkeys(validate_token(p, stream) for p in parents if p is not None))
    if token in parent_tokens:
        raise ValueError(f"partition token {token!r} of change stream {stream!r} names itself as its parent")
    if heartbeat is not None and (
        isinstance(heartbeat, bool) or not isinstance(heartbeat, int) or heartbeat <= 0
    ):
        raise ValueError(f"invalid heartbeat_ms {heartbeat!r} of partition token {token!r}")
    return PartitionSpec(token, start_dt, parent_tokens, heartbeat)


def encode_tokens(tokens: Sequence[str]) -> str:
    """Parent tokens as compact JSON array text."""
    return json.dumps(list(tokens), separators=(",", ":"))


def decode_tokens(text: str | None) -> tuple[str, ...]:
    """Parent tokens from JSON array text."""
    return tuple(json.loads(text)) if text else ()


@dataclass(frozen=True)
class PartitionRecord:
    """A partition as the metastore holds it. Timestamps are aware UTC datetimes."""

    stream: str
    token: str
    parent_tokens: tuple[str, ...]
    start_timestamp: datetime
    end_timestamp: datetime | None
    state: PartitionState
    watermark: datetime
    heartbeat_ms: int | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    attempts: int
    record_count: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    progress_at: datetime | None = None

    @property
    def is_finished(self) -> bool:
        return self.state is PartitionState.FINISHED

    def is_alive_at(self, ts: datetime) -> bool:
        """The partition holds changes committed at ``ts``: start ≤ ts < end (end unknown = open)."""
        return self.start_timestamp <= ts and (self.end_timestamp is None or self.end_timestamp > ts)

    def is_drained_to(self, ts: datetime) -> bool:
        """Every change before ``ts`` that this partition holds has been read."""
        bound = ts if self.end_timestamp is None else min(ts, self.end_timestamp)
        return self.watermark >= bound


def parents_drained(partition: PartitionRecord, parents: Iterable[PartitionRecord]) -> bool:
    """Lineage rule: a partition may be read once every known parent is drained through its start."""
    return all(parent.watermark >= partition.start_timestamp for parent in parents)


def window_parents_to_wait_for(
    parent_tokens: Iterable[str], parent_ends_us: Mapping[str, int | None], window_start_us: int
) -> list[str]:
    """Lineage rule within a window: the parents whose reading in this window must be done first.

    ``parent_ends_us`` maps each parent recorded in the metastore to its end (None while it has
    not ended). A parent that ended at or before the window start was read by earlier windows; a
    parent the metastore does not know (initial partitions have none) holds nothing to wait for.
    Every other parent holds changes of this window that precede its child's.
    """
    waits = []
    for token in parent_tokens:
        if token not in parent_ends_us:
            continue
        end_us = parent_ends_us[token]
        if end_us is None or end_us > window_start_us:
            waits.append(token)
    return waits


@dataclass(frozen=True)
class WindowError:
    """The last failure of a step of a window, as the failing task recorded it."""

    #: the error's first lines (its type and message, credentials redacted)
    text: str
    #: the task instance that met it: ``{dag_id}/{run_id}/{task_id}/{map_index}`` (a reader's lease owner)
    task: str | None
    #: the task's try number (``None``: not known)
    try_number: int | None
    at: datetime

    @property
    def dag_id(self) -> str | None:
        """The DAG of :attr:`task` (``None``: no task recorded)."""
        return task_instance_parts(self.task)[0] if self.task else None

    @property
    def task_id(self) -> str | None:
        """The task id of :attr:`task`, with its map index when mapped (``read[1]``)."""
        if not self.task:
            return None
        _dag, _run, task, index = task_instance_parts(self.task)
        return task if index in ("", "-1") else f"{task}[{index}]"

    @property
    def run_id(self) -> str | None:
        return task_instance_parts(self.task)[1] if self.task else None


def task_instance_name(ti: Any) -> str:
    """The name of a running task instance: ``{dag_id}/{run_id}/{task_id}/{map_index}`` (the same across
    its tries; a reader's lease owner, the task that met a window's error)."""
    return f"{ti.dag_id}/{ti.run_id}/{ti.task_id}/{getattr(ti, 'map_index', -1)}"


def task_instance_parts(identity: str) -> tuple[str, str, str, str]:
    """``(dag_id, run_id, task_id, map_index)`` of a task instance named ``dag/run/task/map_index`` (a
    run id may hold ``/``; a name of another form is all task id)."""
    dag, _, rest = identity.partition("/")
    run, _, tail = rest.rpartition("/")
    run, _, task = run.rpartition("/") if run else ("", "", "")
    if not (dag and task):
        return "", "", identity, ""
    return dag, run, task, tail


@dataclass(frozen=True)
class WindowRecord:
    """A pipeline's window ``[start, end)`` as the metastore holds it."""

    pipeline: str
    stream: str
    start: datetime
    end: datetime
    state: WindowState
    attempt: int
    staging_uri: str | None
    change_set_uri: str | None
    record_count: int | None
    transaction_count: int | None
    key_count: int | None
    opened_at: datetime
    updated_at: datetime
    applied_at: datetime | None
    #: the last failure of a step of the window's current epoch (``None``: none recorded, or a later try
    #: of the same task succeeded, or the window was applied or opened again since)
    error: WindowError | None = None

    @property
    def window(self) -> Window:
        """The window's bounds as a domain ``Window``."""
        return Window(self.start, self.end)

    @property
    def window_id(self) -> str:
        """``{start_micros}-{end_micros}``, as in staging and change-set paths."""
        return self.window.window_id


@dataclass(frozen=True)
class WindowPartitionRecord:
    """One partition's reading within a window ``[window_start, window_end)`` of a stream.

    ``rows`` (staged change rows) and ``transactions`` (transactions completed in the partition,
    each counted ``1 / number_of_partitions_in_transaction``) are known once the item is ``done``.
    """

    stream: str
    window_start: datetime
    window_end: datetime
    token: str
    state: WindowPartitionState
    lease_owner: str | None
    lease_expires_at: datetime | None
    attempts: int
    rows: int | None
    transactions: float | None
    created_at: datetime
    updated_at: datetime
    done_at: datetime | None
    #: the claim whose reading is (or will be) the partition's output; its staged files, when done
    claim_id: str | None = None
    output_files: int | None = None

    @property
    def window(self) -> Window:
        """The window's bounds as a domain ``Window``."""
        return Window(self.window_start, self.window_end)

    @property
    def is_done(self) -> bool:
        return self.state is WindowPartitionState.DONE
