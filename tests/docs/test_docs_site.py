"""The documentation site builds with ``mkdocs build --strict`` (every warning an error), with its key pages.

The build renders the reference from the code's docstrings (mkdocstrings), generates the DAG params, the
command line's help and the connection types from the code (``docs/hooks/generated.py``) and includes
every snippet: a docstring, a DAG or a link that breaks the site fails here.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from snippet_support import ROOT

KEY_PAGES = [
    "index.html",
    "getting-started/index.html",
    "sources/spanner-change-stream/index.html",
    "sources/spanner-tables/index.html",
    "sources/datastream/index.html",
    "sources/tablestore/index.html",
    "targets/delta-lake/index.html",
    "targets/bigquery/index.html",
    "spark/index.html",
    "composer/index.html",
    "operations/index.html",
    "reference/operators/index.html",
    "reference/hooks/index.html",
    "reference/sensors-triggers/index.html",
    "reference/connections/index.html",
    "reference/dag-params/index.html",
    "reference/cli/index.html",
    "reference/architecture/index.html",
    "testing/index.html",
    "benchmarks/index.html",
    "contributing/index.html",
]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site_dir = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(site_dir)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    output = f"{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{output}"
    print(f"the site built in {time.monotonic() - started:.1f} s")
    return site_dir


def test_key_pages_exist(site: Path) -> None:
    missing = [page for page in KEY_PAGES if not (site / page).is_file()]
    assert not missing, missing


def test_reference_is_generated_from_the_code(site: Path) -> None:
    operators = (site / "reference/operators/index.html").read_text()
    names = ["SpannerChangeStreamOpenWindowOperator", "SparkMergeWindowOperator", "CdcCommitWindowOperator"]
    for name in names:
        assert name in operators, name
    params = (site / "reference/dag-params/index.html").read_text()
    for dag_id in [p.stem for p in (ROOT / "example_dags").glob("*.py")]:
        assert dag_id in params, dag_id
    assert "spark_conn_id" in params and "$CDC_DEMO_HOME" in params
    cli = (site / "reference/cli/index.html").read_text()
    assert "usage: python -m airflow_provider_cdc explain" in cli
    connections = (site / "reference/connections/index.html").read_text()
    assert "cdc_metastore" in connections and "sqlalchemy_url" in connections


def _text(page: Path) -> str:
    """A page's text, without its markup (highlighted code is split into spans)."""
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))


def test_snippets_are_included(site: Path) -> None:
    started = _text(site / "getting-started/index.html")
    assert "CREATE CHANGE STREAM ShopChanges" in started
    assert "cdc-spanner-emulator clock advance 10m" in started
    assert "DeltaDataIntervalTimetable" in started  # the example DAG, included whole
    operations = _text(site / "operations/index.html")
    assert "cdc.window.applied_delay" in operations  # the README's metrics table
