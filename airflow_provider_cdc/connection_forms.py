"""The connection forms of the provider's connection types, declared once.

Each :class:`ConnectionForm` says which standard fields a type hides or relabels and which fields of
its own it adds (stored in the connection's extra under their names, the names the hooks read), with
labels, hints and examples. Airflow 3 reads them from the provider info (``conn-fields`` and
``ui-field-behaviour``, :meth:`ConnectionForm.provider_info`); Airflow 2.11 from the registered hook
class (``get_connection_form_widgets`` and ``get_ui_field_behaviour``, :mod:`.connection_types`).
Nothing here imports a hook: the provider info stays quick to read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_cdc.placement.dataproc.resources import DATAPROC_CONNECTION_TYPE

_KINDS = ("string", "password", "integer")


@dataclass(frozen=True)
class FormField:
    """A field of a connection's own, kept in its extra under ``name``."""

    name: str
    label: str
    hint: str
    #: ``string``, ``password`` (masked, never shown again) or ``integer``
    kind: str = "string"
    example: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"form field {self.name!r}: kind {self.kind!r} is not one of {_KINDS}")

    @property
    def description(self) -> str:
        return f"{self.hint} (e.g. {self.example})" if self.example else self.hint


@dataclass(frozen=True)
class ConnectionForm:
    """The form of one connection type."""

    connection_type: str
    hook_name: str
    hook_class_name: str
    fields: tuple[FormField, ...]
    #: standard fields (host, schema, login, password, port, extra) the form hides
    hidden: tuple[str, ...]
    relabeling: Mapping[str, str] = field(default_factory=dict)
    #: examples shown in empty standard fields
    placeholders: Mapping[str, str] = field(default_factory=dict)

    def field_behaviour(self) -> dict[str, Any]:
        """``get_ui_field_behaviour()``: hidden and relabelled fields, placeholders of every field."""
        placeholders = dict(self.placeholders)
        placeholders.update({f.name: f.example for f in self.fields if f.example})
        return {
            "hidden_fields": list(self.hidden),
            "relabeling": dict(self.relabeling),
            "placeholders": placeholders,
        }

    def conn_fields(self) -> dict[str, Any]:
        """The provider info's ``conn-fields`` (Airflow 3)."""
        declared: dict[str, Any] = {}
        for f in self.fields:
            schema: dict[str, Any] = {"type": ["integer" if f.kind == "integer" else "string", "null"]}
            if f.kind == "password":
                schema["format"] = "password"
            declared[f.name] = {"label": f.label, "description": f.description, "schema": schema}
        return declared

    def provider_info(self) -> dict[str, Any]:
        """This type's entry of the provider info's ``connection-types``."""
        behaviour = self.field_behaviour()
        return {
            "connection-type": self.connection_type,
            "hook-class-name": self.hook_class_name,
            "hook-name": self.hook_name,
            "conn-fields": self.conn_fields(),
            "ui-field-behaviour": {
                "hidden-fields": behaviour["hidden_fields"],
                "relabeling": behaviour["relabeling"],
                "placeholders": behaviour["placeholders"],
            },
        }

    def widgets(self) -> dict[str, Any]:
        """``get_connection_form_widgets()``: the WTForms fields of Airflow 2.11's form."""
        from flask_appbuilder.fieldwidgets import BS3PasswordFieldWidget, BS3TextFieldWidget
        from flask_babel import lazy_gettext
        from wtforms import IntegerField, PasswordField, StringField
        from wtforms.validators import NumberRange, Optional

        widgets: dict[str, Any] = {}
        for f in self.fields:
            label, description = lazy_gettext(f.label), f.description
            if f.kind == "password":
                widgets[f.name] = PasswordField(
                    label, widget=BS3PasswordFieldWidget(), description=description
                )
            elif f.kind == "integer":
                widgets[f.name] = IntegerField(
                    label, validators=[Optional(), NumberRange(min=1)], widget=BS3TextFieldWidget(),
                    description=description,
                )  # fmt: skip
            else:
                widgets[f.name] = StringField(label, widget=BS3TextFieldWidget(), description=description)
        return widgets


_MODULE = "airflow_provider_cdc.connection_types"

METASTORE_FORM = ConnectionForm(
    connection_type="cdc_metastore",
    hook_name="CDC Metastore",
    hook_class_name=f"{_MODULE}.CdcMetastoreConnectionHook",
    fields=(
        FormField(
            "sqlalchemy_url",
            "SQLAlchemy URL",
            "The metastore's PostgreSQL or SQLite database; kept masked, as it may hold a password",
            kind="password",
            example="postgresql+psycopg2://cdc@db-host:5432/cdc or sqlite:////var/lib/airflow/cdc.db",
        ),
    ),
    hidden=("host", "schema", "login", "password", "port", "extra"),
)

TABLESTORE_FORM = ConnectionForm(
    connection_type="tablestore",
    hook_name="Alibaba Cloud Table Store",
    hook_class_name=f"{_MODULE}.TablestoreConnectionHook",
    fields=(
        FormField(
            "instance",
            "Instance",
            "The Table Store instance; empty: the first label of the endpoint's host",
            example="my-instance",
        ),
        FormField(
            "sts_token",
            "STS token",
            "A Security Token Service token, with a temporary AccessKey pair; empty for a permanent pair",
            kind="password",
        ),
    ),
    hidden=("schema", "port", "extra"),
    relabeling={"host": "Endpoint", "login": "AccessKey ID", "password": "AccessKey Secret"},
    placeholders={"host": "https://my-instance.cn-hangzhou.ots.aliyuncs.com", "login": "LTAI..."},
)

DATAPROC_FORM = ConnectionForm(
    connection_type=DATAPROC_CONNECTION_TYPE,
    hook_name="Dataproc (CDC merge and upsert jobs)",
    hook_class_name=f"{_MODULE}.DataprocConnectionHook",
    fields=(
        FormField("project_id", "Project ID", "The Google Cloud project of the jobs", example="my-project"),
        FormField("region", "Region", "The Dataproc region", example="us-central1"),
        FormField(
            "staging_uri",
            "Staging folder",
            "A gs:// folder the jobs' files are staged in (the jobs must be able to read it)",
            example="gs://my-bucket/dataproc",
        ),
        FormField(
            "cluster_name",
            "Cluster",
            "A cluster to submit the jobs to; empty: each job is a Dataproc Serverless batch",
            example="cdc",
        ),
        FormField(
            "properties",
            "Spark properties",
            "Spark properties of every job, key=value separated by semicolons (or a JSON object)",
            example="spark.executor.memory=4g; spark.executor.cores=2",
        ),
        FormField("runtime_version", "Serverless runtime version", "Batches only", example="2.2"),
        FormField(
            "container_image", "Container image", "Batches only: a custom container image",
            example="us-docker.pkg.dev/my-project/spark/cdc:1",
        ),  # fmt: skip
        FormField(
            "service_account", "Service account", "The service account batches run as",
            example="cdc-jobs@my-project.iam.gserviceaccount.com",
        ),  # fmt: skip
        FormField(
            "subnetwork_uri", "Subnetwork", "Batches only: the subnetwork they run in",
            example="projects/my-project/regions/us-central1/subnetworks/default",
        ),  # fmt: skip
        FormField(
            "labels", "Labels", "Labels of every job or batch, key=value separated by semicolons",
            example="team=data; env=prod",
        ),  # fmt: skip
        FormField(
            "gcp_conn_id", "Google Cloud connection",
            "The connection whose credentials submit the jobs (default google_cloud_default)",
            example="google_cloud_default",
        ),  # fmt: skip
        FormField(
            "impersonation_chain", "Impersonation chain",
            "A service account to impersonate, or a comma-separated delegation chain",
            example="cdc-submitter@my-project.iam.gserviceaccount.com",
        ),  # fmt: skip
        FormField(
            "wait_timeout_seconds", "Wait timeout (seconds)",
            "Cluster jobs only: how long a task waits for its job; empty: no limit",
            kind="integer", example="3600",
        ),  # fmt: skip
    ),
    hidden=("host", "schema", "login", "password", "port", "extra"),
)

#: Every connection type the provider registers, in the order of its provider info.
CONNECTION_FORMS: tuple[ConnectionForm, ...] = (METASTORE_FORM, TABLESTORE_FORM, DATAPROC_FORM)
