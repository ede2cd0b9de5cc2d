"""Names of a pipeline's target tables as Airflow assets, and the extra of their asset events (pure).

A table is named by where it lives, as Airflow's providers name such assets, so a downstream DAG can
schedule on it without knowing the pipeline. Each target names its own tables (its commit part's
``table_names``, see :mod:`airflow_provider_cdc.core.contract.target`): a table stored at a location (a
folder under a root) as that location's URI, :func:`location_table_uri` (``file:///abs/path/Orders``
for a local root, ``gs://bucket/prefix/Orders`` or any other object-store scheme as is); a table of a
service by the URI scheme Airflow's provider for it uses.

Paths are percent-encoded (RFC 3986) so the URI is ASCII, as Airflow 2 requires and Airflow 3 stores
unchanged. The asset's name is its URI (``Asset(uri=...)``): a consumer declaring the same URI, on
either Airflow version, schedules on the same asset.

The tables a window applies are known only when it runs (from its change set), so the commit emits
their events through an asset alias, one per pipeline DAG: :func:`alias_name` (``cdc:{pipeline}``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from airflow_provider_cdc.core.identifiers import validate_identifier, validate_pipeline_id
from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.core.window import Window

__all__ = [
    "ALIAS_PREFIX",
    "AssetNameError",
    "alias_name",
    "bounded_uri",
    "event_extra",
    "location_table_uri",
    "location_uri",
    "table_events",
    "table_identifier",
]

#: The prefix of a pipeline's asset alias name.
ALIAS_PREFIX = "cdc:"

# A URI scheme (RFC 3986); one letter would be a Windows drive.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+$")
# The characters a path keeps unencoded: RFC 3986 unreserved, sub-delims, ':' '@' and '/'.
_PATH_SAFE = "/:@!$&'()*+,;=-._~"
# Airflow's asset identifiers are at most 1500 characters.
_MAX_URI = 1500


class AssetNameError(ValueError):
    """A location, table or dataset that names no asset; the message says which and why."""


def alias_name(pipeline: str) -> str:
    """The asset alias of a pipeline's commits: ``cdc:{pipeline}`` (a valid pipeline id)."""
    try:
        return ALIAS_PREFIX + validate_pipeline_id(pipeline)
    except ValueError as exc:
        raise AssetNameError(f"no asset alias for pipeline {pipeline!r}: {exc}") from None


def location_uri(root: str) -> str:
    """A root location as a URI without a trailing slash: an absolute local path or ``file://`` URI as
    ``file:///...`` (percent-encoded), any other URI (``gs://bucket/prefix``) with its path encoded.

    A relative path, a ``file://`` URI naming a host, an object-store URI without a bucket or a URI
    with a query, fragment or credentials is refused naming the root.
    """
    if not isinstance(root, str) or not root.strip():
        raise AssetNameError(f"root must be a non-empty absolute path or URI, got {root!r}")
    root = root.strip()
    parts = urlsplit(root)
    if parts.query or parts.fragment or "@" in parts.netloc:
        raise AssetNameError(
            f"root {root!r}: an asset URI names a location, without query, fragment or credentials"
        )
    if parts.scheme in ("", "file"):
        path = unquote(parts.path) if parts.scheme == "file" else root
        if parts.scheme == "file" and parts.netloc not in ("", "localhost"):
            raise AssetNameError(f"root {root!r}: a file:// URI names no host (file:///abs/path)")
        if not path.startswith("/"):
            raise AssetNameError(
                f"root {root!r} is relative: an asset names an absolute path (/abs/path or "
                "file:///abs/path), the same for every worker"
            )
        path = re.sub("/{2,}", "/", path).rstrip("/")
        return "file://" + (quote(path, safe=_PATH_SAFE) or "/")
    if not _SCHEME.match(parts.scheme):
        raise AssetNameError(f"root {root!r}: not an absolute path or a URI")
    scheme = parts.scheme.lower()
    if scheme == "airflow":
        raise AssetNameError(f"root {root!r}: the scheme 'airflow' is reserved by Airflow")
    if not parts.netloc:
        raise AssetNameError(f"root {root!r}: a {scheme}:// URI names its bucket (gs://bucket/prefix)")
    path = quote(unquote(parts.path), safe=_PATH_SAFE).rstrip("/")
    return f"{scheme}://{parts.netloc}{path}"


def location_table_uri(root: str, table: str, kind: str) -> str:
    """The asset URI of the ``kind`` table ``table`` stored at ``{root}/{table}``:
    ``{location_uri(root)}/{table}``."""
    return bounded_uri(f"{location_uri(root).rstrip('/')}/{table_identifier(table, kind)}")


def event_extra(
    window: Window, target: str, table: str, watermark: str | datetime, rows: int | None
) -> dict[str, Any]:
    """The extra of a table's asset event for a committed window: the window (RFC 3339 bounds and
    id), the target and table, the table's apply watermark after the commit (RFC 3339) and the
    window's change rows of the table (``None``: not recorded)."""
    mark = format_timestamp(watermark) if isinstance(watermark, datetime) else str(watermark)
    return {
        "window_start": format_timestamp(window.start),
        "window_end": format_timestamp(window.end),
        "window_id": window.window_id,
        "target": target,
        "table": table,
        "watermark": mark,
        "rows": rows,
    }


def table_events(summary: Mapping[str, Any], window: Window) -> list[tuple[str, dict[str, Any]]]:
    """The asset events of a committed window, ``(asset URI, extra)`` per table of the commit's
    ``summary`` (its ``tables``: target → table → ``uri``, ``rows``, ``watermark``) that has an asset
    URI and an apply watermark."""
    tables = summary.get("tables") or {}
    if not isinstance(tables, Mapping):
        raise TypeError(f"the commit summary's 'tables' must be a mapping, got {type(tables).__name__}")
    events: list[tuple[str, dict[str, Any]]] = []
    for target, entries in sorted(tables.items()):
        for table, entry in sorted(entries.items()):
            if entry.get("uri") and entry.get("watermark") is not None:
                extra = event_extra(window, target, table, entry["watermark"], entry.get("rows"))
                events.append((str(entry["uri"]), extra))
    return events


def table_identifier(table: str, kind: str) -> str:
    """``table`` checked to name a table (a plain identifier) of the ``kind`` target."""
    try:
        return validate_identifier(table, f"{kind} table")
    except ValueError as exc:
        raise AssetNameError(str(exc)) from None


def bounded_uri(uri: str) -> str:
    """``uri`` checked against Airflow's 1500 characters of an asset identifier."""
    if len(uri) > _MAX_URI:
        raise AssetNameError(f"asset URI {uri[:80]}... is {len(uri)} characters, Airflow allows {_MAX_URI}")
    return uri


#: Names that moved into the targets' folders (imported from here on demand).
_MOVED = {
    "delta_table_uri": "airflow_provider_cdc.targets.delta.names",
    "bigquery_table_uri": "airflow_provider_cdc.targets.bigquery.names",
    "split_bigquery_dataset": "airflow_provider_cdc.targets.bigquery.names",
}


def __getattr__(name: str) -> Any:
    if name == "lake_root_uri":
        return location_uri
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
