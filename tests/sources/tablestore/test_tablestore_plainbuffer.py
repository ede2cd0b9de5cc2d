"""PlainBuffer stream records: round trips, CRC-8, the checksum order and the errors a reader sees."""

from __future__ import annotations

import struct

import pytest

from airflow_provider_cdc.sources.tablestore.protocol.plainbuffer import (
    Cell,
    PlainBufferError,
    PlainBufferRow,
    SequenceInfo,
    crc8,
    decode_row,
    encode_row,
)


def bitwise_crc8(crc: int, data: bytes) -> int:
    """CRC-8/ATM written out bit by bit, independent of the module's table."""
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def test_crc8_is_crc8_atm():
    assert crc8(0, b"123456789") == 0xF4
    assert bitwise_crc8(0, b"123456789") == 0xF4
    assert crc8(crc8(0, b"1234"), b"56789") == 0xF4


@pytest.mark.parametrize(
    "row",
    [
        PlainBufferRow(
            (("id", 1), ("name", "ä"), ("blob", b"\x00\xff")),
            (
                Cell("i", -(2**63), "PUT", 1),
                Cell("f", 1.5, "PUT", 2),
                Cell("b", False, "PUT", 3),
                Cell("s", "text", "PUT", 4),
                Cell("y", b"bytes", "PUT", 5),
            ),
            sequence=SequenceInfo(3, 1_700_000_000_123_456, 7),
        ),
        PlainBufferRow(
            (("id", 2),),
            (
                Cell("a", 10, "PUT", 1_700_000_000_000),
                Cell("b", op="DELETE_ONE_VERSION", timestamp_ms=1_699_999_999_999),
                Cell("c", op="DELETE_ALL_VERSION"),
                Cell("n", 5, "INCREMENT"),
            ),
            sequence=SequenceInfo(1, 5, 0),
        ),
        PlainBufferRow((("id", 3),), deleted=True, sequence=SequenceInfo(1, 6, 1)),
        PlainBufferRow((("id", 4),), (Cell("a", True),)),
    ],
    ids=["put-every-type", "update-every-op", "delete", "no-extension"],
)
def test_round_trip(row):
    assert decode_row(encode_row(row)) == row


def hand_built(*, op_before_timestamp: bool = False) -> bytes:
    """A row built from the grammar byte by byte: key id=7; cells c (DELETE_ONE_VERSION @5), d="x" @9."""
    le32 = lambda value: struct.pack("<i", value)  # noqa: E731
    le64 = lambda value: struct.pack("<q", value)  # noqa: E731
    out = bytearray(b"\x75\x00\x00\x00")
    # key cell: name, value (type, int64); checksum over name then type byte then int64
    key_value = b"\x00" + le64(7)
    key_crc = bitwise_crc8(bitwise_crc8(0, b"id"), key_value)
    out += b"\x01" + b"\x03" + b"\x04" + le32(2) + b"id" + b"\x05" + struct.pack("<I", 9) + key_value
    out += b"\x0a" + bytes([key_crc])
    out += b"\x02"
    # attribute c: op 0x03 then ts on the wire; the checksum takes ts, then the op byte
    if op_before_timestamp:
        c_crc = bitwise_crc8(bitwise_crc8(bitwise_crc8(0, b"c"), b"\x03"), le64(5))
    else:
        c_crc = bitwise_crc8(bitwise_crc8(bitwise_crc8(0, b"c"), le64(5)), b"\x03")
    out += b"\x03" + b"\x04" + le32(1) + b"c" + b"\x06\x03" + b"\x07" + le64(5) + b"\x0a" + bytes([c_crc])
    # attribute d: string value (type, int32 length, bytes) then ts; no op
    d_value = b"\x03" + le32(1) + b"x"
    d_crc = bitwise_crc8(bitwise_crc8(bitwise_crc8(0, b"d"), d_value), le64(9))
    out += b"\x03" + b"\x04" + le32(1) + b"d" + b"\x05" + struct.pack("<I", len(d_value)) + d_value
    out += b"\x07" + le64(9) + b"\x0a" + bytes([d_crc])
    # extension: sequence info (epoch 2, ts 1000, row index 4); not in the row checksum
    seq = b"\x0d" + struct.pack("<I", 2) + b"\x0e" + le64(1000) + b"\x0f" + struct.pack("<I", 4)
    entry = b"\x0c" + le32(len(seq)) + seq
    out += b"\x0b" + struct.pack("<I", len(entry)) + entry
    row_crc = bitwise_crc8(
        bitwise_crc8(bitwise_crc8(bitwise_crc8(0, bytes([key_crc])), bytes([c_crc])), bytes([d_crc])), b"\x00"
    )
    out += b"\x09" + bytes([row_crc])
    return bytes(out)


HAND_ROW = PlainBufferRow(
    (("id", 7),),
    (Cell("c", None, "DELETE_ONE_VERSION", 5), Cell("d", "x", "PUT", 9)),
    sequence=SequenceInfo(2, 1000, 4),
)


def test_hand_built_buffer_matches_the_encoder_byte_for_byte():
    assert encode_row(HAND_ROW) == hand_built()
    assert decode_row(hand_built()) == HAND_ROW


def test_checksum_with_the_op_before_the_timestamp_is_refused():
    with pytest.raises(
        PlainBufferError, match=r"column 'c': cell checksum .* at offset|offset \d+: column 'c'"
    ):
        decode_row(hand_built(op_before_timestamp=True))


def test_corrupted_row_checksum_names_its_offset():
    data = bytearray(encode_row(HAND_ROW))
    data[-1] ^= 0xFF
    with pytest.raises(PlainBufferError, match=rf"offset {len(data) - 1}: row checksum") as caught:
        decode_row(bytes(data))
    assert caught.value.offset == len(data) - 1


def test_truncated_buffer_names_its_offset():
    data = encode_row(HAND_ROW)
    for cut in (2, 10, 30, len(data) - 1):
        with pytest.raises(PlainBufferError, match=r"offset \d+"):
            decode_row(data[:cut])


def test_unknown_tag_is_named():
    data = bytearray(encode_row(PlainBufferRow((("id", 1),))))
    data[4] = 0x42  # where TAG_PK belongs
    with pytest.raises(PlainBufferError, match=r"offset 4: .*found unknown tag \(0x42\)"):
        decode_row(bytes(data))


def test_unknown_extension_entries_are_skipped_by_length():
    base = encode_row(PlainBufferRow((("id", 1),), sequence=SequenceInfo(1, 2, 3)))
    extension_at = base.index(b"\x0b\x18\x00\x00\x00")
    unknown = b"\x10" + struct.pack("<i", 3) + b"abc"
    entries = unknown + base[extension_at + 5 : -2]
    data = base[:extension_at] + b"\x0b" + struct.pack("<I", len(entries)) + entries + base[-2:]
    assert decode_row(data).sequence == SequenceInfo(1, 2, 3)


def test_a_record_holds_exactly_one_row():
    data = encode_row(PlainBufferRow((("id", 1),)))
    with pytest.raises(PlainBufferError, match=r"exactly one row"):
        decode_row(data + data[4:])


def test_wrong_header_is_refused():
    with pytest.raises(PlainBufferError, match=r"offset 0: header is 0x76"):
        decode_row(b"\x76\x00\x00\x00")


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        (Cell("a"), "needs a value"),
        (Cell("a", 1, "DELETE_ALL_VERSION"), "carries no value"),
        (Cell("a", None, "DELETE_ONE_VERSION"), "needs the version"),
        (Cell("a", 1.5, "INCREMENT"), "integer value"),
        (Cell("a", [1]), "no PlainBuffer type"),
        (Cell("a", 1, "MERGE"), "unknown cell op"),
    ],
)
def test_encoder_refuses_malformed_cells(cell, message):
    with pytest.raises(PlainBufferError, match=message):
        encode_row(PlainBufferRow((("id", 1),), (cell,)))
