"""Spanner change-stream records: data change, heartbeat and child-partitions records.

A change-stream query (``SELECT ChangeRecord FROM READ_<stream>(...)``) returns one column,
``ChangeRecord``, an ``ARRAY<STRUCT<data_change_record, heartbeat_record, child_partitions_record>>``
whose single element holds exactly one record: a :class:`DataChangeRecord`, a
:class:`HeartbeatRecord` or a :class:`ChildPartitionsRecord`. A data change record's columns are
:class:`~airflow_provider_cdc.core.columns.ColumnType` entries. The parser that builds records from
query rows and JSON (:func:`parse_change_record_row`, :func:`parse_record_dict`,
:func:`parse_change_record_json`) is :mod:`.record_parser`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import ClassVar, TypeAlias

from airflow_provider_cdc.core.columns import ColumnType

DATA_CHANGE_RECORD = "data_change_record"
HEARTBEAT_RECORD = "heartbeat_record"
CHILD_PARTITIONS_RECORD = "child_partitions_record"
RECORD_KINDS = (DATA_CHANGE_RECORD, HEARTBEAT_RECORD, CHILD_PARTITIONS_RECORD)


class MalformedRecordError(ValueError):
    """A change-stream row or record that does not have the documented shape.

    ``path`` is the field path that is wrong (``data_change_record.mods[0].keys``).
    """

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class ModType(str, Enum):
    """Kind of change a data change record carries."""

    INSERT = "INSERT"
    UPDATE = "UPDATE"
    DELETE = "DELETE"


class ValueCaptureType(str, Enum):
    """Value capture type of the change stream when the change was captured."""

    OLD_AND_NEW_VALUES = "OLD_AND_NEW_VALUES"
    NEW_ROW = "NEW_ROW"
    NEW_VALUES = "NEW_VALUES"
    NEW_ROW_AND_OLD_VALUES = "NEW_ROW_AND_OLD_VALUES"


@dataclass(frozen=True, slots=True)
class Mod:
    """One changed row: primary-key values and the non-key columns' new and old values."""

    keys: dict
    new_values: dict
    old_values: dict


@dataclass(frozen=True, slots=True)
class DataChangeRecord:
    """Changes of one mod type to one table, from one transaction, in one partition."""

    KIND: ClassVar[str] = DATA_CHANGE_RECORD

    commit_timestamp: datetime
    record_sequence: str
    server_transaction_id: str
    is_last_record_in_transaction_in_partition: bool
    table_name: str
    column_types: tuple[ColumnType, ...]
    mods: tuple[Mod, ...]
    mod_type: ModType
    value_capture_type: str
    number_of_records_in_transaction: int
    number_of_partitions_in_transaction: int
    transaction_tag: str = ""
    is_system_transaction: bool = False

    @property
    def timestamp(self) -> datetime:
        """The commit timestamp: the partition has delivered every change up to it."""
        return self.commit_timestamp


@dataclass(frozen=True, slots=True)
class HeartbeatRecord:
    """Every change committed at or before ``timestamp`` in the partition has been returned."""

    KIND: ClassVar[str] = HEARTBEAT_RECORD

    timestamp: datetime


@dataclass(frozen=True, slots=True)
class ChildPartition:
    """A partition to query next; ``parent_partition_tokens`` is empty for the initial query's children."""

    token: str
    parent_partition_tokens: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ChildPartitionsRecord:
    """Children that carry on the partition's key range from ``start_timestamp`` on."""

    KIND: ClassVar[str] = CHILD_PARTITIONS_RECORD

    start_timestamp: datetime
    record_sequence: str
    child_partitions: tuple[ChildPartition, ...]

    @property
    def timestamp(self) -> datetime:
        """The children's start timestamp: the partition has delivered every change before it."""
        return self.start_timestamp


ChangeStreamRecord: TypeAlias = DataChangeRecord | HeartbeatRecord | ChildPartitionsRecord


__all__ = [
    "CHILD_PARTITIONS_RECORD",
    "DATA_CHANGE_RECORD",
    "HEARTBEAT_RECORD",
    "RECORD_KINDS",
    "ChangeStreamRecord",
    "ChildPartition",
    "ChildPartitionsRecord",
    "ColumnType",
    "DataChangeRecord",
    "HeartbeatRecord",
    "MalformedRecordError",
    "Mod",
    "ModType",
    "ValueCaptureType",
]
