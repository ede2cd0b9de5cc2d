"""The Tablestore Stream wire protocol, pure: proto2 messages, PlainBuffer rows and V2 request signing.

Nothing here does I/O; the stream client and the test emulator both build on it.
"""
