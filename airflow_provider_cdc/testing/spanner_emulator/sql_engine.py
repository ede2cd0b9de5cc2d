"""Binding and running a parsed query over one table or ``INFORMATION_SCHEMA`` view.

Names resolve case-insensitively; comparisons follow GoogleSQL's signatures and coercions (numbers with
numbers, string literals and parameters to DATE and TIMESTAMP, untyped parameters to the other side's
type) with Spanner's error messages; conditions compile to functions of a row with SQL's three-valued
logic; ``ORDER BY`` puts NULLs first (last when ``DESC``) and NaN before other numbers.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

import grpc

from . import catalog
from .model import EmulatorError, Table, find_table
from .sql_parser import (
    Column,
    Compare,
    Count,
    InList,
    IsNull,
    Literal,
    Logical,
    Not,
    Param,
    Select,
    Star,
    parse,
    sql_error,
    unsupported,
)
from .sql_query import Query
from .sql_values import (
    NUMBERS,
    TYPE_NAMES,
    UNORDERED,
    Operand,
    all_of,
    any_of,
    comparable,
    default_type,
    flip,
    getter,
    literal_value,
    negate,
    typed_param,
    untyped_param,
)
from .storage import Descending
from .values import SpannerType

Row = dict[str, Any]
_OPS = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
PARTITION_CHECK_HINT = "spanner_emulator.disable_query_partitionability_check"


def prepare(sql: str, tables: Mapping[str, Table], params: Any, param_types: Mapping[str, Any]) -> Query:
    """Parse and bind ``sql`` against the database's tables, with the request's parameters."""
    return _Binder(parse(sql), tables, params, param_types).bind()


class _Binder:
    def __init__(
        self, select: Select, tables: Mapping[str, Table], params: Any, types: Mapping[str, Any]
    ) -> None:
        self.select, self.sql, self.tables = select, select.sql, tables
        self.params = dict(params.fields) if params is not None else {}
        self.types = {name: type_pb.code for name, type_pb in types.items()}
        self.columns: dict[str, SpannerType] = {}
        self.range_name: str | None = None

    def error(self, pos: int, message: str) -> EmulatorError:
        return sql_error(self.sql, pos, message)

    # ----- FROM -----------------------------------------------------------------------------------
    def bind(self) -> Query:
        select = self.select
        table, view = None, None
        if select.table is not None:
            table, view = self.source(select.table)
        fields, cells, outputs = self.select_list()
        query = Query(fields, table, view, cells, hints=select.hints)
        if any(isinstance(item.expr, Count) for item in select.items):
            query.counts = self.counts(query)
        if select.where is not None:
            query.where = self.where(select.where)
        if select.order and query.counts is not None:
            raise unsupported(self.sql, select.clause_pos["ORDER"], "ORDER BY in a query with COUNT")
        if select.order:
            query.order = self.order_by(outputs)
        if select.limit is not None:
            query.limit = self.count(select.limit)
            query.offset = self.count(select.offset) if select.offset is not None else 0
        partition_checked = select.hints.get(PARTITION_CHECK_HINT) != "true"
        if select.limit is not None:
            query.not_partitionable = "LIMIT"
        elif query.counts is not None:
            query.not_partitionable = "COUNT"
        elif select.order and partition_checked:
            query.not_partitionable = "ORDER BY"
        return query

    def source(self, name: tuple[str, ...]) -> tuple[Table | None, Any]:
        pos = self.select.table_pos
        self.range_name = self.select.alias or name[-1]
        if len(name) == 2 and name[0].upper() == "INFORMATION_SCHEMA":
            found = catalog.view(name[1])
            if found is None:
                raise self.error(pos, f"Table not found: {'.'.join(name)}")
            columns, rows = found
            self.columns = dict(columns)
            if name[1].upper() in catalog.VIEWS:  # the views that list tables
                self.check_user_only(name[1].upper())
            return None, rows
        table = find_table(self.tables, name[0]) if len(name) == 1 else None
        if table is None:
            raise self.error(pos, f"Table not found: {'.'.join(name)}")
        self.columns = {c.name: c.type for c in table.columns}
        return table, None

    def check_user_only(self, view: str) -> None:
        schemas: list[Any] = []
        names: list[list[Any]] = []
        where = self.select.where
        conjuncts = list(where.items) if isinstance(where, Logical) and where.op == "AND" else [where]
        for node in conjuncts:
            pairs: list[tuple[Any, list[Any]]] = []
            if isinstance(node, Compare) and node.op == "=":
                pairs = [(node.left, [node.right]), (node.right, [node.left])]
            elif isinstance(node, InList) and not node.negated:
                pairs = [(node.operand, list(node.items))]
            for column, values in pairs:
                if not isinstance(column, Column) or any(isinstance(v, Column) for v in values):
                    continue
                found = [self.constant(v).typed(catalog.STRING).cell for v in values]
                target = column.parts[-1].upper()
                if target == "TABLE_SCHEMA":
                    schemas.extend(found)
                elif target == "TABLE_NAME":
                    names.append(found)
        if not catalog.user_only(schemas, names, self.tables):
            raise unsupported(
                self.sql,
                self.select.table_pos,
                f"rows of Spanner's system views in INFORMATION_SCHEMA.{view}; filter on TABLE_SCHEMA = '' "
                "or on TABLE_NAME",
            )

    # ----- names and values -----------------------------------------------------------------------
    def column(self, node: Column) -> Operand:
        if len(node.parts) == 2:
            qualifier, name = node.parts
            if self.range_name is None or qualifier.casefold() != self.range_name.casefold():
                raise self.error(node.pos, f"Unrecognized name: {qualifier}")
            found = self.find(name)
            if found is None:
                raise self.error(node.name_pos, f"Name {name} not found inside {qualifier}")
        else:
            found = self.find(node.parts[0])
            if found is None:
                if self.range_name is not None and node.parts[0].casefold() == self.range_name.casefold():
                    raise unsupported(self.sql, node.pos, "table values as expressions")
                raise self.error(node.pos, f"Unrecognized name: {node.parts[0]}")
        name, type_ = found
        return Operand(
            type_,
            node.pos,
            get=getter(name, type_.code),
            cell_of=lambda row: row.get(name),
            node=node,
            column=name,
        )

    def find(self, name: str) -> tuple[str, SpannerType] | None:
        folded = name.casefold()
        return next(((n, t) for n, t in self.columns.items() if n.casefold() == folded), None)

    def constant(self, node: Any) -> Operand:
        if isinstance(node, Literal):
            type_, cell = literal_value(node.kind, node.value, lambda message: self.error(node.pos, message))
            value = None if type_ is None else comparable(cell, type_.code)
            return Operand(type_, node.pos, value=value, cell=cell, node=node)
        if isinstance(node, Param):
            value = self.param_value(node)
            code = self.types.get(node.name) or self.types.get(self.param_key(node))
            if code:
                name = getattr(code, "name", None) or TYPE_NAMES.get(int(code), "TYPE_CODE_UNSPECIFIED")
                if name != "TYPE_CODE_UNSPECIFIED":
                    cell = typed_param(node.name, value, name)
                    return Operand(
                        SpannerType(name), node.pos, value=comparable(cell, name), cell=cell, node=node
                    )
            return Operand(None, node.pos, node=node, raw=value)
        raise unsupported(self.sql, getattr(node, "pos", 0), "this expression")

    def param_key(self, node: Param) -> str:
        folded = node.name.casefold()
        return next((k for k in self.params if k.casefold() == folded), node.name)

    def param_value(self, node: Param) -> Any:
        key = self.param_key(node)
        if key not in self.params:
            raise EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, f"Incomplete query parameters {node.name}")
        return self.params[key]

    def operand(self, node: Any) -> Operand:
        if isinstance(node, Column):
            return self.column(node)
        if isinstance(node, Literal | Param):
            return self.constant(node)
        raise unsupported(self.sql, node.pos, "conditions as values")

    def settle(self, operand: Operand) -> Operand:
        """An untyped parameter on its own takes its default type."""
        if operand.raw is None:
            return operand
        return operand.typed(SpannerType(default_type(operand.raw)))

    # ----- SELECT list ----------------------------------------------------------------------------
    def select_list(self) -> tuple[list[tuple[str, SpannerType]], list[Callable[[Row], Any]], list[Any]]:
        fields, cells, outputs = [], [], []
        for item in self.select.items:
            if isinstance(item.expr, Star):
                if self.range_name is None:
                    raise self.error(item.expr.pos, "SELECT * must have a FROM clause")
                if (
                    item.expr.qualifier is not None
                    and item.expr.qualifier.casefold() != self.range_name.casefold()
                ):
                    raise self.error(item.expr.pos, f"Unrecognized name: {item.expr.qualifier}")
                for name, type_ in self.columns.items():
                    fields.append((name, type_))
                    cells.append(lambda row, n=name: row.get(n))
                    outputs.append((name, self.column(Column((name,), item.expr.pos, item.expr.pos))))
                continue
            if isinstance(item.expr, Count):
                fields.append((item.alias or "", SpannerType("INT64")))
                cells.append(lambda row: None)
                outputs.append((item.alias or "", None))
                continue
            operand = self.settle(self.operand(item.expr))
            type_ = operand.type or SpannerType("INT64")
            name = item.alias or (item.expr.parts[-1] if isinstance(item.expr, Column) else "")
            fields.append((name, type_))
            if operand.cell_of is not None:
                cells.append(operand.cell_of)
            else:
                cells.append(lambda row, c=operand.cell: c)
            outputs.append((name, operand))
        return fields, cells, outputs

    def counts(self, query: Query) -> list[Callable[[Row], bool] | None]:
        """What each item of an aggregate query counts; its cells then read the counts' row."""
        counts: list[Callable[[Row], bool] | None] = []
        for index, item in enumerate(self.select.items):
            expr = item.expr
            if isinstance(expr, Count):
                get = None if expr.column is None else self.column(expr.column).cell_of
                counts.append((lambda row: True) if get is None else (lambda row, g=get: g(row) is not None))
                query.cells[index] = lambda row, key=f"#{index}": row[key]
            elif isinstance(expr, Column | Star):
                name = expr.parts[-1] if isinstance(expr, Column) else "*"
                what = f"SELECT list expression references column {name}"
                raise self.error(expr.pos, f"{what} which is neither grouped nor aggregated")
            else:
                counts.append(None)
        return counts

    # ----- WHERE ----------------------------------------------------------------------------------
    def where(self, node: Any) -> Callable[[Row], bool | None]:
        test, type_name = self.condition(node)
        if type_name != "BOOL":
            raise self.error(node.pos, f"WHERE clause should return type BOOL, but returns {type_name}")
        return test

    def condition(self, node: Any) -> tuple[Callable[[Row], bool | None], str]:
        """A function of a row giving TRUE, FALSE or NULL (``None``), and the expression's type name."""
        if isinstance(node, Compare):
            return self.compare(node.op, node.left, node.right, node.pos), "BOOL"
        if isinstance(node, IsNull):
            operand = self.settle(self.operand(node.operand))
            get = operand.get or (lambda row, v=operand.value: v)
            if node.negated:
                return (lambda row: get(row) is not None), "BOOL"
            return (lambda row: get(row) is None), "BOOL"
        if isinstance(node, InList):
            tests = [self.compare("=", node.operand, item, node.pos) for item in node.items]
            test = any_of(tests)
            return (negate(test) if node.negated else test), "BOOL"
        if isinstance(node, Logical):
            parts = [self.condition(item) for item in node.items]
            names = [name for _, name in parts]
            if any(name != "BOOL" for name in names):
                raise self.error(
                    node.pos,
                    f"No matching signature for operator {node.op} for argument types: {', '.join(names)}. "
                    f"Supported signature: BOOL {node.op} ([BOOL, ...])",
                )
            tests = [test for test, _ in parts]
            return (all_of(tests) if node.op == "AND" else any_of(tests)), "BOOL"
        if isinstance(node, Not):
            test, name = self.condition(node.operand)
            if name != "BOOL":
                raise self.error(
                    node.pos,
                    f"No matching signature for operator NOT for argument types: {name}. "
                    "Supported signature: NOT (BOOL)",
                )
            return negate(test), "BOOL"
        operand = self.settle(self.operand(node))
        type_name = str(operand.type or "INT64")
        if operand.get is not None:
            return operand.get, type_name
        return (lambda row, v=operand.value: v), type_name

    def compare(self, op: str, left_node: Any, right_node: Any, pos: int) -> Callable[[Row], bool | None]:
        left, right = self.operand(left_node), self.operand(right_node)
        for side in (left, right):
            if isinstance(side.node, Literal) and side.node.kind == "NULL" and op in ("=", "!="):
                raise self.error(side.pos, f"Operands of {op} cannot be literal NULL")
        for side in (left, right):
            if side.type is not None and (side.type.code in UNORDERED):
                what = "Equality" if op in ("=", "!=") else "Less than"
                raise self.error(pos, f"{what} is not defined for arguments of type {side.type}")
        left, right = self.unify(op, left, right, pos)
        test = _OPS[op]
        if left.get is not None and right.get is not None:
            lget, rget = left.get, right.get

            def both(row: Row) -> bool | None:
                a, b = lget(row), rget(row)
                return None if a is None or b is None else test(a, b)

            return both
        if left.get is None and right.get is None:
            a, b = left.value, right.value
            fixed = None if a is None or b is None else test(a, b)
            return lambda row: fixed
        get, constant = (left.get, right.value) if left.get is not None else (right.get, left.value)
        if constant is None:
            return lambda row: None
        if left.get is None:
            test = flip(test)

        def one(row: Row) -> bool | None:
            a = get(row)  # type: ignore[misc]
            return None if a is None else test(a, constant)

        return one

    def unify(self, op: str, left: Operand, right: Operand, pos: int) -> tuple[Operand, Operand]:
        """Both sides as comparable types, or Spanner's "No matching signature" error."""
        lt, rt = left.type, right.type
        if lt is None and rt is None:
            return self.settle(left), self.settle(right)
        if lt is None:
            return left.typed(rt), right  # type: ignore[arg-type]
        if rt is None:
            return left, right.typed(lt)
        if lt.code == rt.code or (lt.code in NUMBERS and rt.code in NUMBERS):
            return left, right
        for this, other in ((left, right), (right, left)):
            coercible = this.get is None and this.type.code == "STRING"  # type: ignore[union-attr]
            if coercible and other.type.code in ("DATE", "TIMESTAMP"):  # type: ignore[union-attr]
                try:
                    cast = this.typed(other.type)  # type: ignore[arg-type]
                except EmulatorError as exc:
                    raise self.error(this.pos, exc.message) from None
                return (cast, other) if this is left else (other, cast)
        raise self.error(
            pos,
            f"No matching signature for operator {op} for argument types: {lt}, {rt}. "
            f"Supported signature: ANY {op} ANY",
        )

    # ----- ORDER BY and LIMIT ---------------------------------------------------------------------
    def order_by(self, outputs: list[tuple[str, Any]]) -> Callable[[Row], tuple]:
        keys = []
        for item in self.select.order:
            expr = item.expr
            operand = None
            if isinstance(expr, Literal) and expr.kind == "INT64":
                if not 1 <= expr.value <= len(outputs):
                    raise self.error(expr.pos, f"ORDER BY is out of SELECT column number range: {expr.value}")
                operand = outputs[expr.value - 1][1]
            elif isinstance(expr, Column) and len(expr.parts) == 1:
                folded = expr.parts[0].casefold()
                named = [o for n, o in outputs if n.casefold() == folded]
                if len({(o.column, id(o) if o.column is None else 0) for o in named}) > 1:
                    raise self.error(expr.pos, f"Column name {expr.parts[0]} is ambiguous")
                operand = named[0] if named else None
            if operand is None:
                operand = self.settle(self.operand(expr))
            if operand.type is not None and operand.type.code in UNORDERED:
                raise self.error(expr.pos, f"ORDER BY does not support expressions of type {operand.type}")
            get = operand.get or (lambda row, v=operand.value: v)
            keys.append((get, item.desc))

        def key(row: Row) -> tuple:
            parts = []
            for get, desc in keys:
                value = get(row)
                part = (0,) if value is None else ((1, 0) if value != value else (1, 1, value))
                parts.append(Descending(part) if desc else part)
            return tuple(parts)

        return key

    def count(self, node: Any) -> int:
        if isinstance(node, Literal):
            return int(node.value)
        operand = self.constant(node)
        cell = operand.cell if operand.raw is None else untyped_param(operand.raw, "INT64")
        if operand.type is not None and operand.type.code != "INT64":
            raise self.error(node.pos, f"LIMIT expects an integer literal or parameter, got {operand.type}")
        out_of_range = grpc.StatusCode.OUT_OF_RANGE
        if cell is None:
            raise EmulatorError(out_of_range, "Limit requires non-null count and offset")
        if int(cell) < 0:
            raise EmulatorError(out_of_range, "Limit requires non-negative count and offset")
        return int(cell)
