"""Change sequence numbers in the CDC format of change sequence numbers (``_CHANGE_SEQUENCE_NUMBER``,
as BigQuery's change data capture defines it; the change contract's one citation of the format).

A sequence number is one to four ``/``-separated sections of one to sixteen hexadecimal digits
(upper or lower case), e.g. ``18F2EBB6480`` or ``FFF/ABC``. Two sequence numbers compare section by
section as unsigned 64-bit integers; a later section only matters when all earlier ones are equal.
When one sequence number is a proper prefix of the other (``ABC`` and ``ABC/0``), the shorter one
is the smaller, exactly like Python tuples.

The *sortable* form pads every section to sixteen upper-case hex digits, so that plain string
comparison of sortable forms gives the same order as the numeric comparison above (a shorter
prefix is also a shorter string, hence smaller). Staged change rows, change sets and target tables
store this form.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache

MAX_SECTIONS = 4
MAX_SECTION_DIGITS = 16
MAX_SECTION_VALUE = (1 << 64) - 1

_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


class InvalidSequenceNumberError(ValueError):
    """Text or values that do not form a valid change sequence number."""


@dataclass(frozen=True, order=True)
class ChangeSequenceNumber:
    """A parsed ``_CHANGE_SEQUENCE_NUMBER``: a tuple of one to four unsigned 64-bit sections.

    Instances are immutable and ordered (section by section; a proper prefix sorts first).
    """

    sections: tuple[int, ...]

    def __post_init__(self) -> None:
        sections = self.sections
        if not isinstance(sections, tuple):
            raise InvalidSequenceNumberError(
                f"sequence number sections must be a tuple of integers, got {type(sections).__name__}"
            )
        if not 1 <= len(sections) <= MAX_SECTIONS:
            raise InvalidSequenceNumberError(
                f"a sequence number has 1 to {MAX_SECTIONS} sections, got {len(sections)}"
            )
        for position, value in enumerate(sections, start=1):
            if type(value) is not int or not 0 <= value <= MAX_SECTION_VALUE:
                raise InvalidSequenceNumberError(
                    f"section {position} of a sequence number must be an integer in [0, 2**64 - 1], "
                    f"got {value!r}"
                )

    @classmethod
    def of(cls, *sections: int) -> ChangeSequenceNumber:
        """Build from integer sections: ``ChangeSequenceNumber.of(4095, 2748)``."""
        return cls(tuple(sections))

    @classmethod
    def parse(cls, text: str) -> ChangeSequenceNumber:
        """Parse ``_CHANGE_SEQUENCE_NUMBER`` text (canonical or sortable form, any letter case).

        Raises ``InvalidSequenceNumberError`` naming the problem: not text, too many sections, an
        empty section, a non-hex character or a section longer than sixteen digits.
        """
        if not isinstance(text, str):
            raise InvalidSequenceNumberError(
                f"a sequence number must be text, got {type(text).__name__}: {text!r}"
            )
        parts = text.split("/")
        if len(parts) > MAX_SECTIONS:
            raise InvalidSequenceNumberError(
                f"sequence number {text!r} has {len(parts)} sections; at most {MAX_SECTIONS} are allowed"
            )
        sections = []
        for position, part in enumerate(parts, start=1):
            if not part:
                raise InvalidSequenceNumberError(f"sequence number {text!r}: section {position} is empty")
            bad = next((char for char in part if char not in _HEX_DIGITS), None)
            if bad is not None:
                raise InvalidSequenceNumberError(
                    f"sequence number {text!r}: section {position} ({part!r}) contains the non-hex "
                    f"character {bad!r}"
                )
            if len(part) > MAX_SECTION_DIGITS:
                raise InvalidSequenceNumberError(
                    f"sequence number {text!r}: section {position} has {len(part)} digits; "
                    f"at most {MAX_SECTION_DIGITS} are allowed"
                )
            sections.append(int(part, 16))
        return cls(tuple(sections))

    def __str__(self) -> str:
        """Canonical form: upper-case hex sections without leading zeros (``FFF/ABC``)."""
        return "/".join(format(value, "X") for value in self.sections)

    def sortable(self) -> str:
        """Fixed-width form (sections padded to 16 upper-case hex digits); string order = numeric order."""
        return "/".join(format(value, "016X") for value in self.sections)


def parse_sequence_number(text: str) -> ChangeSequenceNumber:
    """Shorthand for ``ChangeSequenceNumber.parse``."""
    return ChangeSequenceNumber.parse(text)


def sortable_sequence_number(text: str) -> str:
    """Normalise any valid ``_CHANGE_SEQUENCE_NUMBER`` text to its sortable form."""
    return ChangeSequenceNumber.parse(text).sortable()


@lru_cache(maxsize=65536)
def fingerprint64(text: str) -> int:
    """Stable unsigned 64-bit fingerprint of ``text``: the first 8 bytes of BLAKE2b, big-endian.

    Stable across processes, machines and Python versions (unlike ``hash``). Cached because a source
    fingerprints the same text (e.g. one transaction's id) for every change of it.
    """
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")

