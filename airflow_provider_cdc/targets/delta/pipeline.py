"""The Delta target in a pipeline declaration: :class:`DeltaLake` (``cdc_pipeline(targets=[…])``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_provider_cdc.specs import Locations, PipelineSpecError, TargetSpec
from airflow_provider_cdc.targets.delta import LAKE_ROOT

__all__ = ["DeltaLake"]


@dataclass(frozen=True, kw_only=True)
class DeltaLake(TargetSpec):
    """Delta tables under ``Locations.lake_root``, upserted by a Spark job (task ``upsert``).

    :param tombstone_horizon: seconds (or a template) a deleted key refuses older late events; for
        sources whose late events may arrive after a delete (Datastream).
    :param arguments: further arguments of ``SparkUpsertWindowOperator``.
    """

    task_id: ClassVar[str] = "upsert"
    target: ClassVar[str] = "delta"

    tombstone_horizon: float | str | None = None
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def validate_locations(self, locations: Locations) -> None:
        if not locations.root(LAKE_ROOT):
            raise PipelineSpecError(
                f"cdc_pipeline locations.{LAKE_ROOT}: missing; the DeltaLake target needs it"
            )

    def apply_step(self, common: Mapping[str, Any], spark: Mapping[str, Any]) -> Any:
        """``SparkUpsertWindowOperator`` on the pipeline's Spark connection."""
        from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator

        extra = {"tombstone_horizon": self.tombstone_horizon} if self.tombstone_horizon else {}
        return SparkUpsertWindowOperator(
            task_id=self.task_id, **dict(spark), **extra, **dict(self.arguments), **dict(common)
        )
