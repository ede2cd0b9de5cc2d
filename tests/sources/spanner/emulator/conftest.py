"""Fixtures of the emulator tests whose modules take a ``target`` (from ``table_targets``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from table_targets import Target


@pytest.fixture
def fresh(target: Target) -> Iterator[Callable[[list[str]], Any]]:
    """Databases on ``target``, dropped after the test (Google's emulator holds 100 per instance)."""
    made: list[Any] = []

    def make(ddl: list[str]) -> Any:
        made.append(target.database(ddl))
        return made[-1]

    yield make
    for database in made:
        database.drop()
