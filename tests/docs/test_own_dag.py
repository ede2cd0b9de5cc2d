"""The README's own pipeline (``docs/snippets/shop_pipeline.py``) parses in a real DagBag into the whole
window, snapshot first, and the preflight reads it as a user's DAG."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from snippet_support import ROOT

DAG_FILE = ROOT / "docs" / "snippets" / "shop_pipeline.py"


@pytest.fixture
def dags_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "dags"
    folder.mkdir()
    shutil.copy(DAG_FILE, folder / DAG_FILE.name)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    return folder


def test_the_own_pipeline_dag_is_the_whole_window_with_its_snapshot(
    dags_folder: Path, tmp_path: Path
) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(str(dags_folder))
    assert bag.import_errors == {}
    dag = bag.dags["shop"]
    window = ["wait_parents", "open_window", "read", "drained", "merge", "upsert", "commit"]
    assert set(window) <= set(dag.task_ids)
    for before, after in zip(window, window[1:], strict=False):
        assert after in dag.get_task(before).downstream_task_ids, (before, after)
    # the open step decides whether this run takes the snapshot (first window only)
    snapshot = {task for task in dag.task_ids if task.startswith("initial_snapshot.")}
    assert {"initial_snapshot.open", "initial_snapshot.commit"} <= snapshot
    assert "initial_snapshot.open" in dag.get_task("open_window").downstream_task_ids
    assert "merge" in dag.get_task("initial_snapshot.commit").downstream_task_ids
    locations = dag.get_task("merge").locations
    assert locations["lake_root"] == str(tmp_path / "home" / "shop" / "lake")
    assert dag.get_task("open_window").database_id == "shop"


def test_the_readme_shows_the_own_pipeline_dag_as_it_is() -> None:
    readme = (ROOT / "README.md").read_text()
    assert DAG_FILE.read_text().strip() in readme
