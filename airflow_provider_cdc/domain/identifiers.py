"""Validation of names that end up in SQL text or paths (streams, tables, columns)."""

from __future__ import annotations

import re

# Spanner (GoogleSQL) identifiers: a letter, then letters, digits and underscores; at most 128 chars.
_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,127}$")


class InvalidIdentifierError(ValueError):
    """A stream, table or column name that is not a plain identifier."""


def validate_identifier(name: object, kind: str = "identifier") -> str:
    """Return ``name`` unchanged if it is a plain identifier, else raise ``InvalidIdentifierError``.

    ``kind`` names what the value is ("change stream", "table", "column") in the error.
    """
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise InvalidIdentifierError(
            f"invalid {kind} name {name!r}: expected a letter followed by up to 127 letters, "
            "digits or underscores"
        )
    return name
