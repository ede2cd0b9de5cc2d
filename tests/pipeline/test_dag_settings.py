"""Settings read from the environment when a pipeline DAG is parsed: defaults, precedence, refusals."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_provider_cdc.dag_settings import DagSettings

VARIABLES = ("CDC_WINDOW_SECONDS", "CDC_WINDOW_MINUTES", "CDC_START_DATE", "CDC_READERS", "CDC_DEMO_HOME")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))


def test_defaults_run_ten_minute_windows_from_2026_with_two_readers(tmp_path: Path) -> None:
    settings = DagSettings.from_env()
    assert settings == DagSettings(
        timedelta(minutes=10), datetime(2026, 1, 1, tzinfo=timezone.utc), 2, str(tmp_path / "cdc-demo")
    )


def test_seconds_win_over_minutes_and_every_setting_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDC_WINDOW_MINUTES", "5")
    monkeypatch.setenv("CDC_WINDOW_SECONDS", "20")
    monkeypatch.setenv("CDC_START_DATE", "2026-03-01T12:00:00+01:00")
    monkeypatch.setenv("CDC_READERS", "4")
    monkeypatch.setenv("CDC_DEMO_HOME", "/data/cdc")
    settings = DagSettings.from_env()
    assert settings.window == timedelta(seconds=20)
    assert settings.start_date == datetime(2026, 3, 1, 11, tzinfo=timezone.utc)
    assert (settings.readers, settings.demo_home) == (4, "/data/cdc")
    monkeypatch.delenv("CDC_WINDOW_SECONDS")
    assert DagSettings.from_env().window == timedelta(minutes=5)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("CDC_READERS", "0", "CDC_READERS must be a positive integer, got '0'"),
        ("CDC_WINDOW_MINUTES", "ten", "CDC_WINDOW_MINUTES must be a positive integer, got 'ten'"),
        ("CDC_WINDOW_SECONDS", "-5", "CDC_WINDOW_SECONDS must be a positive integer, got '-5'"),
        ("CDC_START_DATE", "yesterday", "CDC_START_DATE must be an RFC 3339 timestamp"),
    ],
)
def test_a_bad_value_fails_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        DagSettings.from_env()
