"""The Datastream scenarios the conversion tests run: each database, MySQL with GTIDs, SQL Server with
zoned source timestamps (``DatastreamScenario`` database and options)."""

from __future__ import annotations

import pytest

#: ``(database, options)`` for ``DatastreamScenario``, as ``pytest.mark.parametrize`` takes them.
SCENARIOS = pytest.mark.parametrize(
    ("database", "options"),
    [
        ("mysql", {}),
        ("mysql", {"mysql_gtid": True}),
        ("oracle", {}),
        ("postgresql", {}),
        ("sqlserver", {"source_timestamps_with_zone": True}),
    ],
)
