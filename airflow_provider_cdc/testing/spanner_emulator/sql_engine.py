"""Binding and running a parsed query over one table or ``INFORMATION_SCHEMA`` view.

Names resolve case-insensitively; comparisons and function calls follow GoogleSQL's signatures and
coercions (numbers with numbers, string literals and parameters to DATE and TIMESTAMP, untyped parameters
to the other side's type) with Spanner's error messages; conditions compile to functions of a row with
SQL's three-valued logic; ``ORDER BY`` puts NULLs first (last when ``DESC``) and NaN before other numbers.
An aggregate query (``COUNT``, ``BIT_XOR``) answers one row.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

import grpc

from . import catalog, sql_functions
from .model import EmulatorError, Table, find_table
from .sql_parser import (
    AGGREGATE_FUNCTIONS,
    Call,
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
from .sql_query import Aggregate, Query
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
        self.clause = "SELECT"  # where expressions being bound stand: SELECT, WHERE, ORDER BY

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
        aggregate = next((name for name in map(_aggregate_name, select.items) if name), None)
        if aggregate is not None:
            query.aggregates = self.aggregates(query)
        if select.where is not None:
            self.clause = "WHERE"
            query.where = self.where(select.where)
        if select.order and aggregate is not None:
            raise unsupported(self.sql, select.clause_pos["ORDER"], f"ORDER BY in a query with {aggregate}")
        if select.order:
            self.clause = "ORDER BY"
            query.order = self.order_by(outputs)
        if select.limit is not None:
            query.limit = self.count(select.limit)
            query.offset = self.count(select.offset) if select.offset is not None else 0
        partition_checked = select.hints.get(PARTITION_CHECK_HINT) != "true"
        if select.limit is not None:
            query.not_partitionable = "LIMIT"
        elif aggregate is not None:
            query.not_partitionable = aggregate
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
        if isinstance(node, Call):
            if node.name in AGGREGATE_FUNCTIONS:
                if self.clause == "SELECT":
                    raise unsupported(self.sql, node.pos, f"{node.name} inside another expression")
                raise self.error(
                    node.pos, f"Aggregate function {node.name} not allowed in {self.clause} clause"
                )
            return self.call(node)
        raise unsupported(self.sql, node.pos, "conditions as values")

    # ----- function calls -------------------------------------------------------------------------
    def argument(self, node: Any) -> Operand:
        """A function's argument (an untyped parameter takes its default type; NULL stays untyped)."""
        return self.settle(self.operand(node))

    @staticmethod
    def type_name(operand: Operand) -> str:
        return "INT64" if operand.type is None else str(operand.type)

    def signature_error(
        self, node: Call, args: list[Operand], supported: str, aggregate: bool = False
    ) -> EmulatorError:
        kind = "aggregate function" if aggregate else "function"
        if not args:
            what = f"No matching signature for {kind} {node.name} with no arguments"
        else:
            types = ", ".join(self.type_name(a) for a in args)
            what = f"No matching signature for {kind} {node.name} for argument types: {types}"
        plural = "signatures" if ";" in supported else "signature"
        return self.error(node.pos, f"{what}. Supported {plural}: {supported}")

    def call(self, node: Call) -> Operand:
        """A scalar function's value as a function of a row (its comparable value and its cell)."""
        args = [self.argument(a) for a in node.args]
        cells = [a.cell_of or (lambda row, c=a.cell: c) for a in args]
        if node.name == "FARM_FINGERPRINT":
            supported = "FARM_FINGERPRINT(BYTES); FARM_FINGERPRINT(STRING)"
            if len(args) != 1 or (args[0].type is not None and args[0].type.code not in ("STRING", "BYTES")):
                raise self.signature_error(node, args, supported)
            code, value = args[0].type.code if args[0].type else "STRING", cells[0]
            return self.result(node, "INT64", lambda row: sql_functions.fingerprint_cell(value(row), code))
        if node.name == "UNIX_MICROS":
            supported = "UNIX_MICROS(TIMESTAMP)"
            if len(args) != 1:
                raise self.signature_error(node, args, supported)
            arg = args[0]
            if arg.type is not None and arg.type.code == "STRING" and arg.get is None:
                try:
                    arg = arg.typed(SpannerType("TIMESTAMP"))
                except EmulatorError as exc:
                    raise self.error(arg.pos, exc.message) from None
                cells[0] = lambda row, c=arg.cell: c
            elif arg.type is not None and arg.type.code != "TIMESTAMP":
                raise self.signature_error(node, args, supported)
            value = cells[0]
            return self.result(node, "INT64", lambda row: sql_functions.unix_micros_cell(value(row)))
        return self.format_call(node, args, cells)

    def format_call(self, node: Call, args: list[Operand], cells: list[Callable[[Row], Any]]) -> Operand:
        supported = "FORMAT(STRING, [ANY, ...])"
        if not args:
            raise self.error(
                node.pos,
                f"Number of arguments does not match for function FORMAT. Supported signature: {supported}",
            )
        if args[0].type is not None and args[0].type.code != "STRING":
            raise self.signature_error(node, args, supported)
        pattern_node = node.args[0]
        if not isinstance(pattern_node, Literal):
            raise unsupported(self.sql, pattern_node.pos, "FORMAT with a pattern that is not a literal")
        if pattern_node.kind == "NULL":
            return self.result(node, "STRING", lambda row: None)
        codes = [self.type_name(a) for a in args[1:]]
        try:
            pattern = sql_functions.parse_pattern(pattern_node.value)
            sql_functions.check_arguments(pattern, codes)
        except sql_functions.FunctionError as exc:
            raise self.error(node.pos, str(exc)) from None
        except sql_functions.NotEmulated as exc:
            raise unsupported(self.sql, node.pos, str(exc)) from None
        values = cells[1:]
        return self.result(
            node,
            "STRING",
            lambda row: sql_functions.format_cells(pattern, [v(row) for v in values], codes),
        )

    @staticmethod
    def result(node: Call, code: str, cell_of: Callable[[Row], Any]) -> Operand:
        convert = getter("value", code)
        return Operand(
            SpannerType(code),
            node.pos,
            get=lambda row: convert({"value": cell_of(row)}),
            cell_of=cell_of,
            node=node,
        )

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
            if isinstance(item.expr, Count) or _aggregate_name(item) == "BIT_XOR":
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

    def aggregates(self, query: Query) -> list[Aggregate | None]:
        """What each item of an aggregate query aggregates; its cells then read the aggregates' row."""
        if self.range_name is None:
            name = next(n for n in map(_aggregate_name, self.select.items) if n)
            pos = next(item.expr.pos for item in self.select.items if _aggregate_name(item))
            where = "SELECT without FROM clause"
            raise self.error(pos, f"Aggregate function {name} not allowed in {where}")
        aggregates: list[Aggregate | None] = []
        for index, item in enumerate(self.select.items):
            expr = item.expr
            if isinstance(expr, Count):
                get = None if expr.column is None else self.column(expr.column).cell_of
                aggregates.append(Aggregate.count(get))
                query.cells[index] = lambda row, key=f"#{index}": row[key]
            elif _aggregate_name(item) == "BIT_XOR":
                aggregates.append(self.bit_xor(expr))
                query.cells[index] = lambda row, key=f"#{index}": row[key]
            elif isinstance(expr, Column | Star):
                name = expr.parts[-1] if isinstance(expr, Column) else "*"
                what = f"SELECT list expression references column {name}"
                raise self.error(expr.pos, f"{what} which is neither grouped nor aggregated")
            else:
                column = _first_column(expr)
                if column is not None:
                    what = f"SELECT list expression references column {column.parts[-1]}"
                    raise self.error(column.pos, f"{what} which is neither grouped nor aggregated")
                aggregates.append(None)
        return aggregates

    def bit_xor(self, node: Call) -> Aggregate:
        if any(isinstance(a, Call) and a.name in AGGREGATE_FUNCTIONS for a in node.args):
            raise self.error(node.pos, "Aggregations of aggregations are not allowed")
        args = [self.argument(a) for a in node.args]
        if len(args) != 1 or (args[0].type is not None and args[0].type.code != "INT64"):
            raise self.signature_error(node, args, "BIT_XOR(INT64)", aggregate=True)
        value = args[0].get or (lambda row, v=args[0].value: v)
        return Aggregate.bit_xor(value)

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


def _aggregate_name(item: Any) -> str | None:
    """``COUNT`` or the aggregate function a SELECT item calls at its top, else ``None``."""
    expr = item.expr
    if isinstance(expr, Count):
        return "COUNT"
    if isinstance(expr, Call) and expr.name in AGGREGATE_FUNCTIONS:
        return expr.name
    return None


def _first_column(node: Any) -> Column | None:
    """The first column an expression reads, if any."""
    if isinstance(node, Column):
        return node
    if isinstance(node, Call):
        return next((c for c in map(_first_column, node.args) if c is not None), None)
    return None
