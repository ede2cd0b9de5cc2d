"""Apache Airflow provider for change-data-capture micro-batch pipelines."""

from __future__ import annotations

__version__ = "0.1.0"


def get_provider_info() -> dict:
    """Describe this provider to Airflow's ProvidersManager."""
    return {
        "package-name": "airflow-provider-cdc",
        "name": "Change Data Capture",
        "description": "Read Google Cloud Spanner change streams in bounded windows and apply them "
        "exactly once, in commit order per key, to Delta Lake tables.",
        "versions": [__version__],
        "connection-types": [],
        "hook-class-names": [],
    }
