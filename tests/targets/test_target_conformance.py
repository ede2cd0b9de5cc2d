"""Every target passes the target conformance checks (tests/support/target_conformance.py): Delta on a
local lake, BigQuery on the loopback fake with its ledger in a SQLite metastore and partial images
completed from a local lake the Delta upsert applied first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import bigquery
from google.cloud.bigquery_storage_v1 import BigQueryWriteClient
from google.cloud.bigquery_storage_v1.services.big_query_write.transports import BigQueryWriteGrpcTransport

from airflow_provider_cdc.changesets.reader import ChangeSetReader
from airflow_provider_cdc.core.contract.target import TableApplyResult, TableName, Target, TargetApplied
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore
from airflow_provider_cdc.plugins import open_target, target_kind, target_names
from airflow_provider_cdc.targets.bigquery.target import BigQueryCdcTarget
from airflow_provider_cdc.targets.delta.commit import applied_output as delta_output
from airflow_provider_cdc.targets.delta.compare import HIDDEN_COLUMNS
from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget
from airflow_provider_cdc.testing.bigquery_fake import FakeBigQuery
from tests.support.target_conformance import CHECKS, PIPELINE, TargetHarness

PROJECT, DATASET = "conformance-project", "cdc"
BIGQUERY_TARGET, DELTA_TARGET = "bigquery", "delta"


class DeltaHarness(TargetHarness):
    name = DELTA_TARGET

    def __init__(self, root: Path) -> None:
        self.lake_root = str(root / "lake")
        self.root = root

    def applied(self, results: list[TableApplyResult], window: Window) -> TargetApplied:
        return delta_output(self.lake_root, window.end_micros, results)

    def metastore_url(self) -> str:
        return f"sqlite:///{self.root / 'metastore.db'}"

    def target(self) -> Target:
        return DeltaLakeTarget(self.lake_root)

    def rows(self, table: str) -> list[dict[str, Any]]:
        lake = DeltaLakeTarget(self.lake_root)
        if not lake.exists(table):
            return []
        return sorted(lake.read_table(table).drop_columns(list(HIDDEN_COLUMNS)).to_pylist(), key=str)

    def writes(self, table: str) -> int:
        lake = DeltaLakeTarget(self.lake_root)
        return lake.open(table).version() + 1 if lake.exists(table) else 0


class BigQueryHarness(TargetHarness):
    name = BIGQUERY_TARGET

    def __init__(self, root: Path, fake: FakeBigQuery) -> None:
        self.fake = fake
        self.lake = DeltaLakeTarget(str(root / "lake"))
        self.url = f"sqlite:///{root / 'metastore.db'}"
        self.ledger = Metastore(self.url)
        self.ledger.create_schema()

    def metastore_url(self) -> str:
        return self.url

    def applied(self, results: list[TableApplyResult], window: Window) -> TargetApplied:
        """As the BigQuery upsert's output: each table's rows and upsert_stream_apply_watermark."""
        from dataclasses import replace

        from airflow_provider_cdc.targets.bigquery.names import bigquery_table_name

        target = self.target()
        reported = [
            replace(r, watermark=target.apply_watermark(r.table), reports_watermark=True) for r in results
        ]
        names: dict[str, TableName] = {
            r.table: bigquery_table_name(f"{PROJECT}.{DATASET}", r.table) for r in results
        }
        return TargetApplied(
            BIGQUERY_TARGET, window.end_micros, f"{PROJECT}.{DATASET}", tuple(reported), names
        )

    def target(self) -> Target:
        bq = bigquery.Client(
            project=PROJECT,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.fake.rest_endpoint},
        )
        write = BigQueryWriteClient(
            transport=BigQueryWriteGrpcTransport(channel=grpc.insecure_channel(self.fake.write_endpoint))
        )
        return BigQueryCdcTarget(bq, write, PROJECT, DATASET, row_source=self.lake, ledger=self.ledger)

    def rows(self, table: str) -> list[dict[str, Any]]:
        if (PROJECT, DATASET, table) not in self.fake.state.tables:
            return []
        return sorted(self.fake.rows(PROJECT, DATASET, table), key=str)

    def writes(self, table: str) -> int:
        if (PROJECT, DATASET, table) not in self.fake.state.tables:
            return 0
        return self.fake.table(PROJECT, DATASET, table).appended_rows

    def before_apply(self, change_sets: Path, window: Window) -> None:
        """The Delta upsert of the window: BigQuery completes partial images from its tables."""
        for table in ChangeSetReader(str(change_sets / window.window_id)).tables():
            self.lake.apply_window(table, PIPELINE, window)


@pytest.fixture
def fake():
    with FakeBigQuery() as server:
        server.create_dataset(PROJECT, DATASET)
        yield server


@pytest.fixture(params=[DELTA_TARGET, BIGQUERY_TARGET])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> TargetHarness:
    if request.param == DELTA_TARGET:
        return DeltaHarness(tmp_path)
    return BigQueryHarness(tmp_path, request.getfixturevalue("fake"))


@pytest.mark.parametrize("check", list(CHECKS))
def test_target_conforms(harness: TargetHarness, check: str, tmp_path: Path) -> None:
    CHECKS[check](harness, tmp_path / "changesets")


def test_every_registered_target_is_found_by_its_name() -> None:
    assert target_names() == [BIGQUERY_TARGET, DELTA_TARGET]
    for name in target_names():
        assert target_kind(name).load().name == name
    assert isinstance(open_target(DELTA_TARGET, "/nonexistent/lake"), Target)
    known = r"unknown target 'iceberg'; registered targets: \['bigquery', 'delta'\]"
    with pytest.raises(KeyError, match=known):
        target_kind("iceberg")


def test_every_registered_target_has_a_commit_part() -> None:
    for name in target_names():
        part = target_kind(name).committer()
        assert callable(part.window_results) and callable(part.apply_watermarks), name


def test_a_result_survives_its_xcom_form_and_refuses_an_unknown_outcome() -> None:
    result = TableApplyResult(DELTA_TARGET, "Orders", 5, "applied", 3, 7)
    assert TableApplyResult.from_dict(result.to_dict()) == result
    applied = TargetApplied(
        DELTA_TARGET, 5, "/lake", (result,), {"Orders": TableName("file", "/lake/Orders")}
    )
    assert TargetApplied.from_dict(applied.to_dict()) == applied
    with pytest.raises(ValueError, match="of window version 6"):
        TargetApplied(DELTA_TARGET, 6, None, (result,))
    with pytest.raises(ValueError, match="outcome must be one of"):
        TableApplyResult(DELTA_TARGET, "Orders", 5, "done")


def test_a_target_that_keeps_rows_is_the_row_source_of_partial_images() -> None:
    from airflow_provider_cdc.plugins import target_kinds
    from airflow_provider_cdc.targets.images import open_row_source, row_source_fix, row_source_root

    keeping = [kind for kind in target_kinds() if kind.keeps_rows]
    assert [kind.name for kind in keeping] == [DELTA_TARGET]
    for kind in keeping:
        cls = kind.load()
        assert kind.location_field
        assert all(callable(getattr(cls, m, None)) for m in ("current_rows", "table_uri", "applied_window"))
    assert row_source_root({"lake_root": "/l"}) == (DELTA_TARGET, "/l")
    assert row_source_root({}) is None and open_row_source({}) is None
    assert open_row_source({"lake_root": "/nonexistent/lake"}).name == DELTA_TARGET
    assert "pass lake_root (the Delta target) in locations" in row_source_fix()
