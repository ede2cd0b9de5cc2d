"""The hook classes the provider registers for its connection types: its hooks, unchanged, with the
connection forms of :mod:`.connection_forms` (what Airflow 2.11's connection form asks a hook class for).
"""

from __future__ import annotations

from typing import Any

from airflow_provider_cdc.connection_forms import DATAPROC_FORM, METASTORE_FORM, TABLESTORE_FORM
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.placement.dataproc.hook import DataprocJobsHook
from airflow_provider_cdc.sources.tablestore.connection import TablestoreHook


class CdcMetastoreConnectionHook(CdcMetastoreHook):
    """:class:`~airflow_provider_cdc.hooks.metastore.CdcMetastoreHook` with its connection form."""

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        return METASTORE_FORM.widgets()

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return METASTORE_FORM.field_behaviour()


class TablestoreConnectionHook(TablestoreHook):
    """:class:`~airflow_provider_cdc.sources.tablestore.connection.TablestoreHook` with its form."""

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        return TABLESTORE_FORM.widgets()

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return TABLESTORE_FORM.field_behaviour()


class DataprocConnectionHook(DataprocJobsHook):
    """:class:`~airflow_provider_cdc.placement.dataproc.hook.DataprocJobsHook` with its connection form."""

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        return DATAPROC_FORM.widgets()

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return DATAPROC_FORM.field_behaviour()
