"""A two-table window change set (Orders, Customers) written with the change-set writer."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from airflow_provider_cdc.changesets.writer import Change, change_set_table, write_change_set
from airflow_provider_cdc.core.timestamps import to_micros
from support.changes import spanner_columns

ORDERS = spanner_columns(1, ("OrderId", "STRING"), ("Amount", "NUMERIC"), ("PlacedAt", "TIMESTAMP"))
CUSTOMERS = spanner_columns(1, ("CustomerId", "INT64"), ("Email", "STRING"), ("Photo", "BYTES"))
START = datetime(2024, 6, 1, 12, 0, tzinfo=timezone.utc)
END = START + timedelta(minutes=5)
WINDOW_ID = f"{to_micros(START)}-{to_micros(END)}"


def seq(n: int) -> str:
    """The sortable sequence number of the ``n``-th change of the window."""
    return "/".join(f"{v:016X}" for v in (to_micros(START) + n, 7, n, 0))


def write_window(root: Path, window_id: str = WINDOW_ID, n: int = 1) -> Path:
    """Write the window's change set under ``root``: 5 Orders upserts, a Customers upsert and delete."""
    commit = START + timedelta(seconds=n)
    orders = [
        Change(
            {"OrderId": f"o{i}"}, "UPSERT", seq(n), commit, {"Amount": Decimal(f"{i}.25"), "PlacedAt": commit}
        )
        for i in range(5)
    ]
    customers = [
        Change({"CustomerId": 1}, "UPSERT", seq(n), commit, {"Email": "a@example.com", "Photo": b"\x89PNG"}),
        Change({"CustomerId": 2}, "DELETE", seq(n), commit),
    ]
    path = root / window_id
    write_change_set(
        str(path),
        {"Orders": change_set_table(ORDERS, orders), "Customers": change_set_table(CUSTOMERS, customers)},
    )
    return path


def interval_context(**extra: Any) -> dict[str, Any]:
    """A task context whose data interval is the window."""
    return {"data_interval_start": START, "data_interval_end": END, **extra}
