"""The BigQuery target in a pipeline declaration: :class:`BigQueryCdc` (``cdc_pipeline(targets=[…])``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

from airflow_provider_cdc.specs import TargetSpec, _identifier

__all__ = ["BigQueryCdc"]


@dataclass(frozen=True, kw_only=True)
class BigQueryCdc(TargetSpec):
    """BigQuery CDC tables (``_CHANGE_TYPE`` upserts over the Storage Write API; task ``to_bigquery``).

    It writes whole rows: partial row images are completed from a target of the same pipeline that
    keeps current rows, which applies before it.

    :param dataset: the dataset (it must exist).
    :param project_id: its project (default: the connection's).
    :param api_endpoint: the BigQuery REST endpoint (blank: BigQuery's own).
    :param write_endpoint: the Storage Write API endpoint (blank: BigQuery's own).
    :param max_staleness: the tables' ``max_staleness`` option.
    :param arguments: further arguments of ``BigQueryCdcUpsertOperator``.
    """

    task_id: ClassVar[str] = "to_bigquery"
    target: ClassVar[str] = "bigquery"
    needs_full_images: ClassVar[bool] = True

    dataset: str
    project_id: str | None = None
    api_endpoint: str | None = None
    write_endpoint: str | None = None
    max_staleness: timedelta | str | None = timedelta(minutes=15)
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        _identifier(self, "dataset", "dataset")

    def operator_arguments(self) -> dict[str, Any]:
        """The upsert operator's own arguments."""
        arguments: dict[str, Any] = {"dataset": self.dataset, "max_staleness": self.max_staleness}
        for name in ("project_id", "api_endpoint", "write_endpoint"):
            if getattr(self, name) is not None:
                arguments[name] = getattr(self, name)
        return {**arguments, **self.arguments}

    def apply_step(self, common: Mapping[str, Any], spark: Mapping[str, Any]) -> Any:
        """``BigQueryCdcUpsertOperator`` (no Spark)."""
        from airflow_provider_cdc.targets.bigquery.operators import BigQueryCdcUpsertOperator

        return BigQueryCdcUpsertOperator(task_id=self.task_id, **self.operator_arguments(), **dict(common))
