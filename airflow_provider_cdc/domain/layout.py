"""Where a window's data lives: the folder layout every source, job and target agrees on.

Staging (a source's output, the merge's input)::

    {staging_root}/{stream}/{window_id}/partition={partition_key}/claim={claim_id}/part-NNNNN.parquet

A partition of a window is read under a claim; the claim that completes it (recorded in the
metastore) names the partition's output, and other claims' folders (readers that lost their
lease) are never read. Change sets (the merge's output, a target's input)::

    {changeset_root}/{window_id}/table={table}/part-*.parquet + {changeset_root}/{window_id}/_manifest.json
"""

from __future__ import annotations

import hashlib

PARTITION_DIR_PREFIX = "partition="
CLAIM_DIR_PREFIX = "claim="
TABLE_DIR_PREFIX = "table="
MANIFEST_NAME = "_manifest.json"


def partition_key(partition_token: str) -> str:
    """Folder key of a partition: the first 16 hex digits of the SHA-256 of its token."""
    if not isinstance(partition_token, str) or not partition_token:
        raise ValueError(f"partition token must be a non-empty string, got {partition_token!r}")
    return hashlib.sha256(partition_token.encode("utf-8")).hexdigest()[:16]


def claim_folder(window_folder: str, key: str, claim_id: str) -> str:
    """The folder of one claim's output within a window's staging folder."""
    return f"{window_folder.rstrip('/')}/{PARTITION_DIR_PREFIX}{key}/{CLAIM_DIR_PREFIX}{claim_id}"
