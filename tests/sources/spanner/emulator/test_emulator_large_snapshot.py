"""A snapshot of a large table streams in batches: the project's emulator never holds the whole result.

The rule is about the project's emulator's own memory (it serves from this process, so its allocations
are measured here); Google's emulator is a separate program and has no part in it.
"""

from __future__ import annotations

import tracemalloc
from datetime import datetime, timezone
from typing import Any

import grpc
from google.cloud.spanner_v1 import ExecuteSqlRequest, TransactionOptions, TransactionSelector

from airflow_provider_cdc.testing.spanner_emulator import ManualClock, SpannerEmulator

ROWS = 200_000
PAYLOAD = "p" * 100


def test_a_snapshot_of_200k_rows_streams_without_holding_the_result(emulator_instance: Any) -> None:
    clock = ManualClock(datetime(2026, 4, 1, tzinfo=timezone.utc))
    with SpannerEmulator(clock=clock) as emulator:
        instance = emulator_instance(emulator)
        database = instance.database(
            "big",
            ddl_statements=[
                "CREATE TABLE Big (Shard INT64 NOT NULL, Id INT64 NOT NULL, Payload STRING(MAX)) "
                "PRIMARY KEY (Shard, Id)"
            ],
        )
        database.create().result(60)
        for start in range(0, ROWS, 25_000):
            with database.batch() as batch:
                rows = [[i % 16, i, PAYLOAD] for i in range(start, start + 25_000)]
                batch.insert("Big", ["Shard", "Id", "Payload"], rows)
        session = database.spanner_api.create_session(database=database.name).name
        read_only = TransactionOptions.ReadOnly(read_timestamp=batch.committed)
        request = ExecuteSqlRequest(
            session=session,
            sql="SELECT Shard, Id, Payload FROM Big WHERE Id >= 0",
            transaction=TransactionSelector(single_use=TransactionOptions(read_only=read_only)),
        )
        with grpc.insecure_channel(emulator.host) as channel:
            call = channel.unary_stream(
                "/google.spanner.v1.Spanner/ExecuteStreamingSql",
                request_serializer=ExecuteSqlRequest.serialize,
                response_deserializer=len,  # only the size of each PartialResultSet
            )
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                sizes = list(call(request, timeout=300))
                peak = tracemalloc.get_traced_memory()[1] - before
            finally:
                tracemalloc.stop()
    streamed = sum(sizes)
    assert streamed > ROWS * len(PAYLOAD)  # every row went out
    assert len(sizes) > 50  # in many messages
    # holding the result would take at least what was streamed; ordering the 200k new keys for the read
    # takes a few pointer lists (about 3 MB) and each message a quarter of a megabyte
    assert peak < streamed / 3, f"peak {peak} bytes while streaming {streamed} bytes"
