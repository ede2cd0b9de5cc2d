"""Tokens of the GoogleSQL subset the emulator parses, and errors positioned as Spanner words them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import grpc

from .model import EmulatorError

RESERVED = frozenset(
    """ALL AND ANY ARRAY AS ASC ASSERT_ROWS_MODIFIED AT BETWEEN BY CASE CAST COLLATE CONTAINS CREATE CROSS
    CUBE CURRENT DEFAULT DEFINE DESC DISTINCT ELSE END ENUM ESCAPE EXCEPT EXCLUDE EXISTS EXTRACT FALSE FETCH
    FOLLOWING FOR FROM FULL GROUP GROUPING GROUPS HASH HAVING IF IGNORE IN INNER INTERSECT INTERVAL INTO IS
    JOIN LATERAL LEFT LIKE LIMIT LOOKUP MERGE NATURAL NEW NO NOT NULL NULLS OF ON OR ORDER OUTER OVER
    PARTITION PRECEDING PROTO RANGE RECURSIVE RESPECT RIGHT ROLLUP ROWS SELECT SET SOME STRUCT TABLESAMPLE
    THEN TO TREAT TRUE UNBOUNDED UNION UNNEST USING WHEN WHERE WINDOW WITH WITHIN""".split()
)
COMPARISONS = {"=": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
TYPED_LITERALS = ("TIMESTAMP", "DATE", "NUMERIC", "JSON")
_TOKEN = re.compile(
    r"""(?P<space>\s+|--[^\n]*|\#[^\n]*|/\*.*?\*/)
    |(?P<hint>@\{[^}]*\})
    |(?P<param>@[A-Za-z_][A-Za-z0-9_]*)
    |(?P<quoted>`(?:[^`\\]|\\.)*`)
    |(?P<string>(?:[rR][bB]?|[bB][rR]?)?(?:'''(?:[^\\]|\\.)*?'''|\"\"\"(?:[^\\]|\\.)*?\"\"\"
        |'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"))
    |(?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
    |(?P<int>0[xX][0-9A-Fa-f]+|\d+)
    |(?P<word>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<op><=|>=|<>|!=|\|\||<<|>>|[=<>(),.*;+\-/\[\]{}|&^~:@!?])""",
    re.VERBOSE | re.DOTALL,
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "0": "\0"}


def sql_error(sql: str, pos: int, message: str, code: grpc.StatusCode | None = None) -> EmulatorError:
    """An error with Spanner's position suffix: ``message [at L:C]``, the line, a caret under the column."""
    line_start = sql.rfind("\n", 0, pos) + 1
    line_end = sql.find("\n", pos)
    line = sql[line_start : len(sql) if line_end < 0 else line_end]
    row, column = sql.count("\n", 0, pos) + 1, pos - line_start + 1
    text = f"{message} [at {row}:{column}]\n{line}\n{' ' * (column - 1)}^"
    return EmulatorError(code or grpc.StatusCode.INVALID_ARGUMENT, text)


def unsupported(sql: str, pos: int, what: str) -> EmulatorError:
    """The refusal of a construct outside the subset (INVALID_ARGUMENT, naming it)."""
    return sql_error(sql, pos, f"Unsupported by the emulator: {what}")


@dataclass(frozen=True)
class Token:
    kind: str  # word, keyword, quoted, int, float, string, bytes, param, hint, op, end
    text: str
    value: Any
    pos: int

    def describe(self) -> str:
        """The token as Spanner's syntax errors name it."""
        if self.kind == "end":
            return "end of statement"
        if self.kind == "keyword":
            return f"keyword {self.value}"
        if self.kind in ("word", "quoted"):
            return f'identifier "{self.value}"'
        names = {"int": "integer literal", "float": "floating point literal", "string": "string literal"}
        if self.kind in names:
            return f'{names[self.kind]} "{self.text}"'
        if self.kind == "bytes":
            return f'bytes literal "{self.text}"'
        return f'"{self.text}"'


def _unescape(body: str) -> str:
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[nxt]
            out.append(chr(int(body[i + 2 : i + 2 + width], 16)))
            i += 2 + width
        elif nxt.isdigit():
            out.append(chr(int(body[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(nxt)
            i += 2
    return "".join(out)


def tokenize(sql: str) -> list[Token]:
    tokens, pos = [], 0
    while pos < len(sql):
        match = _TOKEN.match(sql, pos)
        if not match:
            raise sql_error(sql, pos, f'Syntax error: Illegal input character "{sql[pos]}"')
        kind, text = match.lastgroup or "", match.group()
        pos = match.end()
        start = match.start()
        if kind == "space":
            continue
        if kind == "word":
            upper = text.upper()
            tokens.append(
                Token("keyword", text, upper, start) if upper in RESERVED else Token(kind, text, text, start)
            )
        elif kind == "quoted":
            tokens.append(Token(kind, text, text[1:-1], start))
        elif kind == "string":
            prefix = re.match(r"[rRbB]*", text).group().lower()  # type: ignore[union-attr]
            quote = 3 if text[len(prefix) :].startswith(("'''", '"""')) else 1
            body = text[len(prefix) + quote : len(text) - quote]
            value = body if "r" in prefix else _unescape(body)
            tokens.append(Token("bytes" if "b" in prefix else "string", text, value, start))
        elif kind == "int":
            tokens.append(Token(kind, text, int(text, 16) if text[:2].lower() == "0x" else int(text), start))
        elif kind == "param":
            tokens.append(Token(kind, text, text[1:], start))
        else:
            tokens.append(Token(kind, text, text, start))
    tokens.append(Token("end", "", None, len(sql)))
    return tokens
