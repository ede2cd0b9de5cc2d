"""A Tablestore Stream emulator for tests: signed protobuf calls over HTTP on 127.0.0.1.

``TablestoreEmulator`` serves ``/ListStream``, ``/DescribeStream``, ``/GetShardIterator`` and
``/GetStreamRecord`` over an in-memory model of tables, shards (split, merge), stream records
(PlainBuffer rows with the sequence extension) and retention on a manual clock. Product code never
imports this package; a client meets it only through the wire protocol.
"""

from .clock import ManualClock
from .model import OtsError, StreamModel, decode_iterator, encode_iterator
from .server import OPERATIONS, TablestoreEmulator

__all__ = [
    "OPERATIONS",
    "ManualClock",
    "OtsError",
    "StreamModel",
    "TablestoreEmulator",
    "decode_iterator",
    "encode_iterator",
]
