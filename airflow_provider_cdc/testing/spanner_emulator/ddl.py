"""A parser for the GoogleSQL DDL the emulator accepts: tables, their columns (``ALTER TABLE … ADD``,
``DROP`` and ``ALTER COLUMN``), change streams and database options; and the split of a DDL file into
statements."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta

from .values import SCALAR_CODES, SpannerType


class DdlError(ValueError):
    """A DDL statement the emulator cannot accept (reported as INVALID_ARGUMENT)."""


#: The longest STRING (characters) and BYTES (bytes) a column can declare; ``MAX`` means these.
MAX_LENGTH = {"STRING": 2_621_440, "BYTES": 10_485_760}


@dataclass
class ColumnDef:
    name: str
    type: SpannerType
    not_null: bool = False
    allow_commit_timestamp: bool = False
    spanner_type: str = ""  # as INFORMATION_SCHEMA.COLUMNS.SPANNER_TYPE shows it: STRING(MAX), ARRAY<INT64>
    max_length: int | None = None  # STRING(n) / BYTES(n) (or their ARRAY): n; None for MAX or other types

    def __post_init__(self) -> None:
        if not self.spanner_type:
            self.spanner_type = str(self.type)

    @property
    def effective_max_length(self) -> int | None:
        """The declared length, or the type's limit for ``MAX``; ``None`` for types without a length."""
        base = self.type.element if self.type.code == "ARRAY" else self.type
        limit = MAX_LENGTH.get(base.code) if base is not None else None
        return limit if self.max_length is None else self.max_length


@dataclass
class CreateTable:
    name: str
    columns: list[ColumnDef]
    primary_key: list[str]
    key_desc: list[bool] = field(default_factory=list)  # per key column: DESC
    parent: str | None = None  # INTERLEAVE IN PARENT
    on_delete: str | None = None  # CASCADE or NO ACTION, when interleaved


@dataclass
class AddColumn:
    table: str
    column: ColumnDef
    if_not_exists: bool = False


@dataclass
class DropColumn:
    table: str
    column: str


@dataclass
class AlterColumn:
    """``ALTER COLUMN c <type> [NOT NULL]``: a new type, length or nullability; options are kept."""

    table: str
    column: ColumnDef


@dataclass
class AlterColumnOptions:
    """``ALTER COLUMN c SET OPTIONS (allow_commit_timestamp = true | false | null)``."""

    table: str
    column: str
    allow_commit_timestamp: bool


@dataclass
class DropColumnDefault:
    """``ALTER COLUMN c DROP DEFAULT``: the emulator's columns have no default, so nothing changes."""

    table: str
    column: str


@dataclass
class DropTable:
    name: str


@dataclass
class CreateIndex:
    """``CREATE [UNIQUE] [NULL_FILTERED] INDEX [IF NOT EXISTS] i ON t (c [DESC], …) [STORING (…)]
    [, INTERLEAVE IN p]``."""

    name: str
    table: str
    columns: list[str]
    desc: list[bool]
    storing: list[str] = field(default_factory=list)
    unique: bool = False
    null_filtered: bool = False
    parent: str | None = None
    if_not_exists: bool = False


@dataclass
class DropIndex:
    name: str
    if_exists: bool = False


@dataclass
class CreateChangeStream:
    name: str
    # None: FOR ALL; {} : watches nothing; {table: None (all columns) | [columns]}
    scope: dict[str, list[str] | None] | None
    retention: timedelta = timedelta(days=1)
    value_capture_type: str = "OLD_AND_NEW_VALUES"
    options: dict[str, str] = field(default_factory=dict)


@dataclass
class DropChangeStream:
    name: str


@dataclass
class AlterDatabase:
    name: str
    version_retention: timedelta | None  # None: back to the default
    version_retention_text: str | None = None  # the option's value as written ('36h')


Statement = (
    CreateTable
    | AddColumn
    | DropColumn
    | AlterColumn
    | AlterColumnOptions
    | DropColumnDefault
    | DropTable
    | CreateIndex
    | DropIndex
    | CreateChangeStream
    | DropChangeStream
    | AlterDatabase
)

_IDENT = r"`?([A-Za-z_][A-Za-z0-9_]*)`?"
VALUE_CAPTURE_TYPES = ("OLD_AND_NEW_VALUES", "NEW_VALUES", "NEW_ROW", "NEW_ROW_AND_OLD_VALUES")
MAX_RETENTION = timedelta(days=30)
MIN_RETENTION = timedelta(hours=1)
#: ``version_retention_period``: Spanner's default and bounds.
DEFAULT_VERSION_RETENTION = timedelta(hours=1)
MAX_VERSION_RETENTION = timedelta(days=7)


def split_top_level(text: str, sep: str = ",", angle_brackets: bool = True) -> list[str]:
    """Split on ``sep`` outside parentheses, quotes and (for types) angle brackets."""
    opening, closing = ("(<", ")>") if angle_brackets else ("(", ")")
    parts, depth, current, quote = [], 0, [], None
    for ch in text:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "'\"":
            quote = ch
        elif ch in opening:
            depth += 1
        elif ch in closing:
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    tail = "".join(current).strip()
    if tail:
        parts.append(tail)
    return parts


def parse_type(text: str) -> SpannerType:
    return parse_type_text(text)[0]


def parse_type_text(text: str) -> tuple[SpannerType, str]:
    """The type and its text as Spanner shows it (``STRING(MAX)``, ``BYTES(256)``, ``ARRAY<INT64>``)."""
    type_, shown, _length = parse_type_spec(text)
    return type_, shown


def parse_type_spec(text: str) -> tuple[SpannerType, str, int | None]:
    """The type, its text as Spanner shows it, and its declared length (``None``: ``MAX`` or none)."""
    text = text.strip()
    array = re.fullmatch(r"ARRAY\s*<\s*(.+)\s*>", text, re.IGNORECASE)
    if array:
        element, shown, length = parse_type_spec(array.group(1))
        if element.code == "ARRAY":
            raise DdlError("ARRAY of ARRAY is not supported")
        return SpannerType("ARRAY", element), f"ARRAY<{shown}>", length
    scalar = re.fullmatch(r"([A-Za-z0-9]+)\s*(\(\s*(MAX|\d+)\s*\))?", text, re.IGNORECASE)
    if not scalar or scalar.group(1).upper() not in SCALAR_CODES:
        raise DdlError(f"unsupported column type {text!r}")
    code = scalar.group(1).upper()
    length = scalar.group(3)
    if length and code not in MAX_LENGTH:
        raise DdlError(f"column type {code} takes no length")
    declared = int(length) if length and length.isdigit() else None
    return SpannerType(code), f"{code}({length.upper()})" if length else code, declared


def parse_options(text: str) -> dict[str, str]:
    options = {}
    for item in split_top_level(text):
        match = re.fullmatch(r"([A-Za-z_]+)\s*=\s*(.+)", item.strip(), re.DOTALL)
        if not match:
            raise DdlError(f"malformed option {item!r}")
        options[match.group(1).lower()] = match.group(2).strip().strip("'\"")
    return options


def _column(text: str) -> ColumnDef:
    """A column definition: ``name type [NOT NULL] [OPTIONS (allow_commit_timestamp = …)]``."""
    match = re.fullmatch(_IDENT + r"\s+(.*)", text.strip(), re.DOTALL)
    if not match:
        raise DdlError(f"malformed column definition {text!r}")
    name, rest = match.group(1), match.group(2).strip()
    allow = False
    opt = re.search(r"\bOPTIONS\s*\((.*)\)\s*$", rest, re.IGNORECASE | re.DOTALL)
    if opt:
        allow = bool(_commit_timestamp_option(opt.group(1)))
        rest = rest[: opt.start()].strip()
    column = _typed_column(name, rest)
    column.allow_commit_timestamp = allow
    return column


def _typed_column(name: str, text: str) -> ColumnDef:
    """``type [NOT NULL]`` of column ``name``; a DEFAULT, generated or hidden column is refused."""
    unsupported = re.search(r"\b(DEFAULT|AS|HIDDEN|GENERATED)\b", text, re.IGNORECASE)
    if unsupported:
        raise DdlError(
            f"Unsupported by the emulator: column {name} uses {unsupported.group(1).upper()} "
            "(default, generated and hidden columns are not modelled)"
        )
    not_null = False
    nn = re.search(r"\bNOT\s+NULL\s*$", text, re.IGNORECASE)
    if nn:
        not_null = True
        text = text[: nn.start()].strip()
    type_, shown, length = parse_type_spec(text)
    return ColumnDef(name, type_, not_null, False, shown, length)


def _commit_timestamp_option(text: str) -> bool | None:
    """The value of a column's ``OPTIONS (allow_commit_timestamp = true | false | null)``; any other
    option is unknown, as Spanner's parser says."""
    value: bool | None = None
    for item in split_top_level(text):
        match = re.fullmatch(r"([A-Za-z_]+)\s*=\s*(.+)", item.strip(), re.DOTALL)
        if not match:
            raise DdlError(f"malformed option {item!r}")
        if match.group(1).lower() != "allow_commit_timestamp":
            raise DdlError(f"Option: {match.group(1)} is unknown.")
        literal = match.group(2).strip().lower()
        if literal not in ("true", "false", "null"):
            raise DdlError(f"allow_commit_timestamp takes true, false or null, not {match.group(2).strip()}")
        value = {"true": True, "false": False, "null": None}[literal]
    return value


def parse_duration(text: str) -> timedelta:
    match = re.fullmatch(r"(\d+)\s*([smhd])", text.strip().lower())
    if not match:
        raise DdlError(f"invalid retention_period {text!r}: use e.g. '36h' or '7d'")
    unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[match.group(2)]
    return timedelta(**{unit: int(match.group(1))})


def parse_statement(sql: str) -> Statement:
    """Parse one DDL statement."""
    text = sql.strip().rstrip(";").strip()
    flags = re.IGNORECASE | re.DOTALL
    match = re.fullmatch(
        r"CREATE\s+TABLE\s+" + _IDENT + r"\s*\((.*)\)\s*PRIMARY\s+KEY\s*\((.*?)\)(.*)", text, flags
    )
    if match:
        name, body, key_text = match.group(1), match.group(2), match.group(3)
        definitions = split_top_level(body)
        for part in definitions:
            if re.match(r"(CONSTRAINT|FOREIGN\s+KEY|CHECK)\b", part, re.IGNORECASE):
                raise DdlError(
                    f"Unsupported by the emulator: table {name} declares {' '.join(part.split())[:80]!r} "
                    "(foreign keys and CHECK constraints are not modelled)"
                )
        columns = [_column(part) for part in definitions]
        parts = [k.strip() for k in key_text.split(",") if k.strip()]
        key = [re.sub(r"\s+(ASC|DESC)$", "", k, flags=re.IGNORECASE).strip("`") for k in parts]
        desc = [bool(re.search(r"\sDESC$", k, flags=re.IGNORECASE)) for k in parts]
        names = {c.name for c in columns}
        if len(names) != len(columns):
            raise DdlError(f"table {name}: duplicate column name")
        for k in key:
            if k not in names:
                raise DdlError(f"table {name}: primary key column {k} is not defined")
        interleave = re.fullmatch(
            r"\s*(?:,\s*INTERLEAVE\s+IN\s+PARENT\s+"
            + _IDENT
            + r"(?:\s+ON\s+DELETE\s+(CASCADE|NO\s+ACTION))?)?\s*",
            match.group(4),
            flags,
        )
        if interleave is None:
            tail = " ".join(match.group(4).split())[:80]
            raise DdlError(
                f"Unsupported by the emulator: table {name} ends with {tail!r} "
                "(only INTERLEAVE IN PARENT is modelled)"
            )
        parent = interleave.group(1)
        on_delete = None
        if parent:
            on_delete = " ".join((interleave.group(2) or "NO ACTION").upper().split())
        return CreateTable(name, columns, key, desc, parent, on_delete)
    match = re.fullmatch(r"ALTER\s+TABLE\s+" + _IDENT + r"\s+(ADD|DROP|ALTER)\s+(.*)", text, flags)
    if match:
        return _alter_table(text, match.group(1), match.group(2).upper(), match.group(3).strip())
    match = re.fullmatch(
        r"ALTER\s+DATABASE\s+(`[^`]+`|[A-Za-z0-9_-]+)\s+SET\s+OPTIONS\s*\((.*)\)", text, flags
    )
    if match:
        return _alter_database(sql.strip(), match.group(1).strip("`"), match.group(2))
    match = re.fullmatch(
        r"CREATE\s+(UNIQUE\s+)?(NULL_FILTERED\s+)?INDEX\s+(IF\s+NOT\s+EXISTS\s+)?"
        + _IDENT
        + r"\s+ON\s+"
        + _IDENT
        + r"\s*\(([^()]*)\)(?:\s*STORING\s*\(([^()]*)\))?(?:\s*,\s*INTERLEAVE\s+IN\s+"
        + _IDENT
        + r")?",
        text,
        flags,
    )
    if match:
        return _create_index(match)
    match = re.fullmatch(r"DROP\s+INDEX\s+(IF\s+EXISTS\s+)?" + _IDENT, text, flags)
    if match:
        return DropIndex(match.group(2), bool(match.group(1)))
    match = re.fullmatch(r"DROP\s+TABLE\s+" + _IDENT, text, flags)
    if match:
        return DropTable(match.group(1))
    match = re.fullmatch(r"DROP\s+CHANGE\s+STREAM\s+" + _IDENT, text, flags)
    if match:
        return DropChangeStream(match.group(1))
    match = re.fullmatch(
        r"CREATE\s+CHANGE\s+STREAM\s+" + _IDENT + r"(?:\s+FOR\s+(.*?))?(?:\s+OPTIONS\s*\((.*)\))?",
        text,
        flags,
    )
    if match:
        return _change_stream(match.group(1), match.group(2), match.group(3))
    raise DdlError(f"unsupported DDL statement: {text[:80]!r}")


def _create_index(match: re.Match[str]) -> CreateIndex:
    parts = [p.strip() for p in match.group(6).split(",") if p.strip()]
    columns, desc = [], []
    for part in parts:
        key = re.fullmatch(_IDENT + r"(?:\s+(ASC|DESC))?", part, re.IGNORECASE)
        if not key:
            raise DdlError(f"index {match.group(4)}: malformed key column {part!r}")
        columns.append(key.group(1))
        desc.append((key.group(2) or "").upper() == "DESC")
    if not columns:
        raise DdlError(f"index {match.group(4)} has no key column")
    storing = [c.strip().strip("`") for c in (match.group(7) or "").split(",") if c.strip()]
    return CreateIndex(
        name=match.group(4),
        table=match.group(5),
        columns=columns,
        desc=desc,
        storing=storing,
        unique=bool(match.group(1)),
        null_filtered=bool(match.group(2)),
        parent=match.group(8),
        if_not_exists=bool(match.group(3)),
    )


#: Words after ``ADD`` / ``DROP`` that start another ALTER TABLE action than a column's.
_NOT_A_COLUMN = {"CONSTRAINT", "FOREIGN", "CHECK", "ROW", "SYNONYM"}


def _alter_table(sql: str, table: str, action: str, rest: str) -> Statement:
    """``ALTER TABLE t ADD [COLUMN] [IF NOT EXISTS] …``, ``DROP [COLUMN] c`` and ``ALTER [COLUMN] c …``."""
    flags = re.IGNORECASE | re.DOTALL
    keyword = re.match(r"COLUMN\s+", rest, flags)
    if keyword:
        rest = rest[keyword.end() :]
    elif rest.split(maxsplit=1)[0].strip("`").upper() in _NOT_A_COLUMN:
        raise DdlError(f"unsupported DDL statement: {sql[:80]!r}")
    if action == "ADD":
        exists = re.match(r"IF\s+NOT\s+EXISTS\s+", rest, flags)
        return AddColumn(table, _column(rest[exists.end() :] if exists else rest), bool(exists))
    if action == "DROP":
        match = re.fullmatch(_IDENT, rest)
        if not match:
            raise DdlError(f"Error parsing Spanner DDL statement: {sql} : expected a column name after DROP")
        return DropColumn(table, match.group(1))
    match = re.fullmatch(_IDENT + r"\s+(.*)", rest, flags)
    if not match:
        raise DdlError(f"Error parsing Spanner DDL statement: {sql} : expected a column and its definition")
    column, change = match.group(1), match.group(2).strip()
    options = re.fullmatch(r"SET\s+OPTIONS\s*\((.*)\)", change, flags)
    if options:
        try:
            allow = _commit_timestamp_option(options.group(1))
        except DdlError as exc:
            raise DdlError(f"Error parsing Spanner DDL statement: {sql} : {exc}") from exc
        return AlterColumnOptions(table, column, bool(allow))
    if re.fullmatch(r"DROP\s+DEFAULT", change, flags):
        return DropColumnDefault(table, column)
    if re.match(r"(SET|DROP)\b", change, flags):
        raise DdlError(
            f"Unsupported by the emulator: {sql[:120]} (column defaults and ON UPDATE are not modelled)"
        )
    if re.search(r"\bOPTIONS\b", change, flags):
        raise DdlError(
            f"Error parsing Spanner DDL statement: {sql} : ALTER COLUMN takes a type and NOT NULL; "
            "set options with ALTER COLUMN … SET OPTIONS"
        )
    if re.match(r"NOT\s+NULL\b", change, flags):
        raise DdlError(f"Error parsing Spanner DDL statement: {sql} : ALTER COLUMN needs the column's type")
    return AlterColumn(table, _typed_column(column, change))


def _change_stream(name: str, for_text: str | None, options_text: str | None) -> CreateChangeStream:
    scope: dict[str, list[str] | None] | None
    if for_text is None:
        scope = {}
    elif for_text.strip().upper() == "ALL":
        scope = None
    else:
        scope = {}
        for item in split_top_level(for_text):
            match = re.fullmatch(_IDENT + r"\s*(?:\((.*)\))?", item.strip(), re.DOTALL)
            if not match:
                raise DdlError(f"change stream {name}: malformed FOR clause {item!r}")
            cols = match.group(2)
            scope[match.group(1)] = (
                [c.strip().strip("`") for c in cols.split(",") if c.strip()] if cols is not None else None
            )
    options = parse_options(options_text) if options_text else {}
    retention = (
        parse_duration(options["retention_period"]) if "retention_period" in options else timedelta(days=1)
    )
    if not MIN_RETENTION <= retention <= MAX_RETENTION:
        raise DdlError(f"change stream {name}: retention_period must be between 1h and 30d")
    capture = options.get("value_capture_type", "OLD_AND_NEW_VALUES").upper()
    if capture not in VALUE_CAPTURE_TYPES:
        raise DdlError(f"change stream {name}: unsupported value_capture_type {capture}")
    return CreateChangeStream(name, scope, retention, capture, options)


def _alter_database(sql: str, name: str, options_text: str) -> AlterDatabase:
    """``ALTER DATABASE <name> SET OPTIONS (version_retention_period = '<duration>' | NULL)``."""
    retention: timedelta | None = None
    text: str | None = None
    for item in split_top_level(options_text):
        match = re.fullmatch(r"([A-Za-z_]+)\s*=\s*(.+)", item.strip(), re.DOTALL)
        if not match:
            raise DdlError(f"Error parsing Spanner DDL statement: {sql} : malformed option {item!r}")
        option, value = match.group(1).lower(), match.group(2).strip()
        if option != "version_retention_period":
            raise DdlError(
                f"Error parsing Spanner DDL statement: {sql} : Option: {match.group(1)} is unknown."
            )
        if value.upper() == "NULL":
            retention = text = None
            continue
        text = value.strip("'\"").strip()
        duration = re.fullmatch(r"(\d+)\s*([smhd])", text.lower())
        if not duration:
            raise DdlError(
                f"Invalid value for version_retention_period: {value}; use e.g. '1h', '36h' or '7d'"
            )
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[duration.group(2)]
        retention = timedelta(**{unit: int(duration.group(1))})
        if not DEFAULT_VERSION_RETENTION <= retention <= MAX_VERSION_RETENTION:
            raise DdlError(f"version_retention_period must be between 1h and 7d, got {value}")
    return AlterDatabase(name, retention, text)


def split_statements(text: str) -> list[tuple[int, str]]:
    """The statements of a DDL file, each with the line it starts on: separated by ``;``, with ``--``,
    ``#`` and ``/* … */`` comments left out (as ``gcloud spanner databases create --ddl-file`` reads it).

    Quoted strings and identifiers (``'…'``, ``"…"``, triple-quoted, `` `…` ``) are kept whole.
    """
    statements: list[tuple[int, str]] = []
    current: list[str] = []
    line = start_line = 1
    i, n = 0, len(text)

    def add(part: str) -> None:
        nonlocal start_line
        if not current and not part.strip():
            return  # whitespace between statements
        if not current:
            start_line = line
        current.append(part)

    while i < n:
        ch = text[i]
        if ch in "'\"`":
            quote = text[i : i + 3] if ch != "`" and text[i : i + 3] == ch * 3 else ch
            end = i + len(quote)
            while end < n and text[end : end + len(quote)] != quote:
                end += 2 if text[end] == "\\" else 1
            if end >= n:
                raise DdlError(f"unterminated quoted text starting on line {line}")
            end += len(quote)
            add(text[i:end])
            line += text.count("\n", i, end)
            i = end
        elif text.startswith("--", i) or ch == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise DdlError(f"unterminated /* comment starting on line {line}")
            line += text.count("\n", i, end)
            add(" ")
            i = end + 2
        elif ch == ";":
            statement = "".join(current).strip()
            if statement:
                statements.append((start_line, statement))
            current.clear()
            i += 1
        else:
            add(ch)
            line += ch == "\n"
            i += 1
    statement = "".join(current).strip()
    if statement:
        statements.append((start_line, statement))
    return statements
