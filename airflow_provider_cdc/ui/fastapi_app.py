"""The pipeline pages on Airflow 3: a FastAPI app the API server mounts (a plugin's ``fastapi_apps``).

A request is the signed-in user's (the API server's JWT, from its cookie or an ``Authorization:
Bearer`` header, read by Airflow's own ``get_user``); the pipelines shown are those of the DAGs the
auth manager lets the user read (``get_authorized_dag_ids``). Without a valid token the page sends
the browser to the auth manager's login. Airflow's modules are imported on the first request, so
loading the plugin in a task or the scheduler stays cheap (so are the pages' own modules).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from airflow_provider_cdc.ui import TITLE

if TYPE_CHECKING:
    from airflow_provider_cdc.ui.service import PipelinePages

#: Where the API server mounts the pages.
URL_PREFIX = "/cdc"

_bearer = HTTPBearer(auto_error=False)


@dataclass(frozen=True)
class Airflow3Links:
    """Links of the pages (under the app's mount ``root``) and into Airflow 3's UI (under ``airflow``)."""

    root: str
    airflow: str

    def index(self) -> str:
        return f"{self.root}/"

    def pipeline(self, pipeline: str, *, older: str | None = None, newer: str | None = None) -> str:
        query = urlencode({k: v for k, v in (("older", older), ("newer", newer)) if v})
        return f"{self.root}/pipelines/{quote(pipeline, safe='')}" + (f"?{query}" if query else "")

    def run(self, dag_id: str, run_id: str) -> str:
        return f"{self.airflow}dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"

    def task(self, dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
        mapped = f"/mapped/{map_index}" if map_index >= 0 else ""
        return f"{self.run(dag_id, run_id)}/tasks/{quote(task_id, safe='')}{mapped}"


async def current_user(
    request: Request, bearer: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> Any:
    """The signed-in user, as Airflow's API authenticates it (401 without a valid token)."""
    from airflow.api_fastapi.core_api.security import get_user

    return await get_user(request=request, _oauth_token=None, bearer_credentials=bearer)


def _readable_dag_ids(user: Any) -> set[str]:
    from airflow.api_fastapi.app import get_auth_manager

    return set(get_auth_manager().get_authorized_dag_ids(user=user, method="GET"))


def _links(request: Request) -> Airflow3Links:
    from airflow.api_fastapi.app import API_ROOT_PATH

    return Airflow3Links(root=request.scope.get("root_path", "").rstrip("/"), airflow=API_ROOT_PATH)


def create_app(pages: PipelinePages | None = None) -> FastAPI:
    """The app: ``/`` lists the pipelines, ``/pipelines/{pipeline}`` shows one (``?older=``/``?newer=``
    page through its windows by window id)."""
    app = FastAPI(title=TITLE, openapi_url=None, docs_url=None, redoc_url=None)
    held: list[PipelinePages] = [pages] if pages is not None else []

    def the_pages() -> PipelinePages:
        if not held:
            from airflow_provider_cdc.ui.service import PipelinePages

            held.append(PipelinePages())
        return held[0]

    @app.exception_handler(HTTPException)
    async def _signed_out(request: Request, error: HTTPException) -> Response:
        if error.status_code == 401:
            from airflow.api_fastapi.app import get_auth_manager

            return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), 303)
        from airflow_provider_cdc.ui.render import render_document

        return HTMLResponse(render_document(_message(str(error.detail))), status_code=error.status_code)

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request, user: Any = Depends(current_user)) -> HTMLResponse:
        from airflow.utils.session import create_session

        from airflow_provider_cdc.ui.render import render_document, render_pipelines

        readable = _readable_dag_ids(user)
        with create_session() as session:
            page = the_pages().index(readable, session, _links(request))
        return HTMLResponse(render_document(render_pipelines(page)))

    @app.get("/pipelines/{pipeline}", response_class=HTMLResponse)
    def pipeline(
        request: Request,
        pipeline: str,
        older: str | None = None,
        newer: str | None = None,
        user: Any = Depends(current_user),
    ) -> HTMLResponse:
        from airflow.utils.session import create_session

        from airflow_provider_cdc.ui.render import render_document, render_pipeline

        readable = _readable_dag_ids(user)
        links = _links(request)
        try:
            with create_session() as session:
                page = the_pages().pipeline(pipeline, readable, session, links, older=older, newer=newer)
        except ValueError as error:
            raise HTTPException(400, f"Invalid page of pipeline windows: {error}") from None
        if page is None:
            raise HTTPException(404, f"No pipeline {pipeline!r} is run by a DAG you may read.")
        return HTMLResponse(render_document(render_pipeline(page, links), f"{TITLE}: {pipeline}"))

    return app


def _message(text: str) -> Any:
    from markupsafe import Markup, escape

    return Markup('<div class="cdc-ui"><p class="problem">{}</p></div>').format(escape(text))
