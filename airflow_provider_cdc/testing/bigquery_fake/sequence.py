"""BigQuery CDC's ``_CHANGE_SEQUENCE_NUMBER`` as BigQuery reads it.

The value is text of one to four sections separated by ``/``; each section is one to sixteen
hexadecimal digits, upper or lower case (from ``0`` up to ``FFFFFFFFFFFFFFFF/…/FFFFFFFFFFFFFFFF``).
Two values compare section by section as unsigned integers, a later section only when the earlier
ones are equal; where one value has fewer sections and is equal on those, the shorter one is the
smaller. Anything else is refused (the row fails with a row error).
"""

from __future__ import annotations

MAX_SECTIONS = 4
MAX_SECTION_DIGITS = 16
_HEX = frozenset("0123456789abcdefABCDEF")


class SequenceNumberError(ValueError):
    """Text that is not a ``_CHANGE_SEQUENCE_NUMBER``."""


def parse_sequence_number(text: str) -> tuple[int, ...]:
    """The sections of ``text`` as unsigned integers, ordered as BigQuery orders them."""
    sections = text.split("/")
    if len(sections) > MAX_SECTIONS:
        raise SequenceNumberError(
            f"{text!r} has {len(sections)} sections separated by '/'; at most {MAX_SECTIONS} are allowed"
        )
    values = []
    for position, section in enumerate(sections, start=1):
        if not section:
            raise SequenceNumberError(f"{text!r} has an empty section {position}")
        if len(section) > MAX_SECTION_DIGITS:
            raise SequenceNumberError(
                f"{text!r}: section {position} has {len(section)} digits; at most {MAX_SECTION_DIGITS}"
            )
        if not set(section) <= _HEX:
            raise SequenceNumberError(f"{text!r}: section {position} holds a non-hex character")
        values.append(int(section, 16))
    return tuple(values)
