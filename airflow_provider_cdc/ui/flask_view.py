"""The pipeline pages on Airflow 2.11: a Flask AppBuilder view in the webserver (a plugin's
``appbuilder_views``), inside the webserver's own page layout.

Only a signed-in user sees them (others are sent to the login), and only the pipelines of the DAGs
the security manager lets that user read (``get_readable_dag_ids``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import g, redirect, request, url_for
from flask_appbuilder import BaseView, expose

from airflow_provider_cdc.ui.render import TITLE, render_pipeline, render_pipelines
from airflow_provider_cdc.ui.service import PipelinePages

URL_PREFIX = "/cdc"


class Airflow2Links:
    """Links of the pages and into Airflow 2.11's grid view (a task's logs: its ``logs`` tab)."""

    def index(self) -> str:
        return url_for("CdcPipelinesView.index")

    def pipeline(self, pipeline: str, *, older: str | None = None, newer: str | None = None) -> str:
        pages = {k: v for k, v in (("older", older), ("newer", newer)) if v}
        return url_for("CdcPipelinesView.pipeline", pipeline=pipeline, **pages)

    def run(self, dag_id: str, run_id: str) -> str:
        return url_for("Airflow.grid", dag_id=dag_id, dag_run_id=run_id)

    def task(self, dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
        mapped = {"map_index": map_index} if map_index >= 0 else {}
        return url_for(
            "Airflow.grid", dag_id=dag_id, dag_run_id=run_id, task_id=task_id, tab="logs", **mapped
        )


class CdcPipelinesView(BaseView):
    """``/cdc/`` lists the pipelines, ``/cdc/pipelines/<pipeline>`` shows one."""

    route_base = URL_PREFIX
    default_view = "index"
    template_folder = str(Path(__file__).parent / "templates")

    def __init__(self, pages: PipelinePages | None = None) -> None:
        super().__init__()
        self.pages = pages or PipelinePages()

    def _readable(self) -> set[str] | None:
        """The DAGs the signed-in user may read; None when nobody is signed in."""
        user = getattr(g, "user", None)
        if user is None or getattr(user, "is_anonymous", True):
            return None
        return set(self.appbuilder.sm.get_readable_dag_ids(user))

    def _login(self) -> Any:
        from airflow.www.extensions.init_auth_manager import get_auth_manager

        return redirect(get_auth_manager().get_url_login(next_url=request.url))

    def _page(self, content: Any, title: str, status: int = 200) -> Any:
        return self.render_template("cdc_airflow2.html", content=content, title=title), status

    @expose("/")
    def index(self) -> Any:
        from airflow.utils.session import create_session

        readable = self._readable()
        if readable is None:
            return self._login()
        with create_session() as session:
            page = self.pages.index(readable, session, Airflow2Links())
        return self._page(render_pipelines(page), TITLE)

    @expose("/pipelines/<pipeline>")
    def pipeline(self, pipeline: str) -> Any:
        from airflow.utils.session import create_session
        from markupsafe import Markup, escape

        readable = self._readable()
        if readable is None:
            return self._login()
        links = Airflow2Links()
        older, newer = request.args.get("older"), request.args.get("newer")
        try:
            with create_session() as session:
                page = self.pages.pipeline(pipeline, readable, session, links, older=older, newer=newer)
        except ValueError as error:
            message = f"Invalid page of pipeline windows: {error}"
            return self._page(Markup('<p class="problem">{}</p>').format(escape(message)), TITLE, 400)
        if page is None:
            message = f"No pipeline {pipeline!r} is run by a DAG you may read."
            return self._page(Markup('<p class="problem">{}</p>').format(escape(message)), TITLE, 404)
        return self._page(render_pipeline(page, links), f"{TITLE}: {pipeline}")
