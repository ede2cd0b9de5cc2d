"""Airflow 2.11 / 3.x differences of the provider's Airflow surface, in one place.

Import from here rather than from ``airflow``: base classes, exceptions, :data:`Context`,
:func:`mask_secret`, :func:`redact_secrets`, :func:`default_deferrable`, :func:`airflow_stats` (metrics),
:func:`airflow_conf`, assets (:class:`Asset`, :class:`AssetAlias`: Airflow 2's
``Dataset`` and ``DatasetAlias``) and :func:`triggering_asset_events`.
"""

from __future__ import annotations

from typing import Any

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
    from airflow.sdk.bases.branch import BranchMixIn
except ImportError:  # Airflow 2.11
    from airflow.operators.branch import BranchMixIn  # type: ignore[no-redef]

try:  # Airflow 3
    from airflow.sdk.log import mask_secret
except ImportError:  # Airflow 2.11
    from airflow.utils.log.secrets_masker import mask_secret  # type: ignore[no-redef]

from airflow.triggers.base import BaseTrigger, TriggerEvent

try:  # Airflow 3: assets
    from airflow.sdk import Asset, AssetAlias
except ImportError:  # Airflow 2.11: datasets, the same two kinds
    from airflow.datasets import Dataset as Asset  # type: ignore[no-redef,assignment]
    from airflow.datasets import DatasetAlias as AssetAlias  # type: ignore[no-redef,assignment]


def default_deferrable() -> bool:
    """Airflow's ``[operators] default_deferrable`` (``AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE``), read at
    each call: the ``deferrable`` of a task built without one."""
    try:  # Airflow 3
        from airflow.sdk.configuration import conf
    except ImportError:  # Airflow 2.11
        from airflow.configuration import conf  # type: ignore[no-redef]
    return conf.getboolean("operators", "default_deferrable", fallback=False)


def triggering_asset_events(context: Any) -> list[tuple[str, Any]]:
    """The events that triggered an asset-scheduled run, as ``(asset URI, event)`` pairs (each event
    has ``extra``, ``source_dag_id``, ``source_run_id`` and ``timestamp``): Airflow 3's
    ``triggering_asset_events``, Airflow 2.11's ``triggering_dataset_events``."""
    events = context.get("triggering_asset_events")
    if events is None:
        events = context.get("triggering_dataset_events") or {}
    pairs = []
    for key, batch in events.items():
        uri = key if isinstance(key, str) else getattr(key, "uri", None)
        if uri is not None:  # Airflow 3 lists an event under its asset and again under its alias
            pairs.extend((str(uri), event) for event in batch)
    return pairs


def airflow_conf() -> Any:
    """Airflow's configuration (Airflow 3: the task SDK's; Airflow 2.11: ``airflow.configuration``)."""
    try:  # Airflow 3
        from airflow.sdk.configuration import conf
    except ImportError:  # Airflow 2.11
        from airflow.configuration import conf  # type: ignore[no-redef]
    return conf


def airflow_stats() -> Any:
    """Airflow's own ``Stats``, sending to whichever backend the deployment configured in ``[metrics]``
    (StatsD, DogStatsD, OpenTelemetry, or none): Airflow 3.2+'s task SDK ``Stats`` (the task runner
    initializes it in every task process), Airflow 3.0/3.1's and Airflow 2.11's ``airflow.stats``."""
    try:  # Airflow 3.2+
        from airflow.sdk.observability.stats import Stats
    except ImportError:
        try:  # Airflow 3.0, 3.1
            from airflow.observability.stats import Stats  # type: ignore[no-redef]
        except ImportError:  # Airflow 2.11
            from airflow.stats import Stats  # type: ignore[no-redef]
    return Stats


def redact_secrets(text: str) -> str:
    """``text`` with every value Airflow masks in task logs (connection passwords, keys given to
    :func:`mask_secret`) replaced, as the task log would show it."""
    try:  # Airflow 3
        from airflow.sdk._shared.secrets_masker import redact
    except ImportError:
        try:  # Airflow 2.11
            from airflow.utils.log.secrets_masker import redact  # type: ignore[no-redef]
        except ImportError:  # pragma: no cover - every supported Airflow has one
            return text
    return str(redact(text))


__all__ = [
    "BranchMixIn",
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "Asset",
    "AssetAlias",
    "BaseHook",
    "BaseOperator",
    "BaseSensorOperator",
    "BaseTrigger",
    "Context",
    "TriggerEvent",
    "airflow_conf",
    "airflow_stats",
    "default_deferrable",
    "mask_secret",
    "redact_secrets",
    "triggering_asset_events",
]
