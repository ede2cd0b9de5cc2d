"""The window contract: what every source, job and target of a window agrees on.

- :mod:`.locations`: where a window's staged rows and change set live, and the targets' roots, from
  one set of roots (:class:`~.locations.WindowLocations`), and the folder names inside them.
- :mod:`.staged_rows`: the staged change row (a source's output, the merge job's input) as an Arrow
  schema and as Spark DDL.
- :mod:`.change_set`: the change set (the merge job's output, a target's input): its columns, Arrow
  schema and manifest.

The window itself (``[start, end)`` and its id ``{start_micros}-{end_micros}``) is
:class:`~airflow_provider_cdc.core.window.Window`. Pure like the rest of the domain (Arrow schemas
are built on first use), so the Spark jobs ship it with the domain package.
"""

from airflow_provider_cdc.core.contract.change_set import (
    CHANGE_SET_COLUMNS,
    ChangeSetError,
    change_set_schema,
)
from airflow_provider_cdc.core.contract.locations import MANIFEST_NAME, WindowLocations, partition_key
from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS, staged_change_schema
from airflow_provider_cdc.core.window import Window

__all__ = [
    "CHANGE_SET_COLUMNS",
    "MANIFEST_NAME",
    "STAGED_CHANGE_COLUMNS",
    "ChangeSetError",
    "Window",
    "WindowLocations",
    "change_set_schema",
    "partition_key",
    "staged_change_schema",
]
