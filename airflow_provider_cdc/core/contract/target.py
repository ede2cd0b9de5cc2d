"""The target protocol: what every target of a window's change set offers, declared once.

A target holds one table per source table and applies a window's change set to each, table by
table, idempotently and in window order:

* ``name`` is the target's key in the metastore (``cdc_window_tables`` and ``cdc_table_watermarks``
  are keyed by pipeline, target and table): the name it is registered under.
* ``applied_window(table, pipeline)`` is the end (µs) of the last window of ``pipeline`` the table
  holds, ``None`` when it holds none.
* ``apply_window(change_set, pipeline, window)`` applies one table's change set of one window. A
  table that already holds the window reports ``already_applied`` and changes nothing; a window older
  than the one the table holds, which the table never applied, is refused with
  :class:`OlderWindowError` naming window, table and target (windows apply in order).
* ``window_result(table, pipeline, window)`` is what the target records about a window the table
  holds (``None`` when it does not hold it): the commit records it in the ledger.
* ``apply_watermark(table, pipeline)``: every change committed before it is in the table.

Every target answers an apply with one :class:`TableApplyResult` per table. ``table`` arguments name
the source table; a target that stores it under another name (a renaming setting of its own) reports that
name in its results.

A target's apply step (an Airflow task) returns one :class:`TargetApplied` (as its ``to_dict``, an
XCom): the target, the window, its tables' results and what names each table as an asset and an
OpenLineage dataset (:class:`TableName`). The commit takes any number of them and hands each to its
target's :class:`TargetCommit` (found through the registry), which checks what the target must hold at
commit time and gives the results and apply watermarks the commit records under (pipeline, target,
table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from airflow_provider_cdc.core.timestamps import coerce_timestamp, format_timestamp

if TYPE_CHECKING:
    from airflow_provider_cdc.core.contract.change_set import ChangeSetTable
    from airflow_provider_cdc.core.window import Window

Outcome = Literal["applied", "already_applied", "skipped"]
APPLIED: Outcome = "applied"
ALREADY_APPLIED: Outcome = "already_applied"
#: The change set held no rows for the table: nothing was written.
SKIPPED: Outcome = "skipped"
OUTCOMES: tuple[Outcome, ...] = (APPLIED, ALREADY_APPLIED, SKIPPED)


class WindowNotHeldError(RuntimeError):
    """At commit time a table that must hold the window does not (the message names window, table and
    the step that must apply it)."""


class OlderWindowError(RuntimeError):
    """A window older than the one a table holds, which the table never applied: refused, since
    applying it would undo later windows (the message names window, table and target)."""


@dataclass(frozen=True)
class TableApplyResult:
    """What applying one window to one table of a target did.

    ``window`` is the window end in µs; ``rows`` the change rows the apply took (0 when nothing was
    written); ``version`` the target's own version of the table that holds the window (``None`` for
    a target without versions); ``detail`` says why nothing was written.
    ``reports_watermark`` says whether the target reported the table's apply ``watermark`` with the
    apply (a target that reports how far it has applied its appended changes); ``watermark``
    ``None`` then means the target has applied nothing to the table yet.
    """

    target: str
    table: str
    window: int
    outcome: Outcome
    rows: int = 0
    version: int | None = None
    detail: str = ""
    watermark: datetime | None = None
    reports_watermark: bool = False

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {self.outcome!r}")
        if self.watermark is not None and not self.reports_watermark:
            object.__setattr__(self, "reports_watermark", True)

    def ledger_entry(self) -> tuple[int | None, int]:
        """The ledger's ``(target version, rows)`` of the table for the window."""
        return self.version, self.rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; ``watermark`` (RFC 3339 or ``None``) only when the target reported it."""
        value: dict[str, Any] = {
            "target": self.target,
            "table": self.table,
            "window": self.window,
            "outcome": self.outcome,
            "rows": self.rows,
            "version": self.version,
            "detail": self.detail,
        }
        if self.reports_watermark:
            value["watermark"] = None if self.watermark is None else format_timestamp(self.watermark)
        return value

    @classmethod
    def from_dict(cls, value: Any) -> TableApplyResult:
        """A result from :meth:`to_dict` (an XCom); anything else fails naming what is wrong."""
        if isinstance(value, TableApplyResult):
            return value
        if not isinstance(value, dict):
            raise TypeError(f"a table apply result must be a mapping, got {type(value).__name__}")
        missing = [k for k in ("target", "table", "window", "outcome") if k not in value]
        if missing:
            raise ValueError(f"table apply result {value!r} lacks {missing}")
        version = value.get("version")
        mark = value.get("watermark")
        try:
            watermark = None if mark is None else coerce_timestamp(mark)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"table apply result {value!r}: no valid watermark ({exc})") from None
        return cls(
            str(value["target"]),
            str(value["table"]),
            int(value["window"]),
            value["outcome"],
            int(value.get("rows") or 0),
            None if version is None else int(version),
            str(value.get("detail") or ""),
            watermark,
            "watermark" in value,
        )


@dataclass(frozen=True)
class TableName:
    """What names a target table outside the provider: its Airflow asset ``uri`` (``None``: the table
    has no asset) and its OpenLineage dataset (``namespace``, ``name``)."""

    namespace: str
    name: str
    uri: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "uri": self.uri}

    @classmethod
    def from_dict(cls, value: Any) -> TableName:
        if isinstance(value, TableName):
            return value
        if not isinstance(value, Mapping) or "namespace" not in value or "name" not in value:
            raise ValueError(f"a table name must be a mapping with namespace and name, got {value!r}")
        uri = value.get("uri")
        return cls(str(value["namespace"]), str(value["name"]), None if uri is None else str(uri))


@dataclass(frozen=True)
class TargetApplied:
    """What one target's apply step did to one window: the apply step's return value (an XCom, as
    :meth:`to_dict`) and what the commit takes (``applied=[…]``).

    ``target`` is the registered target name, ``window`` the window end (µs), ``location`` where the
    target's tables live (a root, a dataset; ``None``: not named), ``tables`` one
    :class:`TableApplyResult` per table the step applied or found applied (it may be empty: the target
    then reads what it holds at commit time), ``names`` the :class:`TableName` of each table and
    ``details`` the target's own report of the step (JSON, shown to people, never read by the commit).
    """

    target: str
    window: int
    location: str | None = None
    tables: tuple[TableApplyResult, ...] = ()
    names: Mapping[str, TableName] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tables", tuple(self.tables))
        for result in self.tables:
            if result.target != self.target or result.window != self.window:
                raise ValueError(
                    f"the {self.target} step of window version {self.window} holds the {result.target} "
                    f"result of table {result.table!r} of window version {result.window}"
                )

    def watermarks(self) -> dict[str, datetime | None]:
        """Table → the apply watermark the target reported with the apply (``None``: nothing applied
        to it yet); tables whose watermark it did not report are left out."""
        return {r.table: r.watermark for r in self.tables if r.reports_watermark}

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "window": self.window,
            "location": self.location,
            "tables": [result.to_dict() for result in self.tables],
            "names": {table: name.to_dict() for table, name in sorted(self.names.items())},
            "details": dict(self.details),
        }

    @classmethod
    def from_dict(cls, value: Any) -> TargetApplied:
        """An apply step's output (:meth:`to_dict`); anything else fails naming what is wrong."""
        if isinstance(value, TargetApplied):
            return value
        if not isinstance(value, Mapping) or "target" not in value or "window" not in value:
            raise ValueError(
                "applied takes the target apply steps' outputs (each a mapping with 'target', 'window' and "
                f"'tables'), got {value!r:.200}"
            )
        tables = value.get("tables") or ()
        if not isinstance(tables, Sequence) or isinstance(tables, (str, bytes)):
            raise ValueError(f"the {value['target']} step's 'tables' must be a list, got {tables!r:.200}")
        names = value.get("names") or {}
        location = value.get("location")
        return cls(
            str(value["target"]),
            int(value["window"]),
            None if location is None else str(location),
            tuple(TableApplyResult.from_dict(result) for result in tables),
            {str(table): TableName.from_dict(name) for table, name in dict(names).items()},
            dict(value.get("details") or {}),
        )


@dataclass(frozen=True)
class CommitContext:
    """What a target's commit part is given: the pipeline, the window, the change set's tables with
    their rows (empty without a change set), the storage options of the step's connection and the
    tables whose apply watermark the metastore records for the target."""

    pipeline: str
    window: Window
    changed: Mapping[str, int | None]
    storage_options: Mapping[str, str]
    recorded: Sequence[str] = ()
    log: Any = None


class TargetCommit(Protocol):
    """A target's part of the commit (its kind's ``commit``), given its apply step's output.

    ``storage_errors`` are the errors of the target's storage (besides ``OSError``) that the commit
    reports as the storage being unavailable (retried)."""

    storage_errors: tuple[type[BaseException], ...]

    def window_results(self, applied: TargetApplied, context: CommitContext) -> list[TableApplyResult]:
        """The results the ledger records for the window, checked: a table that must hold the window
        and does not fails naming it and the fix. Called once, before the window is marked applied."""
        ...

    def apply_watermarks(self, applied: TargetApplied, context: CommitContext) -> dict[str, datetime | None]:
        """Table → its apply watermark after the window (``None``: the target has applied nothing to
        the table yet); the commit records each only forward and checks them against max_staleness."""
        ...

    def table_names(self, applied: TargetApplied, tables: Sequence[str]) -> dict[str, TableName]:
        """What names each of ``tables`` (assets, lineage); a table without a name is left out."""
        ...

    def lineage_columns(
        self, applied: TargetApplied, table: str, storage_options: Mapping[str, str]
    ) -> list[str] | None:
        """The table's columns copied one to one from its source table (``None``: not known)."""
        ...


def older_window_message(target: str, table: str, window: int, held: int, why: str = "") -> str:
    """The refusal of a window older than the table's (see :class:`OlderWindowError`)."""
    return (
        f"{target} table {table!r}: window {window} was never applied and is older than the table's "
        f"applied window {held}{why}; windows must be applied in order, so it is not applied"
    )


@runtime_checkable
class Target(Protocol):
    """A target of change sets (see the module docstring)."""

    name: str

    def applied_window(self, table: str, pipeline: str) -> int | None:
        """The end (µs) of the last window of ``pipeline`` the table holds (``None``: none)."""
        ...

    def apply_window(self, change_set: ChangeSetTable, pipeline: str, window: Window) -> TableApplyResult:
        """Apply one table's change set of ``window`` (idempotent, in window order)."""
        ...

    def window_result(self, table: str, pipeline: str, window: Window) -> TableApplyResult | None:
        """What the target records about ``window`` in the table (``None``: it does not hold it)."""
        ...

    def apply_watermark(self, table: str, pipeline: str) -> datetime | None:
        """Every change committed before this time is in the table (``None``: nothing applied yet)."""
        ...
