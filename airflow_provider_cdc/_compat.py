"""Airflow 2.11 / 3.x differences of the provider's Airflow surface, in one place.

Import from here rather than from ``airflow``: base classes, exceptions, :data:`Context`,
:func:`mask_secret` and :func:`default_deferrable`.
"""

from __future__ import annotations

try:  # Airflow 3
    from airflow.sdk import BaseHook, BaseOperator, BaseSensorOperator, Context
except ImportError:  # Airflow 2.11
    from airflow.hooks.base import BaseHook  # type: ignore[no-redef]
    from airflow.models import BaseOperator  # type: ignore[no-redef]
    from airflow.sensors.base import BaseSensorOperator  # type: ignore[no-redef]
    from airflow.utils.context import Context  # type: ignore[no-redef]

try:  # Airflow 3
    from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowNotFoundException
except ImportError:  # Airflow 2.11
    from airflow.exceptions import (  # type: ignore[no-redef]
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
    )

try:  # Airflow 3
    from airflow.sdk.log import mask_secret
except ImportError:  # Airflow 2.11
    from airflow.utils.log.secrets_masker import mask_secret  # type: ignore[no-redef]

from airflow.triggers.base import BaseTrigger, TriggerEvent


def default_deferrable() -> bool:
    """Airflow's ``[operators] default_deferrable`` (``AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE``), read at
    each call: the ``deferrable`` of a task built without one."""
    try:  # Airflow 3
        from airflow.sdk.configuration import conf
    except ImportError:  # Airflow 2.11
        from airflow.configuration import conf  # type: ignore[no-redef]
    return conf.getboolean("operators", "default_deferrable", fallback=False)


__all__ = [
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "BaseHook",
    "BaseOperator",
    "BaseSensorOperator",
    "BaseTrigger",
    "Context",
    "TriggerEvent",
    "default_deferrable",
    "mask_secret",
]
