"""Reading staged change rows back: listing a window's staged files, opening them as a dataset,
and discarding the files of claims that lost their partition.

Every function opens the staging ``root`` as :class:`~.parquet.StagingWriter` does: with an
explicit ``filesystem``, or else with ``storage_options`` (:func:`.files.open_root`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
import pyarrow.fs as pafs

from airflow_provider_cdc import filesystems
from airflow_provider_cdc.core.contract.locations import (
    CLAIM_DIR_PREFIX,
    PARTITION_DIR_PREFIX,
    claim_folder,
    partition_key,
)
from airflow_provider_cdc.core.contract.staged_rows import staged_change_schema
from airflow_provider_cdc.core.identifiers import validate_identifier
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.staging.files import (
    PART_FILE,
    delete_quietly,
    list_files,
    open_root,
    partition_directories,
    window_directory,
)

if TYPE_CHECKING:  # pyarrow.dataset imports pandas: loaded only where staging is read back
    import pyarrow.dataset as ds


class ClaimFolder(Protocol):
    """Where one claim of a partition stages its files (a :class:`~.parquet.StagingWriter` is one)."""

    filesystem: pafs.FileSystem
    partition_directory: str
    directory: str


def staged_files(
    root: str,
    stream: str,
    window: Window,
    filesystem: pafs.FileSystem | None = None,
    *,
    claims: Mapping[str, str] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> list[str]:
    """Paths of the window's staged Parquet files, in partition and file order.

    ``claims`` (partition token → the claim the metastore recorded as its output) limits them to
    those claims' files; without it every staged file is listed, whoever wrote it.
    """
    validate_identifier(stream, "change stream")
    fs, base = open_root(root, filesystem, storage_options)
    return _staged_paths(fs, window_directory(base, stream, window), claims)


def _staged_paths(fs: pafs.FileSystem, window_dir: str, claims: Mapping[str, str] | None) -> list[str]:
    if claims is not None:
        return sorted(
            info.path
            for token, claim in claims.items()
            for info in list_files(fs, claim_folder(window_dir, partition_key(token), claim))
            if PART_FILE.fullmatch(info.base_name)
        )
    paths = []
    for info in list_files(fs, window_dir, recursive=True):
        parents = info.path[: -len(info.base_name) - 1].rsplit("/", 2)[-2:]
        if PART_FILE.fullmatch(info.base_name) and (
            parents[-1].startswith(PARTITION_DIR_PREFIX)
            or (parents[-1].startswith(CLAIM_DIR_PREFIX) and parents[0].startswith(PARTITION_DIR_PREFIX))
        ):
            paths.append(info.path)
    return sorted(paths)


#: The file that marks a claim's folder as the recorded output of its partition.
RECORDED_MARKER = "_recorded"


def discard_other_claims(
    claim: ClaimFolder | str,
    stream: str | None = None,
    window: Window | None = None,
    partition_token: str | None = None,
    claim_id: str | None = None,
    *,
    filesystem: pafs.FileSystem | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> int:
    """Mark the claim's folder as a recorded output (:data:`RECORDED_MARKER`) and delete the files
    other claims of the partition staged (readers that lost the partition); call only once the
    metastore recorded the claim as the output. Returns how many files went.

    Claims marked recorded stay: they are the output of an earlier opening of the window (a change
    stream's partition keeps its token across openings), which a run of that opening may still be
    merging. ``claim`` is the writer of the recorded claim, or the staging root with ``stream``,
    ``window``, ``partition_token`` and ``claim_id`` naming the claim (the root opened with
    ``filesystem`` or ``storage_options``). A stale reader still writing may leave files behind:
    never read, since readers of the staging read recorded claims only.
    """
    if isinstance(claim, str):
        if stream is None or window is None or partition_token is None or claim_id is None:
            raise TypeError(
                "discarding other claims under a staging root needs stream, window, partition_token "
                "and claim_id"
            )
        fs, base = open_root(claim, filesystem, storage_options)
        partition_dir, own_dir = partition_directories(
            window_directory(base, stream, window), partition_token, claim_id
        )
    else:
        fs, partition_dir, own_dir = claim.filesystem, claim.partition_directory, claim.directory
    own = own_dir.rstrip("/") + "/"
    files = list_files(fs, partition_dir, recursive=True)
    if any(info.path.startswith(own) and PART_FILE.fullmatch(info.base_name) for info in files):
        with fs.open_output_stream(filesystems.join(own_dir, RECORDED_MARKER)) as marker:
            marker.write(b"")
    recorded = {info.path[: -len(RECORDED_MARKER)] for info in files if info.base_name == RECORDED_MARKER}
    removed = 0
    for info in files:
        folder = info.path[: -len(info.base_name)]
        if not info.path.startswith(own) and folder not in recorded:
            delete_quietly(fs, info.path)
            removed += 1
    return removed


def read_staged_changes(
    root: str,
    stream: str,
    window: Window,
    filesystem: pafs.FileSystem | None = None,
    *,
    claims: Mapping[str, str] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> ds.Dataset:
    """The window's staged change rows as a dataset (empty if nothing was staged); ``claims`` as
    in :func:`staged_files`."""
    import pyarrow.dataset as ds

    fs, base = open_root(root, filesystem, storage_options)
    paths = _staged_paths(fs, window_directory(base, stream, window), claims)
    return ds.dataset(paths, schema=staged_change_schema(), format="parquet", filesystem=fs)


def iter_staged_batches(
    root: str,
    stream: str,
    window: Window,
    filesystem: pafs.FileSystem | None = None,
    *,
    batch_size: int = 10_000,
    columns: Sequence[str] | None = None,
    claims: Mapping[str, str] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Record batches of the window's staged rows, reading one file at a time."""
    dataset = read_staged_changes(
        root, stream, window, filesystem, claims=claims, storage_options=storage_options
    )
    yield from dataset.to_batches(
        columns=list(columns) if columns is not None else None,
        batch_size=batch_size,
        batch_readahead=1,
        fragment_readahead=1,
    )
