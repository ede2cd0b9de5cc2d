"""Apache Airflow provider for change-data-capture micro-batch pipelines."""

from __future__ import annotations

__version__ = "0.1.0"


def get_provider_info() -> dict:
    """Describe this provider to Airflow's ProvidersManager (``airflow providers list``).

    Its plugin (the pipeline pages) is registered through the ``airflow.plugins`` entry point.
    """
    from airflow_provider_cdc.connection_forms import CONNECTION_FORMS

    return {
        "package-name": "airflow-provider-cdc",
        "name": "Change Data Capture",
        "description": "Read database change data (Google Cloud Spanner change streams and tables, "
        "Datastream files, Table Store streams) in bounded windows and apply them exactly once, in "
        "order per key, to Delta Lake and BigQuery CDC tables.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Google Cloud Spanner change streams",
                "external-doc-url": "https://cloud.google.com/spanner/docs/change-streams",
                "tags": ["gcp"],
            },
            {
                "integration-name": "Google BigQuery CDC",
                "external-doc-url": "https://cloud.google.com/bigquery/docs/change-data-capture",
                "tags": ["gcp"],
            },
            {
                "integration-name": "Google Cloud Spanner tables",
                "external-doc-url": "https://cloud.google.com/spanner/docs/reads#read_data_in_parallel",
                "tags": ["gcp"],
            },
            {
                "integration-name": "Google Cloud Datastream",
                "external-doc-url": "https://cloud.google.com/datastream/docs/events-and-streams",
                "tags": ["gcp"],
            },
            {
                "integration-name": "Alibaba Cloud Table Store streams",
                "external-doc-url": "https://www.alibabacloud.com/help/doc-detail/60305.htm",
                "tags": ["alibaba"],
            },
            {
                "integration-name": "CDC metastore",
                "tags": ["software"],
            },
            {
                "integration-name": "Google Cloud Dataproc (CDC jobs)",
                "external-doc-url": "https://cloud.google.com/dataproc/docs",
                "tags": ["gcp"],
            },
        ],
        "hooks": [
            {
                "integration-name": "Google Cloud Spanner change streams",
                "python-modules": [
                    "airflow_provider_cdc.sources.spanner.change_stream_hook",
                    "airflow_provider_cdc.hooks.metastore",
                ],
            },
            {
                "integration-name": "Google BigQuery CDC",
                "python-modules": ["airflow_provider_cdc.targets.bigquery.hook"],
            },
            {
                "integration-name": "Google Cloud Spanner tables",
                "python-modules": ["airflow_provider_cdc.sources.spanner.table_hook"],
            },
            {
                "integration-name": "Google Cloud Datastream",
                "python-modules": ["airflow_provider_cdc.sources.datastream.hook"],
            },
            {
                "integration-name": "Alibaba Cloud Table Store streams",
                "python-modules": [
                    "airflow_provider_cdc.sources.tablestore.hook",
                    "airflow_provider_cdc.sources.tablestore.connection",
                ],
            },
            {
                "integration-name": "Google Cloud Dataproc (CDC jobs)",
                "python-modules": ["airflow_provider_cdc.placement.dataproc.hook"],
            },
        ],
        "operators": [
            {
                "integration-name": "Google Cloud Spanner change streams",
                "python-modules": [
                    "airflow_provider_cdc.sources.spanner.change_stream_operators",
                    "airflow_provider_cdc.operators.merge",
                    "airflow_provider_cdc.targets.delta.operators",
                    "airflow_provider_cdc.operators.commit",
                ],
            },
            {
                "integration-name": "Google BigQuery CDC",
                "python-modules": ["airflow_provider_cdc.targets.bigquery.operators"],
            },
            {
                "integration-name": "Google Cloud Spanner tables",
                "python-modules": ["airflow_provider_cdc.sources.spanner.table_operators"],
            },
            {
                "integration-name": "Google Cloud Datastream",
                "python-modules": ["airflow_provider_cdc.sources.datastream.operators"],
            },
            {
                "integration-name": "Alibaba Cloud Table Store streams",
                "python-modules": ["airflow_provider_cdc.sources.tablestore.operators"],
            },
        ],
        "sensors": [
            {
                "integration-name": "Google Cloud Spanner change streams",
                "python-modules": ["airflow_provider_cdc.sources.spanner.sensors"],
            },
            {
                "integration-name": "CDC metastore",
                "python-modules": ["airflow_provider_cdc.sensors.window_complete"],
            },
            {
                "integration-name": "Google Cloud Datastream",
                "python-modules": ["airflow_provider_cdc.sources.datastream.operators"],
            },
        ],
        "triggers": [
            {
                "integration-name": "Google Cloud Spanner change streams",
                "python-modules": ["airflow_provider_cdc.sources.spanner.triggers"],
            },
            {
                "integration-name": "CDC metastore",
                "python-modules": ["airflow_provider_cdc.triggers.window_complete"],
            },
        ],
        "connection-types": [form.provider_info() for form in CONNECTION_FORMS],
    }
