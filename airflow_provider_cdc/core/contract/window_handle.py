"""The window handle: what opening a window hands to the steps after it.

The open step of a source returns a :class:`WindowHandle` as its return value (and pushes it as the XCom
``window``): the pipeline, the source's metastore key, the window, the opening's epoch and where the window
is staged, decided once by the open step (the source hook's rule). Later steps take the handle whole
(``window=open_window.output``) instead of deriving any of it from strings.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_cdc.core.contract.locations import WindowLocations, staging_folder
from airflow_provider_cdc.core.contract.staged_rows import COMMIT_TIME, WINDOW_BASES
from airflow_provider_cdc.core.timestamps import format_timestamp, parse_timestamp
from airflow_provider_cdc.core.window import Window

__all__ = ["WINDOW_XCOM_KEY", "WindowHandle", "staging_folder"]

#: The XCom key under which an open operator pushes its window handle (as :meth:`WindowHandle.to_dict`).
WINDOW_XCOM_KEY = "window"

_FIELDS = ("pipeline", "source_key", "window_start", "window_end", "staging_root", "epoch", "window_basis")
#: Keys of :meth:`WindowHandle.to_dict` that a handle's dict may lack (the defaults apply).
_OPTIONAL = ("window_basis", "staging_location")


@dataclass(frozen=True)
class WindowHandle:
    """One opening of a window of a source.

    :param pipeline: the pipeline id.
    :param source_key: the source's key in the metastore (``projects/…/databases/<db>/<stream>``).
    :param window: the window ``[start, end)``.
    :param staging_root: the root the window is staged under.
    :param epoch: the opening's epoch (``None``: the opening recorded none).
    :param window_basis: which staged rows are the window's (the merge's ``window_basis``): those
        committed in it (``commit_time``) or every row staged for it (``arrival``).
    :param staging_location: the folder of the window's staged rows, as the open step decided it (its
        source hook's rule); default ``{staging_root}/{staging_folder(source_key)}/{window_id}``.
    """

    pipeline: str
    source_key: str
    window: Window
    staging_root: str
    epoch: int | None = None
    window_basis: str = COMMIT_TIME
    staging_location: str = ""

    def __post_init__(self) -> None:
        if self.window_basis not in WINDOW_BASES:
            raise ValueError(f"window_basis must be one of {list(WINDOW_BASES)}, got {self.window_basis!r}")
        if not self.pipeline:
            raise ValueError("a window handle names its pipeline")
        if not str(self.source_key or "").strip():
            raise ValueError("a window handle names its source (its metastore key)")
        if self.epoch is not None and (isinstance(self.epoch, bool) or int(self.epoch) < 1):
            raise ValueError(f"epoch must be a positive integer, got {self.epoch!r}")
        location = str(self.staging_location or "").strip().rstrip("/")
        if not location:
            roots = WindowLocations(staging_root=self.staging_root)
            location = roots.staging_of(self.source_key, self.window)
        object.__setattr__(self, "staging_location", location)

    @property
    def window_id(self) -> str:
        return self.window.window_id

    def to_dict(self) -> dict[str, Any]:
        """JSON values (an XCom, the open step's return value): the fields, the window as RFC 3339 text,
        plus the derived ``window_id`` for readers of the XCom."""
        return {
            "pipeline": self.pipeline,
            "source_key": self.source_key,
            "window_start": format_timestamp(self.window.start),
            "window_end": format_timestamp(self.window.end),
            "staging_root": self.staging_root,
            "epoch": self.epoch,
            "window_basis": self.window_basis,
            "window_id": self.window_id,
            "staging_location": self.staging_location,
        }

    @staticmethod
    def xcom_fields() -> tuple[str, ...]:
        """The keys of :meth:`to_dict`."""
        return (*_FIELDS, "staging_location", "window_id")

    @classmethod
    def of(cls, value: WindowHandle | Mapping[str, Any] | str) -> WindowHandle:
        """The handle ``value`` is: a handle, :meth:`to_dict`'s mapping or its JSON text."""
        return value if isinstance(value, WindowHandle) else cls.from_dict(value)

    @classmethod
    def from_dict(cls, value: Mapping[str, Any] | str) -> WindowHandle:
        """The handle of :meth:`to_dict`'s mapping, or of its text (a rendered template: JSON, or the
        mapping's Python form, as ``{{ ti.xcom_pull(…) }}`` renders it). A mapping without
        ``staging_location`` or ``window_basis`` takes their defaults."""
        if isinstance(value, str):
            value = _parsed_text(value)
        if not isinstance(value, Mapping):
            raise TypeError(f"a window handle is a mapping, got {type(value).__name__}")
        missing = [name for name in _FIELDS if name not in value and name not in _OPTIONAL]
        if missing:
            raise ValueError(f"a window handle lacks {missing}")
        handle = cls(
            pipeline=str(value["pipeline"]),
            source_key=str(value["source_key"]),
            window=Window(parse_timestamp(value["window_start"]), parse_timestamp(value["window_end"])),
            staging_root=str(value["staging_root"]),
            epoch=None if value["epoch"] is None else int(value["epoch"]),
            window_basis=str(value.get("window_basis") or COMMIT_TIME),
            staging_location=str(value.get("staging_location") or ""),
        )
        if "window_id" in value and value["window_id"] != handle.window_id:
            raise ValueError(
                f"window handle window_id {value['window_id']!r} does not match its window "
                f"({handle.window_id!r})"
            )
        return handle


def _parsed_text(text: str) -> Any:
    """A rendered template's value: JSON text, or a Python literal (a dict rendered by Jinja)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        problem = f"a window handle's text is neither JSON nor a mapping, got {text[:200]!r}"
        raise ValueError(problem) from None
