"""The per-key collapse in Spark's own operations: no Python workers, no shuffle or sort of its own.

:func:`collapse_in_spark` takes a window's changes shuffled by key hash and sorted by key and
sequence number (the shuffle and sort every key-ordered merge needs). A window function gives each
change its predecessor (a repeated change, a retried read's, is dropped; a change opens the key's
last segment when it is an INSERT, the key's first, or follows a DELETE), and one sort-based
aggregation per key computes what :func:`airflow_provider_cdc.core.collapse.collapse_key` decides:
the newest change (sequence number, commit timestamp, operation, after image), where the last
segment begins, whether the chain holds an INSERT or DELETE (a full image), the checks (an unknown
operation, an image that is not a JSON object of known columns, a value Spark would write otherwise
than Python), and per column the newest present value with the sequence number it was present at
(a column set to NULL is present). A segment of one change passes its ``after_json`` through; a
longer one is the columns present in it, sorted, each value written as Python's ``json`` writes it.

Spark writes JSON values otherwise than Python in a few cases the JSON encoding rarely holds (a
float whose shortest form has more than 15 significant digits, an integer of 19 digits or more, a
negative zero, a control character other than ``\\b \\f \\n \\r \\t``, an unpaired escaped
surrogate). A key whose row could differ from the reference's, or that the reference refuses (an
image that is not a JSON object, an unknown operation, no key), is marked in :data:`NEEDS_KERNEL`;
the plan then merges the window with the Arrow kernel instead (:mod:`.kernels`), which writes the
reference's rows or names the problem.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from airflow_provider_cdc.core.contract.change_set import (
    CHANGE_SEQUENCE_NUMBER,
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    FULL_IMAGE,
    KEYS_JSON,
    PRESENT_COLUMNS,
    UPSERT,
    VALUES_JSON,
)
from airflow_provider_cdc.core.contract.staged_rows import DELETE, INSERT, OPERATIONS
from airflow_provider_cdc.merge.kernels import TABLE_PARTITION_COLUMN

#: True on a row the Arrow kernel must write (its image could differ from the reference's, or the
#: reference refuses the key's changes).
NEEDS_KERNEL = "_needs_kernel"
#: Significant digits of a float that Python writes as they were read (``sys.float_info.dig``).
EXACT_FLOAT_DIGITS = 15
#: A raw number that is a negative zero, and an escaped UTF-16 surrogate without its pair: read as
#: Python reads them, but not written back alike by Spark.
_UNSAFE_RAW = (
    r"-0(\.0*)?([eE][-+]?[0-9]+)?(?=[\s,\]}])"
    r"|\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F]"
)
#: Spark's escape of a control character whose hex digits Python writes in lower case.
_UPPER_CASE_ESCAPE = r"\\u00(0[BEF]|1[A-F])"
#: A column name Python's JSON writes as it is (no quote, backslash or control character).
_PLAIN_NAME = "^[^\"\\\\\\x00-\\x1f]*$"
_NUMBER = r"^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$"


def python_float(text: Any) -> Any:
    """The text Python's ``repr`` gives the float a numeric JSON text reads as (``1e+16``,
    ``0.0001``, ``12.0``); NULL where the text has more than :data:`EXACT_FLOAT_DIGITS`
    significant digits or is not a number."""
    from pyspark.sql import functions as F

    integer = F.regexp_extract(text, r"^-?([0-9]+)", 1)
    digits = F.concat(integer, F.regexp_extract(text, r"^-?[0-9]+\.([0-9]+)", 1))
    exponent = F.coalesce(F.regexp_extract(text, r"[eE]([-+]?[0-9]+)$", 1).try_cast("int"), F.lit(0))
    unpadded = F.regexp_replace(digits, "^0+", "")
    parts = F.struct(
        F.when(F.startswith(text, F.lit("-")), "-").otherwise("").alias("sign"),
        F.regexp_replace(unpadded, "0+$", "").alias("significant"),
        # the decimal exponent of the first significant digit
        (F.length(integer) - 1 - (F.length(digits) - F.length(unpadded)) + exponent).alias("power"),
        (text.isNotNull() & text.rlike(_NUMBER)).alias("number"),
    )

    def written(part: Any) -> Any:
        sign, significant, power = part["sign"], part["significant"], part["power"]
        width = F.length(significant)
        scientific = F.concat(
            sign, F.substr(significant, F.lit(1), F.lit(1)),
            F.when(width > 1, F.concat(F.lit("."), F.substr(significant, F.lit(2)))).otherwise(""),
            F.lit("e"), F.when(power < 0, "-").otherwise("+"),
            F.when(F.abs(power) < 10, "0").otherwise(""), F.abs(power).cast("string"),
        )
        fixed = F.concat(
            sign, F.rpad(F.substr(significant, F.lit(1), power + 1), power + 1, F.lit("0")), F.lit("."),
            F.coalesce(F.nullif(F.substr(significant, power + 2), F.lit("")), F.lit("0")),
        )
        small = F.concat(sign, F.lit("0."), F.repeat(F.lit("0"), -power - 1), significant)
        null = F.lit(None).cast("string")
        return (
            F.when(~part["number"], null)
            .when(significant == "", F.concat(sign, F.lit("0.0")))
            .when((width > EXACT_FLOAT_DIGITS) | (F.abs(power) > 300), null)
            .when((power >= 16) | (power < -4), scientific)
            .when(power >= 0, fixed)
            .otherwise(small)
        )

    # a one-element array binds the parts to a name, so that they are computed once
    return F.get(F.transform(F.array(parts), written), 0)


def python_json_value(value: Any) -> Any:
    """A variant's JSON text as Python's ``json`` writes the value it reads (compact, sorted
    object keys, non-ASCII as is); NULL where Spark's text could differ."""
    from pyspark.sql import functions as F

    def written(typed: Any) -> Any:
        kind, text = typed["kind"], typed["text"]
        null = F.lit(None).cast("string")
        decimal = kind.startswith("DECIMAL(")
        number = value.try_cast("double")
        # Python writes the shortest text that reads back as the float; when 15 digits read back,
        # no other text of at most 15 digits does, so those digits are Python's (only numbers
        # reach this branch, so only they are formatted)
        fifteen = F.format_string("%.14e", number)
        return (
            F.when(kind.isin("BIGINT", "INT", "SMALLINT", "TINYINT", "BOOLEAN", "VOID"), text)
            # a JSON integer is a BIGINT when it fits, so an unscaled DECIMAL that short was a float
            .when(decimal & kind.rlike(r"^DECIMAL\((19|[2-9][0-9]|1[0-9][0-9]),0\)$"), null)
            .when(decimal | kind.isin("DOUBLE", "FLOAT"),
                  python_float(F.when(fifteen.try_cast("double") == number, fifteen)))
            .when(kind.rlike("DECIMAL|DOUBLE|FLOAT") | text.rlike(_UPPER_CASE_ESCAPE), null)
            .otherwise(text)
        )

    typed = F.struct(F.schema_of_variant(value).alias("kind"), F.to_json(value).alias("text"))
    return F.get(F.transform(F.array(typed), written), 0)


def plain_column_names(columns: Sequence[str]) -> bool:
    """Whether Python's JSON writes every name of ``columns`` as it is (no escapes)."""
    return all(re.fullmatch(_PLAIN_NAME, name) for name in columns)


def collapse_in_spark(ordered: Any, clustering: str, columns: Sequence[str]) -> Any:
    """The change-set rows of ``ordered`` (the collapse's input columns and ``clustering``, a
    column its partitions are clustered by that is equal for equal keys, sorted by ``clustering``,
    key and sequence number): the table partition column, the collapsed columns, and
    :data:`NEEDS_KERNEL`.

    ``columns`` are the column names the images may carry (the tables' column types); a key
    whose last segment carries another is marked. The plan adds no shuffle or sort to
    ``ordered``'s: a window function finds each change's predecessor (a repeated change, and
    where the last segment begins) and a sort-based aggregation per key does the rest.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    names = sorted(set(columns))
    key = [clustering, "table_name", "keys_json"]
    sequence, operation = F.col("change_sequence_number"), F.col("operation")
    previous = F.lag(F.struct(sequence.alias("seq"), operation.alias("op"))).over(
        Window.partitionBy(*key).orderBy(sequence)
    )
    image = F.try_parse_json("after_json").try_cast("map<string,variant>")
    rows = ordered.select(*key, "operation", "after_json", "change_sequence_number", "commit_timestamp",
                          previous.alias("_previous"), image.alias("_image"))
    before = F.col("_previous")
    # a change staged twice (a retried read) counts once
    rows = rows.filter(before.isNull() | (before["seq"] != sequence))
    image = F.col("_image")
    present = [F.map_contains_key(image, name) for name in names]
    known = sum((flag.cast("int") for flag in present), F.lit(0))
    opens = (operation != DELETE) & ((operation == INSERT) | before.isNull() | (before["op"] == DELETE))
    after = F.col("after_json")
    unsafe = F.when(after.contains("-0") | after.contains("\\u"), after.rlike(_UNSAFE_RAW)).otherwise(False)
    aggregates = [
        F.max(sequence).alias("_newest"),
        F.max_by("commit_timestamp", sequence).alias("_commit"),
        F.max_by(operation, sequence).alias("_newest_operation"),
        F.max_by(after, sequence).alias("_newest_image"),
        F.max(F.when(opens, sequence)).alias("_start"),
        F.count_if(operation.isin(DELETE, INSERT)).alias("_resets"),
        F.count_if(~F.coalesce(operation.isin(*OPERATIONS), F.lit(False))).alias("_unknown"),
        F.max(F.when(image.isNull() | (F.size(image) != known), sequence)).alias("_unreadable"),
        F.max(F.when(unsafe, sequence)).alias("_unsafe"),
    ]
    for number, (name, here) in enumerate(zip(names, present, strict=True)):
        at = F.when(here, sequence)
        value = F.try_element_at(image, F.lit(name))
        aggregates += [F.max_by(value, at).alias(f"_value_{number}"), F.max(at).alias(f"_at_{number}")]
    grouped = rows.groupBy(*key).agg(*aggregates)

    start, newest = F.col("_start"), F.col("_newest")
    deleted = F.col("_newest_operation") == DELETE
    single = start == newest
    included = [F.coalesce(F.col(f"_at_{number}") >= start, F.lit(False)) for number in range(len(names))]
    # written once per value in a projection of their own (each is used twice below)
    merging = ~single & ~deleted
    grouped = grouped.select("*", *[
        F.when(here & merging, python_json_value(F.col(f"_value_{number}"))).alias(f"_token_{number}")
        for number, here in enumerate(included)
    ])
    tokens = [F.col(f"_token_{number}") for number in range(len(names))]
    merged_text = F.concat(
        F.lit("{"),
        F.concat_ws(",", *[F.when(here, F.concat(F.lit(f'"{name}":'), token))
                          for name, here, token in zip(names, included, tokens, strict=True)]),
        F.lit("}"),
    )
    unmerged = F.lit(False)
    for here, token in zip(included, tokens, strict=True):
        unmerged = unmerged | (here & token.isNull())
    in_segment = lambda column: F.coalesce(F.col(column) >= start, F.lit(False))  # noqa: E731
    bad_image = ~deleted & (in_segment("_unreadable") | (~single & (in_segment("_unsafe") | unmerged)))
    present_names = F.filter(
        F.array(*[F.when(here, F.lit(name)) for name, here in zip(names, included, strict=True)]),
        lambda name: name.isNotNull(),
    ) if names else F.array().cast("array<string>")
    return grouped.select(
        F.col("table_name").alias(TABLE_PARTITION_COLUMN),
        F.col("keys_json").alias(KEYS_JSON),
        F.when(deleted, "{}").when(single, F.col("_newest_image")).otherwise(merged_text).alias(VALUES_JSON),
        # nullable, as the change set declares every column (a key always has a newest change)
        F.when(newest.isNotNull(), F.when(deleted, F.array().cast("array<string>")).otherwise(present_names))
        .alias(PRESENT_COLUMNS),
        (deleted | (F.col("_resets") > 0)).alias(FULL_IMAGE),
        F.when(newest.isNotNull(), F.when(deleted, DELETE).otherwise(UPSERT)).alias(CHANGE_TYPE),
        F.col("_newest").alias(CHANGE_SEQUENCE_NUMBER),
        F.col("_commit").alias(COMMIT_TIMESTAMP),
        (F.col("keys_json").isNull() | (F.col("_unknown") > 0) | F.coalesce(bad_image, F.lit(True)))
        .alias(NEEDS_KERNEL),
    )
