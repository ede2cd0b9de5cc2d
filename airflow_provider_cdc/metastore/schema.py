"""The metastore's tables as they are at the current schema version, and a portable clock.

These definitions are what the data-access modules (``partitions``, ``windows``, …) query. The
tables themselves are created and upgraded only by the ordered steps in ``migrations``; a test
checks that both agree.
All timestamps are integer microseconds since the Unix epoch (``*_us`` columns).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import FunctionElement

from airflow_provider_cdc.metastore.model import (
    MAX_OWNER_LENGTH,
    MAX_PIPELINE_LENGTH,
    MAX_STREAM_LENGTH,
    MAX_TARGET_LENGTH,
    MAX_TOKEN_LENGTH,
    PartitionState,
    WindowPartitionState,
    WindowState,
)

SCHEMA_VERSION_TABLE = "cdc_schema_version"
PARTITIONS_TABLE = "cdc_partitions"
WINDOWS_TABLE = "cdc_windows"
TABLE_WATERMARKS_TABLE = "cdc_table_watermarks"
WINDOW_PARTITIONS_TABLE = "cdc_window_partitions"
PIPELINES_TABLE = "cdc_pipelines"
WINDOW_TABLES_TABLE = "cdc_window_tables"
UNIT_CHECKPOINTS_TABLE = "cdc_unit_checkpoints"
MAX_TABLE_NAME_LENGTH = 128
STATE_LENGTH = 16


def state_check(
    column: str, states: type[PartitionState] | type[WindowState] | type[WindowPartitionState], name: str
) -> sa.CheckConstraint:
    """``CHECK (column IN (...))`` over an enum's values, built from Core constructs."""
    return sa.CheckConstraint(sa.column(column).in_([s.value for s in states]), name=name)


metadata = sa.MetaData()

schema_version = sa.Table(
    SCHEMA_VERSION_TABLE,
    metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("description", sa.String(200), nullable=False),
    sa.Column("applied_us", sa.BigInteger, nullable=False),
)

partitions = sa.Table(
    PARTITIONS_TABLE,
    metadata,
    sa.Column("stream", sa.String(MAX_STREAM_LENGTH), primary_key=True),
    sa.Column("token", sa.String(MAX_TOKEN_LENGTH), primary_key=True),
    sa.Column("parent_tokens", sa.Text, nullable=False),
    sa.Column("start_us", sa.BigInteger, nullable=False),
    sa.Column("end_us", sa.BigInteger, nullable=True),
    sa.Column("state", sa.String(STATE_LENGTH), nullable=False),
    sa.Column("watermark_us", sa.BigInteger, nullable=False),
    sa.Column("heartbeat_ms", sa.Integer, nullable=True),
    sa.Column("lease_owner", sa.String(MAX_OWNER_LENGTH), nullable=True),
    sa.Column("lease_expires_us", sa.BigInteger, nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("record_count", sa.BigInteger, nullable=False),
    sa.Column("created_us", sa.BigInteger, nullable=False),
    sa.Column("updated_us", sa.BigInteger, nullable=False),
    sa.Column("finished_us", sa.BigInteger, nullable=True),
    # version 2
    sa.Column("progress_us", sa.BigInteger, nullable=True),
    state_check("state", PartitionState, "ck_cdc_partitions_state"),
    sa.Index("ix_cdc_partitions_stream_start", "stream", "start_us"),
)

windows = sa.Table(
    WINDOWS_TABLE,
    metadata,
    sa.Column("pipeline", sa.String(MAX_PIPELINE_LENGTH), primary_key=True),
    sa.Column("start_us", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("end_us", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("stream", sa.String(MAX_STREAM_LENGTH), nullable=False),
    sa.Column("state", sa.String(STATE_LENGTH), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("staging_uri", sa.Text, nullable=True),
    sa.Column("record_count", sa.BigInteger, nullable=True),
    sa.Column("opened_us", sa.BigInteger, nullable=False),
    sa.Column("updated_us", sa.BigInteger, nullable=False),
    sa.Column("applied_us", sa.BigInteger, nullable=True),
    # version 2
    sa.Column("change_set_uri", sa.Text, nullable=True),
    sa.Column("transaction_count", sa.BigInteger, nullable=True),
    sa.Column("key_count", sa.BigInteger, nullable=True),
    # version 5: states reading and applied only; no error, drained or merged timings
    state_check("state", WindowState, "ck_cdc_windows_state"),
    # version 8: a pipeline's windows in one state, by start (its last applied, its reading windows)
    sa.Index("ix_cdc_windows_state", "pipeline", "state", "start_us"),
    # version 9: the window's last failure (first lines, credentials redacted), the task instance that met
    # it (``dag/run/task/map index``, as a reader's lease owner), its try number and when
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("last_error_task", sa.Text, nullable=True),
    sa.Column("last_error_try", sa.Integer, nullable=True),
    sa.Column("last_error_us", sa.BigInteger, nullable=True),
)

# version 6: keyed by (pipeline, target, table); the target column comes last, as added.
table_watermarks = sa.Table(
    TABLE_WATERMARKS_TABLE,
    metadata,
    sa.Column("pipeline", sa.String(MAX_PIPELINE_LENGTH), nullable=False),
    sa.Column("table_name", sa.String(MAX_TABLE_NAME_LENGTH), nullable=False),
    sa.Column("watermark_us", sa.BigInteger, nullable=False),
    sa.Column("updated_us", sa.BigInteger, nullable=False),
    sa.Column("target", sa.String(MAX_TARGET_LENGTH), nullable=False),
    sa.PrimaryKeyConstraint("pipeline", "target", "table_name"),
)


def double_precision() -> sa.types.TypeEngine:
    """An 8-byte float on both backends (SQLite ``FLOAT`` is REAL; PostgreSQL ``DOUBLE PRECISION``)."""
    return sa.Float().with_variant(postgresql.DOUBLE_PRECISION(), "postgresql")


# version 3: which partitions each window of a stream must read, and who reads them.
window_partitions = sa.Table(
    WINDOW_PARTITIONS_TABLE,
    metadata,
    sa.Column("stream", sa.String(MAX_STREAM_LENGTH), primary_key=True),
    sa.Column("window_start_us", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("window_end_us", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("token", sa.String(MAX_TOKEN_LENGTH), primary_key=True),
    sa.Column("state", sa.String(STATE_LENGTH), nullable=False),
    sa.Column("lease_owner", sa.String(MAX_OWNER_LENGTH), nullable=True),
    sa.Column("lease_expires_us", sa.BigInteger, nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("rows", sa.BigInteger, nullable=True),
    sa.Column("transactions", double_precision(), nullable=True),
    sa.Column("created_us", sa.BigInteger, nullable=False),
    sa.Column("updated_us", sa.BigInteger, nullable=False),
    sa.Column("done_us", sa.BigInteger, nullable=True),
    # version 4: the claim whose staged files are the partition's output, and how many
    sa.Column("claim_id", sa.String(32), nullable=True),
    sa.Column("output_files", sa.Integer, nullable=True),
    state_check("state", WindowPartitionState, "ck_cdc_window_partitions_state"),
)


# version 4: each pipeline's first window, and what each applied window did to each target table.
pipelines = sa.Table(
    PIPELINES_TABLE,
    metadata,
    sa.Column("pipeline", sa.String(MAX_PIPELINE_LENGTH), primary_key=True),
    sa.Column("first_window_start_us", sa.BigInteger, nullable=False),
    # Windows ending at or before this were applied before tables were recorded per window.
    sa.Column("tables_recorded_from_us", sa.BigInteger, nullable=True),
    sa.Column("created_us", sa.BigInteger, nullable=False),
)

window_tables = sa.Table(
    WINDOW_TABLES_TABLE,
    metadata,
    sa.Column("pipeline", sa.String(MAX_PIPELINE_LENGTH), nullable=False),
    sa.Column("window_start_us", sa.BigInteger, nullable=False, autoincrement=False),
    sa.Column("window_end_us", sa.BigInteger, nullable=False, autoincrement=False),
    sa.Column("table_name", sa.String(MAX_TABLE_NAME_LENGTH), nullable=False),
    sa.Column("target_version", sa.BigInteger, nullable=True),  # the target's own version of the table
    sa.Column("rows", sa.BigInteger, nullable=True),
    sa.Column("recorded_us", sa.BigInteger, nullable=False),
    # version 6: the target the window was applied to is part of the key
    sa.Column("target", sa.String(MAX_TARGET_LENGTH), nullable=False),
    sa.PrimaryKeyConstraint("pipeline", "target", "window_start_us", "window_end_us", "table_name"),
    sa.Index("ix_cdc_window_tables_table", "pipeline", "target", "table_name", "window_end_us"),
)


# version 7: where a unit of a source (a shard read through an iterator) stands at a window boundary, so
# the next window continues there and a re-read of the window ending there reads exactly the same records.
unit_checkpoints = sa.Table(
    UNIT_CHECKPOINTS_TABLE,
    metadata,
    sa.Column("stream", sa.String(MAX_STREAM_LENGTH), primary_key=True),
    sa.Column("unit", sa.String(MAX_TOKEN_LENGTH), primary_key=True),
    sa.Column("boundary_us", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("kind", sa.String(STATE_LENGTH), nullable=False),
    sa.Column("position", sa.Text, nullable=True),
    sa.Column("records", sa.BigInteger, nullable=False),
    sa.Column("recorded_us", sa.BigInteger, nullable=False),
)


class utc_now_micros(FunctionElement):
    """The database server's current time as integer microseconds since the Unix epoch.

    Leases and timings use the database clock so that readers on different hosts agree on it.
    PostgreSQL gives microseconds; SQLite gives milliseconds (exact integers, no float rounding).
    """

    type = sa.BigInteger()
    name = "utc_now_micros"
    inherit_cache = True


@compiles(utc_now_micros)
def _now_unsupported(element: utc_now_micros, compiler: object, **kw: object) -> str:
    raise sa.exc.CompileError("the metastore supports PostgreSQL and SQLite only")


@compiles(utc_now_micros, "postgresql")
def _now_postgresql(element: utc_now_micros, compiler: object, **kw: object) -> str:
    return "CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000) AS BIGINT)"


@compiles(utc_now_micros, "sqlite")
def _now_sqlite(element: utc_now_micros, compiler: object, **kw: object) -> str:
    # 'now' is fixed for the duration of one statement, so both parts come from the same instant.
    return (
        "(CAST(strftime('%s', 'now') AS INTEGER) * 1000000"
        " + CAST(substr(strftime('%f', 'now'), 4, 3) AS INTEGER) * 1000)"
    )
