"""The pipeline pages as HTML: one Jinja template per page, autoescaped, shared by both web servers.

:func:`render_pipelines` and :func:`render_pipeline` give a fragment (its own styles included);
:func:`render_document` makes a whole document of one (Airflow 3 shows it in a frame), and Airflow 2.11
puts the fragment into its own page layout.
"""

from __future__ import annotations

from functools import cache

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from airflow_provider_cdc.ui import TITLE
from airflow_provider_cdc.ui.page import PLOT_WINDOWS, Links, PipelinePage, PipelinesPage


@cache
def environment() -> Environment:
    """The templates of ``airflow_provider_cdc/ui/templates``, every value escaped."""
    return Environment(
        loader=PackageLoader("airflow_provider_cdc.ui", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_pipelines(page: PipelinesPage) -> Markup:
    """The list of pipelines."""
    return Markup(environment().get_template("cdc_pipelines.html").render(page=page))


def render_pipeline(page: PipelinePage, links: Links) -> Markup:
    """One pipeline's page (its plots are the SVG :mod:`~airflow_provider_cdc.ui.charts` drew)."""
    return Markup(
        environment()
        .get_template("cdc_pipeline.html")
        .render(
            page=page,
            index_link=links.index(),
            plot_windows=PLOT_WINDOWS,
            lag_chart=Markup(page.lag_chart),
            rows_chart=Markup(page.rows_chart),
        )
    )


def render_document(content: Markup, title: str = TITLE) -> str:
    """A whole HTML document around a page fragment."""
    return environment().get_template("cdc_document.html").render(content=content, title=title)
