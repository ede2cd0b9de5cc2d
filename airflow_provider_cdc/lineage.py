"""OpenLineage for the window steps: the datasets each step reads and writes, and the window as a run
facet.

Datasets are named as OpenLineage's naming conventions (and Airflow's providers) name them. A
location (staging, a change set, a table stored in folders) is ``gs://{bucket}`` and the path in it,
``file`` and the absolute path for a local one, ``{scheme}://{authority}`` and the path for another
store (:func:`location_dataset`). Each source names what it reads in its folder's ``lineage`` module
(``sources/<name>/lineage.py``: ``KEY_PREFIX``, the first segment of its metastore keys, and
``datasets``/``table_dataset``), found by the key; each target names its tables in its commit part
(``targets/<name>/commit.py``, see :mod:`airflow_provider_cdc.core.contract.target`).

The naming is pure; :func:`operator_lineage` builds the provider's ``OperatorLineage`` (imported
only then: the OpenLineage provider is the extra ``openlineage``).
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import urlsplit

from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.core.window import Window

#: The run facet's name in an event's ``run.facets``.
WINDOW_FACET = "cdcWindow"


@dataclass(frozen=True, order=True)
class DatasetName:
    """An OpenLineage dataset's namespace and name."""

    namespace: str
    name: str


@dataclass(frozen=True)
class StepLineage:
    """What one step read and wrote, and which output columns come unchanged from which input columns
    (output dataset → column → the input dataset it is copied from)."""

    inputs: Sequence[DatasetName] = ()
    outputs: Sequence[DatasetName] = ()
    columns: Mapping[DatasetName, Mapping[str, DatasetName]] = field(default_factory=dict)


def location_dataset(location: str) -> DatasetName:
    """The dataset of a location: an absolute path or ``file://`` URI, or an object-store URI."""
    text = str(location).strip().rstrip("/")
    parts = urlsplit(text)
    if len(parts.scheme) <= 1 or parts.scheme == "file":
        return DatasetName("file", parts.path if parts.scheme == "file" else text)
    return DatasetName(f"{parts.scheme}://{parts.netloc}", parts.path.lstrip("/"))


def location_table_dataset(root: str, table: str) -> DatasetName:
    """A table stored at ``{root}/{table}`` (a folder per table): that location's dataset."""
    return location_dataset(f"{str(root).rstrip('/')}/{table}")


def source_datasets(source_key: str, tables: Iterable[str] = ()) -> list[DatasetName]:
    """The datasets a source reads, from its metastore key (``WindowSource.source_key``), as the
    source's folder names them (the source's ``tables``, or what it reads when none are named); a key
    no source claims names no dataset."""
    naming = _source_naming(source_key)
    return [] if naming is None else list(naming.datasets(source_key, tables))


def source_table_dataset(source_key: str, table: str) -> DatasetName | None:
    """The source table a target table of ``table``'s name copies, when the source names tables;
    ``None`` for a source of files or a key no source claims."""
    naming = _source_naming(source_key)
    return None if naming is None else naming.table_dataset(source_key, table)


def _source_naming(source_key: str) -> Any:
    """The ``lineage`` module of the source folder whose ``KEY_PREFIX`` begins ``source_key``."""
    return _source_namings().get(str(source_key).split("/", 1)[0])


@cache
def _source_namings() -> dict[str, Any]:
    package = importlib.import_module("airflow_provider_cdc.sources")  # by name: sources sit above this

    namings: dict[str, Any] = {}
    for module in pkgutil.iter_modules(package.__path__):
        if module.ispkg and importlib.util.find_spec(f"{package.__name__}.{module.name}.lineage"):
            naming = importlib.import_module(f"{package.__name__}.{module.name}.lineage")
            namings[naming.KEY_PREFIX] = naming
    return namings


def identity_columns(
    output: DatasetName, columns: Iterable[str], source: DatasetName
) -> dict[DatasetName, dict[str, DatasetName]]:
    """Column lineage of a table copied column for column: each of ``columns`` from ``source``."""
    return {output: {column: source for column in columns}}


def window_facet_fields(pipeline: str | None, window: Window, epoch: int | None) -> dict[str, Any]:
    """The run facet's fields: the pipeline, the window (RFC 3339 bounds and its id) and the epoch."""
    return {
        "pipeline": pipeline,
        "windowId": window.window_id,
        "windowStart": format_timestamp(window.start),
        "windowEnd": format_timestamp(window.end),
        "epoch": epoch,
    }


def operator_lineage(lineage: StepLineage, window_fields: Mapping[str, Any]) -> Any:
    """The OpenLineage provider's ``OperatorLineage`` of a step: its datasets, the column lineage of its
    outputs, and the window as the run facet :data:`WINDOW_FACET`."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import column_lineage_dataset

    def facets_of(output: DatasetName) -> dict[str, Any]:
        columns = lineage.columns.get(output)
        if not columns:
            return {}
        fields = {
            column: column_lineage_dataset.Fields(
                inputFields=[
                    column_lineage_dataset.InputField(
                        namespace=source.namespace,
                        name=source.name,
                        field=column,
                        transformations=[
                            column_lineage_dataset.Transformation(type="DIRECT", subtype="IDENTITY")
                        ],
                    )
                ],
            )
            for column, source in sorted(columns.items())
        }
        return {"columnLineage": column_lineage_dataset.ColumnLineageDatasetFacet(fields=fields)}

    return OperatorLineage(
        inputs=[InputDataset(namespace=d.namespace, name=d.name) for d in _unique(lineage.inputs)],
        outputs=[
            OutputDataset(namespace=d.namespace, name=d.name, facets=facets_of(d))
            for d in _unique(lineage.outputs)
        ],
        run_facets={WINDOW_FACET: window_run_facet_class()(**window_fields)},
    )


@cache
def window_run_facet_class() -> type:
    """The run facet :data:`WINDOW_FACET` as an OpenLineage facet class (made once, on first use)."""
    import attr
    from openlineage.client.facet_v2 import RunFacet

    @attr.define
    class CdcWindowRunFacet(RunFacet):
        """The window a step ran for: pipeline, window id and bounds, epoch (the opening)."""

        pipeline: str | None = attr.field(default=None)
        windowId: str = attr.field(default="")  # OpenLineage's camelCase fields
        windowStart: str = attr.field(default="")
        windowEnd: str = attr.field(default="")
        epoch: int | None = attr.field(default=None)

        @staticmethod
        def _get_schema() -> str:
            return "https://pypi.org/project/airflow-provider-cdc/#CdcWindowRunFacet"

    return CdcWindowRunFacet


def lineage_of(
    task: Any,
    task_instance: Any,
    lineage: Callable[[], StepLineage | None],
    window: Window,
    epoch: int | None,
) -> Any:
    """A step's ``OperatorLineage``, or ``None`` when it has none or it cannot be built (a lineage
    problem never fails the task: it is logged)."""
    try:
        datasets = lineage()
        if datasets is None:
            return None
        pipeline = getattr(task, "pipeline_id", None) or getattr(task_instance, "dag_id", None)
        return operator_lineage(datasets, window_facet_fields(pipeline, window, epoch))
    except Exception as error:  # lineage is reported on the side: the step itself succeeded
        task.log.warning("No OpenLineage datasets for this step: %s: %s", type(error).__name__, error)
        return None


def lineage_enabled() -> bool:
    """Whether the OpenLineage provider is installed and configured to send events (it is otherwise
    never asked for a step's lineage, so a step computes nothing for it)."""
    try:
        from airflow.providers.openlineage.conf import is_disabled
    except ImportError:
        return False
    return not is_disabled()


def _unique(datasets: Iterable[DatasetName]) -> list[DatasetName]:
    return sorted(set(datasets))
