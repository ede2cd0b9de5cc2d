"""What every source must do, checked through a small adapter (:class:`SourceUnderTest`).

A source reads a bounded window ``[start, end)`` of changes into staging, one folder per claim of a
unit (a change-stream partition, a table batch), and only the claim that completes a unit is
recorded. The checks:

- :func:`check_reads_stage_the_history`: a seeded window read fresh, and read again after a reader
  that claimed a unit, staged part of it and died (its lease then lapses on the metastore's clock,
  moved by the rescuing reader's waits), stages the same changes, equal to the committed history;
- :func:`check_sequence_numbers_order_each_key`: change sequence numbers order each key's changes as
  the history committed them, strictly increasing per key;
- :func:`check_only_recorded_claims_are_read`: files of unrecorded claims, unknown units and
  unfinished writes in the window's staging are never read;
- :func:`check_a_refused_window_is_named_and_loses_nothing`: a window the source refuses (past its
  retention, or late rows) fails naming the window, stages nothing and is not readable as empty.

:class:`SourceConformanceChecks` runs the four as tests; the adapters share the metastore on a clock
(:func:`clocked_metastore`, :func:`on_metastore`), the staging as the merge reads it
(:func:`merge_input_rows`, :func:`typed_change`) and, for sources that open a window by epoch,
:class:`EpochSource`.

Changes are compared as neutral dicts: ``table``, ``key`` (column → value), ``operation``,
``values`` (column → value) and, for staged rows, ``change_sequence_number``.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_provider_cdc._errors import CdcError
from airflow_provider_cdc.core.contract.locations import CLAIM_DIR_PREFIX, PARTITION_DIR_PREFIX
from airflow_provider_cdc.core.sequence_number import ChangeSequenceNumber
from airflow_provider_cdc.core.window import Window
from support.clock import ManualClock
from support.staged_changes import canonical

#: The pipeline the adapters open their windows for.
PIPELINE = "conformance"
#: Rows per staged file while a reader is killed: a claim's second file is where it dies, so the
#: first unit of two rows or more is staged in part.
KILL_ROWS_PER_FILE = 1
#: The lease (seconds on the metastore's clock) of the killed reader and the rescuer, and the
#: rescuer's wait between claims: it claims the dead reader's unit after a few waits.
LEASE_SECONDS = 60.0
POLL_SECONDS = 15.0


@dataclass(frozen=True)
class Opened:
    """A window's opening: its epoch and the units it must read."""

    epoch: int
    units: Sequence[str]


class SourceUnderTest(Protocol):
    """A source as the checks drive it.

    ``lease_clock`` is the clock (microseconds) the source's claims and leases run on; the checks move
    it instead of waiting. ``read`` passes ``reader_kwargs`` to the source's claimed reader
    (``lease_seconds``, ``poll_seconds``, ``sleep``, ``rows_per_file``, ``filesystem``).
    """

    name: str
    lease_clock: ManualClock

    def window(self) -> Window:
        """The seeded window: it holds changes."""
        ...

    def open(self, window: Window) -> Opened: ...

    def read(self, window: Window, owner: str, **reader_kwargs: Any) -> Any: ...

    def staged(self, window: Window) -> list[dict[str, Any]]:
        """What the merge reads of the window (the recorded claims), as neutral dicts; fails when the
        window has no recorded units."""
        ...

    def staging_location(self, window: Window) -> Path:
        """The window's staging folder (``partition=…/claim=…`` folders inside)."""
        ...

    def history(self, window: Window) -> list[dict[str, Any]]:
        """The changes the source committed in the window, in commit order, as neutral dicts."""
        ...

    def retention_error(self) -> Window | None:
        """A window the source must refuse (older than its retention, or after late rows), prepared
        so that opening and reading it fails; ``None`` when the source refuses none."""
        ...


class WindowNotNamedError(AssertionError):
    """A refused window's error does not name the window."""


def change_text(change: Mapping[str, Any]) -> str:
    """A change without its sequence number, as comparable text."""
    return canonical([change["table"], change["key"], change["operation"], change["values"]])


def _key_text(change: Mapping[str, Any]) -> str:
    return canonical([change["table"], change["key"]])


def _changes(changes: Sequence[Mapping[str, Any]]) -> Counter:
    return Counter(change_text(change) for change in changes)


def _staged_texts(changes: Sequence[Mapping[str, Any]]) -> Counter:
    return Counter(canonical(dict(change)) for change in changes)


def describe_difference(staged: Counter, expected: Counter) -> str:
    """What differs between two multisets of changes, for an assertion message."""
    extra, missing = staged - expected, expected - staged
    return (
        f"{sum(extra.values())} staged but not committed (or staged twice), e.g. {list(extra)[:2]}; "
        f"{sum(missing.values())} committed but not staged, e.g. {list(missing)[:2]}"
    )


def assert_stages_history(
    staged: Sequence[Mapping[str, Any]], history: Sequence[Mapping[str, Any]], what: str
) -> None:
    """Every committed change staged once, nothing else."""
    found, expected = _changes(staged), _changes(history)
    assert found == expected, f"{what}: {describe_difference(found, expected)}"


# ----- a reader that dies mid-unit ------------------------------------------------------------------
class ReaderKilled(BaseException):
    """The reader died (nothing of it handles this: no cleanup, no release of its claim)."""


class _KillingHandler(pafs.FileSystemHandler):
    """The local file system, seen as an object store (files written whole, folders implicit), until a
    claim starts writing its second staged file: the reader dies there, its first file staged."""

    def __init__(self, state: KillSwitch) -> None:
        self.fs = pafs.LocalFileSystem()
        self.state = state

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def __hash__(self) -> int:
        return id(self)

    def get_type_name(self) -> str:
        return "killing"

    def normalize_path(self, path: str) -> str:
        return self.fs.normalize_path(path)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(paths)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(selector)

    def create_dir(self, path: str, recursive: bool) -> None:
        self.fs.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.fs.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise PermissionError("the staging root is never emptied")

    def delete_file(self, path: str) -> None:
        self.fs.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self.fs.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self.fs.copy_file(src, dest)

    def open_input_stream(self, path: str) -> Any:
        return self.fs.open_input_stream(path)

    def open_input_file(self, path: str) -> Any:
        return self.fs.open_input_file(path)

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        if Path(path).name == "part-00001.parquet" and Path(path).parent.name.startswith(CLAIM_DIR_PREFIX):
            self.state.killed_at = Path(path)
            raise ReaderKilled(f"reader killed while staging {path}")
        self.fs.create_dir(str(Path(path).parent), recursive=True)  # as on an object store
        return self.fs.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        return self.fs.open_append_stream(path, metadata=metadata)


@dataclass
class KillSwitch:
    """A staging file system on which a reader dies when a claim starts its second file."""

    killed_at: Path | None = None
    filesystem: pafs.FileSystem = field(init=False)

    def __post_init__(self) -> None:
        self.filesystem = pafs.PyFileSystem(_KillingHandler(self))


def _part_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("part-*.parquet")) if folder.exists() else []


# ----- the checks ---------------------------------------------------------------------------------
def check_reads_stage_the_history(source: SourceUnderTest) -> None:
    """A fresh read and a read after a killed reader stage the same changes: the committed history."""
    window = source.window()
    history = source.history(window)
    assert history, f"{source.name}: the seeded window {window} holds no changes"
    first = source.open(window)
    assert first.units, f"{source.name}: opening {window} found no units"
    source.read(window, "reader-fresh")
    fresh = source.staged(window)
    assert_stages_history(fresh, history, f"{source.name}, a fresh read of {window}")

    again = source.open(window)
    assert again.epoch > first.epoch, f"{source.name}: opening {window} again did not start a new epoch"
    kill = KillSwitch()
    try:
        source.read(
            window,
            "reader-killed",
            filesystem=kill.filesystem,
            rows_per_file=KILL_ROWS_PER_FILE,
            lease_seconds=LEASE_SECONDS,
        )
    except ReaderKilled:
        pass
    assert kill.killed_at is not None, f"{source.name}: the reader finished {window} before it was killed"
    partial = _part_files(kill.killed_at.parent)
    assert partial, f"{source.name}: the killed reader staged nothing of its unit ({kill.killed_at.parent})"

    clock = source.lease_clock
    before = clock()
    source.read(
        window,
        "reader-rescuer",
        lease_seconds=LEASE_SECONDS,
        poll_seconds=POLL_SECONDS,
        sleep=clock.advance,
    )
    assert clock() - before >= LEASE_SECONDS * 1_000_000, (
        f"{source.name}: the rescuer read the killed reader's unit before its lease lapsed"
    )
    rescued = source.staged(window)
    assert_stages_history(rescued, history, f"{source.name}, {window} read after a killed reader")
    assert _staged_texts(rescued) == _staged_texts(fresh), (
        f"{source.name}: the read after a killed reader staged other rows than the fresh read: "
        + describe_difference(_staged_texts(rescued), _staged_texts(fresh))
    )


def check_sequence_numbers_order_each_key(source: SourceUnderTest) -> None:
    """Each key's staged changes, ordered by change sequence number (strictly increasing), are its
    committed changes in commit order."""
    window = source.window()
    source.open(window)
    source.read(window, "reader-0")
    staged = source.staged(window)
    committed: dict[str, list[str]] = defaultdict(list)
    for change in source.history(window):
        committed[_key_text(change)].append(change_text(change))
    by_key: dict[str, list[tuple[ChangeSequenceNumber, str]]] = defaultdict(list)
    for change in staged:
        number = ChangeSequenceNumber.parse(change["change_sequence_number"])
        by_key[_key_text(change)].append((number, change_text(change)))
    assert set(by_key) == set(committed), (
        f"{source.name}: keys staged and keys committed in {window} differ: "
        f"{sorted(set(by_key) ^ set(committed))[:3]}"
    )
    for key, changes in by_key.items():
        changes.sort(key=lambda item: item[0])
        numbers = [number for number, _ in changes]
        ties = [str(a) for a, b in zip(numbers, numbers[1:], strict=False) if a == b]
        assert not ties, f"{source.name}: key {key} has changes sharing sequence number(s) {ties}"
        assert [text for _, text in changes] == committed[key], (
            f"{source.name}: sequence numbers order the changes of key {key} otherwise than committed:\n"
            f"  by sequence number: {[text for _, text in changes]}\n  committed: {committed[key]}"
        )


def check_only_recorded_claims_are_read(source: SourceUnderTest) -> None:
    """Files of unrecorded claims (a copy of every claim's output), of a unit the window does not have,
    of an unfinished write and loose in a unit's folder are never read."""
    window = source.window()
    source.open(window)
    source.read(window, "reader-0")
    before = source.staged(window)
    folder = source.staging_location(window)
    pattern = f"{PARTITION_DIR_PREFIX}*/{CLAIM_DIR_PREFIX}*"
    claims = sorted(path for path in folder.glob(pattern) if path.is_dir())
    assert any(_part_files(claim) for claim in claims), f"{source.name}: {window} staged no files"
    visible = sum(pq.read_metadata(path).num_rows for path in _part_files(folder))
    for claim in claims:  # a reader that lost its lease staged the unit again under its own claim
        if _part_files(claim):
            shutil.copytree(claim, claim.parent / f"{CLAIM_DIR_PREFIX}{uuid.uuid4().hex}")
    sample = next(path for claim in claims for path in _part_files(claim))
    unknown = (
        folder / f"{PARTITION_DIR_PREFIX}{uuid.uuid4().hex[:16]}" / (f"{CLAIM_DIR_PREFIX}{uuid.uuid4().hex}")
    )
    unknown.mkdir(parents=True)
    shutil.copy(sample, unknown / "part-00000.parquet")  # a unit the window does not have
    shutil.copy(sample, sample.parent.parent / "part-00000.parquet")  # loose in a unit's folder
    shutil.copy(sample, sample.parent / ".part-00099.parquet.tmp")  # an unfinished write
    junk = sum(pq.read_metadata(path).num_rows for path in _part_files(folder)) - visible
    assert junk > 0, f"{source.name}: no junk rows were staged beside {window}'s output"
    after = source.staged(window)
    assert _staged_texts(after) == _staged_texts(before), (
        f"{source.name}: files no recorded claim staged were read: "
        + describe_difference(_staged_texts(after), _staged_texts(before))
    )


def _names(message: str, window: Window) -> bool:
    from airflow_provider_cdc.core.timestamps import format_timestamp

    bounds = format_timestamp(window.start) in message and format_timestamp(window.end) in message
    return window.window_id in message or str(window) in message or bounds


def check_a_refused_window_is_named_and_loses_nothing(source: SourceUnderTest) -> CdcError | None:
    """A window the source refuses fails with the provider's error naming the window; nothing of it is
    staged and it has no recorded units (the merge refuses it instead of reading it as empty).
    Returns the error (``None``: the source refuses no window)."""
    window = source.retention_error()
    if window is None:
        return None
    error: CdcError | None = None
    try:
        source.open(window)
        source.read(window, "reader-0")
    except CdcError as exc:
        error = exc
    assert error is not None, f"{source.name}: {window} was opened and read; it must be refused"
    staged_files = _part_files(source.staging_location(window))
    assert not staged_files, f"{source.name}: the refused {window} staged {staged_files[:2]}"
    try:
        rows = source.staged(window)
    except Exception:  # the merge's input check refuses a window without recorded units
        rows = None
    assert rows is None, f"{source.name}: the refused {window} reads as {len(rows)} staged change(s)"
    message = str(error)
    if not _names(message, window):
        raise WindowNotNamedError(
            f"{source.name}: the error refusing {window} (id {window.window_id}) does not name it: {message}"
        )
    return error


# ----- what the adapters share ------------------------------------------------------------------------
Hook = TypeVar("Hook")


def clocked_metastore(url: str, clock: ManualClock) -> Any:
    """A metastore at ``url`` (schema made) whose leases run on ``clock``."""
    from airflow_provider_cdc.metastore import Metastore

    store = Metastore(url, clock=clock)
    store.ensure_schema()
    return store


def on_metastore(hook_class: type[Hook], store: Any) -> type[Hook]:
    """``hook_class`` with ``store`` as its metastore."""

    class Clocked(hook_class):  # type: ignore[misc, valid-type]
        @property
        def metastore(self) -> Any:
            return store

    return Clocked


def merge_input_rows(source_key: str, location: Path, window: Window) -> list[dict[str, Any]]:
    """The window's staged rows the merge reads: each recorded unit's recorded files."""
    from airflow_provider_cdc.hooks.pipeline import CdcPipelineHook
    from airflow_provider_cdc.merge.input import check_staged_units

    units = CdcPipelineHook().merge_input(source_key, window).units
    checked = check_staged_units(str(location), window, units)
    return [row for unit in checked for path in unit.files for row in pq.read_table(path).to_pylist()]


def typed_change(row: Mapping[str, Any]) -> dict[str, Any]:
    """A staged row as a neutral change, its key and image decoded by the row's column types."""
    from airflow_provider_cdc.core.types import decode_value, parse_logical_type

    types = {
        c["name"]: parse_logical_type(c["type"], c["name"]) for c in json.loads(row["column_types_json"])
    }

    def decode(text: str) -> dict[str, Any]:
        return {name: decode_value(types[name], value, name) for name, value in json.loads(text).items()}

    return {
        "table": row["table_name"],
        "key": decode(row["keys_json"]),
        "operation": row["operation"],
        "values": decode(row["after_json"]),
        "change_sequence_number": row["change_sequence_number"],
    }


@dataclass
class EpochSource:
    """An adapter of a source whose hook opens a window's epoch (``open_window_epoch``) and stages it under
    its ``staging_folder``; :meth:`history`, :meth:`window` and :meth:`retention_error` are the source's."""

    name: str
    hook: Any
    root: Path
    lease_clock: ManualClock

    def open(self, window: Window) -> Opened:
        epoch, units = self.hook.open_window_epoch(PIPELINE, window, str(self.root), "opener")
        return Opened(epoch, units)

    def read(self, window: Window, owner: str, **reader_kwargs: Any) -> Any:
        return self.hook.read_window(window, str(self.root), owner, **reader_kwargs)

    def staging_location(self, window: Window) -> Path:
        return self.root / self.hook.staging_folder / window.window_id

    def staged(self, window: Window) -> list[dict[str, Any]]:
        rows = merge_input_rows(self.hook.source_key, self.staging_location(window), window)
        return [self.change(row) for row in rows]

    def change(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """A staged row as a neutral change."""
        return typed_change(row)


class SourceConformanceChecks:
    """The checks as tests, for a test module whose ``source`` fixture yields a :class:`SourceUnderTest`.

    A subclass names the provider error its source refuses a window with (:attr:`refused_with`, or
    :meth:`refusal` when it differs by source)."""

    refused_with = ""

    def refusal(self, source: SourceUnderTest) -> str:
        """The name of the error ``source`` refuses its refused window with."""
        return self.refused_with

    def test_a_window_read_fresh_and_after_a_killed_reader_stages_the_history(
        self, source: SourceUnderTest
    ) -> None:
        check_reads_stage_the_history(source)

    def test_sequence_numbers_order_each_keys_changes_as_committed(self, source: SourceUnderTest) -> None:
        check_sequence_numbers_order_each_key(source)

    def test_only_recorded_claims_are_read(self, source: SourceUnderTest) -> None:
        check_only_recorded_claims_are_read(source)

    def test_a_refused_window_is_named_and_loses_nothing(self, source: SourceUnderTest) -> None:
        error = check_a_refused_window_is_named_and_loses_nothing(source)
        assert type(error).__name__ == self.refusal(source), f"{source.name}: refused with {error!r}"
