"""A ``google-cloud-spanner`` client and instance on an emulator (the project's or Google's).

The client reads ``SPANNER_EMULATOR_HOST`` when it is constructed; it is set for that moment only, so
clients of several emulators can coexist in one process.
"""

from __future__ import annotations

import os
from typing import Any

INSTANCE_CONFIG = "emulator-config"  # the one instance configuration both emulators serve


def emulator_client(host: str, project: str) -> Any:
    """A client of project ``project`` for the emulator at ``host``."""
    from google.cloud.spanner_v1 import Client

    previous = os.environ.get("SPANNER_EMULATOR_HOST")
    os.environ["SPANNER_EMULATOR_HOST"] = host
    try:
        return Client(project=project, disable_builtin_metrics=True)
    finally:
        if previous is None:
            os.environ.pop("SPANNER_EMULATOR_HOST", None)
        else:
            os.environ["SPANNER_EMULATOR_HOST"] = previous


def emulator_instance(host: str, project: str, instance_id: str, *, exists_ok: bool = False) -> Any:
    """The instance ``instance_id`` on the emulator at ``host``, created (one node); with ``exists_ok``
    an instance that is already there is taken as it is."""
    from google.api_core.exceptions import AlreadyExists

    instance = emulator_client(host, project).instance(
        instance_id, configuration_name=f"projects/{project}/instanceConfigs/{INSTANCE_CONFIG}", node_count=1
    )
    try:
        instance.create().result(60)
    except AlreadyExists:
        if not exists_ok:
            raise
    return instance
