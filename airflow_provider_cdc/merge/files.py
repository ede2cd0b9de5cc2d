"""The merge job's file access: through Spark's Hadoop filesystems, or through the driver.

Spark reads the staging and writes the change set itself through its Hadoop filesystems
(:class:`HadoopFiles` does the few file operations around that). When Spark has no filesystem for
a location's scheme (``gs://`` without the GCS connector) and runs locally, the driver copies the
staging folder to local disk and the change set back (:func:`download_tree`,
:func:`upload_change_set`) with the filesystems of :func:`airflow_provider_cdc.filesystems.resolve`,
so with the same storage options (credentials) as staging, change sets and the targets' tables.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

from airflow_provider_cdc.core.contract.locations import MANIFEST_NAME
from airflow_provider_cdc.filesystems import is_local, join, resolve
from airflow_provider_cdc.merge.errors import MergeJobError

#: Files copied at once between the driver's disk and a remote filesystem.
TRANSFER_THREADS = 8


class HadoopFiles:
    """Small file operations on any URI Spark can reach, through the JVM's Hadoop FileSystem."""

    def __init__(self, spark: Any) -> None:
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _fs_path(self, uri: str) -> tuple[Any, Any]:
        path = self._jvm.org.apache.hadoop.fs.Path(uri)
        return path.getFileSystem(self._conf), path

    def supports(self, uri: str) -> bool:
        """Whether Spark has a filesystem for the scheme of ``uri``."""
        scheme = urlparse(uri).scheme or "file"
        try:
            self._jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, self._conf)
        except Exception:  # py4j wraps UnsupportedFileSystemException
            return False
        return True

    def exists(self, uri: str) -> bool:
        fs, path = self._fs_path(uri)
        return bool(fs.exists(path))

    def delete(self, uri: str) -> None:
        """Delete ``uri`` (recursively); nothing happens when it does not exist."""
        fs, path = self._fs_path(uri)
        if fs.exists(path):
            fs.delete(path, True)

    def make_dirs(self, uri: str) -> None:
        fs, path = self._fs_path(uri)
        fs.mkdirs(path)

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Write via a temporary name and rename, so readers never see a partial file."""
        fs, path = self._fs_path(uri)
        temporary = self._jvm.org.apache.hadoop.fs.Path(uri + ".tmp")
        stream = fs.create(temporary, True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()
        if fs.exists(path):
            fs.delete(path, False)
        if not fs.rename(temporary, path):
            raise MergeJobError(f"could not rename {uri}.tmp to {uri}")


class ArrowFiles:
    """The same small file operations as :class:`HadoopFiles`, from the driver's side with pyarrow
    filesystems (:func:`airflow_provider_cdc.filesystems.resolve`): for a Spark Connect client,
    which has no JVM of its own. The server reads and writes the same URIs with its filesystems.

    :param storage_options: credentials for object stores (None: Application Default Credentials).
    :param shares_disk: whether the server runs on this machine, so that a location it has no
        filesystem for can go through the driver's disk (local paths only count as supported then).
    """

    def __init__(
        self, storage_options: Mapping[str, str] | None = None, *, shares_disk: bool = False
    ) -> None:
        self._options = storage_options
        self._shares_disk = shares_disk

    def supports(self, uri: str) -> bool:
        """Whether the server reaches ``uri`` itself: local paths always; other schemes when the
        server is elsewhere (a cluster has its filesystem connectors), else through this disk."""
        return is_local(uri) or not self._shares_disk

    def exists(self, uri: str) -> bool:
        filesystem, path = resolve(uri, self._options)
        if filesystem.get_file_info(path).type != pafs.FileType.NotFound:
            return True
        # object stores have no folders: a prefix with an object under it exists
        selector = pafs.FileSelector(path, recursive=False, allow_not_found=True)
        return bool(filesystem.get_file_info(selector))

    def delete(self, uri: str) -> None:
        """Delete ``uri`` (recursively); nothing happens when it does not exist."""
        filesystem, path = resolve(uri, self._options)
        kind = filesystem.get_file_info(path).type
        if kind == pafs.FileType.File:
            filesystem.delete_file(path)
        else:
            filesystem.delete_dir_contents(path, accept_root_dir=not path, missing_dir_ok=True)
            if path and filesystem.get_file_info(path).type == pafs.FileType.Directory:
                filesystem.delete_dir(path)

    def make_dirs(self, uri: str) -> None:
        filesystem, path = resolve(uri, self._options)
        if path:
            filesystem.create_dir(path, recursive=True)

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Write whole: local files via a temporary name and a rename, objects in one upload."""
        folder, name = uri.rstrip("/").rsplit("/", 1)
        filesystem, path = resolve(folder, self._options)
        target = join(path, name)
        if is_local(uri):
            temporary = target + ".tmp"
            with filesystem.open_output_stream(temporary) as stream:
                stream.write(data)
            filesystem.move(temporary, target)
            return
        with filesystem.open_output_stream(target) as stream:
            stream.write(data)


def _relative(path: str, root: str) -> str:
    """``path`` (as its filesystem lists it) relative to the folder ``root`` of that filesystem."""
    return (path[len(root):] if root and path.startswith(root) else path).strip("/")


def _each(action: Callable[[str], None], items: Iterable[str]) -> None:
    """Run ``action`` on every item, :data:`TRANSFER_THREADS` at a time; the first error is raised."""
    with ThreadPoolExecutor(TRANSFER_THREADS) as pool:
        for _ in pool.map(action, items):
            pass


def download_tree(location: str, local_dir: str, storage_options: Mapping[str, str] | None = None) -> bool:
    """Copy every file under ``location`` into ``local_dir``; False when it holds no file."""
    filesystem, root = resolve(location, storage_options)
    listing = filesystem.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    paths = sorted(info.path for info in listing if info.type == pafs.FileType.File)
    if not paths:
        return False
    local = pafs.LocalFileSystem()

    def copy(path: str) -> None:
        target = os.path.join(local_dir, *_relative(path, root).split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        pafs.copy_files(path, target, source_filesystem=filesystem, destination_filesystem=local)

    _each(copy, paths)
    return True


def upload_change_set(
    local_dir: str, location: str, manifest: bytes, storage_options: Mapping[str, str] | None = None,
    *, manifest_name: str = MANIFEST_NAME,
) -> None:
    """Replace the change set at ``location`` with the files in ``local_dir``; the manifest goes last
    (under ``manifest_name``)."""
    filesystem, root = resolve(location, storage_options)
    if root:
        filesystem.create_dir(root, recursive=True)
    # An object store's root is the change-set folder itself (its paths are relative to it).
    filesystem.delete_dir_contents(root, accept_root_dir=not root, missing_dir_ok=True)
    relatives = sorted(
        os.path.relpath(os.path.join(dirpath, name), local_dir).replace(os.sep, "/")
        for dirpath, _dirnames, filenames in os.walk(local_dir)
        for name in filenames
        if not name.startswith((".", "_"))  # checksums, _SUCCESS markers; the manifest is written below
    )
    for folder in sorted({posixpath.dirname(relative) for relative in relatives} - {""}):
        filesystem.create_dir(join(root, folder), recursive=True)
    local = pafs.LocalFileSystem()

    def copy(relative: str) -> None:
        pafs.copy_files(os.path.join(local_dir, *relative.split("/")), join(root, relative),
                        source_filesystem=local, destination_filesystem=filesystem)

    _each(copy, relatives)
    with filesystem.open_output_stream(join(root, manifest_name)) as stream:
        stream.write(manifest)
