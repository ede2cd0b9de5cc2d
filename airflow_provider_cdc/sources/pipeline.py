"""What every source's pipeline plug-in (``sources/<name>/pipeline.py``) shares."""

from __future__ import annotations

from typing import Any

from airflow_provider_cdc.specs import SourceWindow

__all__ = ["window_complete"]


def window_complete(window: SourceWindow, open_window: Any, timeout: float) -> Any:
    """The ``complete`` sensor: every unit of the window the open step opened is staged (from the
    metastore alone, the open step's window handle naming the source and the window) before the merge."""
    from airflow_provider_cdc.sensors.window_complete import WindowCompleteSensor

    return WindowCompleteSensor(
        task_id="complete", window=open_window.output, poke_interval=window.poke_interval, timeout=timeout,
        **window.metastore,
    )  # fmt: skip
