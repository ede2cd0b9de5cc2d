"""Names of a pipeline's target tables as Airflow assets, and the extra of their asset events (pure).

A table is named by where it lives, as Airflow's providers name such assets, so a downstream DAG can
schedule on it without knowing the pipeline:

- a Delta table: its location, ``{lake_root}/{table}`` as a URI: ``file:///abs/path/lake/Orders``
  for a local lake root (an absolute path or a ``file://`` URI), ``gs://bucket/prefix/Orders`` (or any
  other object-store scheme) as is;
- a BigQuery table: ``bigquery://{project}/{dataset}/{table}``, the google provider's convention.

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
    "bigquery_table_uri",
    "delta_table_uri",
    "event_extra",
    "lake_root_uri",
    "split_bigquery_dataset",
    "table_events",
    "watermarks_of",
]

#: The targets whose tables have asset URIs (the metastore's target names; not imported from it, so
#: that a DAG naming an asset does not load the metastore).
DELTA_TARGET = "delta"
BIGQUERY_TARGET = "bigquery"

#: The prefix of a pipeline's asset alias name.
ALIAS_PREFIX = "cdc:"

# A Google Cloud project id, optionally domain-scoped (``example.com:my-project``).
_PROJECT = re.compile(r"^(?:[a-z0-9][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{0,61}[a-z0-9]$")
# A BigQuery dataset id: letters, digits and underscores, at most 1024.
_DATASET = re.compile(r"^[A-Za-z0-9_]{1,1024}$")
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


def lake_root_uri(lake_root: str) -> str:
    """The lake root as a URI without a trailing slash: an absolute local path or ``file://`` URI as
    ``file:///...`` (percent-encoded), any other URI (``gs://bucket/prefix``) with its path encoded.

    A relative path, a ``file://`` URI naming a host, an object-store URI without a bucket or a URI
    with a query, fragment or credentials is refused naming the root.
    """
    if not isinstance(lake_root, str) or not lake_root.strip():
        raise AssetNameError(f"lake root must be a non-empty absolute path or URI, got {lake_root!r}")
    root = lake_root.strip()
    parts = urlsplit(root)
    if parts.query or parts.fragment or "@" in parts.netloc:
        raise AssetNameError(
            f"lake root {root!r}: an asset URI names a location, without query, fragment or credentials"
        )
    if parts.scheme in ("", "file"):
        path = unquote(parts.path) if parts.scheme == "file" else root
        if parts.scheme == "file" and parts.netloc not in ("", "localhost"):
            raise AssetNameError(f"lake root {root!r}: a file:// URI names no host (file:///abs/path)")
        if not path.startswith("/"):
            raise AssetNameError(
                f"lake root {root!r} is relative: an asset names an absolute path (/abs/path or "
                "file:///abs/path), the same for every worker"
            )
        path = re.sub("/{2,}", "/", path).rstrip("/")
        return "file://" + (quote(path, safe=_PATH_SAFE) or "/")
    if not _SCHEME.match(parts.scheme):
        raise AssetNameError(f"lake root {root!r}: not an absolute path or a URI")
    scheme = parts.scheme.lower()
    if scheme == "airflow":
        raise AssetNameError(f"lake root {root!r}: the scheme 'airflow' is reserved by Airflow")
    if not parts.netloc:
        raise AssetNameError(f"lake root {root!r}: a {scheme}:// URI names its bucket (gs://bucket/prefix)")
    path = quote(unquote(parts.path), safe=_PATH_SAFE).rstrip("/")
    return f"{scheme}://{parts.netloc}{path}"


def delta_table_uri(lake_root: str, table: str) -> str:
    """The asset URI of the Delta table ``table`` under ``lake_root``: ``{lake_root_uri}/{table}``."""
    return _bounded(f"{lake_root_uri(lake_root).rstrip('/')}/{_table(table, 'Delta')}")


def split_bigquery_dataset(dataset: str) -> tuple[str, str]:
    """``(project, dataset)`` of ``project.dataset`` (the project may be domain-scoped)."""
    project, dot, name = str(dataset).strip().rpartition(".")
    if not dot or not _PROJECT.match(project) or not _DATASET.match(name):
        raise AssetNameError(
            f"BigQuery dataset {dataset!r}: expected project.dataset (a Google Cloud project id, then "
            "letters, digits or underscores)"
        )
    return project, name


def bigquery_table_uri(dataset: str, table: str) -> str:
    """The asset URI of the BigQuery table ``table`` of ``dataset`` (``project.dataset``):
    ``bigquery://{project}/{dataset}/{table}``."""
    project, name = split_bigquery_dataset(dataset)
    return _bounded(f"bigquery://{project}/{name}/{_table(table, 'BigQuery')}")


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


def watermarks_of(summary: Mapping[str, Any], key: str) -> dict[str, str]:
    """Table → watermark (RFC 3339) of the commit summary's ``key`` (``watermarks``, or
    ``{target}_watermarks``); a table without a watermark yet is left out."""
    marks = summary.get(key) or {}
    if not isinstance(marks, Mapping):
        raise TypeError(f"the commit summary's {key!r} must be a mapping, got {type(marks).__name__}")
    return {str(t): str(m) for t, m in sorted(marks.items()) if m is not None}


def table_events(
    summary: Mapping[str, Any],
    window: Window,
    *,
    lake_root: str | None = None,
    bigquery_dataset: str | None = None,
    rows: Mapping[str, Mapping[str, int | None]] | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """The asset events of a committed window, ``(asset URI, extra)`` per table with an apply
    watermark in the commit's ``summary``: the Delta tables (``watermarks``) when ``lake_root`` names
    where they live, the BigQuery tables (``bigquery_watermarks``) when ``bigquery_dataset``
    (``project.dataset``) does. ``rows`` (target → table → the window's change rows) fills ``rows``;
    a table it lacks has ``None``."""
    counts = rows or {}
    events: list[tuple[str, dict[str, Any]]] = []
    for target, key, name, dataset in (
        (DELTA_TARGET, "watermarks", delta_table_uri, lake_root),
        (BIGQUERY_TARGET, f"{BIGQUERY_TARGET}_watermarks", bigquery_table_uri, bigquery_dataset),
    ):
        if not dataset:
            continue
        for table, mark in watermarks_of(summary, key).items():
            extra = event_extra(window, target, table, mark, counts.get(target, {}).get(table))
            events.append((name(dataset, table), extra))
    return events


def _table(table: str, kind: str) -> str:
    try:
        return validate_identifier(table, f"{kind} table")
    except ValueError as exc:
        raise AssetNameError(str(exc)) from None


def _bounded(uri: str) -> str:
    if len(uri) > _MAX_URI:
        raise AssetNameError(f"asset URI {uri[:80]}... is {len(uri)} characters, Airflow allows {_MAX_URI}")
    return uri
