"""Write a few rows to the emulator's ``shop`` database (``SPANNER_EMULATOR_HOST`` names it)."""

from __future__ import annotations

from datetime import datetime, timezone

from google.cloud import spanner

database = spanner.Client(project="test-project").instance("test-instance").database("shop")
placed = datetime(2026, 1, 1, 0, 1, tzinfo=timezone.utc)
with database.batch() as batch:
    customers = [(1, "Ada", "ada@example.com"), (2, "Lin", None)]
    batch.insert("Customers", ("CustomerId", "Name", "Email"), customers)
    batch.insert("Orders", ("OrderId", "CustomerId", "Amount", "PlacedAt"), [("o-1", 1, "12.50", placed)])
with database.batch() as batch:
    batch.update("Customers", ("CustomerId", "Email"), [(2, "lin@example.com")])  # a partial update
    batch.insert("Orders", ("OrderId", "CustomerId", "Amount", "PlacedAt"), [("o-2", 2, "7.00", placed)])
    batch.delete("Orders", spanner.KeySet(keys=[["o-1"]]))
print("wrote 2 customers and 2 orders, updated 1 customer, deleted 1 order")
