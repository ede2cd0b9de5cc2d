"""Datastream output in Cloud Storage for tests: a seeded source history with its truth, the writer
that lays its events out exactly as Datastream does (Avro or JSONL files, minute folders, rotation,
arrival times) and scenarios that plan a whole stream over arrival windows.

Product code never imports this package; its files meet a reader only through Datastream's format.
"""

from .history import (
    DATABASES,
    Column,
    DatastreamEvent,
    SourceHistory,
    TableSpec,
    generate_history,
    truth,
)
from .scenario import DatastreamScenario
from .writer import DatastreamFile, GcsSink, LocalFolderSink, WrittenFile, avro_schema, plan_files, write_file

__all__ = [
    "DATABASES",
    "Column",
    "DatastreamEvent",
    "DatastreamFile",
    "DatastreamScenario",
    "GcsSink",
    "LocalFolderSink",
    "SourceHistory",
    "TableSpec",
    "WrittenFile",
    "avro_schema",
    "generate_history",
    "plan_files",
    "truth",
    "write_file",
]
