"""Folding several windows' changes of a table into one merge source: one row per key.

Pure logic, no I/O. The per-window upsert applies each window's change of a key in window order:
an ``UPSERT`` applies when the row is absent or its sequence number is greater than the stored one
(a partial image updates its present columns, a missing row is inserted with NULLs elsewhere), a
``DELETE`` removes the row when newer. :func:`fold_changes` reproduces that sequence for each key
and returns the net change, which one MERGE without the sequence-number guard then applies:

* ``DELETE``: the key's row is removed (nothing happens when it is absent);
* ``UPSERT`` with a full image: the row is replaced (or inserted) by the folded image, NULL where no
  applied change carried a column, when a ``DELETE`` was applied on the way (the row was rebuilt
  from nothing) or an applied change carried a full image;
* ``UPSERT`` with a partial image: the columns carried by an applied change take the value of the
  last one carrying them; the others keep the stored value (NULL for an inserted row).

Which changes apply depends on the stored row before the first pending window: absent, or present
with its sequence number. ``initial`` gives it per key when known (see :func:`initial_state`);
without it every key is taken as absent or older than all its pending changes, which holds when the
table's greatest sequence number is below the pending changes' smallest (the caller checks that
from the table's file statistics). Under that assumption absent and present rows take the same
changes: after the first change both are present with its sequence number, or both absent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_cdc.changesets.typed_batches import (
    SOURCE_CHANGE_TYPE,
    SOURCE_FULL_IMAGE,
    SOURCE_PRESENT,
    SOURCE_SEQUENCE,
    TableColumns,
)
from airflow_provider_cdc.core.contract.change_set import DELETE

#: The window (its end in µs) a pending change belongs to.
PENDING_WINDOW = "_pending_window"
_ROW = "_fold_row"
_OTHER = "_fold_other"
_KEY_VALUE = "_fold_key_{}"
_KEY_IS_NULL = "_fold_key_is_null_{}"


@dataclass(frozen=True)
class InitialState:
    """The stored row of each key before the pending windows (aligned with the changes' keys)."""

    present: np.ndarray  # bool per row of the changes
    sequence: pa.Array  # the stored sequence number (NULL: absent, or stored without one)


def _fill_value(arrow_type: pa.DataType) -> pa.Scalar:
    try:
        return pa.scalar(0).cast(arrow_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.scalar("0").cast(arrow_type)


def _join_columns(data: pa.Table, keys: list[str]) -> tuple[pa.Table, list[str]]:
    """``data`` with a NULL flag and a NULL-filled value per key column, so that a hash join matches
    NULL keys as the MERGE's ``IS NOT DISTINCT FROM`` does."""
    names = []
    for i, key in enumerate(keys):
        values = data[key]
        if pa.types.is_string_view(values.type):
            values = values.cast(pa.string())
        flag, value = _KEY_IS_NULL.format(i), _KEY_VALUE.format(i)
        data = data.append_column(flag, pc.is_null(values))
        data = data.append_column(value, pc.fill_null(values, _fill_value(values.type)))
        names += [flag, value]
    return data, names


def match_keys(left: pa.Table, right: pa.Table, keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Row index pairs of ``left`` and ``right`` with equal keys (NULL equals NULL); each side holds a
    key at most once."""
    if left.num_rows == 0 or right.num_rows == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    if len(keys) == 1:  # a set lookup: much cheaper than a join for one batch against many keys
        found, values = left[keys[0]], right[keys[0]]
        if found.type != values.type:
            found = found.cast(values.type)
        index = pc.index_in(found, value_set=values.combine_chunks(), skip_nulls=False)
        rows = np.flatnonzero(pc.is_valid(index).to_numpy(zero_copy_only=False))
        return rows.astype(np.int64), pc.take(index, pa.array(rows)).to_numpy().astype(np.int64)
    a = left.select(keys).append_column(_ROW, pa.array(np.arange(left.num_rows, dtype=np.int64)))
    b = right.select(keys).append_column(_OTHER, pa.array(np.arange(right.num_rows, dtype=np.int64)))
    a, on = _join_columns(a, keys)
    b, _ = _join_columns(b, keys)
    if [a.schema.field(n).type for n in on] != [b.schema.field(n).type for n in on]:
        aligned = pa.schema([*(a.schema.field(n) for n in on), b.schema.field(_OTHER)])
        b = b.select([*on, _OTHER]).cast(aligned)
    matched = a.select([*on, _ROW]).join(b.select([*on, _OTHER]), on, join_type="inner")
    return matched[_ROW].to_numpy(), matched[_OTHER].to_numpy()


class KeyIndex:
    """The keys of ``right`` (each at most once), to find many batches' rows among them: a single
    integer, date or timestamp key is sorted once and searched; other keys use :func:`match_keys`."""

    def __init__(self, right: pa.Table, keys: list[str]) -> None:
        self.right, self.keys = right, keys
        self.sorted: np.ndarray | None = None
        if len(keys) != 1 or right.num_rows == 0:
            return
        column = right[keys[0]].combine_chunks()
        kind = column.type
        if column.null_count or not (
            pa.types.is_integer(kind) or pa.types.is_timestamp(kind) or pa.types.is_date(kind)
        ):
            return
        values = column.to_numpy()
        self.order = np.argsort(values, kind="stable")
        self.sorted = values[self.order]
        self.type = kind

    def match(self, left: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """Row index pairs of ``left`` and ``right`` with equal keys."""
        if self.sorted is None:
            return match_keys(left, self.right, self.keys)
        column = left[self.keys[0]]
        if column.type != self.type:
            column = column.cast(self.type)
        valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
        values = pc.fill_null(column, pa.scalar(self.sorted[0], self.type)).to_numpy()
        at = np.minimum(np.searchsorted(self.sorted, values), len(self.sorted) - 1)
        rows = np.flatnonzero((self.sorted[at] == values) & valid)
        return rows.astype(np.int64), self.order[at[rows]].astype(np.int64)


def sort_changes(changes: pa.Table, keys: list[str]) -> pa.Table:
    """Pending changes ordered by key, then window (a key has one change per window)."""
    return changes.sort_by([*((k, "ascending") for k in keys), (PENDING_WINDOW, "ascending")])


def group_starts(changes: pa.Table, keys: list[str]) -> np.ndarray:
    """Per row of key-sorted ``changes``, whether it starts a new key."""
    n = changes.num_rows
    starts = np.zeros(n, dtype=bool)
    if n == 0:
        return starts
    starts[0] = True
    for key in keys:
        column = changes[key].combine_chunks()
        if pa.types.is_string_view(column.type):
            column = column.cast(pa.string())
        current, previous = column.slice(1), column.slice(0, n - 1)
        nulls_differ = pc.xor(pc.is_null(current), pc.is_null(previous))
        values_differ = pc.fill_null(pc.not_equal(current, previous), False)
        starts[1:] |= pc.or_(nulls_differ, values_differ).to_numpy(zero_copy_only=False)
    return starts


def initial_state(changes: pa.Table, stored: pa.Table, keys: list[str]) -> InitialState:
    """The stored rows (keys and ``_change_sequence_number``) of the keys of ``changes``."""
    present = np.zeros(changes.num_rows, dtype=bool)
    rows, found = match_keys(changes, stored, keys)
    present[rows] = True
    index = np.full(changes.num_rows, -1, dtype=np.int64)
    index[rows] = found
    if not rows.size:
        return InitialState(present, pa.nulls(changes.num_rows, pa.string()))
    sequence = stored[SOURCE_SEQUENCE].combine_chunks()
    if sequence.type != pa.string():
        sequence = sequence.cast(pa.string())
    return InitialState(present, sequence.take(pa.array(index, mask=index < 0)))


def _applied(
    sequence: list[str | None], is_delete: np.ndarray, starts: np.ndarray, initial: InitialState | None
) -> np.ndarray:
    """Per change, whether the per-window upsert would apply it (a DELETE of an absent row counts as
    applied: the row is absent after it either way)."""
    n = len(sequence)
    applied = np.ones(n, dtype=bool)
    group = np.cumsum(starts) - 1
    seq = np.array(sequence, dtype=object)
    increasing = np.ones(n, dtype=bool)
    if n > 1:
        same = ~starts[1:]
        increasing[1:] = ~same | (seq[1:] > seq[:-1])
    regular = np.ones(int(group[-1]) + 1 if n else 0, dtype=bool)
    np.logical_and.at(regular, group, increasing)
    stored_seq: list[str | None] = [None] * n
    stored_present = np.zeros(n, dtype=bool)
    if initial is not None:
        stored_seq = initial.sequence.to_pylist()
        stored_present = initial.present
    known = stored_present & np.array([s is not None for s in stored_seq], dtype=bool)
    # Sequence numbers increasing in window order: all apply, but those a stored newer row ignores.
    for i in np.flatnonzero(known & regular[group]):
        applied[i] = seq[i] > stored_seq[i]
    # Otherwise play the changes one by one (late or repeated changes across windows).
    bounds = np.append(np.flatnonzero(starts), n)
    for g in np.flatnonzero(~regular):
        rows = range(int(bounds[g]), int(bounds[g + 1]))
        first = rows[0]
        present, current = bool(stored_present[first]), stored_seq[first]
        for i in rows:
            newer = current is None or seq[i] > current
            if is_delete[i]:
                applied[i] = not present or newer
                if present and newer:
                    present = False
            else:
                applied[i] = not present or newer
                if applied[i]:
                    present, current = True, seq[i]
    return applied


def fold_changes(changes: pa.Table, table: TableColumns, initial: InitialState | None = None) -> pa.Table:
    """One merge-source row per key (schema ``table.source_schema()``) with the net effect of
    ``changes`` (merge-source rows of several windows plus ``_pending_window``), sorted by key and
    window by :func:`sort_changes`; keys none of whose changes apply are left out."""
    schema = table.source_schema()
    if changes.num_rows == 0:
        return schema.empty_table()
    keys = [c.name for c in table.keys]
    starts = group_starts(changes, keys)
    is_delete = pc.equal(changes[SOURCE_CHANGE_TYPE], DELETE).to_numpy(zero_copy_only=False)
    sequence = changes[SOURCE_SEQUENCE].to_pylist()
    applied = _applied(sequence, is_delete, starts, initial)
    group = np.cumsum(starts) - 1
    idx = np.arange(changes.num_rows, dtype=np.int64)
    rows = idx[applied]
    if rows.size == 0:
        return schema.empty_table()
    g = group[rows]
    first = np.ones(rows.size, dtype=bool)
    first[1:] = g[1:] != g[:-1]
    first_pos = np.flatnonzero(first)
    last_pos = np.append(first_pos[1:] - 1, rows.size - 1)
    last = rows[last_pos]  # the last applied change of each key: its outcome
    group_start_row = rows[first_pos]
    # Per applied change, the latest applied DELETE of its key at or before it (below the key's start: none).
    start_of = np.repeat(group_start_row, np.diff(np.append(first_pos, rows.size)))
    last_delete = np.maximum.accumulate(np.where(is_delete[rows], rows, start_of - 1))
    key_last_delete = last_delete[last_pos]
    rebuilt = key_last_delete >= group_start_row  # a DELETE applied: the row starts over from nothing
    considered = rows > np.repeat(key_last_delete, np.diff(np.append(first_pos, rows.size)))
    full = changes[SOURCE_FULL_IMAGE].to_numpy(zero_copy_only=False)[rows]
    present = changes[SOURCE_PRESENT].combine_chunks()
    named = pc.list_flatten(present)
    parents = pc.list_parent_indices(present).to_numpy()
    position = np.full(changes.num_rows, -1, dtype=np.int64)
    position[rows] = np.arange(rows.size)
    values = [c.name for c in table.values]
    any_full = np.maximum.reduceat((full & considered).astype(np.int8), first_pos).astype(bool)
    result_full = rebuilt | any_full
    source_of: dict[str, np.ndarray] = {}
    carried = np.zeros((last.size, len(values)), dtype=bool)
    for j, name in enumerate(values):
        carries = full.copy()
        mentioned = parents[pc.fill_null(pc.equal(named, name), False).to_numpy(zero_copy_only=False)]
        hit = position[mentioned]
        carries[hit[hit >= 0]] = True
        candidate = np.where(carries & considered, rows, -1)
        chosen = np.maximum.reduceat(candidate, first_pos)
        carried[:, j] = chosen >= 0
        source_of[name] = chosen
    upsert = ~is_delete[last]
    columns: dict[str, pa.Array] = {}
    for field in schema:
        name = field.name
        if name in source_of:
            chosen = source_of[name]
            column = changes[name].take(pa.array(chosen, mask=chosen < 0))
        elif name == SOURCE_PRESENT:
            mask = carried & ~result_full[:, None] & upsert[:, None]
            flat = np.tile(np.array(values, dtype=object), last.size)[mask.ravel()] if values else []
            offsets = np.concatenate([[0], np.cumsum(mask.sum(axis=1))]).astype(np.int32)
            column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.string()))
        elif name == SOURCE_FULL_IMAGE:
            column = pa.array(result_full & upsert)
        else:  # keys, sequence number, commit timestamp, change type, keys JSON: the last change's
            column = changes[name].take(pa.array(last))
        columns[name] = column.cast(field.type) if column.type != field.type else column
    return pa.table([columns[f.name] for f in schema], schema=schema)


__all__ = [
    "PENDING_WINDOW",
    "InitialState",
    "KeyIndex",
    "fold_changes",
    "group_starts",
    "initial_state",
    "match_keys",
    "sort_changes",
]
