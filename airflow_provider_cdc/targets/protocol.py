"""The target protocol: what every target of a window's change set offers, declared once.

A target holds one table per source table and applies a window's change set to each, table by
table, idempotently and in window order:

* ``name`` is the target's key in the metastore (``cdc_window_tables`` and ``cdc_table_watermarks``
  are keyed by pipeline, target and table): ``delta``, ``bigquery``.
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
the source table; a target that stores it under another name (BigQuery's ``table_names``) reports that
name in its results.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from airflow_provider_cdc.changesets.reader import ChangeSetTable
    from airflow_provider_cdc.core.window import Window

Outcome = Literal["applied", "already_applied", "skipped"]
APPLIED: Outcome = "applied"
ALREADY_APPLIED: Outcome = "already_applied"
#: The change set held no rows for the table: nothing was written.
SKIPPED: Outcome = "skipped"
OUTCOMES: tuple[Outcome, ...] = (APPLIED, ALREADY_APPLIED, SKIPPED)


class OlderWindowError(RuntimeError):
    """A window older than the one a table holds, which the table never applied: refused, since
    applying it would undo later windows (the message names window, table and target)."""


@dataclass(frozen=True)
class TableApplyResult:
    """What applying one window to one table of a target did.

    ``window`` is the window end in µs; ``rows`` the change rows the apply took (0 when nothing was
    written); ``version`` the target's own version of the table that holds the window (a Delta table
    version; ``None`` for a target without versions); ``detail`` says why nothing was written.
    """

    target: str
    table: str
    window: int
    outcome: Outcome
    rows: int = 0
    version: int | None = None
    detail: str = ""

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {self.outcome!r}")

    def ledger_entry(self) -> tuple[int | None, int]:
        """The ledger's ``(target version, rows)`` of the table for the window."""
        return self.version, self.rows

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "table": self.table,
            "window": self.window,
            "outcome": self.outcome,
            "rows": self.rows,
            "version": self.version,
            "detail": self.detail,
        }

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
        return cls(
            str(value["target"]),
            str(value["table"]),
            int(value["window"]),
            value["outcome"],
            int(value.get("rows") or 0),
            None if version is None else int(version),
            str(value.get("detail") or ""),
        )


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
