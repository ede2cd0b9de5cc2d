"""Storage credentials from an Airflow Google Cloud connection, for every location a pipeline uses.

Staging, change sets, the targets' tables and the Spark jobs all open their locations with the
storage options built here (:mod:`airflow_provider_cdc.filesystems`), so a pipeline reads and
writes with one identity: the DAG's ``gcp_conn_id``.

The default connection (:data:`DEFAULT_GCP_CONN_ID`) is only read for a location on an object store
(``gs://``, ``s3://`` …), and when it is not defined the storage clients use Application Default
Credentials: a pipeline on local paths needs no Google connection. A connection named otherwise is
always read, and must exist (``ConnectionNotDefinedError``, which fails a task without retries).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_provider_cdc._compat import mask_secret
from airflow_provider_cdc._errors import ConfigurationError
from airflow_provider_cdc.hooks.connections import defined_connection

#: The Google Cloud connection every window step uses unless given another ``gcp_conn_id``.
DEFAULT_GCP_CONN_ID = "google_cloud_default"
ImpersonationChain = str | Sequence[str] | None

_EXTRA_PREFIX = "extra__google_cloud_platform__"
_UNSUPPORTED_GCP_FIELDS = (
    "key_secret_name",
    "credential_config_file",
    "impersonation_chain",
    "idp_issuer_url",
    "is_anonymous",
)


def on_object_store(locations: Iterable[str | None]) -> bool:
    """Whether any of ``locations`` (absolute paths or URIs; ``None`` skipped) is on an object store."""
    from airflow_provider_cdc.filesystems import is_local

    return any(location and not is_local(str(location)) for location in locations)


def storage_connection(gcp_conn_id: str | None, locations: Iterable[str | None]) -> str | None:
    """The connection whose credentials open ``locations``: ``gcp_conn_id``, except the default
    connection for locations that are all local (``None``: no connection is read)."""
    if not gcp_conn_id or (gcp_conn_id == DEFAULT_GCP_CONN_ID and not on_object_store(locations)):
        return None
    return gcp_conn_id


def gcp_storage_options(
    extras: Mapping[str, Any], impersonation_chain: ImpersonationChain = None
) -> dict[str, str]:
    """Storage options from a Google Cloud connection's extras.

    ``keyfile_dict`` becomes ``google_service_account_key`` (the key JSON), ``key_path``
    becomes ``google_service_account`` (a key file path on the worker); with neither, Application
    Default Credentials (e.g. workload identity) are used and no option is set. Other credential
    sources of the connection, and an ``impersonation_chain`` (the storage clients take no
    short-lived token), are refused with the field's name.
    """

    def field(name: str) -> Any:
        value = extras.get(name)
        return extras.get(_EXTRA_PREFIX + name) if value in (None, "") else value

    unsupported = [name for name in _UNSUPPORTED_GCP_FIELDS if field(name) not in (None, "", False)]
    if impersonation_chain and "impersonation_chain" not in unsupported:
        unsupported.append("impersonation_chain")
    if unsupported:
        raise ValueError(
            f"Google Cloud connection field(s) {unsupported} cannot be passed to the storage clients; "
            "use 'keyfile_dict', 'key_path' or Application Default Credentials (to act as another "
            "service account on an object store, give the worker that identity, e.g. workload identity)"
        )
    keyfile_dict, key_path = field("keyfile_dict"), field("key_path")
    if keyfile_dict and key_path:
        raise ValueError("Google Cloud connection sets both 'keyfile_dict' and 'key_path'; keep one")
    if keyfile_dict:
        if isinstance(keyfile_dict, str):
            try:
                keyfile_dict = json.loads(keyfile_dict)
            except json.JSONDecodeError:
                raise ValueError("Google Cloud connection field 'keyfile_dict' is not valid JSON") from None
        if not isinstance(keyfile_dict, Mapping):
            raise ValueError("Google Cloud connection field 'keyfile_dict' must be a JSON object")
        return {"google_service_account_key": json.dumps(dict(keyfile_dict))}
    if key_path:
        if str(key_path).endswith(".p12"):
            raise ValueError("Google Cloud connection field 'key_path' names a P12 key; use a JSON key file")
        return {"google_service_account": str(key_path)}
    return {}


def google_connection(gcp_conn_id: str, logger: Any = None) -> Any | None:
    """The Google Cloud connection ``gcp_conn_id``; ``None`` for a missing ``google_cloud_default``
    (Application Default Credentials, logged); any other missing connection raises
    ``ConnectionNotDefinedError``."""
    return defined_connection(
        gcp_conn_id,
        "gcp_conn_id",
        default=DEFAULT_GCP_CONN_ID,
        default_means="Google clients use Application Default Credentials",
        logger=logger,
    )


def gcs_client(gcp_conn_id: str, impersonation_chain: ImpersonationChain = None, logger: Any = None) -> Any:
    """A ``google.cloud.storage`` client with the identity of ``gcp_conn_id`` (the google provider's
    ``GCSHook``); without a ``google_cloud_default`` connection, Application Default Credentials (an
    ``impersonation_chain`` then needs the connection: refused)."""
    if google_connection(gcp_conn_id, logger) is None:
        if impersonation_chain:
            raise ConfigurationError(
                f"impersonation_chain needs the Google Cloud connection {gcp_conn_id!r} (gcp_conn_id), "
                "which is not defined: define it, or drop impersonation_chain"
            )
        from google.cloud import storage

        return storage.Client()
    from airflow.providers.google.cloud.hooks.gcs import GCSHook

    return GCSHook(gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain).get_conn()


def storage_options(
    gcp_conn_id: str | None, impersonation_chain: ImpersonationChain = None
) -> dict[str, str]:
    """Storage options of an Airflow Google connection (empty without one, or when the default
    connection is not defined: Application Default Credentials); every secret in them is masked in
    task logs. The connection is read as the google provider's hooks read it, with
    ``impersonation_chain``; a chain (given, or in the connection) is refused, see
    :func:`gcp_storage_options`."""
    if not gcp_conn_id or google_connection(gcp_conn_id) is None:
        return {}
    from airflow.providers.google.common.hooks.base_google import GoogleBaseHook

    hook = GoogleBaseHook(gcp_conn_id=gcp_conn_id, impersonation_chain=impersonation_chain)
    options = gcp_storage_options(hook.extras, hook.impersonation_chain)
    for value in options.values():
        mask_secret(value)
    key = options.get("google_service_account_key")
    if key:
        for secret in ("private_key", "private_key_id"):
            if json.loads(key).get(secret):
                mask_secret(json.loads(key)[secret])
    return options


def storage_environment(
    gcp_conn_id: str | None, impersonation_chain: ImpersonationChain = None
) -> dict[str, str]:
    """The connection's storage options as a job's environment (masked; empty without options)."""
    from airflow_provider_cdc.filesystems import storage_environment as environment

    env = environment(storage_options(gcp_conn_id, impersonation_chain))
    for value in env.values():
        mask_secret(value)
    return env
