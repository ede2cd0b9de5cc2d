"""Datastream events order by the fields each database's log states, backfill below the log."""

from __future__ import annotations

import pytest

from airflow_provider_cdc.core.sequence_number import parse_sequence_number, sortable_sequence_number
from airflow_provider_cdc.sources.datastream.read_methods import database_of, is_backfill
from airflow_provider_cdc.sources.datastream.sequence_numbers import (
    SequenceFieldError,
    event_sequence_number,
)


def csn(database: str, metadata: dict, *, backfill: bool = False, upsert: bool = True, ts: int = 0) -> tuple:
    text = event_sequence_number(
        database,
        metadata,
        backfill=backfill,
        upsert=upsert,
        source_timestamp_ms=ts,
        object_name="t",
        uuid="u1",
    )
    assert sortable_sequence_number(text) == parse_sequence_number(text).sortable()
    return parse_sequence_number(text).sections


def test_mysql_orders_by_binlog_file_then_position_even_when_the_timestamp_goes_back() -> None:
    first = csn("mysql", {"log_file": "mysql-bin.000014", "log_position": 900}, ts=2_000)
    later_older_ts = csn("mysql", {"log_file": "mysql-bin.000014", "log_position": 950}, ts=1_000)
    next_file = csn("mysql", {"log_file": "mysql-bin.000015", "log_position": 4}, ts=500)
    assert first < later_older_ts < next_file
    assert first == (1, 14, 900, 1)


def test_mysql_gtid_field_names() -> None:
    assert csn("mysql", {"binlog_file": "mysql-bin.000002", "binlog_position": 77}) == (1, 2, 77, 1)


def test_mysql_event_without_binlog_file_is_backfill_below_every_log_event() -> None:
    backfill = csn("mysql", {"log_file": "", "log_position": 0}, ts=9_999_999)
    assert backfill == (0, 9_999_999, 0, 1)
    assert backfill < csn("mysql", {"log_file": "mysql-bin.000001", "log_position": 4}, ts=1)


def test_oracle_orders_by_scn_then_rs_id_then_ssn() -> None:
    a = csn("oracle", {"scn": 100, "rs_id": " 0x0073c9.000a4e4c.01d0 ", "ssn": 67})
    b = csn("oracle", {"scn": 100, "rs_id": " 0x0073c9.000a4e4c.01d0 ", "ssn": 68})
    c = csn("oracle", {"scn": 100, "rs_id": "0x0073c9.000a4e4d.0000", "ssn": 0})
    d = csn("oracle", {"scn": 101, "rs_id": "0x000001.00000000.0000", "ssn": 0})
    assert a < b < c < d
    assert a == (1, 100, 0x0073C9 << 32 | 0x000A4E4C, 0x01D0 << 32 | 67 << 1 | 1)


def test_oracle_backfill_carries_the_snapshot_scn() -> None:
    assert csn("oracle", {"scn": 7040521, "rs_id": None}, backfill=True) == (0, 7040521, 0, 1)
    assert csn("oracle", {}, backfill=True, upsert=False) == (0, 0, 0, 0)


@pytest.mark.parametrize("database", ["postgresql", "sqlserver"])
def test_postgresql_and_sqlserver_order_by_timestamp_then_lsn(database: str) -> None:
    lsn = {
        "postgresql": ("16/CB002DB0", "16/CB002DB8"),
        "sqlserver": ("0000002a:00000248:0003", "0000002a:00000248:0004"),
    }
    low, high = lsn[database]
    assert (
        csn(database, {"lsn": low}, ts=5)
        < csn(database, {"lsn": high}, ts=5)
        < csn(database, {"lsn": low}, ts=6)
    )


def test_postgresql_lsn_is_64_bits() -> None:
    assert csn("postgresql", {"lsn": "16/CB002DB0"}, ts=7) == (1, 7, 0x16 << 32 | 0xCB002DB0, 1)


@pytest.mark.parametrize("lsn", ["0000002a:00000248:0003", "0x0000002a000002480003", "0000002a000002480003"])
def test_sqlserver_lsn_forms(lsn: str) -> None:
    assert csn("sqlserver", {"lsn": lsn}, ts=1) == (1, 1, 0x2A << 32 | 0x248, 3 << 1 | 1)


@pytest.mark.parametrize("database", ["mysql", "oracle", "postgresql", "sqlserver"])
def test_backfill_sorts_below_every_log_event(database: str) -> None:
    log = {
        "mysql": {"log_file": "mysql-bin.000001", "log_position": 0},
        "oracle": {"scn": 0, "rs_id": "0x0.0.0", "ssn": 0},
        "postgresql": {"lsn": "0/0"},
        "sqlserver": {"lsn": "00000000:00000000:0000"},
    }[database]
    backfill = csn(database, {"scn": 2**40}, backfill=True, ts=2**42)
    assert backfill < csn(database, log, ts=0, upsert=False)


@pytest.mark.parametrize(
    ("database", "metadata"),
    [
        ("mysql", {"log_file": "mysql-bin.000003", "log_position": 10}),
        ("oracle", {"scn": 5, "rs_id": "0x1.2.3", "ssn": 0}),
        ("postgresql", {"lsn": "1/2"}),
        ("sqlserver", {"lsn": "00000001:00000002:0003"}),
    ],
)
def test_upsert_wins_over_delete_at_equal_fields(database: str, metadata: dict) -> None:
    # UPDATE t SET id = id + 1: UPDATE-DELETE of key 2 and UPDATE-INSERT of key 2 at one position
    assert csn(database, metadata, upsert=False, ts=3) < csn(database, metadata, upsert=True, ts=3)


@pytest.mark.parametrize(
    ("database", "metadata", "field"),
    [
        ("mysql", {"log_file": "mysql-bin.000003"}, "log_position"),
        ("mysql", {"log_file": "binlog", "log_position": 3}, "log_file"),
        ("mysql", {"binlog_file": "mysql-bin.1", "binlog_position": -1}, "binlog_position"),
        ("oracle", {"rs_id": "0x1.2.3", "ssn": 0}, "scn"),
        ("oracle", {"scn": 5, "rs_id": "0x1.2", "ssn": 0}, "rs_id"),
        ("oracle", {"scn": 5, "rs_id": "0x1.2.zz", "ssn": 0}, "rs_id"),
        ("oracle", {"scn": 5, "rs_id": "0x1.123456789.3", "ssn": 0}, "rs_id"),
        ("oracle", {"scn": 5, "rs_id": "0x1.2.3", "ssn": 2**31}, "ssn"),
        ("postgresql", {"lsn": "16-CB002DB0"}, "lsn"),
        ("postgresql", {}, "lsn"),
        ("sqlserver", {"lsn": "2a:248"}, "lsn"),
    ],
)
def test_malformed_ordering_fields_are_refused_naming_the_field(
    database: str, metadata: dict, field: str
) -> None:
    with pytest.raises(SequenceFieldError, match=rf"object 't', event 'u1': source_metadata\.{field} is"):
        csn(database, metadata)


@pytest.mark.parametrize(
    ("read_method", "database", "backfill"),
    [
        ("mysql-cdc-binlog", "mysql", False),
        ("mysql-backfill-fulldump", "mysql", True),
        ("oracle-cdc-logminer", "oracle", False),
        ("oracle-supplementation", "oracle", False),
        ("oracle_dump", "oracle", True),
        ("postgres-cdc-wal", "postgresql", False),
        ("postgresql-cdc", "postgresql", False),
        ("postgresql-backfill", "postgresql", True),
        ("sqlserver-cdc", "sqlserver", False),
    ],
)
def test_database_and_backfill_from_read_method(read_method: str, database: str, backfill: bool) -> None:
    assert database_of(read_method) == database
    assert is_backfill(read_method) is backfill


def test_unknown_read_method_needs_the_setting() -> None:
    with pytest.raises(ValueError, match="set source_database"):
        database_of("db2-cdc")
    assert database_of("db2-cdc", "postgres") == "postgresql"
