"""Airflow 2.11 / 3.x import compatibility for the provider's Airflow surface."""

from __future__ import annotations

try:  # Airflow 3
    from airflow.sdk import BaseHook, BaseOperator, BaseSensorOperator
except ImportError:  # Airflow 2.11
    from airflow.hooks.base import BaseHook  # type: ignore[no-redef]
    from airflow.models import BaseOperator  # type: ignore[no-redef]
    from airflow.sensors.base import BaseSensorOperator  # type: ignore[no-redef]

try:  # Airflow 3
    from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowNotFoundException
except ImportError:  # Airflow 2.11
    from airflow.exceptions import (  # type: ignore[no-redef]
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
    )
from airflow.triggers.base import BaseTrigger, TriggerEvent

__all__ = [
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "BaseHook",
    "BaseOperator",
    "BaseSensorOperator",
    "BaseTrigger",
    "TriggerEvent",
]
