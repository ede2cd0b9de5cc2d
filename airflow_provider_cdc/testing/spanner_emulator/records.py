"""Data change records: what each change stream logs, per partition, for a committed transaction."""

from __future__ import annotations

import json
from typing import Any

from . import wire
from .model import ChangeStream, PartitionLog, Table
from .partitions import Partition, PartitionMap, key_hash
from .transaction import _Mod


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def record_for_stream(
    stream: ChangeStream,
    partitions: PartitionMap,
    mods: list[_Mod],
    commit_us: int,
    commit_text: str,
    transaction_id: str,
) -> None:
    """Append to ``stream``'s partition logs the data change records of one transaction's ``mods``."""
    capture = stream.definition.value_capture_type
    # records in creation order: (partition, table, mod_type, non-key columns, [(keys, new, old)]);
    # a mod joins its partition's last record when table, mod type and columns are the same
    records: list[tuple[Partition, Table, str, tuple[str, ...], list[tuple[dict, dict, dict]]]] = []
    open_record: dict[int, int] = {}
    for mod in mods:
        tracked = stream.tracked_columns(mod.table)
        if tracked is None:
            continue
        entry = _mod_values(mod, tracked, capture)
        if entry is None:
            continue
        new, old, columns = entry
        keys = dict(zip(mod.table.primary_key, mod.key, strict=True))
        partition = partitions.owner(key_hash(mod.table.name, _dumps(keys)))
        index = open_record.get(partition.pid)
        record = records[index] if index is not None else None
        if record is not None and record[1] is mod.table and record[2:4] == (mod.mod_type, columns):
            record[4].append((keys, new, old))
        else:
            open_record[partition.pid] = len(records)
            records.append((partition, mod.table, mod.mod_type, columns, [(keys, new, old)]))
    if not records:
        return
    partitions_in_transaction = len({r[0].pid for r in records})
    last_of = {r[0].pid: i for i, r in enumerate(records)}
    for sequence, (partition, table, mod_type, columns, entries) in enumerate(records):
        column_types = [
            {
                "name": c.name,
                "type": c.type.to_json(),
                "is_primary_key": c.name in table.primary_key,
                "ordinal_position": table.ordinal(c.name),
            }
            for c in table.columns
            if c.name in table.primary_key or c.name in columns
        ]
        row = wire.data_change_row(
            commit_ts=commit_text,
            record_sequence=f"{sequence:08d}",
            transaction_id=transaction_id,
            is_last=last_of[partition.pid] == sequence,
            table=table.name,
            column_types=column_types,
            mods=entries,
            mod_type=mod_type,
            value_capture_type=capture,
            records_in_transaction=len(records),
            partitions_in_transaction=partitions_in_transaction,
        )
        log = stream.logs.setdefault(partition.pid, PartitionLog())
        log.timestamps.append(commit_us)
        log.rows.append(row)


def _mod_values(mod: _Mod, tracked: list[str], capture: str) -> tuple[dict, dict, tuple[str, ...]] | None:
    """New values, old values and the non-key columns ``column_types`` lists for one mod.

    INSERT and DELETE list every tracked column. An UPDATE lists the tracked columns the
    transaction wrote (whether or not their values changed), and is not reported when it wrote
    none; with ``NEW_ROW`` and ``NEW_ROW_AND_OLD_VALUES`` it carries and lists every tracked column
    and is reported whenever the stream tracks a non-key column of the table.
    """
    before, after = mod.before or {}, mod.after or {}
    every = tuple(tracked)
    if mod.mod_type == "INSERT":
        return {c: after.get(c) for c in tracked}, {}, every
    if mod.mod_type == "DELETE":
        old = {c: before.get(c) for c in tracked}
        return {}, (old if capture in ("OLD_AND_NEW_VALUES", "NEW_ROW_AND_OLD_VALUES") else {}), every
    written = tuple(c for c in tracked if c in mod.written)
    if capture in ("OLD_AND_NEW_VALUES", "NEW_VALUES"):
        if not written:
            return None
        new = {c: after.get(c) for c in written}
        old = {c: before.get(c) for c in written} if capture == "OLD_AND_NEW_VALUES" else {}
        return new, old, written
    if not every:
        return None
    new = {c: after.get(c) for c in tracked}
    old = {c: before.get(c) for c in written} if capture == "NEW_ROW_AND_OLD_VALUES" else {}
    return new, old, every
