"""The collapse in Spark's own operations (``merge.native``) against the reference collapse, on
random change histories, and the merge's return to the Arrow kernel for keys it marks."""

from __future__ import annotations

import json
import os
import random
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_cdc.core.collapse import collapse_window
from airflow_provider_cdc.core.contract.staged_rows import COMMIT_TIME
from airflow_provider_cdc.core.values import column_types_json, parse_column_types
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.staging import STAGED_CHANGE_SCHEMA
from tests.pipeline.spark.test_merge_job import END, EVENTS, START, mod, read_change_set

pyspark = pytest.importorskip("pyspark")
if int(pyspark.__version__.split(".")[0]) < 4:
    pytest.skip("the native collapse needs Spark 4", allow_module_level=True)

from airflow_provider_cdc.merge import native  # noqa: E402
from airflow_provider_cdc.merge import plan as merge_plan  # noqa: E402

WINDOW = Window(START, END)
#: Values Spark writes exactly as Python's ``json`` does (once read from any of these spellings).
SAFE_VALUES = [
    None, True, False, 0, -7, 10**15, "", "text", "é ünï 中文 😀", 'q"uote', "back\\slash",
    "line\nbreak\ttab", "\u2028", "\x01", [1, 2], ["a", None], [], {"b": 1, "a": [True]}, "NaN", "-0",
]
SAFE_FLOAT_TEXTS = ["1.5", "12.340", "0.000", "100.0", "1E2", "1e16", "1.5e-7", "0.00001", "-2.50", "0.1",
                    "123456.789", "9.99e15", "1e-4", "3.0e0", "-1.25E+3"]
#: Values Spark would write otherwise than Python (the merge leaves their keys to the kernel).
UNSAFE_TEXTS = ["0.30000000000000004", "-0.0", "12345678901234567890", '"\\u000b"', "[1.5, 2]",
                '"\\ud83d"']


@pytest.fixture(scope="module")
def spark() -> Any:
    from pyspark.sql import SparkSession

    from airflow_provider_cdc.merge.job import configure_session

    with pytest.MonkeyPatch.context() as patch:  # no environment left for the tests after these
        if "PYSPARK_PYTHON" not in os.environ:
            patch.setenv("PYSPARK_PYTHON", sys.executable)  # the kernel's workers need pyarrow
        session = (
            SparkSession.builder.master("local[2]").appName("native-collapse-tests")
            .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate()
        )
        yield configure_session(session)
        session.stop()


def image(rng: random.Random, columns: list[str], unsafe: bool) -> str:
    """An after image of some of ``columns`` (absent ones are not in it; NULL ones are), spelled as
    sources spell JSON: with or without spaces, numbers in several forms."""
    parts = []
    for column in columns:
        choice = rng.random()
        if unsafe and choice < 0.15:
            text = rng.choice(UNSAFE_TEXTS)
        elif choice < 0.4:
            text = rng.choice(SAFE_FLOAT_TEXTS)
        else:
            text = json.dumps(rng.choice(SAFE_VALUES), ensure_ascii=rng.random() < 0.5)
        parts.append(f'"{column}"{rng.choice([":", ": "])}{text}')
    return "{" + rng.choice([",", ", "]).join(parts) + "}"


def histories(seed: int, unsafe: bool = False, keys: int = 30, changes: int = 260) -> list[dict]:
    """Random per-key histories: valid ones and others (UPDATE after DELETE, INSERT over a row,
    re-inserts), partial and full images, NULL and absent columns, repeated (retried) changes."""
    rng = random.Random(seed)
    rows = []
    for number in range(changes):
        kind = rng.choice(["INSERT", "UPDATE", "UPDATE", "UPDATE", "DELETE"])
        columns = ["A", "B", "C"] if kind == "INSERT" else sorted(rng.sample("ABC", rng.randint(0, 3)))
        values = "{}" if kind == "DELETE" else image(rng, columns, unsafe)
        commit = START + timedelta(milliseconds=number // 3)
        table = rng.choice(["Events", "Tags"])
        rows.append(mod(commit, f"t{number}", table, kind, f"k{rng.randrange(keys)}", values,
                        index=number % 3, types=EVENTS))
    rows += [dict(row) for row in rng.sample(rows, changes // 10)]
    return rows


def collapsed_natively(spark: Any, rows: list[dict]) -> dict[tuple[str, str], dict]:
    """Each (table, key)'s row as the native collapse writes it, with its ``_needs_kernel`` mark."""
    staged = spark.createDataFrame(pa.Table.from_pylist(rows, schema=STAGED_CHANGE_SCHEMA))
    types = {row["table_name"]: column_types_json(parse_column_types(EVENTS)) for row in rows}
    frame = merge_plan._collapse_natively(staged, WINDOW, COMMIT_TIME, types, 3)
    return {(row["table"], row["_keys_json"]): row for row in frame.toArrow().to_pylist()}


def reference_rows(rows: list[dict]) -> dict[tuple[str, str], dict]:
    return {(table, row["_keys_json"]): row for table, table_rows in collapse_window(rows).items()
            for row in table_rows}


@pytest.mark.parametrize("seed", range(5))
def test_native_collapse_equals_the_reference_on_random_histories(spark: Any, seed: int) -> None:
    rows = histories(seed)
    got, expected = collapsed_natively(spark, rows), reference_rows(rows)
    assert got.keys() == expected.keys()
    for key, row in expected.items():
        produced = dict(got[key])
        assert produced.pop(native.NEEDS_KERNEL) is False, (key, row)
        produced.pop("table")
        assert produced == row, key


@pytest.mark.parametrize("seed", range(3))
def test_native_collapse_marks_only_keys_whose_images_it_cannot_write_alike(spark: Any, seed: int) -> None:
    rows = histories(100 + seed, unsafe=True)
    got, expected = collapsed_natively(spark, rows), reference_rows(rows)
    marked = {key for key, row in got.items() if row[native.NEEDS_KERNEL]}
    assert marked, "some merged image holds a value Spark writes otherwise"
    for key, row in expected.items():
        produced = dict(got[key])
        if produced.pop(native.NEEDS_KERNEL):
            continue
        produced.pop("table")
        assert produced == row, key
    # a key is marked only when the images of its last segment hold such a value
    unsafe = [text for text in UNSAFE_TEXTS]
    for table, key in marked:
        chain = [row for row in rows if (row["table_name"], row["keys_json"]) == (table, key)]
        assert any(text in row["after_json"] for row in chain for text in unsafe), (table, key)


def test_an_update_after_a_delete_is_a_full_image_of_its_columns(spark: Any) -> None:
    at = [START + n * timedelta(microseconds=1) for n in range(8)]
    rows = [
        mod(at[0], "t0", "Events", "DELETE", "k1", types=EVENTS),
        mod(at[1], "t1", "Events", "UPDATE", "k1", {"A": "1", "B": None}, types=EVENTS),
        mod(at[2], "t2", "Events", "UPDATE", "k1", {"C": 2.50}, types=EVENTS),
        mod(at[3], "t3", "Events", "UPDATE", "k2", {"A": "partial"}, types=EVENTS),
        mod(at[4], "t4", "Events", "INSERT", "k3", {"A": "x", "B": 1, "C": None}, types=EVENTS),
        mod(at[5], "t5", "Events", "DELETE", "k3", types=EVENTS),
        mod(at[6], "t6", "Events", "INSERT", "k3", {"A": "again", "B": 2, "C": 3}, types=EVENTS),
        mod(at[7], "t7", "Events", "UPDATE", "k3", {"B": 3}, types=EVENTS),
    ]
    got = collapsed_natively(spark, rows)
    assert {key[1]: (row["_CHANGE_TYPE"], row["_values_json"], row["_present_columns"], row["_full_image"])
            for key, row in got.items()} == {
        '{"Id":"k1"}': ("UPSERT", '{"A":"1","B":null,"C":2.5}', ["A", "B", "C"], True),
        '{"Id":"k2"}': ("UPSERT", '{"A": "partial"}', ["A"], False),
        '{"Id":"k3"}': ("UPSERT", '{"A":"again","B":3,"C":3}', ["A", "B", "C"], True),
    }
    assert not any(row[native.NEEDS_KERNEL] for row in got.values())


@pytest.mark.parametrize(
    "values", ["[1, 2]", "{oops", '{"A": NaN}', '{"A": 1, "A": 2}'],
)
def test_images_the_native_collapse_cannot_read_are_left_to_the_kernel(spark: Any, values: str) -> None:
    rows = [mod(START, "t1", "Events", "UPDATE", "k8", values, types=EVENTS),
            mod(START, "t2", "Events", "INSERT", "k9", {"A": "fine"}, types=EVENTS)]
    got = collapsed_natively(spark, rows)
    assert got[("Events", '{"Id":"k8"}')][native.NEEDS_KERNEL] is True
    assert got[("Events", '{"Id":"k9"}')][native.NEEDS_KERNEL] is False


def test_unknown_operations_are_left_to_the_kernel(spark: Any) -> None:
    rows = [mod(START, "t1", "Events", "MERGE", "k7", {"A": "x"}, types=EVENTS),
            mod(START + timedelta(microseconds=1), "t2", "Events", "UPDATE", "k7", {"A": "y"}, types=EVENTS)]
    assert collapsed_natively(spark, rows)[("Events", '{"Id":"k7"}')][native.NEEDS_KERNEL] is True


def test_python_floats_are_written_as_python_writes_them(spark: Any) -> None:
    from pyspark.sql import functions as F

    rng = random.Random(11)
    texts = [f"{rng.uniform(-1000, 1000):.{rng.randint(0, 6)}f}" for _ in range(200)]
    texts += [f"{rng.uniform(1, 10):.{rng.randint(0, 9)}f}e{rng.randint(-40, 40)}" for _ in range(200)]
    texts += [f"{rng.randint(1, 9)}E{rng.randint(-9, 25)}" for _ in range(100)]
    frame = spark.createDataFrame([(f'{{"v":{text}}}',) for text in texts], "image string")
    value = F.try_parse_json("image").try_cast("map<string,variant>")["v"]
    written = [row[0] for row in frame.select(native.python_json_value(value)).collect()]
    for text, spark_text in zip(texts, written, strict=True):
        if spark_text is not None:  # None: more than 15 digits (the kernel writes it)
            assert spark_text == json.dumps(json.loads(text)), text
    assert sum(text is None for text in written) < len(texts) // 50


def write_staging(folder: Path, rows: list[dict]) -> None:
    target = folder / "partition=p1" / "part-00000.parquet"
    target.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=STAGED_CHANGE_SCHEMA), target)


@pytest.mark.parametrize("unsafe", [False, True])
def test_the_merge_writes_the_reference_natively_or_through_the_kernel(
    spark: Any, tmp_path: Path, unsafe: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_provider_cdc.merge.files import HadoopFiles

    # (a lone surrogate is refused by the kernel too: no Arrow string holds it)
    rows = [row for row in histories(7, unsafe=unsafe)
            if START <= row["commit_timestamp"] < END and "\\ud83d" not in row["after_json"]]
    write_staging(tmp_path / "staging", rows)
    manifest = merge_plan.merge_staging(spark, WINDOW, str(tmp_path / "staging"), str(tmp_path / "changeset"),
                                        HadoopFiles(spark), collapse=merge_plan.NATIVE)
    expected = collapse_window(rows)
    assert read_change_set(tmp_path / "changeset") == {
        table: sorted(table_rows, key=lambda row: row["_keys_json"]) for table, table_rows in expected.items()
    }
    assert manifest["rows"] == sum(len(table_rows) for table_rows in expected.values())
    assert ("need the Arrow kernel" in capsys.readouterr().out) is unsafe
