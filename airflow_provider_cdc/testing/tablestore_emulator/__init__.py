"""A Table Store emulator for tests: signed protobuf calls over HTTP on 127.0.0.1.

``TablestoreEmulator`` serves the table calls (``CreateTable``, ``DescribeTable``, ``DeleteTable``,
``ListTable``), the row calls (``PutRow``, ``UpdateRow``, ``DeleteRow``, ``BatchWriteRow``, ``GetRow``,
``BatchGetRow``, ``GetRange``) and the stream calls (``ListStream``, ``DescribeStream``,
``GetShardIterator``, ``GetStreamRecord``), signed V2 or V4, over an in-memory model of tables, rows,
shards (split, merge), stream records (PlainBuffer rows with the sequence extension) and retention, on
real time or on a manual clock. Every write, by a test or by a client such as the official
``tablestore`` SDK, is a record of the table's stream. Product code never imports this package; a
client meets it only through the wire protocol.
"""

from .calls import CALLS
from .clock import ManualClock, SystemClock
from .model import OtsError, StreamModel, decode_iterator, encode_iterator
from .server import OPERATIONS, TablestoreEmulator

__all__ = [
    "CALLS",
    "OPERATIONS",
    "ManualClock",
    "OtsError",
    "StreamModel",
    "SystemClock",
    "TablestoreEmulator",
    "decode_iterator",
    "encode_iterator",
]
