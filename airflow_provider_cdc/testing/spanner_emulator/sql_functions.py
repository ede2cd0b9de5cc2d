"""The scalar functions the emulator evaluates, as Google's Cloud Spanner emulator answers them.

``FARM_FINGERPRINT(STRING | BYTES)`` (FarmHash ``Fingerprint64`` as a signed INT64),
``UNIX_MICROS(TIMESTAMP)`` and ``FORMAT(pattern, ...)`` with the specifiers ``%d``/``%i`` (INT64), ``%s``
(STRING), ``%T`` (any scalar as a GoogleSQL literal: strings and bytes quoted and escaped, FLOAT64 with 15
significant digits or 17 where 15 do not read back, ``NUMERIC "…"``, ``DATE "…"``, ``TIMESTAMP "…+00"``,
``NULL``) and ``%%``. Values are stored cells (Spanner's JSON encoding, :mod:`.values`); errors carry
Google's words.
"""

from __future__ import annotations

import base64
import math
import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_cdc.core.timestamps import parse_timestamp, to_micros
from airflow_provider_cdc.sources.spanner.farmhash import farm_fingerprint

#: Types ``%T`` renders (the scalar types of Spanner's key columns and values).
LITERAL_TYPES = frozenset(
    {"INT64", "BOOL", "STRING", "BYTES", "FLOAT64", "FLOAT32", "NUMERIC", "DATE", "TIMESTAMP"}
)
_SPEC = re.compile(r"%([-+ #0']*)(\*|\d+)?(?:\.(\*|\d*))?([A-Za-z%]?)")
_KNOWN_SPECS = frozenset("dioxXfFeEgGsStTp%")
_SUPPORTED_SPECS = frozenset("disT%")


class FunctionError(ValueError):
    """A call that GoogleSQL refuses; ``message`` is Google's wording (the caller positions it)."""


class NotEmulated(ValueError):
    """A call the emulator does not evaluate; ``what`` names it for ``Unsupported by the emulator``."""


def fingerprint_cell(cell: Any, code: str) -> str | None:
    """``FARM_FINGERPRINT`` of a STRING or BYTES cell, as an INT64 cell."""
    if cell is None:
        return None
    data = base64.b64decode(cell) if code == "BYTES" else str(cell).encode("utf-8")
    return str(farm_fingerprint(data))


def unix_micros_cell(cell: Any) -> str | None:
    """``UNIX_MICROS`` of a TIMESTAMP cell, as an INT64 cell."""
    return None if cell is None else str(to_micros(parse_timestamp(cell)))


# ----- FORMAT ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pattern:
    """A FORMAT pattern: its literal text pieces and specifiers, in order (a specifier is one letter)."""

    text: str
    pieces: tuple[tuple[bool, str], ...]  # (is a specifier, text or specifier letter)

    @property
    def specifiers(self) -> list[str]:
        return [piece for is_spec, piece in self.pieces if is_spec]


def parse_pattern(text: str) -> Pattern:
    """The pattern's pieces; :class:`FunctionError` or :class:`NotEmulated` for what it cannot be."""
    pieces: list[tuple[bool, str]] = []
    literal: list[str] = []
    at = 0
    while at < len(text):
        percent = text.find("%", at)
        if percent < 0:
            literal.append(text[at:])
            break
        literal.append(text[at:percent])
        match = _SPEC.match(text, percent)
        assert match is not None
        flags, width, precision, letter = match.groups()
        if not letter:
            raise FunctionError(f'Invalid FORMAT string: "{text}"')
        if letter not in _KNOWN_SPECS:
            raise FunctionError(f'Invalid format specifier character "{letter}" in FORMAT string: "{text}"')
        if letter == "%" and not (flags or width or precision is not None):
            literal.append("%")
        elif letter not in _SUPPORTED_SPECS or flags or width or precision is not None:
            raise NotEmulated(f"the FORMAT specifier {match.group()}")
        else:
            if literal:
                pieces.append((False, "".join(literal)))
                literal = []
            pieces.append((True, letter))
        at = match.end()
    if literal and "".join(literal):
        pieces.append((False, "".join(literal)))
    return Pattern(text, tuple(pieces))


def check_arguments(pattern: Pattern, types: Sequence[str]) -> None:
    """Google's errors for the wrong count or types of FORMAT's values (``types``: after the pattern)."""
    wanted = len(pattern.specifiers) + 1
    got = len(types) + 1
    if got < wanted:
        raise FunctionError(
            f'Too few arguments to FORMAT for pattern "{pattern.text}"; Expected {wanted}; Got {got}'
        )
    if got > wanted:
        raise FunctionError(
            f'Too many arguments to FORMAT for pattern "{pattern.text}"; Expected {wanted}; Got {got}'
        )
    for index, (letter, type_name) in enumerate(zip(pattern.specifiers, types, strict=True), start=2):
        expected = {"d": "integer", "i": "integer", "s": "STRING"}.get(letter)
        if expected is not None and type_name != ("INT64" if expected == "integer" else "STRING"):
            raise FunctionError(
                f"Invalid type for argument {index} to FORMAT; Expected {expected}; Got {type_name}"
            )
        if letter == "T" and type_name not in LITERAL_TYPES:
            raise NotEmulated(f"FORMAT('%T') of {type_name} values")


def format_cells(pattern: Pattern, cells: Sequence[Any], codes: Sequence[str]) -> str | None:
    """The formatted text (NULL when a ``%d``/``%s`` value is NULL; ``%T`` shows ``NULL``)."""
    out: list[str] = []
    values = iter(zip(cells, codes, strict=True))
    for is_spec, piece in pattern.pieces:
        if not is_spec:
            out.append(piece)
            continue
        cell, code = next(values)
        if piece == "T":
            out.append(sql_literal(cell, code))
        elif cell is None:
            return None
        else:
            out.append(str(cell))
    return "".join(out)


# ----- %T: values as GoogleSQL literals ----------------------------------------------------------------
def sql_literal(cell: Any, code: str) -> str:
    """A stored cell of type ``code`` as ``FORMAT('%T')`` shows it."""
    if cell is None:
        return "NULL"
    if code == "INT64":
        return str(cell)
    if code == "BOOL":
        return "true" if cell else "false"
    if code == "STRING":
        return string_literal(cell)
    if code == "BYTES":
        return bytes_literal(base64.b64decode(cell))
    if code in ("FLOAT64", "FLOAT32"):
        return float_literal(cell, code)
    if code == "NUMERIC":
        return f'NUMERIC "{cell}"'
    if code == "DATE":
        return f'DATE "{cell}"'
    if code == "TIMESTAMP":
        return f'TIMESTAMP "{timestamp_text(cell)}"'
    raise NotEmulated(f"FORMAT('%T') of {code} values")


def _quote(has: Callable[[str], bool]) -> str:
    return "'" if has('"') and not has("'") else '"'


def string_literal(text: str) -> str:
    """A STRING literal: double quotes unless the text holds ``"`` and no ``'``; ``\\n \\r \\t \\\\``,
    the quote, and other ASCII controls as ``\\xNN`` (a hex digit right after such an escape too)."""
    quote = _quote(lambda c: c in text)
    out: list[str] = []
    hex_before = False
    for char in text:
        hex_now = False
        if char in "\n\r\t\\":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}[char])
        elif char == quote:
            out.append("\\" + char)
        elif ord(char) < 0x80 and (
            not 0x20 <= ord(char) < 0x7F or (hex_before and char in "0123456789abcdefABCDEF")
        ):
            out.append(f"\\x{ord(char):02x}")
            hex_now = True
        else:
            out.append(char)
        hex_before = hex_now
    return quote + "".join(out) + quote


def bytes_literal(data: bytes) -> str:
    """A BYTES literal: ``b`` and the quote as for strings; ``\\\\``, the quote, and every byte outside
    printable ASCII as ``\\xNN``."""
    quote = _quote(lambda c: c.encode() in data)
    out: list[str] = []
    for byte in data:
        char = chr(byte)
        if char == "\\":
            out.append("\\\\")
        elif char == quote:
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\x{byte:02x}")
    return "b" + quote + "".join(out) + quote


def float_literal(cell: Any, code: str) -> str:
    """A FLOAT64 (or FLOAT32) literal: NaN and infinities as ``CAST("nan" AS FLOAT64)``; otherwise the
    shortest of 15 or 17 significant digits (FLOAT32: of 6 to 9) that reads back, ``.0`` added to an
    integral number."""
    if isinstance(cell, str):
        name = {"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}[cell]
        return f'CAST("{name}" AS {code})'
    value = float(cell)
    if math.isnan(value) or math.isinf(value):
        return float_literal("NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity"), code)
    if code == "FLOAT32":
        single = struct.unpack("<f", struct.pack("<f", value))[0]
        text = next(
            t
            for t in (f"{single:.{digits}g}" for digits in range(1, 10))
            if struct.unpack("<f", struct.pack("<f", float(t)))[0] == single
        )
    else:
        text = f"{value:.15g}"
        if float(text) != value:
            text = f"{value:.17g}"
    if re.fullmatch(r"-?\d+", text):
        text += ".0"
    return text


def timestamp_text(cell: str) -> str:
    """A TIMESTAMP cell as ``%T`` shows it: ``YYYY-MM-DD HH:MM:SS[.fff|.ffffff]+00`` in UTC."""
    moment = parse_timestamp(cell)
    text = moment.strftime("%H:%M:%S")
    micros = moment.microsecond
    if micros % 1000 == 0 and micros:
        text += f".{micros // 1000:03d}"
    elif micros:
        text += f".{micros:06d}"
    return f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d} {text}+00"
