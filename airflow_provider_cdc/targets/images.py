"""Full row images for targets whose upsert replaces whole rows, completed by one shared step.

A target that writes whole rows (its spec's ``needs_full_images``) replaces the whole row on UPSERT,
while a source's UPDATE (e.g. a change stream's) may carry only the columns it changed
(``_present_columns``, ``_full_image`` false). A row whose image lacks a column the target writes is
completed from a :class:`RowSource`: the current rows of the same source table in a target of the
pipeline that keeps them (a kind with ``keeps_rows``, :func:`open_row_source`) and applied the window
before, reading only the touched keys:

* The source's row has the change's sequence number: its values fill the missing columns.
* The source's row is newer, or gone (a later window changed or deleted the key): the change is
  superseded; it is not written, and the later window's change, which the target orders after it by
  sequence number, carries the key's state.
* The source's row is older, or the source has no such table: the window was not applied to it yet,
  which is an error naming the table.

When the source has applied windows after this one (a re-send of a table after a partial failure, a
backfill), every UPSERT row is checked against it this way, full images too: a row a later window
changed or deleted is superseded and not written, so that an old image never comes back once the
target has forgotten the later DELETE (a target may keep DELETEs for a limited time only).

Keys match NULL-safely: a NULL key value finds the source row whose key column is NULL (as the
row-keeping targets match keys, ``IS NOT DISTINCT FROM``).

Without a row source the rows cannot be completed and the apply fails naming table and keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pa_ds

from airflow_provider_cdc.changesets.reader import (
    SOURCE_CHANGE_TYPE,
    SOURCE_FULL_IMAGE,
    SOURCE_KEYS_JSON,
    SOURCE_PRESENT,
    SOURCE_SEQUENCE,
    TableColumns,
)

_ROW = "__row"
_HELD_SEQUENCE = "__held_sequence"
_LOOKUP_ROW = "__lookup_row"
_NULL_FLAG = "__null_"
_SHOWN_KEYS = 5


class ImageError(RuntimeError):
    """Partial row images that cannot be completed (names table and keys)."""


class RowSource(Protocol):
    """Where the current rows of a table are read from to complete partial images: the table's
    columns and ``_change_sequence_number`` (the class of a target kind with ``keeps_rows``)."""

    name: str

    def applied_window(self, table: str, pipeline: str) -> int | None:
        """The end (µs) of the last window of ``pipeline`` the table holds (``None``: none)."""
        ...

    def current_rows(self, table: str) -> pa_ds.Dataset | None:
        """The table's current rows; ``None`` when there is no such table."""
        ...

    def table_uri(self, table: str) -> str:
        """Where the table is (for messages)."""
        ...


def row_source_root(target_roots: Mapping[str, str]) -> tuple[str, str] | None:
    """The ``(target, root)`` partial images are completed from: the first registered target (by
    name) that keeps current rows and whose root is among ``target_roots`` (``None``: none is)."""
    from airflow_provider_cdc.plugins import target_kinds

    for kind in target_kinds():
        root = target_roots.get(kind.location_field) if kind.keeps_rows and kind.location_field else None
        if root:
            return kind.name, root
    return None


def open_row_source(
    target_roots: Mapping[str, str], storage_options: Mapping[str, str] | None = None
) -> Any | None:
    """The :class:`RowSource` of :func:`row_source_root` opened on its root (``None``: no root of a
    target that keeps rows is given)."""
    from airflow_provider_cdc.plugins import open_target

    found = row_source_root(target_roots)
    return None if found is None else open_target(found[0], found[1], dict(storage_options or {}))


def row_source_fix() -> str:
    """How a pipeline gets a row source: the roots of the targets that keep rows."""
    from airflow_provider_cdc.plugins import target_kinds

    kinds = [k for k in target_kinds() if k.keeps_rows and k.location_field]
    named = " or ".join(f"{k.location_field} (the {k.title} target)" for k in kinds) or "a root"
    return f"pass {named} in locations and apply that target first, so the images are completed from it"


def _carried(source: pa.Table, table: TableColumns, column: str) -> pa.Array:
    """Per row, whether its image carries ``column``."""
    full = pc.fill_null(source.column(SOURCE_FULL_IMAGE).combine_chunks(), False)
    if column not in {c.name for c in table.values}:
        return pa.array([False] * source.num_rows, pa.bool_())
    present = source.column(SOURCE_PRESENT).combine_chunks()
    flat = pc.list_flatten(present)
    parents = pc.list_parent_indices(present)
    hits = pc.filter(parents, pc.equal(flat, column))
    named = pc.is_in(pa.array(range(source.num_rows), pa.int64()), value_set=hits.cast(pa.int64()))
    return pc.or_(full, named)


def complete_images(
    source: pa.Table,
    table: TableColumns,
    written: Sequence[str],
    rows: RowSource | None,
    *,
    source_table: str | None = None,
    later_windows: bool = False,
) -> tuple[pa.Table, int]:
    """``source`` (a decoded change set) with every written column filled, and the count of
    superseded rows left out (see the module docstring). ``rows`` holds the current rows under
    ``source_table`` (default the change set's table); ``later_windows``: it has applied windows after
    this one, so every UPSERT row is checked against it."""
    keys = [c.name for c in table.keys]
    values = [name for name in written if name not in keys]
    known = {c.name for c in table.values}
    if (
        not later_windows
        and all(name in known for name in values)
        and pc.all(source.column(SOURCE_FULL_IMAGE)).as_py()
    ):
        return _with_columns(source, values, None), 0  # full images carry every written column
    upsert = pc.equal(source.column(SOURCE_CHANGE_TYPE), "UPSERT")
    carried = {name: _carried(source, table, name) for name in values}
    complete = pa.array([True] * source.num_rows, pa.bool_())
    for mask in carried.values():
        complete = pc.and_(complete, mask)
    needs = upsert if later_windows else pc.and_(upsert, pc.invert(complete))
    if isinstance(needs, pa.ChunkedArray):
        needs = needs.combine_chunks()
    if not pc.any(needs).as_py():
        return _with_columns(source, values, None), 0
    partial_keys = pc.filter(source.column(SOURCE_KEYS_JSON), needs).to_pylist()
    name = table.table
    shown = ", ".join(partial_keys[:_SHOWN_KEYS]) + (" …" if len(partial_keys) > _SHOWN_KEYS else "")
    if rows is None:
        raise ImageError(
            f"table {name!r}: {len(partial_keys)} change(s) carry partial row images (keys {shown}) and "
            f"the target's UPSERT replaces whole rows; {row_source_fix()}"
        )
    dataset = rows.current_rows(source_table or name)
    if dataset is None:
        raise ImageError(
            f"table {name!r}: no table at {rows.table_uri(source_table or name)!r} to complete partial "
            f"row images (keys {shown}) from; run the {rows.name} apply step for this window first"
        )
    partial = source.filter(needs)
    partial = partial.append_column(_ROW, pa.array(range(partial.num_rows), pa.int64()))
    held_columns = [c for c in (*keys, *values, SOURCE_SEQUENCE) if c in dataset.schema.names]
    unknown = [c for c in values if c not in dataset.schema.names]
    first = keys[0]
    wanted = pc.unique(partial.column(first))
    scan = _key_field(dataset, first).isin(wanted.drop_null())
    if wanted.null_count:
        scan = scan | pc.field(first).is_null()
    lookup = dataset.to_table(columns=held_columns, filter=scan).rename_columns(
        [
            _HELD_SEQUENCE if c == SOURCE_SEQUENCE else f"__held_{c}" if c not in keys else c
            for c in held_columns
        ]
    )
    # Join on the keys (NULL-safe) and a row number only (Arrow joins carry no list columns), then take.
    lookup = lookup.append_column(_LOOKUP_ROW, pa.array(range(lookup.num_rows), pa.int64()))
    join_keys = [*keys, *(_NULL_FLAG + k for k in keys)]
    matched = (
        _null_safe(partial.select([*keys, _ROW]), keys)
        .join(_null_safe(lookup.select([*keys, _LOOKUP_ROW]), keys), keys=join_keys, join_type="left outer")
        .sort_by(_ROW)
    )
    joined = lookup.drop_columns(keys).take(matched.column(_LOOKUP_ROW))
    change_sequence = partial.column(SOURCE_SEQUENCE)
    held_sequence = joined.column(_HELD_SEQUENCE)
    behind = pc.fill_null(pc.less(held_sequence, change_sequence), False)
    if pc.any(behind).as_py():
        late = pc.filter(partial.column(SOURCE_KEYS_JSON), behind).to_pylist()
        raise ImageError(
            f"table {name!r}: the table at {rows.table_uri(source_table or name)!r} holds older images than "
            f"this window for keys {', '.join(late[:_SHOWN_KEYS])}; run the {rows.name} apply step for this "
            "window before this target's apply"
        )
    current = pc.fill_null(pc.equal(held_sequence, change_sequence), False)
    for column in unknown:
        missing = pc.and_(current, pc.invert(carried[column].filter(needs)))
        if pc.any(missing).as_py():
            raise ImageError(
                f"table {name!r}: column {column!r} is in the target's table but neither in the change "
                f"set's images nor in the table at {rows.table_uri(source_table or name)!r}; refusing to "
                "write rows without it"
            )
    filled = {}
    for column in values:
        if column in unknown:
            continue
        from_held = joined.column(f"__held_{column}").combine_chunks()
        if column in partial.column_names:
            own = partial.column(column).combine_chunks()
            if own.type != from_held.type:
                from_held = from_held.cast(own.type)
            filled[column] = pc.if_else(carried[column].filter(needs), own, from_held)
        else:
            filled[column] = from_held
    completed = _with_columns(partial.drop_columns([_ROW]), values, filled).filter(current)
    superseded = partial.num_rows - completed.num_rows
    ready = _with_columns(source.filter(pc.invert(needs)), values, None, like=completed)
    return pa.concat_tables([ready, completed]), superseded


def _with_columns(
    source: pa.Table, values: Sequence[str], filled: dict[str, pa.Array] | None, like: pa.Table | None = None
) -> pa.Table:
    """``source`` with ``filled`` columns replaced/added and missing written columns as NULLs."""
    for column in values:
        array = None if filled is None else filled.get(column)
        if array is None and column in source.column_names:
            if like is not None and source.schema.field(column).type != like.schema.field(column).type:
                source = source.set_column(
                    source.column_names.index(column),
                    column,
                    source.column(column).cast(like.schema.field(column).type),
                )
            continue
        if array is None:
            kind = like.schema.field(column).type if like is not None else pa.null()
            array = pa.nulls(source.num_rows, kind)
        if column in source.column_names:
            source = source.set_column(source.column_names.index(column), column, array)
        else:
            source = source.append_column(column, array)
    if like is not None:
        source = source.select(like.column_names)
    return source


def _null_safe(rows: pa.Table, keys: Sequence[str]) -> pa.Table:
    """``rows`` with each key column's NULLs replaced by a placeholder and a flag column telling
    them apart, so that an equi-join on both matches NULL with NULL (Arrow joins never match NULLs)."""
    for key in keys:
        column = rows.column(key)
        flag = pc.is_null(column)
        if column.null_count:
            column = pc.fill_null(column, _placeholder(column.type))
        rows = rows.set_column(rows.column_names.index(key), key, column)
        rows = rows.append_column(_NULL_FLAG + key, flag)
    return rows


def _placeholder(kind: pa.DataType) -> pa.Scalar:
    """Some non-NULL value of ``kind``."""
    if pa.types.is_boolean(kind):
        return pa.scalar(False, kind)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return pa.scalar("", kind)
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_binary_view(kind):
        return pa.scalar(b"", kind)
    if pa.types.is_date32(kind):
        return pa.scalar(0, pa.int32()).cast(kind)
    return pa.scalar(0, pa.int64()).cast(kind)


def _key_field(dataset: pa_ds.Dataset, column: str) -> pc.Expression:
    """The key column in a scan filter. A row source's files may store strings and binaries as views,
    which pyarrow cannot compare with the table's type when it prunes files by their statistics; the
    cast to the table's type keeps the filter exact."""
    kind = dataset.schema.field(column).type
    viewable = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary)
    return pc.field(column).cast(kind) if any(test(kind) for test in viewable) else pc.field(column)
