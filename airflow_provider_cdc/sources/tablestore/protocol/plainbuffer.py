"""PlainBuffer rows as Tablestore carries them: cells, CRC-8 checksums, the sequence extension.

A stream record, a written row (``PutRow``, ``UpdateRow``, ``DeleteRow``), a read row (``GetRow``) and a
key (``GetRow``, ``DeleteRow``; the range bounds of ``GetRange``, where a key cell may be ``INF_MIN`` or
``INF_MAX``) are one row after the header; ``GetRange`` answers with several rows after one header.

Layout (all integers little-endian)::

    header(uint32 0x75) row [row ...]
    row  = [TAG_PK cell+] [TAG_ATTR cell+] [TAG_DELETE_MARKER] [extension] TAG_ROW_CHECKSUM crc8
    cell = TAG_CELL TAG_CELL_NAME len(int32) name [TAG_CELL_VALUE len(uint32) type payload]
           [TAG_CELL_OP op(uint8)] [TAG_CELL_TS ts_ms(int64)] TAG_CELL_CHECKSUM crc8
    extension = TAG_EXTENSION len(uint32) (tag(uint8) len(int32) payload)*
    sequence  = TAG_SEQ_INFO len(int32)
                TAG_SEQ_INFO_EPOCH uint32 TAG_SEQ_INFO_TS int64 TAG_SEQ_INFO_ROW_INDEX uint32

Checksums are CRC-8/ATM (polynomial 0x07, initial 0). A cell's covers its name bytes, then its value
(type byte, then int64 / double bits / bool byte, or int32 length and bytes), then its timestamp, then
its op byte: the op comes *after* the timestamp although it precedes it on the wire. A row's covers each
cell checksum (key cells, then attribute cells), then one byte: 1 with a delete marker, else 0. The
extension is outside both. Unknown extension entries are skipped by their length.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

HEADER = 0x75
TAG_PK = 0x01
TAG_ATTR = 0x02
TAG_CELL = 0x03
TAG_CELL_NAME = 0x04
TAG_CELL_VALUE = 0x05
TAG_CELL_OP = 0x06
TAG_CELL_TS = 0x07
TAG_DELETE_MARKER = 0x08
TAG_ROW_CHECKSUM = 0x09
TAG_CELL_CHECKSUM = 0x0A
TAG_EXTENSION = 0x0B
TAG_SEQ_INFO = 0x0C
TAG_SEQ_INFO_EPOCH = 0x0D
TAG_SEQ_INFO_TS = 0x0E
TAG_SEQ_INFO_ROW_INDEX = 0x0F

VT_INTEGER = 0x00
VT_DOUBLE = 0x01
VT_BOOLEAN = 0x02
VT_STRING = 0x03
VT_NULL = 0x06
VT_BLOB = 0x07
VT_INF_MIN = 0x09
VT_INF_MAX = 0x0A

OPS = {"DELETE_ALL_VERSION": 0x01, "DELETE_ONE_VERSION": 0x03, "INCREMENT": 0x04}
_OP_NAMES = {code: name for name, code in OPS.items()}
CELL_OPS = ("PUT", *OPS)

_TAG_NAMES = {
    value: name for name, value in globals().items() if name.startswith("TAG_") and isinstance(value, int)
}


class PlainBufferError(ValueError):
    """A PlainBuffer row that cannot be encoded or decoded; names the offset and the tag or field."""

    def __init__(self, message: str, *, offset: int | None = None) -> None:
        self.offset = offset
        super().__init__(message if offset is None else f"PlainBuffer at offset {offset}: {message}")


class Infinity:
    """A range bound below (``INF_MIN``) or above (``INF_MAX``) every value of a key column."""

    __slots__ = ("name", "value_type")

    def __init__(self, name: str, value_type: int) -> None:
        self.name = name
        self.value_type = value_type

    def __repr__(self) -> str:
        return self.name


INF_MIN = Infinity("INF_MIN", VT_INF_MIN)
INF_MAX = Infinity("INF_MAX", VT_INF_MAX)
_INFINITIES = {VT_INF_MIN: INF_MIN, VT_INF_MAX: INF_MAX}


@dataclass(frozen=True)
class SequenceInfo:
    """Where a stream record sits: the shard's epoch, its write time (µs) and its row index."""

    epoch: int
    timestamp_us: int
    row_index: int


@dataclass(frozen=True)
class Cell:
    """One cell: a key column (name, value) or an attribute change (op, value, version in ms).

    ``PUT`` and ``INCREMENT`` carry a value; ``DELETE_ONE_VERSION`` carries the version only;
    ``DELETE_ALL_VERSION`` carries neither.
    """

    name: str
    value: Any = None
    op: str = "PUT"
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class PlainBufferRow:
    """One row: its primary key in key order, its cells, the delete marker and the sequence extension."""

    primary_key: tuple[tuple[str, Any], ...]
    cells: tuple[Cell, ...] = ()
    deleted: bool = False
    sequence: SequenceInfo | None = None


def _crc_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
        table.append(crc)
    return tuple(table)


_CRC_TABLE = _crc_table()


def crc8(crc: int, data: bytes) -> int:
    """CRC-8/ATM (polynomial 0x07, no reflection, no final xor) of ``data``, continuing from ``crc``."""
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF]
    return crc


# --- encoding ---------------------------------------------------------------------------------------


def _value_payload(value: Any, field: str) -> tuple[bytes, bytes]:
    """(wire payload after the length, checksummed bytes) of a value: type byte first in both."""
    if isinstance(value, Infinity):
        body = bytes([value.value_type])
        return body, body
    if isinstance(value, bool):
        body = bytes([VT_BOOLEAN, 1 if value else 0])
        return body, body
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise PlainBufferError(f"{field}: integer {value} does not fit in int64")
        body = bytes([VT_INTEGER]) + struct.pack("<q", value)
        return body, body
    if isinstance(value, float):
        body = bytes([VT_DOUBLE]) + struct.pack("<d", value)
        return body, body
    if isinstance(value, str):
        raw = value.encode("utf-8")
        body = bytes([VT_STRING]) + struct.pack("<i", len(raw)) + raw
        return body, body
    if isinstance(value, (bytes, bytearray)):
        raw = bytes(value)
        body = bytes([VT_BLOB]) + struct.pack("<i", len(raw)) + raw
        return body, body
    raise PlainBufferError(f"{field}: a value of type {type(value).__name__} has no PlainBuffer type")


def _encode_cell(cell: Cell, *, key: bool, field: str) -> tuple[bytes, int]:
    if key and (cell.op != "PUT" or cell.timestamp_ms is not None):
        raise PlainBufferError(f"{field}: a primary-key cell has a value only")
    if not key and isinstance(cell.value, Infinity):
        raise PlainBufferError(f"{field}: {cell.value!r} bounds a key column; a column cannot hold it")
    if cell.op not in CELL_OPS:
        expected = ", ".join(CELL_OPS)
        raise PlainBufferError(f"{field}: unknown cell op {cell.op!r} (expected one of {expected})")
    has_value = cell.op in ("PUT", "INCREMENT")
    if has_value and cell.value is None:
        raise PlainBufferError(f"{field}: a {cell.op} cell needs a value")
    if not has_value and cell.value is not None:
        raise PlainBufferError(f"{field}: a {cell.op} cell carries no value")
    if cell.op == "DELETE_ONE_VERSION" and cell.timestamp_ms is None:
        raise PlainBufferError(f"{field}: a DELETE_ONE_VERSION cell needs the version's timestamp_ms")
    if cell.op == "DELETE_ALL_VERSION" and cell.timestamp_ms is not None:
        raise PlainBufferError(f"{field}: a DELETE_ALL_VERSION cell carries no timestamp")
    if cell.op == "INCREMENT" and (isinstance(cell.value, bool) or not isinstance(cell.value, int)):
        raise PlainBufferError(f"{field}: an INCREMENT cell needs an integer value")
    name = cell.name.encode("utf-8")
    out = bytearray([TAG_CELL, TAG_CELL_NAME])
    out += struct.pack("<i", len(name)) + name
    checksum = crc8(0, name)
    if has_value:
        payload, summed = _value_payload(cell.value, field)
        out += bytes([TAG_CELL_VALUE]) + struct.pack("<I", len(payload)) + payload
        checksum = crc8(checksum, summed)
    if cell.op in OPS:
        out += bytes([TAG_CELL_OP, OPS[cell.op]])
    if cell.timestamp_ms is not None:
        if cell.timestamp_ms < 0:
            raise PlainBufferError(f"{field}: negative timestamp {cell.timestamp_ms}")
        ts = struct.pack("<q", cell.timestamp_ms)
        out += bytes([TAG_CELL_TS]) + ts
        checksum = crc8(checksum, ts)
    if cell.op in OPS:
        checksum = crc8(checksum, bytes([OPS[cell.op]]))
    out += bytes([TAG_CELL_CHECKSUM, checksum])
    return bytes(out), checksum


def _encode_sequence(sequence: SequenceInfo) -> bytes:
    for name, value, bits in (("epoch", sequence.epoch, 32), ("row_index", sequence.row_index, 32)):
        if not 0 <= value < 2**bits:
            raise PlainBufferError(f"sequence {name} {value} does not fit in uint32")
    body = (
        bytes([TAG_SEQ_INFO_EPOCH])
        + struct.pack("<I", sequence.epoch)
        + bytes([TAG_SEQ_INFO_TS])
        + struct.pack("<q", sequence.timestamp_us)
        + bytes([TAG_SEQ_INFO_ROW_INDEX])
        + struct.pack("<I", sequence.row_index)
    )
    entry = bytes([TAG_SEQ_INFO]) + struct.pack("<i", len(body)) + body
    return bytes([TAG_EXTENSION]) + struct.pack("<I", len(entry)) + entry


def encode_row(row: PlainBufferRow) -> bytes:
    """One row with its header and checksums; the sequence extension when ``row.sequence`` is set."""
    return struct.pack("<I", HEADER) + _encode_row_body(row)


def encode_rows(rows: Sequence[PlainBufferRow]) -> bytes:
    """Rows one after another behind a single header (a ``GetRange`` answer); empty for no rows."""
    if not rows:
        return b""
    return struct.pack("<I", HEADER) + b"".join(_encode_row_body(row) for row in rows)


def _encode_row_body(row: PlainBufferRow) -> bytes:
    if not row.primary_key:
        raise PlainBufferError("a row needs a primary key")
    out = bytearray()
    row_checksum = 0
    out.append(TAG_PK)
    for name, value in row.primary_key:
        encoded, checksum = _encode_cell(Cell(name, value), key=True, field=f"primary key column {name!r}")
        out += encoded
        row_checksum = crc8(row_checksum, bytes([checksum]))
    if row.cells:
        out.append(TAG_ATTR)
        for cell in row.cells:
            encoded, checksum = _encode_cell(cell, key=False, field=f"column {cell.name!r}")
            out += encoded
            row_checksum = crc8(row_checksum, bytes([checksum]))
    if row.deleted:
        out.append(TAG_DELETE_MARKER)
    row_checksum = crc8(row_checksum, b"\x01" if row.deleted else b"\x00")
    if row.sequence is not None:
        out += _encode_sequence(row.sequence)
    out += bytes([TAG_ROW_CHECKSUM, row_checksum])
    return bytes(out)


# --- decoding ---------------------------------------------------------------------------------------


def _tag_name(tag: int | None) -> str:
    if tag is None:
        return "the end of the buffer"
    return f"{_TAG_NAMES.get(tag, 'unknown tag')} (0x{tag:02x})"


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, count: int, what: str) -> bytes:
        if count < 0 or self.pos + count > len(self.data):
            raise PlainBufferError(
                f"truncated: {what} needs {count} bytes, {len(self.data) - self.pos} remain", offset=self.pos
            )
        chunk = self.data[self.pos : self.pos + count]
        self.pos += count
        return chunk

    def unpack(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def peek(self) -> int | None:
        return self.data[self.pos] if self.pos < len(self.data) else None

    def expect(self, tag: int, context: str) -> None:
        found = self.peek()
        if found != tag:
            raise PlainBufferError(
                f"{context}: expected {_tag_name(tag)}, found {_tag_name(found)}", offset=self.pos
            )
        self.pos += 1


def _decode_value(reader: _Reader, field: str, *, key: bool, bounds: bool = False) -> tuple[Any, bytes]:
    length_offset = reader.pos
    length = reader.unpack("<I", f"{field} value length")
    start = reader.pos
    type_offset = reader.pos
    value_type = reader.take(1, f"{field} value type")[0]
    if value_type == VT_INTEGER:
        raw = reader.take(8, f"{field} int64 value")
        value: Any = struct.unpack("<q", raw)[0]
        summed = bytes([value_type]) + raw
    elif value_type in (VT_STRING, VT_BLOB):
        raw_len = reader.take(4, f"{field} value byte length")
        size = struct.unpack("<i", raw_len)[0]
        raw = reader.take(size, f"{field} value bytes")
        if value_type == VT_STRING:
            try:
                value = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                message = f"{field}: string value is not UTF-8 ({error})"
                raise PlainBufferError(message, offset=start) from None
        else:
            value = bytes(raw)
        summed = bytes([value_type]) + raw_len + raw
    elif value_type == VT_DOUBLE and not key:
        raw = reader.take(8, f"{field} double value")
        value = struct.unpack("<d", raw)[0]
        summed = bytes([value_type]) + raw
    elif value_type == VT_BOOLEAN and not key:
        raw = reader.take(1, f"{field} boolean value")
        value = raw != b"\x00"
        summed = bytes([value_type]) + raw
    elif value_type in _INFINITIES and key and bounds:
        value = _INFINITIES[value_type]
        summed = bytes([value_type])
    else:
        kind = "primary-key" if key else "attribute"
        message = f"{field}: unsupported {kind} value type 0x{value_type:02x}"
        raise PlainBufferError(message, offset=type_offset)
    if reader.pos - start != length:
        raise PlainBufferError(
            f"{field}: value length says {length} bytes but the value takes {reader.pos - start}",
            offset=length_offset,
        )
    return value, summed


def _decode_cell(reader: _Reader, *, key: bool, index: int, bounds: bool = False) -> tuple[Cell, int]:
    cell_offset = reader.pos
    reader.expect(TAG_CELL, "cell")
    reader.expect(TAG_CELL_NAME, f"cell {index}")
    size = reader.unpack("<i", f"cell {index} name length")
    raw_name = reader.take(size, f"cell {index} name")
    try:
        name = raw_name.decode("utf-8")
    except UnicodeDecodeError:
        raise PlainBufferError(f"cell {index}: name is not UTF-8", offset=cell_offset) from None
    field = f"{'primary key column' if key else 'column'} {name!r}"
    checksum = crc8(0, raw_name)
    value = None
    if reader.peek() == TAG_CELL_VALUE:
        reader.pos += 1
        value, summed = _decode_value(reader, field, key=key, bounds=bounds)
        checksum = crc8(checksum, summed)
    op_code: int | None = None
    if reader.peek() == TAG_CELL_OP:
        if key:
            raise PlainBufferError(f"{field}: a primary-key cell has no op", offset=reader.pos)
        reader.pos += 1
        op_offset = reader.pos
        op_code = reader.take(1, f"{field} op")[0]
        if op_code not in _OP_NAMES:
            raise PlainBufferError(f"{field}: unknown cell op 0x{op_code:02x}", offset=op_offset)
    timestamp_ms: int | None = None
    if reader.peek() == TAG_CELL_TS:
        reader.pos += 1
        ts_offset = reader.pos
        raw_ts = reader.take(8, f"{field} timestamp")
        timestamp_ms = struct.unpack("<q", raw_ts)[0]
        if timestamp_ms < 0:
            raise PlainBufferError(f"{field}: negative timestamp {timestamp_ms}", offset=ts_offset)
        checksum = crc8(checksum, raw_ts)
    if op_code is not None:
        checksum = crc8(checksum, bytes([op_code]))
    reader.expect(TAG_CELL_CHECKSUM, field)
    stored_offset = reader.pos
    stored = reader.take(1, f"{field} checksum")[0]
    if stored != checksum:
        raise PlainBufferError(
            f"{field}: cell checksum 0x{stored:02x} does not match the computed 0x{checksum:02x}",
            offset=stored_offset,
        )
    op = "PUT" if op_code is None else _OP_NAMES[op_code]
    if key and value is None:
        raise PlainBufferError(f"{field}: a primary-key cell needs a value", offset=cell_offset)
    return Cell(name, value, op, timestamp_ms), checksum


def _decode_sequence(payload: bytes, base: int) -> SequenceInfo:
    reader = _Reader(payload)
    try:
        reader.expect(TAG_SEQ_INFO_EPOCH, "sequence info")
        epoch = reader.unpack("<I", "sequence epoch")
        reader.expect(TAG_SEQ_INFO_TS, "sequence info")
        timestamp_us = reader.unpack("<q", "sequence timestamp")
        reader.expect(TAG_SEQ_INFO_ROW_INDEX, "sequence info")
        row_index = reader.unpack("<I", "sequence row index")
    except PlainBufferError as error:
        raise PlainBufferError(str(error).split(": ", 1)[1], offset=base + (error.offset or 0)) from None
    return SequenceInfo(epoch, timestamp_us, row_index)


def _decode_extension(reader: _Reader) -> SequenceInfo | None:
    reader.pos += 1
    length = reader.unpack("<I", "extension length")
    end = reader.pos + length
    if end > len(reader.data):
        raise PlainBufferError(
            f"truncated: the extension needs {length} bytes, {len(reader.data) - reader.pos} remain",
            offset=reader.pos,
        )
    sequence = None
    while reader.pos < end:
        tag_offset = reader.pos
        tag = reader.take(1, "extension entry tag")[0]
        size = reader.unpack("<i", f"extension entry {_tag_name(tag)} length")
        if reader.pos + size > end or size < 0:
            raise PlainBufferError(
                f"extension entry {_tag_name(tag)} of {size} bytes overruns the extension", offset=tag_offset
            )
        payload_offset = reader.pos
        payload = reader.take(size, "extension entry")
        if tag == TAG_SEQ_INFO:
            sequence = _decode_sequence(payload, payload_offset)
    return sequence


def decode_row(data: bytes, *, bounds: bool = False) -> PlainBufferRow:
    """The one row of ``data`` (a stream record, a written or read row, a key), every checksum verified.

    ``bounds``: key cells may be ``INF_MIN`` or ``INF_MAX`` (the range bounds of ``GetRange``).
    """
    reader = _Reader(bytes(data))
    _decode_header(reader)
    row = _decode_row_body(reader, bounds=bounds)
    if reader.pos != len(reader.data):
        raise PlainBufferError(
            f"a record holds exactly one row, but {len(reader.data) - reader.pos} bytes follow its checksum "
            f"(next is {_tag_name(reader.peek())})",
            offset=reader.pos,
        )
    return row


def decode_rows(data: bytes) -> list[PlainBufferRow]:
    """The rows behind one header (a ``GetRange`` answer); no rows for empty ``data``."""
    if not data:
        return []
    reader = _Reader(bytes(data))
    _decode_header(reader)
    rows = []
    while reader.pos < len(reader.data):
        rows.append(_decode_row_body(reader, bounds=False))
    return rows


def _decode_header(reader: _Reader) -> None:
    header = reader.unpack("<I", "header")
    if header != HEADER:
        raise PlainBufferError(f"header is 0x{header:x}, expected 0x{HEADER:x}", offset=0)


def _decode_row_body(reader: _Reader, *, bounds: bool) -> PlainBufferRow:
    row_checksum = 0
    primary_key: list[tuple[str, Any]] = []
    cells: list[Cell] = []
    if reader.peek() == TAG_PK:
        reader.pos += 1
        while reader.peek() == TAG_CELL:
            cell, checksum = _decode_cell(reader, key=True, index=len(primary_key), bounds=bounds)
            primary_key.append((cell.name, cell.value))
            row_checksum = crc8(row_checksum, bytes([checksum]))
    if not primary_key:
        raise PlainBufferError(
            f"the row has no primary key: expected {_tag_name(TAG_PK)} with cells, "
            f"found {_tag_name(reader.peek())}",
            offset=reader.pos,
        )
    if reader.peek() == TAG_ATTR:
        reader.pos += 1
        while reader.peek() == TAG_CELL:
            cell, checksum = _decode_cell(reader, key=False, index=len(cells))
            cells.append(cell)
            row_checksum = crc8(row_checksum, bytes([checksum]))
    deleted = False
    if reader.peek() == TAG_DELETE_MARKER:
        reader.pos += 1
        deleted = True
    row_checksum = crc8(row_checksum, b"\x01" if deleted else b"\x00")
    sequence = _decode_extension(reader) if reader.peek() == TAG_EXTENSION else None
    reader.expect(TAG_ROW_CHECKSUM, "row")
    stored_offset = reader.pos
    stored = reader.take(1, "row checksum")[0]
    if stored != row_checksum:
        raise PlainBufferError(
            f"row checksum 0x{stored:02x} does not match the computed 0x{row_checksum:02x}",
            offset=stored_offset,
        )
    return PlainBufferRow(tuple(primary_key), tuple(cells), deleted, sequence)
