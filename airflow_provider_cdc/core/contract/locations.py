"""Where a window's data lives, from one set of roots.

Staging (a source's output, the merge's input)::

    {staging_root}/{folder}/{window_id}/partition={partition_key}/claim={claim_id}/part-NNNNN.parquet

where ``folder`` is the source's staging folder, the last segment of its metastore key
(:func:`staging_folder`).

A partition of a window is read under a claim; the claim that completes it (recorded in the
metastore) names the partition's output, and other claims' folders (readers that lost their
lease) are never read. Change sets (the merge's output, a target's input)::

    {changeset_root}/{window_id}/table={table}/part-*.parquet + {changeset_root}/{window_id}/_manifest.json

A merge that belongs to an opening (epoch) of the window writes its tables into a folder of that
epoch, ``{changeset_root}/{window_id}/epoch={n}/table={table}/``, and its manifest is published as
``{changeset_root}/{window_id}/_manifest.json`` naming that folder (``"folder": "epoch={n}"``): two runs
of one window at once never write into the same folder, and the published manifest says which is
the window's change set.

Every other root is a target's: it holds the target's tables and is named by the target's kind (its
``TargetKind.location_field``); the target alone knows its layout. Roots are absolute local paths or
URIs (``gs://bucket/prefix``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.window import Window

PARTITION_DIR_PREFIX = "partition="
CLAIM_DIR_PREFIX = "claim="
TABLE_DIR_PREFIX = "table="
EPOCH_DIR_PREFIX = "epoch="
MANIFEST_NAME = "_manifest.json"
#: The manifest's entry naming the folder (relative to the change set) that holds its tables.
MANIFEST_FOLDER = "folder"
#: The roots a pipeline owns (its staging and change sets); every other root is a target's.
PIPELINE_ROOTS: tuple[str, ...] = ("staging_root", "changeset_root")


def epoch_folder(epoch: int) -> str:
    """The folder (relative to a window's change set) an opening's merge writes its tables into."""
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ValueError(f"an epoch is a non-negative integer, got {epoch!r}")
    return f"{EPOCH_DIR_PREFIX}{epoch}"


def manifest_folder(value: object) -> str:
    """The data folder a published manifest names (``""``: the change set itself); anything but an
    epoch's folder is refused, so a manifest cannot point a reader outside its change set."""
    if value in (None, ""):
        return ""
    text = str(value)
    number = text[len(EPOCH_DIR_PREFIX):] if text.startswith(EPOCH_DIR_PREFIX) else ""
    if not number.isdigit() or epoch_folder(int(number)) != text:
        raise ValueError(
            f"a change set's manifest names folder {value!r}; only {EPOCH_DIR_PREFIX}<n> is valid"
        )
    return text


def partition_key(partition_token: str) -> str:
    """Folder key of a partition: the first 16 hex digits of the SHA-256 of its token."""
    if not isinstance(partition_token, str) or not partition_token:
        raise ValueError(f"partition token must be a non-empty string, got {partition_token!r}")
    return hashlib.sha256(partition_token.encode("utf-8")).hexdigest()[:16]


def claim_folder(window_folder: str, key: str, claim_id: str) -> str:
    """The folder of one claim's output within a window's staging folder."""
    return f"{window_folder.rstrip('/')}/{PARTITION_DIR_PREFIX}{key}/{CLAIM_DIR_PREFIX}{claim_id}"


def staging_folder(source_key: str) -> str:
    """The staging folder of a source: the last segment of its metastore key
    (``projects/…/databases/<db>/<stream>`` → ``<stream>``), a plain identifier."""
    key = str(source_key or "").strip().rstrip("/")
    if not key:
        raise ValueError("a source key names the source (projects/…/databases/<db>/<stream or source>)")
    return validate_identifier(key.rsplit("/", 1)[-1], "change stream")


def _root(value: str | None, name: str) -> str:
    if value is None or not str(value).strip():
        raise ValueError(f"{name} is not set: give the {name} of the pipeline's locations")
    return str(value).strip().rstrip("/") or "/"


@dataclass(frozen=True)
class WindowLocations:
    """The roots of a pipeline's data; every location of a window is derived from them.

    :param staging_root: staged change rows, ``{staging_root}/{stream}/{window_id}``.
    :param changeset_root: change sets, ``{changeset_root}/{window_id}``.
    :param target_roots: the targets' roots by name (a target kind's ``location_field``); an unset
        root is left out.
    """

    staging_root: str | None = None
    changeset_root: str | None = None
    target_roots: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        roots = {str(k): str(v) for k, v in dict(self.target_roots or {}).items() if v is not None}
        clash = sorted(set(roots) & set(PIPELINE_ROOTS))
        if clash:
            raise ValueError(f"target_roots names the pipeline's own root(s) {clash}")
        object.__setattr__(self, "target_roots", roots)

    def root(self, name: str) -> str:
        """The root ``name`` (a pipeline's or a target's); an unset one fails naming it."""
        value = getattr(self, name) if name in PIPELINE_ROOTS else self.target_roots.get(name)
        return _root(value, name)

    def roots(self) -> dict[str, str | None]:
        """Every root by name: the pipeline's (``None``: unset) and the targets' that are set."""
        return {"staging_root": self.staging_root, "changeset_root": self.changeset_root, **self.target_roots}

    def staging(self, stream: str, window: Window) -> str:
        """The folder of a window's staged rows of ``stream``."""
        validate_identifier(stream, "change stream")
        return f"{_root(self.staging_root, 'staging_root')}/{stream}/{window.window_id}"

    def staging_of(self, source_key: str, window: Window) -> str:
        """The folder of a window's staged rows of the source ``source_key`` (its metastore key)."""
        return self.staging(staging_folder(source_key), window)

    def change_set(self, window: Window) -> str:
        """The folder of a window's change set (its tables and manifest)."""
        return f"{_root(self.changeset_root, 'changeset_root')}/{window.window_id}"

    def change_set_data(self, window: Window, epoch: int | None) -> str:
        """Where the merge of an opening (``epoch``) of a window writes its tables and pending manifest;
        without an epoch, the change set itself."""
        folder = self.change_set(window)
        return folder if epoch is None else f"{folder}/{epoch_folder(epoch)}"

    def manifest(self, window: Window) -> str:
        """The manifest of a window's change set, written last."""
        return f"{self.change_set(window)}/{MANIFEST_NAME}"


def window_of_change_set(location: str) -> Window:
    """The window a change-set folder belongs to, from its last path segment (the window id)."""
    return Window.from_window_id(location.rstrip("/").rsplit("/", 1)[-1])
