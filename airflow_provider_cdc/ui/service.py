"""What both web servers do for a page: the DAGs the user may read → the pipelines they run → those
pipelines' metastores, read through :class:`~airflow_provider_cdc.hooks.metastore.CdcMetastoreHook` →
the page. A pipeline no readable DAG runs is never shown, nor said to exist.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from datetime import datetime, timezone
from typing import Any

from airflow_provider_cdc.metastore import Metastore
from airflow_provider_cdc.metastore.overview import DEFAULT_PAGE
from airflow_provider_cdc.ui.airflow_records import DagIndex, DagPipeline, window_runs
from airflow_provider_cdc.ui.page import (
    Links,
    PipelinePage,
    PipelinesPage,
    RunLookup,
    pipeline_page,
    pipeline_views,
    when,
)

log = logging.getLogger(__name__)


def _runs(session: Any) -> RunLookup:
    return lambda dag_id, windows: window_runs(session, dag_id, windows)


class PipelinePages:
    """The pages of one web server process: DAGs' pipelines kept per DAG version, one metastore hook
    (one engine) per connection, opened anew when the connection names another database."""

    def __init__(self) -> None:
        self.dags = DagIndex()
        self._hooks: dict[str, tuple[str, Any]] = {}
        self._lock = threading.Lock()

    def metastore(self, conn_id: str) -> Metastore:
        """The metastore of connection ``conn_id`` (``cdc_metastore_default`` may be missing: the
        SQLite file under ``AIRFLOW_HOME``, as for every task)."""
        from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook

        hook = CdcMetastoreHook(conn_id)
        url = hook.get_url()
        with self._lock:
            held = self._hooks.get(conn_id)
            if held is not None and held[0] == url:
                hook = held[1]
            else:
                if held is not None:
                    held[1].close()
                self._hooks[conn_id] = (url, hook)
        return hook.metastore

    def close(self) -> None:
        """Dispose every metastore engine (harmless to repeat)."""
        with self._lock:
            hooks, self._hooks = list(self._hooks.values()), {}
        for _url, hook in hooks:
            hook.close()

    def index(
        self, readable: Collection[str], session: Any, links: Links, now: datetime | None = None
    ) -> PipelinesPage:
        """The pipelines of the DAGs ``readable`` (the user's), from each DAG's metastore."""
        now = now or datetime.now(timezone.utc)
        by_conn: dict[str, list[DagPipeline]] = {}
        for dag in self.dags.pipelines(readable, session):
            by_conn.setdefault(dag.metastore_conn_id, []).append(dag)
        views, problems = [], []
        for conn_id, dags in sorted(by_conn.items()):
            try:
                views += pipeline_views(self.metastore(conn_id), dags, _runs(session), links, now)
            except Exception as error:  # one unreadable metastore must not hide the others
                log.exception("CDC pipelines: the metastore of connection %s cannot be read", conn_id)
                problems.append(
                    f"The metastore of connection {conn_id} cannot be read ({type(error).__name__}); "
                    "the web server's log has the details."
                )
        views.sort(key=lambda view: view.pipeline)
        return PipelinesPage(tuple(views), tuple(problems), when(now.replace(microsecond=0)))

    def pipeline(
        self,
        pipeline: str,
        readable: Collection[str],
        session: Any,
        links: Links,
        *,
        older: str | None = None,
        newer: str | None = None,
        page_size: int = DEFAULT_PAGE,
        now: datetime | None = None,
    ) -> PipelinePage | None:
        """One pipeline's page, or None when no DAG of ``readable`` runs it (or the metastore does not
        know a pipeline only named by a DAG's id). ``ValueError``: an invalid page cursor."""
        now = now or datetime.now(timezone.utc)
        dags = [dag for dag in self.dags.pipelines(readable, session) if dag.pipeline == pipeline]
        if not dags:
            return None
        conn_id = min(dag.metastore_conn_id for dag in dags)
        dags = [dag for dag in dags if dag.metastore_conn_id == conn_id]
        store = self.metastore(conn_id)
        if not any(dag.named for dag in dags) and not store.known_pipelines([pipeline]):
            return None
        return pipeline_page(
            store, dags, _runs(session), links, now, older=older, newer=newer, page_size=page_size
        )
