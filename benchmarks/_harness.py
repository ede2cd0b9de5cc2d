"""What the benchmarks share: a measured run in a fresh process, its resource use, and medians.

The benchmarks run as scripts (``.venv/bin/python benchmarks/<name>.py``), so this module is imported
from the script's folder.
"""

from __future__ import annotations

import multiprocessing
import resource
import statistics
from typing import Any


def usage() -> dict[str, float]:
    """This process's peak RSS (MB) and CPU seconds so far."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    return {"max_rss_mb": used.ru_maxrss / 1024, "cpu_seconds": used.ru_utime + used.ru_stime}


def in_child(target: Any, *args: Any) -> dict:
    """Run ``target(*args, conn)`` in a fresh (spawned) process and return what it sends on ``conn``."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=target, args=(*args, child))
    process.start()
    while not parent.poll(1.0):
        if not process.is_alive():
            raise RuntimeError(f"{target.__name__} exited with code {process.exitcode} and no result")
    result = parent.recv()
    process.join(60)
    return result


def spread(values: list[float], digits: str = ",.0f") -> str:
    """``median (min-max)`` of ``values``."""
    return f"{statistics.median(values):{digits}} ({min(values):{digits}}-{max(values):{digits}})"
