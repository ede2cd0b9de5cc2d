"""Change sequence numbers of Table Store stream records: ``window start / lineage stage / position``.

Each record's number is three sections: the start of the window that read it (µs), the **stage** of
its shard in that window's lineage (0 for a shard none of whose parents is read in the window, else
one more than its deepest parent's), and its **position** among the records the shard gave the
window (0, 1, …).

Why this orders every change of a key exactly:

- *Windows.* Each shard is read in windows that cut its stream at checkpoints (the iterator at the
  first record at or after a window's end), so every record of a shard read by one window precedes
  every record read by a later one; and a child shard is read only after its parents are drained, so
  this holds along the lineage too. The window start is the first section.
- *Shards within a window.* A key is written to exactly one open shard at a time (its hash range);
  when that shard splits or merges, the key's later records are in a child. A child is read only
  after its parents, and its stage is greater than each parent's that the window reads, so a key's
  records in a parent sort before its records in the child. Two shards of one stage never hold the
  same key within a window.
- *Records within a shard.* The stream returns a shard's records in write order; the position is
  that order.

The record's own ``(epoch, timestamp, row_index)`` is not used: the epoch's comparability across a
parent and its children is not documented, and a child's lower epoch would make a target drop newer
changes. A re-read of a window starts at the same checkpoints and reads the same number of records,
so a record keeps its number (the merge's identity keeps it once). The record's timestamp, epoch,
row index and shard are staged in ``source_metadata_json``.
"""

from __future__ import annotations

from airflow_provider_cdc.core.sequence_number import ChangeSequenceNumber

__all__ = ["record_sequence_number"]


def record_sequence_number(window_start_us: int, stage: int, position: int) -> str:
    """The sortable sequence number of the ``position``-th record a shard of ``stage`` gave a window."""
    if window_start_us < 0 or stage < 0 or position < 0:
        raise ValueError(
            f"a sequence number needs non-negative sections, got window start {window_start_us}, "
            f"stage {stage}, position {position}"
        )
    return ChangeSequenceNumber.of(window_start_us, stage, position).sortable()
