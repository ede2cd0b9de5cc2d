"""Spanner's sequence number of a mod: commit timestamp, transaction, record and mod order.

A data change record of a Spanner change stream carries its commit timestamp, the server
transaction id and the record's sequence within the transaction; each of its mods has its index
in the record. Together they order every mod of a stream, and they map onto the four sections of a
``_CHANGE_SEQUENCE_NUMBER`` (:mod:`airflow_provider_cdc.core.sequence_number`).
"""

from __future__ import annotations

from airflow_provider_cdc.core.sequence_number import (
    MAX_SECTION_VALUE,
    InvalidSequenceNumberError,
    fingerprint64,
)


def spanner_change_sequence_number(
    commit_micros: int, server_transaction_id: str, record_sequence: str, mod_index: int
) -> str:
    """Sortable sequence number of one Spanner mod.

    Sections: ``commit_micros / fingerprint64(server_transaction_id) / int(record_sequence) /
    mod_index``. ``record_sequence`` is the decimal digit string Spanner returns (e.g. ``"00000001"``).
    """
    if type(commit_micros) is not int or not 0 <= commit_micros <= MAX_SECTION_VALUE:
        raise InvalidSequenceNumberError(
            f"commit_micros must be a non-negative integer below 2**64, got {commit_micros!r}"
        )
    if type(server_transaction_id) is not str or not server_transaction_id:
        raise InvalidSequenceNumberError(
            f"server_transaction_id must be non-empty text, got {server_transaction_id!r}"
        )
    if (
        type(record_sequence) is not str
        or not record_sequence.isascii()
        or not record_sequence.isdigit()
    ):
        raise InvalidSequenceNumberError(
            f"record_sequence must be a string of decimal digits, got {record_sequence!r}"
        )
    sequence = int(record_sequence)
    if sequence > MAX_SECTION_VALUE:
        raise InvalidSequenceNumberError(f"record_sequence {record_sequence!r} does not fit in 64 bits")
    if type(mod_index) is not int or not 0 <= mod_index <= MAX_SECTION_VALUE:
        raise InvalidSequenceNumberError(f"mod_index must be a non-negative integer, got {mod_index!r}")
    return (
        f"{commit_micros:016X}/{fingerprint64(server_transaction_id):016X}/{sequence:016X}/{mod_index:016X}"
    )
