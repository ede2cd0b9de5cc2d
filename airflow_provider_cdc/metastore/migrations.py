"""Ordered, versioned schema steps for the metastore.

Each step brings the tables from version ``n - 1`` to ``n`` and is recorded as a row of
``cdc_schema_version``; a fresh database runs every step, an older one only the missing steps, so
both end with the same tables. Steps are frozen history: a later change is a new step, never an
edit of an old one. The whole upgrade runs in one transaction under a lock (PostgreSQL advisory
lock, SQLite's write lock), so concurrent callers wait for each other and the second finds
nothing left to do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import DDLCompiler

from airflow_provider_cdc.metastore.errors import SchemaVersionError
from airflow_provider_cdc.metastore.schema import (
    PARTITIONS_TABLE,
    PIPELINES_TABLE,
    SCHEMA_VERSION_TABLE,
    TABLE_WATERMARKS_TABLE,
    UNIT_CHECKPOINTS_TABLE,
    WINDOW_PARTITIONS_TABLE,
    WINDOW_TABLES_TABLE,
    WINDOWS_TABLE,
    schema_version,
    utc_now_micros,
)

try:  # SQLAlchemy 2.x
    from sqlalchemy.schema import ExecutableDDLElement as _DDLElement
except ImportError:  # SQLAlchemy 1.4
    from sqlalchemy.schema import DDLElement as _DDLElement

# Key of the PostgreSQL advisory lock that serialises schema upgrades (fits a signed BIGINT).
SCHEMA_LOCK_KEY = 0x63646353636865  # "cdcSche"


class AddColumn(_DDLElement):
    """``ALTER TABLE … ADD COLUMN …`` rendered from a Core ``Column`` (quoting by the dialect)."""

    def __init__(self, table: sa.Table, column: sa.Column) -> None:
        self.table = table
        self.column = column


@compiles(AddColumn)
def _compile_add_column(element: AddColumn, compiler: DDLCompiler, **kw: object) -> str:
    table = compiler.preparer.format_table(element.table)
    return f"ALTER TABLE {table} ADD COLUMN {compiler.get_column_specification(element.column)}"


class DropColumn(_DDLElement):
    """``ALTER TABLE … DROP COLUMN …`` (PostgreSQL; SQLite tables are rebuilt instead)."""

    def __init__(self, table: sa.Table, name: str) -> None:
        self.table = table
        self.name = name


@compiles(DropColumn)
def _compile_drop_column(element: DropColumn, compiler: DDLCompiler, **kw: object) -> str:
    table = compiler.preparer.format_table(element.table)
    return f"ALTER TABLE {table} DROP COLUMN {compiler.preparer.quote(element.name)}"


class DropConstraintIfExists(_DDLElement):
    """``ALTER TABLE … DROP CONSTRAINT IF EXISTS …`` (PostgreSQL)."""

    def __init__(self, table: sa.Table, name: str) -> None:
        self.table = table
        self.name = name


@compiles(DropConstraintIfExists)
def _compile_drop_constraint(element: DropConstraintIfExists, compiler: DDLCompiler, **kw: object) -> str:
    table = compiler.preparer.format_table(element.table)
    return f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {compiler.preparer.quote(element.name)}"


class RenameTable(_DDLElement):
    """``ALTER TABLE … RENAME TO …``."""

    def __init__(self, table: sa.Table, new_name: str) -> None:
        self.table = table
        self.new_name = new_name


@compiles(RenameTable)
def _compile_rename_table(element: RenameTable, compiler: DDLCompiler, **kw: object) -> str:
    table = compiler.preparer.format_table(element.table)
    return f"ALTER TABLE {table} RENAME TO {compiler.preparer.quote(element.new_name)}"


class SetNotNull(_DDLElement):
    """``ALTER TABLE … ALTER COLUMN … SET NOT NULL`` (PostgreSQL)."""

    def __init__(self, table: sa.Table, name: str) -> None:
        self.table = table
        self.name = name


@compiles(SetNotNull)
def _compile_set_not_null(element: SetNotNull, compiler: DDLCompiler, **kw: object) -> str:
    table = compiler.preparer.format_table(element.table)
    return f"ALTER TABLE {table} ALTER COLUMN {compiler.preparer.quote(element.name)} SET NOT NULL"


def _state_in(states: tuple[str, ...], name: str) -> sa.CheckConstraint:
    """``CHECK (state IN (...))`` over the states a step knew (steps do not follow later enums)."""
    return sa.CheckConstraint(sa.column("state").in_(states), name=name)


# Window states as each step knew them.
_V1_WINDOW_STATES = ("reading", "drained", "merged", "applied")
_V5_WINDOW_STATES = ("reading", "applied")


@dataclass(frozen=True)
class Migration:
    """One schema step: the version it produces and how."""

    version: int
    description: str
    apply: Callable[[Connection], None]


def _v1_partitions_and_windows(conn: Connection) -> None:
    md = sa.MetaData()
    sa.Table(
        PARTITIONS_TABLE,
        md,
        sa.Column("stream", sa.String(512), primary_key=True),
        sa.Column("token", sa.String(1024), primary_key=True),
        sa.Column("parent_tokens", sa.Text, nullable=False),
        sa.Column("start_us", sa.BigInteger, nullable=False),
        sa.Column("end_us", sa.BigInteger, nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("watermark_us", sa.BigInteger, nullable=False),
        sa.Column("heartbeat_ms", sa.Integer, nullable=True),
        sa.Column("lease_owner", sa.String(256), nullable=True),
        sa.Column("lease_expires_us", sa.BigInteger, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("record_count", sa.BigInteger, nullable=False),
        sa.Column("created_us", sa.BigInteger, nullable=False),
        sa.Column("updated_us", sa.BigInteger, nullable=False),
        sa.Column("finished_us", sa.BigInteger, nullable=True),
        _state_in(("created", "running", "finished"), "ck_cdc_partitions_state"),
        sa.Index("ix_cdc_partitions_stream_start", "stream", "start_us"),
    )
    sa.Table(
        WINDOWS_TABLE,
        md,
        sa.Column("pipeline", sa.String(250), primary_key=True),
        sa.Column("start_us", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("end_us", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("stream", sa.String(512), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("staging_uri", sa.Text, nullable=True),
        sa.Column("record_count", sa.BigInteger, nullable=True),
        sa.Column("opened_us", sa.BigInteger, nullable=False),
        sa.Column("updated_us", sa.BigInteger, nullable=False),
        sa.Column("drained_us", sa.BigInteger, nullable=True),
        sa.Column("merged_us", sa.BigInteger, nullable=True),
        sa.Column("applied_us", sa.BigInteger, nullable=True),
        _state_in(_V1_WINDOW_STATES, "ck_cdc_windows_state"),
    )
    md.create_all(conn)


def _v2_change_sets_and_table_watermarks(conn: Connection) -> None:
    md = sa.MetaData()
    partitions = sa.Table(PARTITIONS_TABLE, md, sa.Column("progress_us", sa.BigInteger, nullable=True))
    windows = sa.Table(
        WINDOWS_TABLE,
        md,
        sa.Column("change_set_uri", sa.Text, nullable=True),
        sa.Column("transaction_count", sa.BigInteger, nullable=True),
        sa.Column("key_count", sa.BigInteger, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
    )
    for table in (partitions, windows):
        for column in table.columns:
            conn.execute(AddColumn(table, column))
    watermarks = sa.Table(
        TABLE_WATERMARKS_TABLE,
        md,
        sa.Column("pipeline", sa.String(250), primary_key=True),
        sa.Column("table_name", sa.String(128), primary_key=True),
        sa.Column("watermark_us", sa.BigInteger, nullable=False),
        sa.Column("updated_us", sa.BigInteger, nullable=False),
    )
    watermarks.create(conn)


def _v3_window_partitions(conn: Connection) -> None:
    sa.Table(
        WINDOW_PARTITIONS_TABLE,
        sa.MetaData(),
        sa.Column("stream", sa.String(512), primary_key=True),
        sa.Column("window_start_us", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("window_end_us", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("token", sa.String(1024), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("lease_owner", sa.String(256), nullable=True),
        sa.Column("lease_expires_us", sa.BigInteger, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("rows", sa.BigInteger, nullable=True),
        sa.Column(
            "transactions",
            sa.Float().with_variant(postgresql.DOUBLE_PRECISION(), "postgresql"),
            nullable=True,
        ),
        sa.Column("created_us", sa.BigInteger, nullable=False),
        sa.Column("updated_us", sa.BigInteger, nullable=False),
        sa.Column("done_us", sa.BigInteger, nullable=True),
        _state_in(("pending", "running", "done"), "ck_cdc_window_partitions_state"),
    ).create(conn)


def _v4_pipelines_and_window_tables(conn: Connection) -> None:
    md = sa.MetaData()
    window_partitions = sa.Table(WINDOW_PARTITIONS_TABLE, md)
    conn.execute(AddColumn(window_partitions, sa.Column("claim_id", sa.String(32), nullable=True)))
    conn.execute(AddColumn(window_partitions, sa.Column("output_files", sa.Integer, nullable=True)))
    pipelines = sa.Table(
        PIPELINES_TABLE,
        md,
        sa.Column("pipeline", sa.String(250), primary_key=True),
        sa.Column("first_window_start_us", sa.BigInteger, nullable=False),
        sa.Column("tables_recorded_from_us", sa.BigInteger, nullable=True),
        sa.Column("created_us", sa.BigInteger, nullable=False),
    )
    pipelines.create(conn)
    sa.Table(
        WINDOW_TABLES_TABLE,
        md,
        sa.Column("pipeline", sa.String(250), primary_key=True),
        sa.Column("window_start_us", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("window_end_us", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("table_name", sa.String(128), primary_key=True),
        sa.Column("target_version", sa.BigInteger, nullable=True),
        sa.Column("rows", sa.BigInteger, nullable=True),
        sa.Column("recorded_us", sa.BigInteger, nullable=False),
        sa.Index("ix_cdc_window_tables_table", "pipeline", "table_name", "window_end_us"),
    ).create(conn)
    # Pipelines that already have windows: their first window is the earliest recorded, and the
    # windows applied so far changed tables without a per-table record.
    windows = sa.table(
        WINDOWS_TABLE, sa.column("pipeline"), sa.column("start_us"), sa.column("end_us"), sa.column("state")
    )
    applied_end = sa.func.max(sa.case((windows.c.state == "applied", windows.c.end_us)))
    existing = sa.select(
        windows.c.pipeline, sa.func.min(windows.c.start_us), applied_end, utc_now_micros()
    ).group_by(windows.c.pipeline)
    conn.execute(
        pipelines.insert().from_select(
            ["pipeline", "first_window_start_us", "tables_recorded_from_us", "created_us"], existing
        )
    )


def _v5_windows_reading_then_applied(conn: Connection) -> None:
    """Windows are ``reading`` or ``applied``; their error and drained/merged timings go."""
    windows = sa.table(WINDOWS_TABLE, sa.column("state"))
    conn.execute(sa.update(windows).where(windows.c.state.in_(("drained", "merged"))).values(state="reading"))
    if conn.dialect.name == "sqlite":
        _v5_rebuild_sqlite_windows(conn)
        return
    table = sa.Table(WINDOWS_TABLE, sa.MetaData())
    conn.execute(DropConstraintIfExists(table, "ck_cdc_windows_state"))
    for name in ("error", "drained_us", "merged_us"):
        conn.execute(DropColumn(table, name))
    check = _state_in(_V5_WINDOW_STATES, "ck_cdc_windows_state")
    sa.Table(WINDOWS_TABLE, sa.MetaData(), sa.Column("state", sa.String(16)), check)
    conn.execute(sa.schema.AddConstraint(check))


def _v5_rebuild_sqlite_windows(conn: Connection) -> None:
    """SQLite cannot change a CHECK constraint: copy the windows into a new table and swap it in."""
    rebuilt = sa.Table(
        f"{WINDOWS_TABLE}_v5",
        sa.MetaData(),
        sa.Column("pipeline", sa.String(250), primary_key=True),
        sa.Column("start_us", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("end_us", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("stream", sa.String(512), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("staging_uri", sa.Text, nullable=True),
        sa.Column("record_count", sa.BigInteger, nullable=True),
        sa.Column("opened_us", sa.BigInteger, nullable=False),
        sa.Column("updated_us", sa.BigInteger, nullable=False),
        sa.Column("applied_us", sa.BigInteger, nullable=True),
        sa.Column("change_set_uri", sa.Text, nullable=True),
        sa.Column("transaction_count", sa.BigInteger, nullable=True),
        sa.Column("key_count", sa.BigInteger, nullable=True),
        _state_in(_V5_WINDOW_STATES, "ck_cdc_windows_state"),
    )
    rebuilt.create(conn)
    names = [c.name for c in rebuilt.columns]
    old = sa.table(WINDOWS_TABLE, *(sa.column(name) for name in names))
    conn.execute(rebuilt.insert().from_select(names, sa.select(*old.c)))
    conn.execute(sa.schema.DropTable(sa.Table(WINDOWS_TABLE, sa.MetaData())))
    conn.execute(RenameTable(rebuilt, WINDOWS_TABLE))


# Version 6: the ledger and the apply watermarks are keyed by (pipeline, target, table). Before it,
# BigQuery's records were kept under the pipeline id with this suffix; every other row was Delta's.
_V6_BIGQUERY_SUFFIX = ".bigquery"
_V6_TARGET_LENGTH = 32


def _v6_tables(md: sa.MetaData, suffix: str = "") -> tuple[sa.Table, sa.Table]:
    """The window tables and table watermarks as version 6 defines them (``suffix``: a rebuild's name)."""
    window_tables = sa.Table(
        f"{WINDOW_TABLES_TABLE}{suffix}",
        md,
        sa.Column("pipeline", sa.String(250), nullable=False),
        sa.Column("window_start_us", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("window_end_us", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("table_name", sa.String(128), nullable=False),
        sa.Column("target_version", sa.BigInteger, nullable=True),
        sa.Column("rows", sa.BigInteger, nullable=True),
        sa.Column("recorded_us", sa.BigInteger, nullable=False),
        sa.Column("target", sa.String(_V6_TARGET_LENGTH), nullable=False),
        sa.PrimaryKeyConstraint("pipeline", "target", "window_start_us", "window_end_us", "table_name"),
    )
    watermarks = sa.Table(
        f"{TABLE_WATERMARKS_TABLE}{suffix}",
        md,
        sa.Column("pipeline", sa.String(250), nullable=False),
        sa.Column("table_name", sa.String(128), nullable=False),
        sa.Column("watermark_us", sa.BigInteger, nullable=False),
        sa.Column("updated_us", sa.BigInteger, nullable=False),
        sa.Column("target", sa.String(_V6_TARGET_LENGTH), nullable=False),
        sa.PrimaryKeyConstraint("pipeline", "target", "table_name"),
    )
    return window_tables, watermarks


def _v6_window_tables_index(window_tables: sa.Table) -> sa.Index:
    return sa.Index(
        "ix_cdc_window_tables_table",
        window_tables.c.pipeline,
        window_tables.c.target,
        window_tables.c.table_name,
        window_tables.c.window_end_us,
    )


def _v6_target_and_pipeline(pipeline: sa.ColumnElement) -> tuple[sa.ColumnElement, sa.ColumnElement]:
    """The target of a version-5 row and its pipeline id without the BigQuery suffix."""
    is_bigquery = pipeline.endswith(_V6_BIGQUERY_SUFFIX, autoescape=True)
    target = sa.case((is_bigquery, sa.literal("bigquery")), else_=sa.literal("delta"))
    stripped = sa.func.substr(pipeline, 1, sa.func.length(pipeline) - len(_V6_BIGQUERY_SUFFIX))
    return target, sa.case((is_bigquery, stripped), else_=pipeline)


def _v6_ledger_by_target(conn: Connection) -> None:
    """Add ``target`` to the window tables and table watermarks and key both by it."""
    if conn.dialect.name == "sqlite":
        _v6_rebuild_sqlite(conn)
        return
    inspector = sa.inspect(conn)
    window_tables, watermarks = _v6_tables(sa.MetaData())
    conn.execute(sa.schema.DropIndex(sa.Index("ix_cdc_window_tables_table")))
    for table in (window_tables, watermarks):
        # The old key (pipeline, …) would collide once the suffix leaves the pipeline ids.
        conn.execute(DropConstraintIfExists(table, inspector.get_pk_constraint(table.name)["name"]))
        bare = sa.Table(table.name, sa.MetaData())
        conn.execute(AddColumn(bare, sa.Column("target", sa.String(_V6_TARGET_LENGTH), nullable=True)))
        target, pipeline = _v6_target_and_pipeline(table.c.pipeline)
        conn.execute(sa.update(table).values(target=target, pipeline=pipeline))
        conn.execute(SetNotNull(bare, "target"))
        conn.execute(sa.schema.AddConstraint(table.primary_key))
    _v6_window_tables_index(window_tables).create(conn)


def _v6_rebuild_sqlite(conn: Connection) -> None:
    """SQLite cannot change a primary key: copy both tables into new ones and swap them in."""
    for old_table, rebuilt in zip(_v6_tables(sa.MetaData()), _v6_tables(sa.MetaData(), "_v6"), strict=True):
        rebuilt.create(conn)
        names = [c.name for c in rebuilt.columns if c.name != "target"]
        old = sa.table(old_table.name, *(sa.column(name) for name in names))
        target, pipeline = _v6_target_and_pipeline(old.c.pipeline)
        copied = sa.select(*(pipeline if name == "pipeline" else old.c[name] for name in names), target)
        conn.execute(rebuilt.insert().from_select([*names, "target"], copied))
        conn.execute(sa.schema.DropTable(sa.Table(old_table.name, sa.MetaData())))  # and its index
        conn.execute(RenameTable(rebuilt, old_table.name))
    _v6_window_tables_index(_v6_tables(sa.MetaData())[0]).create(conn)


def _v7_unit_checkpoints(conn: Connection) -> None:
    sa.Table(
        UNIT_CHECKPOINTS_TABLE,
        sa.MetaData(),
        sa.Column("stream", sa.String(512), primary_key=True),
        sa.Column("unit", sa.String(1024), primary_key=True),
        sa.Column("boundary_us", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("position", sa.Text, nullable=True),
        sa.Column("records", sa.BigInteger, nullable=False),
        sa.Column("recorded_us", sa.BigInteger, nullable=False),
    ).create(conn)


def _v8_windows_by_state(conn: Connection) -> None:
    windows = sa.Table(
        WINDOWS_TABLE,
        sa.MetaData(),
        sa.Column("pipeline", sa.String(250)),
        sa.Column("state", sa.String(16)),
        sa.Column("start_us", sa.BigInteger),
    )
    sa.Index("ix_cdc_windows_state", windows.c.pipeline, windows.c.state, windows.c.start_us).create(conn)


def _v9_window_errors(conn: Connection) -> None:
    """A window's last failure: the error's first lines, the task that met it, its try and when (all
    nullable; a column that exists already is kept)."""
    present = {column["name"] for column in sa.inspect(conn).get_columns(WINDOWS_TABLE)}
    windows = sa.Table(WINDOWS_TABLE, sa.MetaData())
    for column in (
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("last_error_task", sa.Text, nullable=True),
        sa.Column("last_error_try", sa.Integer, nullable=True),
        sa.Column("last_error_us", sa.BigInteger, nullable=True),
    ):
        if column.name not in present:
            conn.execute(AddColumn(windows, column))


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "partitions and windows", _v1_partitions_and_windows),
    Migration(
        2,
        "partition progress, window change sets and counts, per-table apply watermarks",
        _v2_change_sets_and_table_watermarks,
    ),
    Migration(3, "per-window partition reading with leases", _v3_window_partitions),
    Migration(
        4,
        "first windows of pipelines, table versions per window, claimed partition output",
        _v4_pipelines_and_window_tables,
    ),
    Migration(
        5,
        "windows read then applied: no drained or merged state, no window error",
        _v5_windows_reading_then_applied,
    ),
    Migration(
        6,
        "window tables and table watermarks keyed by pipeline, target and table",
        _v6_ledger_by_target,
    ),
    Migration(7, "unit checkpoints at window boundaries", _v7_unit_checkpoints),
    Migration(8, "index of windows by pipeline, state and start", _v8_windows_by_state),
    Migration(9, "the last failure of a window: error, task, try and time", _v9_window_errors),
)
CURRENT_VERSION = MIGRATIONS[-1].version


def _lock(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(SCHEMA_LOCK_KEY)))
    # SQLite: the transaction began with BEGIN IMMEDIATE and already holds the write lock.


def installed_version(conn: Connection) -> int | None:
    """The highest recorded schema version, or None when the version table does not exist."""
    if not sa.inspect(conn).has_table(SCHEMA_VERSION_TABLE):
        return None
    return conn.execute(sa.select(sa.func.max(schema_version.c.version))).scalar() or 0


def upgrade(conn: Connection) -> list[int]:
    """Bring the schema to ``CURRENT_VERSION`` inside the caller's transaction; return applied versions."""
    _lock(conn)
    current = installed_version(conn)
    if current is None:
        inspector = sa.inspect(conn)
        present = [
            t
            for t in (
                PARTITIONS_TABLE,
                WINDOWS_TABLE,
                TABLE_WATERMARKS_TABLE,
                WINDOW_PARTITIONS_TABLE,
                PIPELINES_TABLE,
                WINDOW_TABLES_TABLE,
            )
            if inspector.has_table(t)
        ]
        if present:
            raise SchemaVersionError(
                f"metastore tables {', '.join(present)} exist without a {SCHEMA_VERSION_TABLE} table; "
                "they were not created by this provider, so they are left untouched"
            )
        schema_version.create(conn)
        current = 0
    if current > CURRENT_VERSION:
        raise SchemaVersionError(
            f"metastore schema version {current} is newer than version {CURRENT_VERSION} that this "
            "provider understands; upgrade airflow-provider-cdc"
        )
    applied = []
    for step in MIGRATIONS:
        if step.version <= current:
            continue
        step.apply(conn)
        conn.execute(
            schema_version.insert().values(
                version=step.version, description=step.description, applied_us=utc_now_micros()
            )
        )
        applied.append(step.version)
    return applied
