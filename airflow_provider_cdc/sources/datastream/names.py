"""Datastream object paths: ``[prefix/]object/yyyy/mm/dd/hh/mm/<file>``.

A data file is named ``<40 hex>_<read_method>_<int>_<int>_<int>.(avro|jsonl|jsonl.gz)``; real
files also come without the three numeric tails and with read methods such as ``postgresql-cdc``,
``mysql-backfill-fulldump`` or ``oracle_dump``. The minute folder is the events' source minute in
UTC (the backfill task's start for backfill files): a hint for pruning a listing, never a proof of
completeness, since files for old minutes keep arriving.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone

from airflow_provider_cdc.sources.datastream.read_methods import is_backfill

#: The unit token of a window no file arrived in (followed by the window id): it stages nothing.
EMPTY_WINDOW_TOKEN = "_no_files_"
AVRO = "avro"
JSONL = "jsonl"
_FILE_NAME = re.compile(
    r"^[0-9A-Fa-f]{40}_(?P<read_method>[A-Za-z][A-Za-z0-9_-]*?)(?:_-?\d+_\d+_\d+)?"
    r"\.(?P<extension>avro|jsonl|jsonl\.gz)$"
)
_MINUTE_PARTS = (re.compile(r"^\d{4}$"),) + (re.compile(r"^\d{2}$"),) * 4


class DatastreamFileNameError(ValueError):
    """An object path that is not a Datastream data file (the message names the path)."""


@dataclass(frozen=True)
class DatastreamFile:
    """One Datastream data file, as its path tells it."""

    path: str
    object_name: str
    minute: datetime
    read_method: str
    format: str
    compressed: bool

    @property
    def name(self) -> str:
        """The file name (the path's last segment)."""
        return self.path.rsplit("/", 1)[-1]

    @property
    def is_backfill(self) -> bool:
        """Whether the file holds backfill events (by its read method)."""
        return is_backfill(self.read_method)

    @classmethod
    def parse(cls, path: str) -> DatastreamFile:
        """Parse an object path relative to the stream root (a deeper prefix is ignored)."""
        if not isinstance(path, str):
            raise DatastreamFileNameError(f"a Datastream object path is text, got {type(path).__name__}")
        parts = path.split("/")
        if len(parts) < 7 or not parts[-7]:
            raise DatastreamFileNameError(
                f"{path!r} is not a Datastream data file: expected object/yyyy/mm/dd/hh/mm/<file>"
            )
        *_, object_name, year, month, day, hour, minute_text, file_name = parts
        match = _FILE_NAME.match(file_name)
        if match is None:
            raise DatastreamFileNameError(
                f"{path!r} is not a Datastream data file: expected a file name "
                "<40 hex>_<read_method>[_<n>_<n>_<n>].(avro|jsonl|jsonl.gz)"
            )
        folder = (year, month, day, hour, minute_text)
        try:
            if not all(p.match(text) for p, text in zip(_MINUTE_PARTS, folder, strict=True)):
                raise ValueError("not digits")
            minute = datetime(*(int(text) for text in folder), tzinfo=timezone.utc)  # type: ignore[misc]
        except ValueError:
            raise DatastreamFileNameError(
                f"{path!r} is not a Datastream data file: "
                f"{'/'.join(folder)!r} is not a yyyy/mm/dd/hh/mm folder"
            ) from None
        extension = match.group("extension")
        return cls(
            path=path,
            object_name=object_name,
            minute=minute,
            read_method=match.group("read_method"),
            format=AVRO if extension == AVRO else JSONL,
            compressed=extension.endswith(".gz"),
        )


def parse_file_name(path: str) -> DatastreamFile:
    """Shorthand for :meth:`DatastreamFile.parse`."""
    return DatastreamFile.parse(path)


def is_data_file(path: str) -> bool:
    """Whether ``path`` is a Datastream data file (folder placeholders and other files are not)."""
    if not isinstance(path, str) or not path or path.endswith("/"):
        return False
    try:
        DatastreamFile.parse(path)
    except DatastreamFileNameError:
        return False
    return True


def is_object_name(name: object) -> bool:
    """Whether ``name`` can name a Datastream object (a folder under the stream root): non-empty text
    without ``/``. Any other character is allowed (``ea-main_users``, ``SAMPLE.TBL``)."""
    return isinstance(name, str) and bool(name) and "/" not in name


def minute_folder(object_name: str, minute: datetime) -> str:
    """The folder of ``object_name``'s files for ``minute`` (UTC): ``object/yyyy/mm/dd/hh/mm/``."""
    if not is_object_name(object_name):
        raise DatastreamFileNameError(f"{object_name!r} is not a Datastream object name")
    if minute.tzinfo is not None:
        minute = minute.astimezone(timezone.utc)
    return f"{object_name}/{minute:%Y/%m/%d/%H/%M}/"
