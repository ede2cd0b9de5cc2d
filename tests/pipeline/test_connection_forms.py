"""Every connection type the provider registers has a form (Airflow 3's connection form, as its API
serves it to the UI), and a connection saved from that form is read by its hook as the fields say."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_provider_cdc import get_provider_info
from airflow_provider_cdc.connection_forms import CONNECTION_FORMS

STANDARD = ("host", "schema", "login", "password", "port")


def hook_meta() -> dict[str, Any]:
    """What Airflow 3's API gives the UI's connection form, by connection type."""
    from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService

    HookMetaService.hook_meta_data.cache_clear()
    return {meta.connection_type: meta for meta in HookMetaService.hook_meta_data()}


def saved(conn_id: str, conn_type: str, fields: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
          **standard: Any) -> None:  # fmt: skip
    """A connection as the UI saves it: the form's own fields in its extra, under their names."""
    meta = hook_meta()[conn_type]
    missing = set(fields) - set(meta.extra_fields)
    assert not missing, f"{conn_type}'s form has no field {missing}"
    body = {"conn_type": conn_type, "extra": json.dumps(fields), **standard}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(body))


def test_every_registered_connection_type_has_a_form_with_hints() -> None:
    registered = {entry["connection-type"]: entry for entry in get_provider_info()["connection-types"]}
    assert set(registered) == {form.connection_type for form in CONNECTION_FORMS} == {
        "cdc_metastore", "tablestore", "dataproc"
    }  # fmt: skip
    metas = hook_meta()
    for form in CONNECTION_FORMS:
        meta = metas[form.connection_type]
        registered_class = registered[form.connection_type]["hook-class-name"]
        assert meta.hook_class_name == registered_class == form.hook_class_name
        assert meta.hook_name == form.hook_name
        # every field of the form, labelled and explained; secrets masked
        assert list(meta.extra_fields) == [f.name for f in form.fields]
        for f in form.fields:
            schema = meta.extra_fields[f.name]["schema"]
            assert schema["title"] == f.label and meta.extra_fields[f.name]["description"]
            assert (schema.get("format") == "password") == (f.kind == "password")
        standard = meta.standard_fields
        for name in STANDARD:
            shown = getattr(standard, "url_schema" if name == "schema" else name)
            assert (shown is not None and shown.hidden) == (name in form.hidden), (form.connection_type, name)
        # the hook class Airflow 2.11 asks for the form declares the same behaviour
        hook_class = _import(form.hook_class_name)
        assert hook_class.conn_type == form.connection_type
        assert hook_class.get_ui_field_behaviour() == form.field_behaviour()
        assert "extra" in form.hidden  # nothing needs the raw extra JSON


def _import(path: str) -> Any:
    import importlib

    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def test_the_forms_hints_name_examples() -> None:
    meta = hook_meta()
    url = meta["cdc_metastore"].extra_fields["sqlalchemy_url"]
    assert "postgresql+psycopg2://" in url["description"]
    table_store = meta["tablestore"].standard_fields
    assert (table_store.host.title, table_store.login.title, table_store.password.title) == (
        "Endpoint", "AccessKey ID", "AccessKey Secret"
    )  # fmt: skip
    assert table_store.host.placeholder == "https://my-instance.cn-hangzhou.ots.aliyuncs.com"
    assert meta["dataproc"].extra_fields["wait_timeout_seconds"]["schema"]["type"] == ["integer", "null"]


def test_a_metastore_connection_saved_with_its_url_field_opens_that_database(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook

    url = f"sqlite:///{tmp_path / 'cdc.db'}"
    saved("ui_metastore", "cdc_metastore", {"sqlalchemy_url": url}, monkeypatch)
    with CdcMetastoreHook("ui_metastore") as hook:
        assert hook.get_url() == url
        hook.metastore.record_pipeline("orders", "2026-01-01T00:00:00Z")
    assert (tmp_path / "cdc.db").exists()


def test_a_table_store_connection_saved_with_its_fields_gives_the_client_those_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_provider_cdc.sources.tablestore import connection

    given: dict[str, Any] = {}
    monkeypatch.setattr(connection, "TablestoreStreamClient", lambda **kwargs: given.update(kwargs) or kwargs)
    saved(
        "ui_tablestore", "tablestore", {"instance": "orders-prod", "sts_token": "sts-secret"}, monkeypatch,
        host="https://orders-prod.cn-hangzhou.ots.aliyuncs.com", login="LTAIkey", password="key-secret",
    )  # fmt: skip
    connection.TablestoreHook("ui_tablestore").get_conn()
    assert given == {
        "endpoint": "https://orders-prod.cn-hangzhou.ots.aliyuncs.com",
        "instance": "orders-prod",
        "access_key_id": "LTAIkey",
        "access_key_secret": "key-secret",
        "sts_token": "sts-secret",
    }


def test_a_dataproc_connection_saved_with_its_fields_places_the_jobs_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_provider_cdc.placement.dataproc.hook import DataprocJobsHook

    fields = {
        "project_id": "my-project", "region": "europe-west1", "staging_uri": "gs://bucket/dataproc/",
        "cluster_name": "", "properties": "spark.executor.memory=4g; spark.executor.cores=2",
        "runtime_version": "2.2", "service_account": "jobs@my-project.iam.gserviceaccount.com",
        "labels": "team=data; env=prod", "gcp_conn_id": "google_cloud_jobs",
        "impersonation_chain": "a@my-project.iam.gserviceaccount.com, b@my-project.iam.gserviceaccount.com",
        "wait_timeout_seconds": 3600,
    }  # fmt: skip
    saved("ui_dataproc", "dataproc", fields, monkeypatch)
    placement = DataprocJobsHook("ui_dataproc").placement
    assert placement.serverless
    assert placement.where == "projects/my-project/regions/europe-west1 (Serverless batches)"
    assert placement.staging_uri == "gs://bucket/dataproc"
    assert dict(placement.properties) == {"spark.executor.memory": "4g", "spark.executor.cores": "2"}
    assert dict(placement.labels) == {"team": "data", "env": "prod"}
    assert placement.impersonation_chain == (
        "a@my-project.iam.gserviceaccount.com", "b@my-project.iam.gserviceaccount.com"
    )  # fmt: skip
    assert (placement.gcp_conn_id, placement.wait_timeout_seconds, placement.runtime_version) == (
        "google_cloud_jobs", 3600, "2.2"
    )  # fmt: skip


def test_a_malformed_key_value_field_names_the_field() -> None:
    from airflow_provider_cdc.placement.dataproc.resources import DataprocConnectionError, DataprocPlacement

    extras = {"project_id": "my-project", "region": "us-central1", "staging_uri": "gs://b/s"}
    extras["labels"] = "team"
    with pytest.raises(DataprocConnectionError, match="'labels': expected key=value pairs separated by ';'"):
        DataprocPlacement.from_connection("d", extras)
