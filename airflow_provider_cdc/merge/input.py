"""The merge's input: each unit of a window (a change-stream partition or a table batch) as its reader
recorded it when it completed it, and the check that the staging holds exactly that.

A reader completes a unit under a claim and records the claim, the number of files it staged
(``part-00000.parquet`` … in the claim's folder) and their rows (``cdc_window_partitions``). Before
anything is written the merge checks every unit's claim folder against that record, from the
Parquet footers only: a missing folder or file, or another row count, fails naming the window, the
unit, the claim and what is missing. Imports only pyarrow, the window contract and
:mod:`airflow_provider_cdc.filesystems` (the merge job ships it to Spark).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_provider_cdc.core.contract.locations import claim_folder
from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.filesystems import join, resolve

#: Footers read at once (object stores answer each with one small ranged read).
FOOTER_THREADS = 8
#: Units named in one error message; the rest are counted.
UNITS_SHOWN = 5


class StagedInputError(RuntimeError):
    """The staging does not hold what the readers recorded; nothing was written."""


def part_name(index: int) -> str:
    """The name of a claim's ``index``-th staged file, as the staging writer numbers them."""
    return f"part-{index:05d}.parquet"


@dataclass(frozen=True)
class StagedUnit:
    """One unit of a window as recorded at its completion.

    :param key: the unit's folder key (``partition={key}``).
    :param claim: the claim whose output is the unit's.
    :param files: the files the claim staged (``None``: not recorded, every file of the folder).
    :param rows: the rows in them (``None``: not recorded).
    :param name: the unit as users know it (the partition token or the table batch).
    """

    key: str
    claim: str
    files: int | None = None
    rows: int | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        for field, value in (("key", self.key), ("claim", self.claim)):
            if not (isinstance(value, str) and value.isascii() and value.isalnum()):
                raise ValueError(f"staged unit {field} must be letters and digits, got {value!r}")
        for field, count in (("files", self.files), ("rows", self.rows)):
            if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
                raise ValueError(f"staged unit {field} must be a non-negative integer, got {count!r}")

    @property
    def label(self) -> str:
        where = (
            f"partition key {self.key}" if self.name is None else f"{self.name} (partition key {self.key})"
        )
        return f"{where}, claim {self.claim}"

    def compact(self) -> list[str | int | None]:
        """``[claim, files, rows]``: the unit on the merge job's command line (keyed by :attr:`key`)."""
        return [self.claim, self.files, self.rows]


def units_json(units: Sequence[StagedUnit]) -> str:
    """The ``--staged-units`` argument: ``{key: [claim, files, rows]}``."""
    return json.dumps({unit.key: unit.compact() for unit in units}, sort_keys=True, separators=(",", ":"))


def parse_units(text: str) -> list[StagedUnit]:
    """Units from :func:`units_json` text; ``ValueError`` naming what is wrong."""
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ValueError(f"not JSON: {error}") from None
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object of partition keys to [claim, files, rows]")
    units = []
    for key, entry in sorted(value.items()):
        if not (isinstance(entry, list) and len(entry) == 3):
            raise ValueError(f"partition key {key!r}: expected [claim, files, rows], got {entry!r}")
        units.append(StagedUnit(key, entry[0], entry[1], entry[2]))
    return units


@dataclass(frozen=True)
class CheckedUnit:
    """A unit whose staged files were found as recorded: their locations (under the staging URI) and rows."""

    unit: StagedUnit
    files: tuple[str, ...]
    rows: int


def _problem(
    unit: StagedUnit,
    names: list[str],
    counts: Mapping[str, int],
    unreadable: Mapping[str, str],
    folder_found: bool = True,
) -> str | None:
    """What the unit's claim folder lacks against its record (``names``: its part files)."""
    if unreadable:
        name, error = sorted(unreadable.items())[0]
        return f"recorded {unit.files} file(s) with {unit.rows} row(s); file {name} cannot be read ({error})"
    if unit.files is not None:
        expected = [part_name(index) for index in range(unit.files)]
        missing = [name for name in expected if name not in names]
        if missing:
            shown = ", ".join(missing[:UNITS_SHOWN]) + (
                f" and {len(missing) - UNITS_SHOWN} more" if len(missing) > UNITS_SHOWN else ""
            )
            folder = "" if folder_found else " (its claim folder is missing)"
            return f"recorded {unit.files} file(s) with {unit.rows} row(s); missing file(s) {shown}{folder}"
    rows = sum(counts.values())
    if unit.rows is not None and rows != unit.rows:
        return f"recorded {unit.rows} row(s) in {len(counts)} file(s); the files hold {rows}"
    return None


def check_staged_units(
    staging: str,
    window: Window,
    units: Sequence[StagedUnit],
    storage_options: Mapping[str, str] | None = None,
) -> list[CheckedUnit]:
    """Check every unit's claim folder under the window's staging folder ``staging`` against its record.

    Lists each claim folder and reads the footers of the recorded files (``part-00000.parquet`` up to
    the recorded count; without a recorded count, every part file of the folder). Returns the files
    to read; raises :class:`StagedInputError` naming the window and every unit that differs.
    """
    filesystem, base = resolve(staging, storage_options)

    def inspect(unit: StagedUnit) -> tuple[CheckedUnit, str | None]:
        folder = join(base, claim_folder("", unit.key, unit.claim).lstrip("/"))
        found = filesystem.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
        names = sorted(
            info.base_name
            for info in found
            if info.type == pafs.FileType.File
            and info.base_name.startswith("part-")
            and info.base_name.endswith(".parquet")
        )
        wanted = [part_name(i) for i in range(unit.files)] if unit.files is not None else names
        counts: dict[str, int] = {}
        unreadable: dict[str, str] = {}
        for name in wanted:
            if name in names:
                try:
                    metadata = pq.read_metadata(join(folder, name), filesystem=filesystem)
                except (OSError, pa.ArrowException) as error:
                    lines = str(error).strip().splitlines()
                    unreadable[name] = f"{type(error).__name__}: {lines[0] if lines else ''}"
                    continue
                lacking = [c for c in STAGED_CHANGE_COLUMNS if c not in set(metadata.schema.names)]
                if lacking:
                    unreadable[name] = (
                        f"it lacks the staged change column(s) {', '.join(lacking)} "
                        "(staged by a version of the provider with other columns)"
                    )
                else:
                    counts[name] = metadata.num_rows
        uri = claim_folder(staging, unit.key, unit.claim)
        checked = CheckedUnit(unit, tuple(f"{uri}/{name}" for name in wanted), sum(counts.values()))
        return checked, _problem(unit, names, counts, unreadable, bool(found))

    with ThreadPoolExecutor(FOOTER_THREADS) as pool:
        results = list(pool.map(inspect, units))
    problems = [f"{checked.unit.label}: {problem}" for checked, problem in results if problem is not None]
    if problems:
        more = len(problems) - UNITS_SHOWN
        raise StagedInputError(
            f"window {window}: the staging at {staging} does not hold what the readers recorded for "
            f"{len(problems)} of {len(units)} unit(s): "
            + "; ".join(problems[:UNITS_SHOWN])
            + (f"; and {more} more" if more > 0 else "")
            + ". Nothing was written; clear the window's run (open, read, merge) to read it again"
        )
    return [checked for checked, _ in results]
