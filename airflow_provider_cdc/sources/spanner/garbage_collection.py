"""Fewer full garbage collections while a read holds many short-lived objects.

Every undecoded value of a Spanner result is a protobuf object; a read keeps tens of thousands of them
alive long enough to reach the collector's oldest generation, and each wave of them triggers a full
collection that traverses every object of the process. :func:`fewer_full_collections` raises the oldest
generation's threshold for the duration of a read and restores the process's thresholds afterwards.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

#: While a batch is read, the oldest generation of the garbage collector is collected this many
#: times less often (see :func:`fewer_full_collections`).
FULL_COLLECTION_FACTOR = 100


_collections_lock = threading.Lock()
_collections_deferred = 0  # blocks of fewer_full_collections being run (readers in threads)
_collections_threshold = (0, 0, 0)  # the thresholds to restore when the last one ends


@contextlib.contextmanager
def fewer_full_collections(factor: int = FULL_COLLECTION_FACTOR) -> Iterator[None]:
    """Collect the garbage collector's oldest generation ``factor`` times less often inside the block.

    Every undecoded value of a result is a protobuf object, and the rows in flight keep tens of
    thousands of them alive long enough to reach the oldest generation; each wave of them triggers
    a full collection, which traverses every object of the process (close to half of a snapshot
    read's CPU time in a bare process, more in an Airflow worker). Young generations are collected
    as before, so short-lived reference cycles are freed as before. The process's thresholds are
    restored when the last such block of any thread ends; nothing changes where automatic
    collection is off.
    """
    global _collections_deferred, _collections_threshold
    with _collections_lock:
        first, second, third = gc.get_threshold()
        active = _collections_deferred > 0 or (first > 0 and factor > 1)
        if active:
            if _collections_deferred == 0:
                _collections_threshold = (first, second, third)
                gc.set_threshold(first, second, third * factor)
            _collections_deferred += 1
    try:
        yield
    finally:
        if active:
            with _collections_lock:
                _collections_deferred -= 1
                if _collections_deferred == 0:
                    gc.set_threshold(*_collections_threshold)
