"""Validation of names that end up in SQL text or paths (streams, tables, columns, pipelines)."""

from __future__ import annotations

import re

# The identifier rule every source and target table name (and column, stream, pipeline name) must
# satisfy: a letter, then letters, digits and underscores; at most 128 characters.
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


#: Pipeline ids name windows in the metastore and in the targets' own records: an Airflow DAG id's
#: characters (letters, digits, ``_ . -``), starting with a letter or digit, at most 250 long.
MAX_PIPELINE_ID_LENGTH = 250
_PIPELINE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,249}$")


def validate_pipeline_id(pipeline_id: object) -> str:
    """Return ``pipeline_id`` unchanged if valid, else raise ``InvalidIdentifierError`` naming it."""
    if not isinstance(pipeline_id, str) or not _PIPELINE_ID.match(pipeline_id):
        raise InvalidIdentifierError(
            f"invalid pipeline id {pipeline_id!r}: expected a letter or digit followed by up to "
            f"{MAX_PIPELINE_ID_LENGTH - 1} letters, digits or '_', '.', '-'"
        )
    return pipeline_id
