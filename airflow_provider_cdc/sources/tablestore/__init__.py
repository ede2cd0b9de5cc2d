"""Table Store (OTS) Stream: windows of a table's changes read shard by shard (see the hook)."""
