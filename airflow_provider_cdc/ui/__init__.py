"""The pipeline pages in Airflow's UI: the provider's plugin (:mod:`.plugin`), served by a FastAPI app
on Airflow 3 (:mod:`.fastapi_app`) and a Flask AppBuilder view on Airflow 2.11 (:mod:`.flask_view`),
both rendering the same pages (:mod:`.service`, :mod:`.page`, :mod:`.render`)."""

from __future__ import annotations

#: The pages' title and menu item.
TITLE = "CDC pipelines"
