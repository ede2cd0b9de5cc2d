"""The provider's Airflow plugin (entry point ``airflow.plugins``): the CDC pipeline pages.

Airflow 3: a FastAPI app the API server mounts at ``/cdc`` and a page of the UI's *Browse* menu that
shows it (an external view at ``/plugin/cdc-pipelines``). Airflow 2.11: a Flask AppBuilder view at
``/cdc/`` with an item in the *Browse* menu. Both serve the same pages (:mod:`.service`, :mod:`.render`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from airflow import __version__ as airflow_version
from airflow.plugins_manager import AirflowPlugin

from airflow_provider_cdc.ui import TITLE

AIRFLOW_3 = int(airflow_version.split(".")[0]) >= 3
#: The route of the page in Airflow 3's UI (``/plugin/<route>``).
UI_ROUTE = "cdc-pipelines"


def _api_root() -> str:
    """The path the API server serves under (``[api] base_url``'s), ending with ``/``."""
    from airflow.configuration import conf

    path = urlsplit(conf.get("api", "base_url", fallback="") or "").path
    return path if path.endswith("/") else path + "/"


def airflow3_parts() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The plugin's ``fastapi_apps`` and ``external_views`` on Airflow 3."""
    from airflow_provider_cdc.ui.fastapi_app import URL_PREFIX, create_app

    app = {"app": create_app(), "url_prefix": URL_PREFIX, "name": TITLE}
    view = {
        "name": TITLE,
        "href": f"{_api_root()}{URL_PREFIX.strip('/')}/",
        "url_route": UI_ROUTE,
        "destination": "nav",
        "category": "browse",
    }
    return [app], [view]


def airflow2_parts() -> list[dict[str, Any]]:
    """The plugin's ``appbuilder_views`` on Airflow 2.11."""
    from airflow_provider_cdc.ui.flask_view import CdcPipelinesView

    return [{"name": TITLE, "category": "Browse", "view": CdcPipelinesView()}]


class CdcPipelinesPlugin(AirflowPlugin):
    """The CDC pipeline pages in Airflow's UI."""

    name = "cdc_pipelines"
    if AIRFLOW_3:
        fastapi_apps, external_views = airflow3_parts()
    else:
        appbuilder_views = airflow2_parts()
