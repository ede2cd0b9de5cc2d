"""Undecoded rows of a streaming query, one ``PartialResultSet`` at a time.

``google-cloud-spanner``'s ``StreamedResultSet`` hands out rows one by one. A change-stream read
decodes many rows at once (:mod:`.record_decoder`), so :func:`row_batches` takes the result set's
``PartialResultSet`` messages as they arrive (no waiting for rows that have not come) and yields each
as a :class:`RowBatch`: its complete rows and the bytes they travel in. It does what the result set
does with each message (metadata and stats kept, a value chunked across messages merged by the
client's own rules), so ``decode_row`` and resumption (resume tokens) work as with row iteration. A
client whose result set lacks the attributes this needs (they are not public) gets one batch per
row, from the public row iterator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from google.cloud.spanner_v1.types.result_set import PartialResultSet
from google.protobuf.struct_pb2 import Value

try:
    from google.cloud.spanner_v1.streamed import _merge_by_type
except ImportError:  # pragma: no cover - a client without it reads row by row
    _merge_by_type = None  # type: ignore[assignment]

_PartialResultSet = PartialResultSet.pb()


class RowBatch:
    """Complete rows of a one-column query (each row ``[Value]``) and their serialized form.

    ``serialized`` is a ``PartialResultSet`` holding exactly the batch's values in field 2 (built
    from ``values`` when not given); ``metadata`` the result set's ``ResultSetMetadata`` (protobuf),
    ``None`` when unknown; ``decode_row`` the result set's decoder of a row into Python values.
    """

    __slots__ = ("_serialized", "decode_row", "metadata", "values")

    def __init__(
        self,
        values: Sequence[Value],
        decode_row: Callable[[list[Any]], list[Any]],
        metadata: Any = None,
        serialized: bytes | None = None,
    ) -> None:
        self.values = values
        self.decode_row = decode_row
        self.metadata = metadata
        self._serialized = serialized

    @property
    def rows(self) -> list[list[Value]]:
        """The rows as the client's row iterator yields them."""
        return [[value] for value in self.values]

    @property
    def serialized(self) -> bytes:
        if self._serialized is None:
            message = _PartialResultSet()
            message.values.extend(self.values)
            self._serialized = message.SerializeToString()
        return self._serialized

    def __len__(self) -> int:
        return len(self.values)


def row_batches(results: Any) -> Iterator[RowBatch]:
    """The rows of ``results`` (a ``StreamedResultSet`` of a one-column query, ``lazy_decode=True``)
    in batches, one per ``PartialResultSet`` received."""
    responses = getattr(results, "_response_iterator", None)
    if (
        responses is None
        or _merge_by_type is None
        or not all(hasattr(results, name) for name in ("_metadata", "_stats", "decode_row"))
    ):
        yield from _one_row_at_a_time(results)
        return
    decode_row = results.decode_row
    pending: Value | None = None
    types: list[Any] = []
    row: list[Value] = []  # a row being assembled (only where a row has several values)
    for response in responses:
        message = PartialResultSet.pb(response)
        if results._metadata is None:
            results._metadata = message.metadata
        if not types:
            types = [field.type_ for field in results._metadata.row_type.fields] or [None]
        if message.HasField("stats"):
            results._stats = response.stats
        if pending is None and not message.chunked_value and len(types) == 1:
            if message.values:
                yield RowBatch(message.values, decode_row, results._metadata, message.SerializeToString())
        else:
            values = list(message.values)
            if pending is not None and values:
                values[0] = _merge_by_type(pending, values[0], types[len(row) % len(types)])
                pending = None
            if message.chunked_value and values:
                pending = values.pop()
            if len(types) == 1:
                if values:
                    yield RowBatch(values, decode_row, results._metadata)
            else:  # not a one-column query: whole rows for the row-by-row decoder (which refuses them)
                rows = []
                for value in values:
                    row.append(value)
                    if len(row) == len(types):
                        rows.append(row)
                        row = []
                if rows:
                    yield _Rows(rows, decode_row)
        if message.last:
            break


def _one_row_at_a_time(results: Any) -> Iterator[RowBatch]:
    for row in results:
        yield RowBatch([row[0]], results.decode_row) if len(row) == 1 else _Rows([row], results.decode_row)


class _Rows(RowBatch):
    """Rows of a width other than one: only the row-by-row decoder reads them."""

    __slots__ = ("_rows",)

    def __init__(self, rows: list[list[Any]], decode_row: Callable[[list[Any]], list[Any]]) -> None:
        super().__init__([], decode_row)
        self._rows = rows

    @property
    def rows(self) -> list[list[Any]]:
        return self._rows

    def __len__(self) -> int:
        return len(self._rows)
