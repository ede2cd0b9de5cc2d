"""Both emulators as targets of the table-read rules: the project's (a manual clock) and Google's (the
real clock), each giving fresh databases, its notion of now, and a way to let time pass.

A test module takes the ``target`` fixture (``from table_targets import project_tables, target``) and
runs once per emulator; Google's half is skipped where its emulator is not installed. Its ``fresh``
fixture makes databases on the target, dropped after the test.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_provider_cdc.testing.spanner_emulator import ManualClock, SpannerEmulator

_ids = itertools.count(1)


class Target:
    """One emulator: its instance, and its clock (``None``: Google's emulator, on the real clock)."""

    def __init__(self, name: str, instance: Any, clock: ManualClock | None) -> None:
        self.name = name
        self.instance = instance
        self.clock = clock

    @property
    def google(self) -> bool:
        return self.clock is None

    def database(self, ddl: list[str]) -> Any:
        database = self.instance.database(f"tables{next(_ids)}", ddl_statements=list(ddl))
        database.create().result(60)
        return database

    def now(self) -> datetime:
        return datetime.now(timezone.utc) if self.clock is None else self.clock.now()

    def pass_time(self, delta: timedelta) -> None:
        """Let ``delta`` of the emulator's time pass."""
        if self.clock is None:
            time.sleep(delta.total_seconds())
        else:
            self.clock.advance(delta)


@pytest.fixture(scope="module")
def project_tables(emulator_instance: Any) -> Iterator[tuple[SpannerEmulator, Any]]:
    """The project's emulator (manual clock) for one module, and its instance."""
    clock = ManualClock(datetime(2026, 3, 1, tzinfo=timezone.utc))
    with SpannerEmulator(clock=clock, seed=11) as emulator:
        yield emulator, emulator_instance(emulator)


@pytest.fixture(params=["project", "google"])
def target(request: pytest.FixtureRequest) -> Target:
    """Each rule runs against the project's emulator and against Google's."""
    if request.param == "project":
        emulator, instance = request.getfixturevalue("project_tables")
        return Target("project", instance, emulator.clock)
    return Target("google", request.getfixturevalue("google_spanner_instance"), None)


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


def message(error: BaseException) -> str:
    """An API error's message without the request id the client appends."""
    return re.sub(r", request_id = [0-9.]+$", "", getattr(error, "message", str(error)))


def shown(moment: datetime) -> str:
    """A timestamp as Spanner's messages show it: ``2026-01-01T00:00:00.5+00:00``."""
    moment = moment.astimezone(timezone.utc)
    fraction = f".{moment.microsecond:06d}".rstrip("0") if moment.microsecond else ""
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + fraction + "+00:00"
