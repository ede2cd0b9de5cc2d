"""A parser for the GoogleSQL DDL the emulator accepts: tables, columns, change streams and database
options."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta

from .values import SCALAR_CODES, SpannerType


class DdlError(ValueError):
    """A DDL statement the emulator cannot accept (reported as INVALID_ARGUMENT)."""


@dataclass
class ColumnDef:
    name: str
    type: SpannerType
    not_null: bool = False
    allow_commit_timestamp: bool = False
    spanner_type: str = ""  # as INFORMATION_SCHEMA.COLUMNS.SPANNER_TYPE shows it: STRING(MAX), ARRAY<INT64>

    def __post_init__(self) -> None:
        if not self.spanner_type:
            self.spanner_type = str(self.type)


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


@dataclass
class DropTable:
    name: str


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


Statement = CreateTable | AddColumn | DropTable | CreateChangeStream | DropChangeStream | AlterDatabase

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
    text = text.strip()
    array = re.fullmatch(r"ARRAY\s*<\s*(.+)\s*>", text, re.IGNORECASE)
    if array:
        element, shown = parse_type_text(array.group(1))
        if element.code == "ARRAY":
            raise DdlError("ARRAY of ARRAY is not supported")
        return SpannerType("ARRAY", element), f"ARRAY<{shown}>"
    scalar = re.fullmatch(r"([A-Za-z0-9]+)\s*(\(\s*(MAX|\d+)\s*\))?", text, re.IGNORECASE)
    if not scalar or scalar.group(1).upper() not in SCALAR_CODES:
        raise DdlError(f"unsupported column type {text!r}")
    code = scalar.group(1).upper()
    length = scalar.group(3)
    return SpannerType(code), f"{code}({length.upper()})" if length else code


def parse_options(text: str) -> dict[str, str]:
    options = {}
    for item in split_top_level(text):
        match = re.fullmatch(r"([A-Za-z_]+)\s*=\s*(.+)", item.strip(), re.DOTALL)
        if not match:
            raise DdlError(f"malformed option {item!r}")
        options[match.group(1).lower()] = match.group(2).strip().strip("'\"")
    return options


def _column(text: str) -> ColumnDef:
    match = re.fullmatch(_IDENT + r"\s+(.*)", text.strip(), re.DOTALL)
    if not match:
        raise DdlError(f"malformed column definition {text!r}")
    name, rest = match.group(1), match.group(2).strip()
    options: dict[str, str] = {}
    opt = re.search(r"\bOPTIONS\s*\((.*)\)\s*$", rest, re.IGNORECASE | re.DOTALL)
    if opt:
        options = parse_options(opt.group(1))
        rest = rest[: opt.start()].strip()
    not_null = False
    nn = re.search(r"\bNOT\s+NULL\s*$", rest, re.IGNORECASE)
    if nn:
        not_null = True
        rest = rest[: nn.start()].strip()
    type_, shown = parse_type_text(rest)
    allow = options.get("allow_commit_timestamp", "false").lower() == "true"
    if allow and type_.code != "TIMESTAMP":
        raise DdlError(f"column {name}: allow_commit_timestamp needs a TIMESTAMP column")
    return ColumnDef(name, type_, not_null, allow, shown)


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
        columns = [
            _column(part) for part in split_top_level(body) if not part.upper().startswith("CONSTRAINT")
        ]
        parts = [k.strip() for k in key_text.split(",") if k.strip()]
        key = [re.sub(r"\s+(ASC|DESC)$", "", k, flags=re.IGNORECASE).strip("`") for k in parts]
        desc = [bool(re.search(r"\sDESC$", k, flags=re.IGNORECASE)) for k in parts]
        names = {c.name for c in columns}
        if len(names) != len(columns):
            raise DdlError(f"table {name}: duplicate column name")
        for k in key:
            if k not in names:
                raise DdlError(f"table {name}: primary key column {k} is not defined")
        interleave = re.search(
            r"INTERLEAVE\s+IN\s+PARENT\s+" + _IDENT + r"(?:\s+ON\s+DELETE\s+(CASCADE|NO\s+ACTION))?",
            match.group(4),
            flags,
        )
        parent = interleave.group(1) if interleave else None
        on_delete = None
        if interleave:
            on_delete = " ".join((interleave.group(2) or "NO ACTION").upper().split())
        return CreateTable(name, columns, key, desc, parent, on_delete)
    match = re.fullmatch(r"ALTER\s+TABLE\s+" + _IDENT + r"\s+ADD\s+COLUMN\s+(.*)", text, flags)
    if match:
        return AddColumn(match.group(1), _column(match.group(2)))
    match = re.fullmatch(
        r"ALTER\s+DATABASE\s+(`[^`]+`|[A-Za-z0-9_-]+)\s+SET\s+OPTIONS\s*\((.*)\)", text, flags
    )
    if match:
        return _alter_database(sql.strip(), match.group(1).strip("`"), match.group(2))
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
