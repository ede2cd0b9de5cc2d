"""Sequence numbers (sortable form) of a batch of MySQL events, a column at a time.

The same numbers as :mod:`.sequence_numbers` gives event by event; a batch this does not take
(events without a binlog file, GTID-mode fields, positions that are not integers) returns ``None``
and is numbered event by event, which also names the event of a malformed field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_cdc.core.sequence_number import MAX_SECTION_VALUE
from airflow_provider_cdc.sources.datastream.sequence_numbers import (
    DELETE_BIT,
    UPSERT_BIT,
    _binlog_index,
)

_BACKFILL_FORMAT = "0000000000000000/%016X/0000000000000000/%016X"


def mysql_sequence_texts(
    metas: Sequence[Mapping[str, Any]], backfill: bool, upserts: Sequence[bool], millis: Sequence[int]
) -> list[str] | None:
    """Sortable sequence numbers of MySQL events (``backfill``: read by a backfill), or ``None``."""
    kinds = [UPSERT_BIT if upsert else DELETE_BIT for upsert in upserts]
    if backfill:
        return [_BACKFILL_FORMAT % pair for pair in zip(millis, kinds, strict=True)]
    files = [m.get("log_file") for m in metas]
    distinct = set(files)
    if not all(type(name) is str and name != "" for name in distinct):
        return None  # backfill events in a log file, or GTID mode: event by event
    prefixes = {}
    for name in distinct:
        index = _binlog_index(name)
        if index is None:
            return None
        prefixes[name] = "0000000000000001/%016X/" % index  # noqa: UP031
    positions = [m.get("log_position") for m in metas]
    if set(map(type, positions)) != {int} or min(positions) < 0 or max(positions) > MAX_SECTION_VALUE:
        return None
    return [
        "%s%016X/%016X" % row  # noqa: UP031
        for row in zip([prefixes[name] for name in files], positions, kinds, strict=True)
    ]
