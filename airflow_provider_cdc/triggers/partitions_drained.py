"""Moved to :mod:`airflow_provider_cdc.sources.spanner.triggers`.

This path stays importable: tasks deferred before the move are serialized with the classpath
``airflow_provider_cdc.triggers.partitions_drained.PartitionsDrainedTrigger``, and the triggerer resolves
it here (this path is that module). New deferrals serialize the new path.
"""

from airflow_provider_cdc._moved import alias

alias(__name__, "airflow_provider_cdc.sources.spanner.triggers")
