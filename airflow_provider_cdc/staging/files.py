"""Where staged files live: a staging root opened as a filesystem, and the folders under it.

A root is a local path or a URI; without an explicit filesystem it is opened by
:func:`airflow_provider_cdc.filesystems.resolve` with the given storage options (the same
credentials as the targets' tables), so that paths of the object-store client are relative to the root (its
path is ``""``). Paths are built with :func:`airflow_provider_cdc.filesystems.join` for that reason.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import urlparse

import pyarrow.fs as pafs

from airflow_provider_cdc import filesystems
from airflow_provider_cdc.core.contract.locations import PARTITION_DIR_PREFIX, claim_folder, partition_key
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.window import Window

#: Name of a committed staged file (``part-00000.parquet``), its number in group 1.
PART_FILE = re.compile(r"part-([0-9]{5,})\.parquet")


def open_root(
    root: str,
    filesystem: pafs.FileSystem | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> tuple[pafs.FileSystem, str]:
    """The filesystem holding the staging ``root`` and the root's path in it.

    An explicit ``filesystem`` is used as given (the root's path taken from the URI, or made
    absolute on a local filesystem); otherwise the root is resolved with ``storage_options``.
    """
    if not isinstance(root, str) or not root.strip():
        raise ValueError(f"staging root must be a non-empty path or URI, got {root!r}")
    if filesystem is None:
        return filesystems.resolve(root, storage_options)
    parsed = urlparse(root)
    if len(parsed.scheme) > 1:  # a one-letter scheme is a Windows drive
        path = parsed.path if parsed.scheme == "file" else f"{parsed.netloc}{parsed.path}"
    else:
        path = os.path.abspath(root) if filesystem.type_name == "local" else root
    return filesystem, path.rstrip("/")


def check_window(window: Window) -> Window:
    """``window`` if it is a :class:`Window`, else ``TypeError``."""
    if not isinstance(window, Window):
        raise TypeError(f"expected a Window, got {type(window).__name__}")
    return window


def window_directory(base: str, stream: str, window: Window) -> str:
    """The folder of a window's staged rows of ``stream`` under the root path ``base``."""
    stream = validate_identifier(stream, "change stream")
    return filesystems.join(base, stream, check_window(window).window_id)


def partition_directories(window_dir: str, partition_token: str, claim_id: str | None) -> tuple[str, str]:
    """A partition's folder in a window's folder, and the folder ``claim_id`` writes (the
    partition's folder itself without a claim id)."""
    key = partition_key(partition_token)
    partition_dir = filesystems.join(window_dir, f"{PARTITION_DIR_PREFIX}{key}")
    if claim_id is None:
        return partition_dir, partition_dir
    if not (claim_id.isascii() and claim_id.isalnum()):
        raise ValueError(f"claim id must be letters and digits, got {claim_id!r}")
    return partition_dir, claim_folder(window_dir, key, claim_id)


def is_local(filesystem: pafs.FileSystem) -> bool:
    """Whether ``filesystem`` is (a subtree of) the local filesystem."""
    while isinstance(filesystem, pafs.SubTreeFileSystem):
        filesystem = filesystem.base_fs
    return filesystem.type_name == "local"


def list_files(fs: pafs.FileSystem, directory: str, recursive: bool = False) -> list[pafs.FileInfo]:
    """The files in ``directory`` (none if it does not exist)."""
    selector = pafs.FileSelector(directory, allow_not_found=True, recursive=recursive)
    return [info for info in fs.get_file_info(selector) if info.type == pafs.FileType.File]


def delete_quietly(fs: pafs.FileSystem, path: str) -> None:
    """Delete a file, ignoring one that is already gone or cannot be deleted."""
    try:
        fs.delete_file(path)
    except (FileNotFoundError, OSError):
        pass
