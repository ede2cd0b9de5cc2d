"""The arguments every window step takes: the window's bounds and the pipeline's locations."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from airflow_provider_cdc._errors import InvalidSettingError, require_absolute
from airflow_provider_cdc.core.contract.locations import PIPELINE_ROOTS, WindowLocations
from airflow_provider_cdc.core.timestamps import coerce_timestamp, format_timestamp
from airflow_provider_cdc.core.window import Window

#: The run's data interval: the default window of every step.
WINDOW_START = "{{ data_interval_start }}"
WINDOW_END = "{{ data_interval_end }}"


def known_roots() -> list[str]:
    """The roots a ``locations`` argument may name: the pipeline's own and each registered target's."""
    from airflow_provider_cdc.plugins import location_fields

    return [*PIPELINE_ROOTS, *location_fields()]


def window_of(start: Any, end: Any) -> Window:
    """The window of rendered ``window_start``/``window_end`` values (RFC 3339 text or datetimes); a
    value that is not one fails the task without retries (``InvalidSettingError``)."""
    bounds = []
    for field, value in (("window_start", start), ("window_end", end)):
        try:
            bounds.append(coerce_timestamp(value if isinstance(value, datetime) else str(value)))
        except ValueError:
            raise InvalidSettingError(
                f"{field} must be an RFC 3339 timestamp, got {value!r} "
                "(a run without a data interval needs explicit window_start/window_end)"
            ) from None
    if bounds[0] >= bounds[1]:
        raise InvalidSettingError(
            f"window_start {format_timestamp(bounds[0])} is not before "
            f"window_end {format_timestamp(bounds[1])}"
        )
    return Window(bounds[0], bounds[1])


def locations_of(value: Mapping[str, Any] | WindowLocations | None, *required: str) -> WindowLocations:
    """The pipeline's :class:`WindowLocations` from a rendered ``locations`` argument.

    ``locations`` maps ``staging_root``, ``changeset_root`` and the roots of the registered targets
    (each target kind's ``location_field``) to absolute local paths or URIs; ``required`` names the
    roots the step needs. A relative path, an unknown key or a missing root fails the task without
    retries.
    """
    known = known_roots()
    if isinstance(value, WindowLocations):
        roots: Mapping[str, Any] = value.roots()
    elif isinstance(value, Mapping):
        roots = value
    elif value is None:
        roots = {}
    else:
        raise TypeError(f"locations must be a mapping of {known}, got {type(value).__name__}")
    unknown = sorted(str(name) for name in set(roots) - set(known))
    if unknown:
        raise InvalidSettingError(f"locations has unknown key(s) {unknown}; expected some of {known}")
    cleaned: dict[str, str | None] = {}
    for name in known:
        root = roots.get(name)
        text = None if root is None or not str(root).strip() else str(root).strip()
        require_absolute(f"locations[{name!r}]", text)
        cleaned[name] = text
    missing = [name for name in required if not cleaned.get(name)]
    if missing:
        raise InvalidSettingError(f"locations lacks {missing}: this step needs {list(required)}")
    targets = {name: text for name, text in cleaned.items() if name not in PIPELINE_ROOTS and text}
    return WindowLocations(cleaned["staging_root"], cleaned["changeset_root"], targets)


#: The XCom key under which a window's open operator pushes the epoch it opened.
EPOCH_XCOM_KEY = "epoch"


def xcom_pull_expression(task_id: str, key: str) -> str:
    """The Jinja expression pulling XCom ``key`` of ``task_id`` (checked to be a task id, so the
    template cannot be broken out of)."""
    parts = task_id.split(".")
    if not task_id or not all(part.replace("_", "").replace("-", "").isalnum() for part in parts):
        raise InvalidSettingError(f"not a task id: {task_id!r}")
    return f"ti.xcom_pull(task_ids='{task_id}', key='{key}')"


def epoch_template(open_task_id: str) -> str:
    """The template of the epoch the open task ``open_task_id`` pushed (give it as ``epoch``)."""
    return f"{{{{ {xcom_pull_expression(open_task_id, EPOCH_XCOM_KEY)} }}}}"


def epoch_of(value: Any) -> int | None:
    """The epoch of a rendered ``epoch`` argument (an integer or its text); ``None`` or blank text
    (an open task that pushed none) is no epoch."""
    if value is None or isinstance(value, bool):
        return None
    text = str(value).strip()
    if text in ("", "None"):
        return None
    if not text.isdigit() or int(text) < 1:
        raise InvalidSettingError(
            f"epoch must be a positive integer (the open task's '{EPOCH_XCOM_KEY}' XCom), got {value!r}"
        )
    return int(text)
