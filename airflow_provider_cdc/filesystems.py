"""One resolver from a location (absolute local path or URI) to a pyarrow filesystem and path.

Staging, change sets and the Spark jobs all open their files here, with the same credentials as the
targets' tables: the object-store client's storage options (``google_service_account_key``, the key
JSON, or ``google_service_account``, a key file path; none means Application Default Credentials).
Airflow tasks build them from the Google connection (:mod:`airflow_provider_cdc.hooks.storage`) and
hand them to Spark jobs through the environment variable :data:`STORAGE_OPTIONS_ENV`, never on a
command line.

- local paths and ``file://`` URIs: the local filesystem;
- ``gs://`` with ``STORAGE_EMULATOR_HOST`` set: pyarrow's Cloud Storage client against that emulator,
  anonymously (as Google's client libraries do);
- ``gs://`` without storage options: pyarrow's Cloud Storage client with Application Default
  Credentials;
- any other object-store URI, and ``gs://`` with storage options: the object-store client (delta-rs,
  a library; the same client a target's tables may be written with).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

STORAGE_OPTIONS_ENV = "CDC_STORAGE_OPTIONS"


class StorageOptionsError(ValueError):
    """Storage options that cannot be used (the message never holds their values)."""


def is_local(location: str) -> bool:
    """Whether ``location`` is a local path or a ``file://`` URI."""
    scheme = urlparse(location).scheme
    return len(scheme) <= 1 or scheme == "file"  # a one-letter scheme is a Windows drive


def resolve(
    location: str, storage_options: Mapping[str, str] | None = None
) -> tuple[pafs.FileSystem, str]:
    """The filesystem holding ``location`` and the path of ``location`` in it.

    Paths of the object-store client are relative to ``location`` (the returned path is ``""``).
    """
    if not isinstance(location, str) or not location.strip():
        raise ValueError(f"a location must be a non-empty path or URI, got {location!r}")
    location = location.strip()
    parsed = urlparse(location)
    if is_local(location):
        local = parsed.path if parsed.scheme == "file" else location
        return pafs.LocalFileSystem(), os.path.abspath(local).rstrip("/") or "/"
    emulator = os.environ.get("STORAGE_EMULATOR_HOST", "").strip()
    if parsed.scheme == "gs" and (emulator or not storage_options):
        path = f"{parsed.netloc}{parsed.path}".rstrip("/")
        if emulator:
            endpoint = urlparse(emulator if "://" in emulator else f"http://{emulator}")
            gcs = pafs.GcsFileSystem(
                anonymous=True, endpoint_override=endpoint.netloc, scheme=endpoint.scheme or "http"
            )
            return gcs, path
        return pafs.GcsFileSystem(), path
    return pafs.PyFileSystem(_object_store_handler(location.rstrip("/"), storage_options)), ""


def _object_store_handler(location: str, storage_options: Mapping[str, str] | None) -> Any:
    """The object-store client as a pyarrow filesystem handler whose output streams accept what
    pyarrow writes (its own ``pyarrow.Buffer`` objects as well as ``bytes``)."""
    from deltalake.fs import DeltaStorageHandler

    class _Handler(DeltaStorageHandler):
        def open_output_stream(self, path: str, metadata: Mapping[str, str] | None = None) -> Any:
            import pyarrow as pa

            return pa.PythonFile(_BytesSink(self._handler.open_output_stream(path, metadata)), mode="w")

    return _Handler(location, options=dict(storage_options or {}))


class _BytesSink:
    """A writable stream that hands the object store ``bytes``, whatever buffer it is given."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def write(self, data: Any) -> Any:
        return self._inner.write(data if isinstance(data, bytes) else bytes(memoryview(data)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def join(base: str, *parts: str) -> str:
    """``base`` and ``parts`` joined with ``/`` (an empty ``base``, an object store's root, adds nothing)."""
    return "/".join([base.rstrip("/")] + [p.strip("/") for p in parts]) if base else "/".join(
        p.strip("/") for p in parts
    )


def storage_options_from_env(environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """Storage options from :data:`STORAGE_OPTIONS_ENV` (``None`` when unset or empty)."""
    raw = (os.environ if environ is None else environ).get(STORAGE_OPTIONS_ENV, "").strip()
    if not raw:
        return None
    try:
        options = json.loads(raw)
    except json.JSONDecodeError:
        # The value holds credentials: report where the problem is, not the value.
        raise StorageOptionsError(f"{STORAGE_OPTIONS_ENV} is not valid JSON") from None
    if not isinstance(options, dict) or not all(isinstance(k, str) for k in options):
        raise StorageOptionsError(f"{STORAGE_OPTIONS_ENV} must be a JSON object of option name to value")
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in options.items()}


def storage_environment(storage_options: Mapping[str, str] | None) -> dict[str, str]:
    """``{STORAGE_OPTIONS_ENV: json}`` for a job's environment (empty without options)."""
    return {STORAGE_OPTIONS_ENV: json.dumps(dict(storage_options))} if storage_options else {}
