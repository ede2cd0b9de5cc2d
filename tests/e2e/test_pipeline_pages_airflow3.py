"""The pipeline pages in the real Airflow 3 UI, looked at in headless Chromium.

An ``airflow api-server`` with an Airflow home of its own (SimpleAuthManager, users and passwords from
configuration, two teams each owning a DAG bundle, so a team's viewer may read only its DAGs) serves a
metastore holding two pipelines recorded through the Metastore API: ``orders`` (three windows applied,
the fourth reading in its second attempt after Airflow's run of it failed in its ``merge`` task, run by
``airflow dags test``) and ``payments``. A viewer of team A finds *CDC pipelines* in the *Browse*
menu, sees ``orders`` and not ``payments``, opens it and reads its windows, the failed window's pointer
to the task that failed (followed to Airflow's task page), the apply watermarks, the units in flight and
both plots; a viewer of team B sees only ``payments``, and the page of ``orders`` is not found for
them. The screenshot is kept under the test's directory and in ``.cache/test-artefacts/``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_provider_cdc.core.timestamps import to_micros
from airflow_provider_cdc.metastore import Metastore
from tests.conftest import free_port
from tests.support.chromium import CHROMIUM, Chromium, Page
from tests.support.clock import ManualClock
from tests.support.pipeline_pages import READER, T0, record_pipeline

REPO = Path(__file__).resolve().parents[2]
ARTEFACTS = REPO / ".cache" / "test-artefacts"
AIRFLOW = Path(sys.executable).parent / "airflow"
USERS = {"admin": ("admin", None, "admin-pass"), "ana": ("viewer", "team_a", "ana-pass"),
         "ben": ("viewer", "team_b", "ben-pass")}  # fmt: skip

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"{CHROMIUM} is missing: the pages are looked at in headless Chromium; install Debian's package "
    "chromium (scripts/setup.sh does, as root)",
)

DAG_FILE = '''
"""A pipeline DAG of {team}: its merge fails on the window [00:30, 00:40)."""
from datetime import datetime, timedelta, timezone

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, Param
from airflow.timetables.interval import DeltaDataIntervalTimetable

with DAG(
    "{dag_id}",
    schedule=DeltaDataIntervalTimetable(timedelta(minutes=10)),
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    params={{"pipeline_id": Param("{pipeline}", type="string")}},
):
    open_window = BashOperator(task_id="open_window", bash_command="sleep 1")
    merge = BashOperator(
        task_id="merge",
        bash_command=(
            "{{% if data_interval_start.minute == 30 %}}"
            "echo 'merge of {{{{ params.pipeline_id }}}}: unit token-b staged 3 of 4 files' >&2; exit 1"
            "{{% else %}}sleep 2{{% endif %}}"
        ),
        retries=0,
    )
    open_window >> merge
'''


@dataclass
class UiHome:
    root: Path
    env: dict[str, str]
    url: str

    def token(self, user: str) -> str:
        """A JWT of ``user`` from the API server (``POST /auth/token``, as the login form gets one)."""
        body = json.dumps({"username": user, "password": USERS[user][2]}).encode()
        request = urllib.request.Request(
            f"{self.url}/auth/token", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)["access_token"]


def _airflow(env: dict[str, str], log: Path, *args: str, ok: tuple[int, ...] = (0,)) -> str:
    with log.open("w") as out:
        code = subprocess.run([str(AIRFLOW), *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                              timeout=600, check=False).returncode  # fmt: skip
    text = log.read_text(errors="replace")
    assert code in ok, f"airflow {' '.join(args)} exited with {code}:\n{text[-3000:]}"
    return text


def _environment(root: Path, port: int, metastore_url: str) -> dict[str, str]:
    bundles = [
        {"name": f"{team}_dags", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
         "kwargs": {"path": str(root / "dags" / team)}, "team_name": team}
        for team in ("team_a", "team_b")
    ]  # fmt: skip
    passwords = root / "airflow" / "passwords.json"
    passwords.parent.mkdir(parents=True)
    passwords.write_text(json.dumps({user: password for user, (_r, _t, password) in USERS.items()}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "CDC_"))}
    env.update(
        AIRFLOW_HOME=str(root / "airflow"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(root / "dags"),
        AIRFLOW__CORE__MULTI_TEAM="True",
        AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST=json.dumps(bundles),
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=",".join(
            ":".join(part for part in (user, role, team) if part) for user, (role, team, _p) in USERS.items()
        ),
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords),
        AIRFLOW__API_AUTH__JWT_SECRET="pipeline-pages-test-" + "0" * 24,
        AIRFLOW__API__PORT=str(port),
        AIRFLOW_CONN_CDC_METASTORE_DEFAULT=json.dumps(
            {"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": metastore_url}}
        ),
        PATH=os.pathsep.join([str(AIRFLOW.parent), os.environ.get("PATH", "")]),
    )
    return env


def _wait_healthy(url: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 180
    while True:
        assert server.poll() is None, f"the API server exited:\n{log.read_text(errors='replace')[-3000:]}"
        try:
            with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=5):
                return
        except (urllib.error.URLError, OSError):
            assert time.monotonic() < deadline, "the API server did not answer in 3 minutes"
            time.sleep(1)


@pytest.fixture(scope="module")
def ui_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiHome]:
    root = tmp_path_factory.mktemp("pipeline-pages")
    dags = (("team_a", "orders_to_lake", "orders"), ("team_b", "payments_to_lake", "payments"))
    for team, dag_id, pipeline in dags:
        folder = root / "dags" / team
        folder.mkdir(parents=True)
        (folder / f"{dag_id}.py").write_text(
            textwrap.dedent(DAG_FILE.format(team=team, dag_id=dag_id, pipeline=pipeline))
        )
    port, metastore_url = free_port(), f"sqlite:///{root / 'cdc_metastore.db'}"
    env = _environment(root, port, metastore_url)
    _airflow(env, root / "db-migrate.log", "db", "migrate")
    for team in ("team_a", "team_b"):
        _airflow(env, root / f"teams-{team}.log", "teams", "create", team)
    _airflow(env, root / "reserialize.log", "dags", "reserialize")

    clock = ManualClock(to_micros(T0))
    store = Metastore(metastore_url, clock=clock)
    store.create_schema()
    orders = record_pipeline(store, clock, "orders")
    record_pipeline(store, clock, "payments", windows=2, last_reading=False, tables={"delta": ["Payments"]})
    store.dispose()
    # Airflow's runs: the last applied window's succeeded, the reading window's failed at its merge
    applied_end, failed_end = orders.windows[2][1].isoformat(), orders.windows[3][1].isoformat()
    _airflow(env, root / "run-applied.log", "dags", "test", "orders_to_lake", applied_end)
    failed = _airflow(env, root / "run-failed.log", "dags", "test", "orders_to_lake", failed_end, ok=(0, 1))
    assert "DagRun failed" in failed or "state=failed" in failed, failed[-3000:]

    log = root / "api-server.log"
    with log.open("w") as out:
        server = subprocess.Popen([str(AIRFLOW), "api-server", "--port", str(port)], env=env, stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, server, log)
        yield UiHome(root, env, url)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Chromium]:
    chromium = Chromium(tmp_path / "chromium-profile")
    try:
        yield chromium
    finally:
        chromium.stop()


FRAME = "(document.querySelector('iframe') && document.querySelector('iframe').contentDocument)"


def signed_in(browser: Chromium, home: UiHome, user: str) -> Page:
    page = browser.new_page()
    page.set_cookie("_token", home.token(user), home.url)  # the cookie the login form sets
    return page


def open_from_the_browse_menu(page: Page, home: UiHome) -> list[str]:
    """Open *Browse* → *CDC pipelines* in Airflow's UI; the pipelines the page in it lists."""
    page.navigate(f"{home.url}/")
    browse = "Array.from(document.querySelectorAll('button')).find(b => b.innerText.trim() === 'Browse')"
    page.wait_for(f"!!{browse}", what="the Browse menu of Airflow's navigation")
    item = (
        "Array.from(document.querySelectorAll('[role=menuitem]'))"
        ".find(e => e.innerText.trim() === 'CDC pipelines')"
    )
    # As a user does: open the menu and click the item, again if the UI, still rendering, dropped a click.
    page.wait_for(
        f"""(() => {{
            if (location.pathname === '/plugin/cdc-pipelines') return true;
            const item = {item};
            if (item) item.click();
            else if (!document.querySelector('[role=menu]')) {browse}.click();
            return false;
        }})()""",
        what="the plugin's page in Airflow's UI, from Browse → CDC pipelines",
    )
    page.wait_for(f"!!({FRAME} && {FRAME}.querySelector('#cdc-pipelines'))", what="the page in its frame")
    rows = f"{FRAME}.querySelectorAll('#pipelines tr.pipeline')"
    listed = page.evaluate(f"Array.from({rows}, r => r.dataset.pipeline)")
    assert listed, page.evaluate(f"{FRAME}.body.innerText")
    return listed


PIPELINE_PAGE = f"""(() => {{
  const d = {FRAME};
  if (!d || !d.querySelector('#cdc-pipeline')) return null;
  const cells = (r) => Array.from(r.cells, c => c.innerText.trim());
  const rows = (selector) => Array.from(d.querySelectorAll(selector), cells);
  const failure = d.querySelector('#windows .failure a');
  return {{
    pipeline: d.querySelector('#cdc-pipeline').dataset.pipeline,
    state: d.querySelector('#summary .state').innerText.trim(),
    windows: Array.from(d.querySelectorAll('#windows tr.window'), r => [r.dataset.state, ...cells(r)]),
    failure: failure && [failure.innerText.trim(), failure.getAttribute('href')],
    tables: rows('#tables tr.table'),
    units: rows('#units tr.unit'),
    lagPoints: d.querySelectorAll('#lag-chart svg .point').length,
    rowPoints: d.querySelectorAll('#rows-chart svg .point').length,
    lagValues: Array.from(d.querySelectorAll('#lag-chart svg .point'), p => Number(p.dataset.y)),
  }};
}})()"""


def test_a_team_viewer_sees_its_pipeline_and_where_its_failed_window_broke(
    ui_home: UiHome, browser: Chromium, tmp_path: Path
) -> None:
    page = signed_in(browser, ui_home, "ana")
    assert open_from_the_browse_menu(page, ui_home) == ["orders"]  # not team B's payments
    listed = page.evaluate(f"{FRAME}.querySelector('#pipelines tr.pipeline').innerText")
    assert "orders_to_lake" in listed and "OrdersStream" in listed and "bigquery, delta" in listed
    assert "failed: task merge failed (try 1)" in listed

    page.evaluate(f"{FRAME}.querySelector('#pipelines a').click()")
    shown = page.wait_for(PIPELINE_PAGE, what="the pipeline's page in the frame")
    page.screenshot(tmp_path / "pipeline-page.png", ARTEFACTS / "pipeline-page-airflow3.png", scale=0.7)

    assert shown["pipeline"] == "orders"
    assert shown["state"].startswith("window [2026-01-01 00:30:00, 2026-01-01 00:40:00) failed")
    windows = shown["windows"]
    assert [(w[0], w[1], w[4]) for w in windows] == [
        ("failed", "2026-01-01 00:30:00", "2"), ("applied", "2026-01-01 00:20:00", "1"),
        ("applied", "2026-01-01 00:10:00", "1"), ("applied", "2026-01-01 00:00:00", "1"),
    ]  # fmt: skip
    assert windows[1][5:8] == ["190", "47", "95"]  # rows, transactions, keys
    # each step of the applied window's run, in seconds as people read them
    assert "open_window" in windows[1][-1] and "merge 2" in windows[1][-1], windows[1][-1]
    text, link = shown["failure"]
    assert text == "task merge failed (try 1); the error is in its log"
    assert link.startswith("/dags/orders_to_lake/runs/") and link.endswith("/tasks/merge")
    assert shown["tables"] == [
        ["bigquery", "Orders", "2026-01-01 00:30:00", shown["tables"][0][3]],
        ["delta", "Customers", "2026-01-01 00:30:00", shown["tables"][0][3]],
        ["delta", "Orders", "2026-01-01 00:30:00", shown["tables"][0][3]],
    ]
    assert shown["tables"][0][3].endswith(" d")  # months behind: days
    assert [unit[2:5] for unit in shown["units"]] == [["token-b", "running", READER]]
    assert (shown["lagPoints"], shown["rowPoints"]) == (3, 3)
    assert shown["lagValues"] == [133, 163, 193]

    # the pointer leads to Airflow's page of the task that failed
    page.navigate(ui_home.url + link)
    page.wait_for(
        "document.body.innerText.includes('merge') && document.body.innerText.includes('Failed')",
        what="Airflow's page of the failed merge task",
    )


def test_a_viewer_of_another_team_does_not_see_the_pipeline(ui_home: UiHome, browser: Chromium) -> None:
    page = signed_in(browser, ui_home, "ben")
    assert open_from_the_browse_menu(page, ui_home) == ["payments"]
    page.navigate(f"{ui_home.url}/cdc/pipelines/orders")
    body = page.wait_for("document.body && document.body.innerText.trim()", what="the pipeline page")
    assert body == "No pipeline 'orders' is run by a DAG you may read."
    admin = signed_in(browser, ui_home, "admin")
    admin.navigate(f"{ui_home.url}/cdc/")
    listed = admin.wait_for(
        "(() => { const r = document.querySelectorAll('#pipelines tr.pipeline');"
        " return r.length ? Array.from(r, e => e.dataset.pipeline) : null; })()"
    )
    assert listed == ["orders", "payments"]


def test_the_pages_ask_for_a_login_first(ui_home: UiHome, browser: Chromium) -> None:
    page = browser.new_page()
    page.clear_cookies()
    page.navigate(f"{ui_home.url}/cdc/pipelines/orders")
    location = page.wait_for("location.pathname.startsWith('/auth/login') && location.href", what="the login")
    assert "next=" in location and "orders" not in page.evaluate("document.body.innerText")
