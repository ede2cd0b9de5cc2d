"""A parser for the GoogleSQL subset the emulator answers over one table.

``[@{hints}] SELECT <* | [alias.]* | expression | COUNT(* | column) | BIT_XOR(expression) [[AS] name], ...>
[FROM <table> [[AS] alias]]
[WHERE <condition>] [ORDER BY <column | name | ordinal> [ASC|DESC], ...] [LIMIT <n> [OFFSET <m>]]``, where
an expression is a column, a literal, a parameter or a call of a scalar function the emulator knows
(:data:`SCALAR_FUNCTIONS`), and a condition combines comparisons (``= != <> < <= > >=``), ``IS [NOT] NULL``
and ``[NOT] IN (...)`` of expressions with ``AND``, ``OR``, ``NOT`` and parentheses. Errors carry Spanner's
position suffix (``[at line:column]``, the line and a caret); constructs outside the subset are refused by
name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .model import EmulatorError
from .sql_lexer import COMPARISONS, TYPED_LITERALS, Token, sql_error, tokenize, unsupported


# ----- the syntax tree -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    parts: tuple[str, ...]  # (name,) or (qualifier, name)
    pos: int
    name_pos: int


@dataclass(frozen=True)
class Param:
    name: str
    pos: int


@dataclass(frozen=True)
class Literal:
    kind: str  # INT64, FLOAT64, STRING, BYTES, BOOL, NULL, or a typed literal's type
    value: Any
    text: str
    pos: int


@dataclass(frozen=True)
class Compare:
    op: str  # = != < <= > >=
    left: Any
    right: Any
    pos: int


@dataclass(frozen=True)
class IsNull:
    operand: Any
    negated: bool
    pos: int


@dataclass(frozen=True)
class InList:
    operand: Any
    items: tuple[Any, ...]
    negated: bool
    pos: int


@dataclass(frozen=True)
class Logical:
    op: str  # AND, OR
    items: tuple[Any, ...]
    pos: int


@dataclass(frozen=True)
class Not:
    operand: Any
    pos: int


@dataclass(frozen=True)
class Count:
    column: Column | None  # None: COUNT(*)
    pos: int


@dataclass(frozen=True)
class Call:
    """A call of a known function (upper-case ``name``); ``BIT_XOR`` is an aggregate."""

    name: str
    args: tuple[Any, ...]
    pos: int


#: Scalar functions the emulator evaluates, and the aggregates besides COUNT.
SCALAR_FUNCTIONS = frozenset({"FARM_FINGERPRINT", "FORMAT", "UNIX_MICROS"})
AGGREGATE_FUNCTIONS = frozenset({"BIT_XOR"})


@dataclass(frozen=True)
class Star:
    qualifier: str | None
    pos: int


@dataclass(frozen=True)
class SelectItem:
    expr: Any  # Column, Literal, Param, Call, Count or Star
    alias: str | None


@dataclass(frozen=True)
class OrderItem:
    expr: Any
    desc: bool


@dataclass
class Select:
    sql: str
    items: list[SelectItem]
    table: tuple[str, ...] | None  # (name,) or ("INFORMATION_SCHEMA", view)
    table_pos: int = 0
    alias: str | None = None
    where: Any = None
    order: list[OrderItem] = field(default_factory=list)
    limit: Any = None  # Literal or Param
    offset: Any = None
    hints: dict[str, str] = field(default_factory=dict)
    clause_pos: dict[str, int] = field(default_factory=dict)  # ORDER, LIMIT: where they start


def parse(sql: str) -> Select:
    """The statement, or INVALID_ARGUMENT naming the syntax error or the unsupported construct."""
    return _Parser(sql).statement()


class _Parser:
    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.tokens = tokenize(sql)
        self.i = 0

    # ----- tokens ---------------------------------------------------------------------------------
    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def take(self) -> Token:
        token = self.peek()
        self.i += 1
        return token

    def is_keyword(self, *names: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token.kind == "keyword" and token.value in names

    def is_op(self, *ops: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token.kind == "op" and token.value in ops

    def is_word(self, *names: str) -> bool:
        token = self.peek()
        return token.kind == "word" and token.value.upper() in names

    def accept_keyword(self, name: str) -> Token | None:
        return self.take() if self.is_keyword(name) else None

    def expect_keyword(self, name: str) -> Token:
        if not self.is_keyword(name):
            raise self.error(f"Syntax error: Expected keyword {name} but got {self.peek().describe()}")
        return self.take()

    def expect_op(self, op: str) -> Token:
        if not self.is_op(op):
            raise self.error(f'Syntax error: Expected "{op}" but got {self.peek().describe()}')
        return self.take()

    def error(self, message: str, token: Token | None = None) -> EmulatorError:
        token = token or self.peek()
        return sql_error(self.sql, token.pos, message)

    def unexpected(self) -> EmulatorError:
        token = self.peek()
        what = "end of statement" if token.kind == "end" else token.describe()
        return self.error(f"Syntax error: Unexpected {what}")

    def refuse(self, what: str, token: Token | None = None) -> EmulatorError:
        return unsupported(self.sql, (token or self.peek()).pos, what)

    def identifier(self) -> Token:
        token = self.peek()
        if token.kind not in ("word", "quoted"):
            raise self.error(f"Syntax error: Unexpected {token.describe()}")
        return self.take()

    # ----- statement ------------------------------------------------------------------------------
    def statement(self) -> Select:
        hints: dict[str, str] = {}
        while self.peek().kind == "hint":
            for item in self.take().text[2:-1].split(","):
                name, _, value = item.partition("=")
                hints[name.strip().lower()] = value.strip().lower()
        if self.is_keyword("WITH"):
            raise self.refuse("WITH clauses")
        if self.is_word("INSERT", "UPDATE", "DELETE", "CALL", "GRAPH"):
            raise self.refuse(f"{self.peek().value.upper()} statements (the emulator answers queries only)")
        if self.is_op("("):
            raise self.refuse("parenthesized queries")
        if not self.is_keyword("SELECT"):
            raise self.unexpected()
        select = self.select()
        select.hints = hints
        if self.is_op(";"):
            self.take()
        if self.is_keyword("UNION", "INTERSECT", "EXCEPT"):
            raise self.refuse(f"set operations ({self.peek().value})")
        if self.peek().kind != "end":
            raise self.error(f"Syntax error: Expected end of input but got {self.peek().describe()}")
        return select

    def select(self) -> Select:
        self.expect_keyword("SELECT")
        if self.is_keyword("DISTINCT"):
            raise self.refuse("SELECT DISTINCT")
        if self.is_keyword("AS"):
            raise self.refuse("SELECT AS STRUCT / AS VALUE")
        self.accept_keyword("ALL")
        items = [self.select_item()]
        while self.is_op(","):
            self.take()
            items.append(self.select_item())
        select = Select(self.sql, items, None)
        if self.accept_keyword("FROM"):
            self.table_ref(select)
        if self.accept_keyword("WHERE"):
            select.where = self.expr()
        for clause in ("GROUP", "HAVING", "WINDOW"):
            if self.is_keyword(clause):
                raise self.refuse(f"{clause} clauses")
        if self.is_word("QUALIFY"):
            raise self.refuse("QUALIFY clauses")
        if self.is_keyword("ORDER"):
            select.clause_pos["ORDER"] = self.take().pos
            self.expect_keyword("BY")
            select.order.append(self.order_item())
            while self.is_op(","):
                self.take()
                select.order.append(self.order_item())
        if self.is_keyword("LIMIT"):
            select.clause_pos["LIMIT"] = self.take().pos
            select.limit = self.count("LIMIT")
            if self.is_word("OFFSET"):
                self.take()
                select.offset = self.count("OFFSET")
        return select

    def count(self, clause: str) -> Any:
        token = self.peek()
        if token.kind == "int":
            self.take()
            return Literal("INT64", token.value, token.text, token.pos)
        if token.kind == "param":
            self.take()
            return Param(token.value, token.pos)
        if token.kind == "end":
            raise self.unexpected()
        raise self.error(f"{clause} expects a non-negative integer literal or parameter")

    def select_item(self) -> SelectItem:
        token = self.peek()
        if self.is_op("*"):
            self.take()
            return SelectItem(Star(None, token.pos), None)
        if token.kind in ("word", "quoted") and self.is_op(".", ahead=1) and self.is_op("*", ahead=2):
            self.i += 3
            return SelectItem(Star(token.value, token.pos), None)
        what = "expressions in the SELECT list (select columns, literals, parameters, functions or COUNT)"
        expr = self.count_call() if self.is_count() else self.operand()
        if not isinstance(expr, Column | Literal | Param | Call | Count):
            raise self.refuse(what, token)
        if self.is_op(*COMPARISONS) or self.is_keyword("IS", "IN", "AND", "OR", "NOT", "LIKE", "BETWEEN"):
            raise self.refuse(what, token)
        alias = None
        if self.accept_keyword("AS"):
            alias = self.identifier().value
        elif self.peek().kind in ("word", "quoted") and not self.is_word("OFFSET"):
            alias = self.take().value
        return SelectItem(expr, alias)

    def is_count(self) -> bool:
        return self.is_word("COUNT") and self.is_op("(", ahead=1)

    def count_call(self) -> Count:
        """``COUNT(*)`` or ``COUNT(column)``."""
        token = self.take()
        self.take()
        if self.is_keyword("DISTINCT"):
            raise self.refuse("COUNT(DISTINCT ...)")
        target = None
        if self.is_op("*"):
            self.take()
        else:
            target = self.operand()
            if not isinstance(target, Column):
                raise self.refuse("COUNT of an expression (count * or a column)", token)
        self.expect_op(")")
        if self.is_keyword("OVER"):
            raise self.refuse("window functions")
        return Count(target, token.pos)

    def table_ref(self, select: Select) -> None:
        token = self.peek()
        if self.is_op("("):
            raise self.refuse("subqueries in FROM")
        if self.is_keyword("UNNEST"):
            raise self.refuse("UNNEST")
        parts = [self.identifier().value]
        while self.is_op("."):
            self.take()
            parts.append(self.identifier().value)
        if self.peek().kind == "hint":
            raise self.refuse("table hints")
        if self.is_op("("):
            raise self.refuse("table-valued functions", token)
        select.table, select.table_pos = tuple(parts), token.pos
        if self.is_keyword("TABLESAMPLE"):
            raise self.refuse("TABLESAMPLE")
        if self.accept_keyword("AS"):
            select.alias = self.identifier().value
        elif self.peek().kind in ("word", "quoted"):
            select.alias = self.take().value
        if self.is_op(",") or self.is_keyword("JOIN", "CROSS", "INNER", "LEFT", "RIGHT", "FULL", "NATURAL"):
            raise self.refuse("joins (the emulator reads one table per query)")

    def order_item(self) -> OrderItem:
        expr = self.operand()
        desc = False
        if self.is_keyword("ASC", "DESC"):
            desc = self.take().value == "DESC"
        if self.is_keyword("NULLS"):
            raise self.error("NULLS FIRST and NULLS LAST are not supported")
        return OrderItem(expr, desc)

    # ----- conditions -----------------------------------------------------------------------------
    def expr(self) -> Any:
        return self.logical("OR", self.conjunction)

    def conjunction(self) -> Any:
        return self.logical("AND", self.negation)

    def logical(self, op: str, operand: Any) -> Any:
        first = operand()
        items = [first]
        while self.accept_keyword(op):
            items.append(operand())
        return first if len(items) == 1 else Logical(op, tuple(items), _pos(first))

    def negation(self) -> Any:
        token = self.accept_keyword("NOT")
        if token is not None:
            return Not(self.negation(), token.pos)
        return self.predicate()

    def predicate(self) -> Any:
        left = self.operand()
        token = self.peek()
        if token.kind == "op" and token.value in COMPARISONS:
            self.take()
            return Compare(COMPARISONS[token.value], left, self.operand(), _pos(left))
        if self.accept_keyword("IS"):
            negated = bool(self.accept_keyword("NOT"))
            if self.is_keyword("TRUE", "FALSE") or self.is_word("UNKNOWN"):
                raise self.refuse(f"IS [NOT] {self.peek().text.upper()}")
            self.expect_keyword("NULL")
            return IsNull(left, negated, _pos(left))
        negated = self.is_keyword("NOT") and self.is_keyword("IN", "LIKE", "BETWEEN", ahead=1)
        if negated:
            self.take()
        if self.accept_keyword("IN"):
            if self.is_keyword("UNNEST"):
                raise self.refuse("IN UNNEST")
            self.expect_op("(")
            if self.is_keyword("SELECT"):
                raise self.refuse("subqueries")
            items = [self.operand()]
            while self.is_op(","):
                self.take()
                items.append(self.operand())
            self.expect_op(")")
            return InList(left, tuple(items), negated, _pos(left))
        if self.is_keyword("LIKE", "BETWEEN"):
            raise self.refuse(self.peek().value)
        return left

    def operand(self) -> Any:
        value = self.primary()
        if self.is_op("+", "-", "*", "/", "||", "|", "&", "^", "<<", ">>"):
            raise self.refuse(f"the operator {self.peek().value} (arithmetic and other expressions)")
        if self.is_op("["):
            raise self.refuse("array element access")
        return value

    def primary(self) -> Any:
        token = self.peek()
        if self.is_op("("):
            self.take()
            if self.is_keyword("SELECT"):
                raise self.refuse("subqueries")
            inner = self.expr()
            self.expect_op(")")
            return inner
        if token.kind == "param":
            self.take()
            return Param(token.value, token.pos)
        if token.kind in ("int", "float", "string", "bytes"):
            self.take()
            kind = {"int": "INT64", "float": "FLOAT64", "string": "STRING", "bytes": "BYTES"}[token.kind]
            value = float(token.text) if token.kind == "float" else token.value
            return Literal(kind, value, token.text, token.pos)
        if self.is_op("-") and self.peek(1).kind in ("int", "float"):
            self.take()
            number = self.take()
            value = -(float(number.text) if number.kind == "float" else number.value)
            return Literal(
                "INT64" if number.kind == "int" else "FLOAT64", value, "-" + number.text, token.pos
            )
        if self.is_keyword("TRUE", "FALSE", "NULL"):
            self.take()
            kind = "NULL" if token.value == "NULL" else "BOOL"
            return Literal(kind, None if kind == "NULL" else token.value == "TRUE", token.text, token.pos)
        if token.kind == "word" and token.value.upper() in TYPED_LITERALS and self.peek(1).kind == "string":
            self.take()
            text = self.take()
            return Literal(token.value.upper(), text.value, text.text, token.pos)
        if self.is_keyword("CASE", "CAST", "EXISTS", "ARRAY", "STRUCT", "INTERVAL", "EXTRACT", "IF"):
            raise self.refuse(f"{token.value} expressions")
        if token.kind in ("word", "quoted"):
            if self.is_op("(", ahead=1):
                return self.call()
            self.take()
            parts, name_pos = [token.value], token.pos
            while self.is_op(".") and self.peek(1).kind in ("word", "quoted"):
                self.take()
                name = self.take()
                parts.append(name.value)
                name_pos = name.pos
            if len(parts) > 2:
                raise self.refuse("field access beyond table.column", token)
            return Column(tuple(parts), token.pos, name_pos)
        if token.kind == "param" or self.is_op("@"):
            raise self.refuse("system variables")
        raise self.unexpected()

    def call(self) -> Call:
        """``NAME(argument, ...)`` of a known function; any other function is refused by name."""
        token = self.peek()
        name = token.text.upper()
        if token.kind != "word" or name not in SCALAR_FUNCTIONS | AGGREGATE_FUNCTIONS:
            raise self.refuse(f"function calls ({name})")
        self.i += 2
        if self.is_keyword("DISTINCT"):
            raise self.refuse(f"{name}(DISTINCT ...)")
        args: list[Any] = []
        if not self.is_op(")"):
            args.append(self.operand())
            while self.is_op(","):
                self.take()
                args.append(self.operand())
        self.expect_op(")")
        if self.is_keyword("OVER"):
            raise self.refuse("window functions")
        return Call(name, tuple(args), token.pos)


def _pos(node: Any) -> int:
    return node.pos
