"""Run by tests/e2e/test_pipeline_pages_airflow2.py in the Airflow 2.11 virtualenv: the webserver app's
Flask test client signs users in and requests the pipeline pages and the connection forms; what each
response showed is printed as one JSON object.

Users: ``admin`` (Admin), ``ana`` (may read the DAG ``orders_to_lake`` only) and ``ben`` (may read
``payments_to_lake`` only); each may use the website and the menu item.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from airflow.www.app import create_app

DAGS = {"ana": "orders_to_lake", "ben": "payments_to_lake"}


def pipelines(html: str) -> list[str]:
    return re.findall(r'<tr class="pipeline" data-pipeline="([^"]+)"', html)


def windows(html: str) -> list[str]:
    return re.findall(r'<tr class="window" data-window="[^"]+" data-state="([^"]+)"', html)


def failures(html: str) -> list[list[str]]:
    return [list(found) for found in re.findall(r'<div class="failure"><a href="([^"]+)">([^<]+)</a>', html)]


def main() -> dict[str, Any]:
    app = create_app(testing=True)
    app.config["WTF_CSRF_ENABLED"] = False
    sm = app.appbuilder.sm
    with app.app_context():
        for user, dag_id in DAGS.items():
            role = sm.add_role(f"{user}_readers")
            granted = [("can_read", f"DAG:{dag_id}"), ("can_read", "Website"), ("menu_access", "Browse"),
                       ("menu_access", "CDC pipelines")]  # fmt: skip
            for action, resource in granted:
                sm.add_permission_to_role(role, sm.create_permission(action, resource))
            sm.add_user(user, user, "user", f"{user}@example.com", role, password=f"{user}-pass")
        admin = sm.find_role("Admin")
        sm.add_user("admin", "admin", "user", "admin@example.com", admin, password="admin-pass")

    def signed_in(user: str) -> Any:
        client = app.test_client()
        response = client.post("/login/", data={"username": user, "password": f"{user}-pass"})
        assert response.status_code == 302, response.status_code
        return client

    seen: dict[str, Any] = {}
    anonymous = app.test_client().get("/cdc/pipelines/orders")
    seen["anonymous"] = [anonymous.status_code, anonymous.headers.get("Location", "")]
    for user in ("ana", "ben", "admin"):
        client = signed_in(user)
        listed = client.get("/cdc/")
        page = client.get("/cdc/pipelines/orders")
        html = page.get_data(as_text=True)
        seen[user] = {
            "list": [listed.status_code, pipelines(listed.get_data(as_text=True))],
            "orders": [page.status_code, windows(html), failures(html)],
            "orders_text": re.sub(r"<[^>]+>", " ", html),
            "menu": "CDC pipelines" in client.get("/home").get_data(as_text=True),
        }
    admin = signed_in("admin")
    older = re.search(r'href="([^"]*older=[^"]*)"', admin.get("/cdc/pipelines/orders").get_data(as_text=True))
    seen["bad_page"] = admin.get("/cdc/pipelines/orders?older=1;drop").status_code
    seen["older_link"] = older.group(1) if older else None
    seen["connection_forms"] = connection_forms(admin)
    return seen


def connection_forms(client: Any) -> dict[str, Any]:
    """The connection form's fields, and what the hooks read from connections saved with them."""
    from airflow_provider_cdc.hooks.dataproc import DataprocJobsHook
    from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
    from airflow_provider_cdc.sources.tablestore import connection as tablestore

    form = client.get("/connection/add").get_data(as_text=True)
    labels = {name: name in form for name in ("SQLAlchemy URL", "Instance", "STS token", "Spark properties",
                                               "Staging folder", "Wait timeout (seconds)")}  # fmt: skip
    saved = {}
    table_store = {"host": "https://orders.cn-hangzhou.ots.aliyuncs.com", "login": "LTAIid",
                   "password": "key-secret", "instance": "orders", "sts_token": "sts"}  # fmt: skip
    dataproc = {"project_id": "my-project", "region": "us-central1", "staging_uri": "gs://bucket/jobs",
                "properties": "spark.executor.cores=2; a=b", "labels": "team=data",
                "wait_timeout_seconds": "600"}  # fmt: skip
    for conn_id, conn_type, fields in (
        ("ui_metastore", "cdc_metastore", {"sqlalchemy_url": sys.argv[1]}),
        ("ui_tablestore", "tablestore", table_store),
        ("ui_dataproc", "dataproc", dataproc),
    ):
        data = {"conn_id": conn_id, "conn_type": conn_type}
        for name, value in fields.items():
            own = name not in ("host", "login", "password")
            data[f"extra__{conn_type}__{name}" if own else name] = value
        saved[conn_id] = client.post("/connection/add", data=data).status_code
    given: dict[str, Any] = {}
    tablestore.TablestoreStreamClient = lambda **kwargs: given.update(kwargs) or kwargs  # type: ignore[assignment]
    tablestore.TablestoreHook("ui_tablestore").get_conn()
    placement = DataprocJobsHook("ui_dataproc").placement
    return {
        "labels": labels,
        "saved": saved,
        "metastore_url": CdcMetastoreHook("ui_metastore").get_url(),
        "tablestore": given,
        "dataproc": [dict(placement.properties), dict(placement.labels), placement.wait_timeout_seconds],
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(main()))
