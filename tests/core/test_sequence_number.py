"""Change sequence numbers: BigQuery's ``_CHANGE_SEQUENCE_NUMBER`` format and the Spanner mapping."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_cdc.core.sequence_number import (
    ChangeSequenceNumber,
    InvalidSequenceNumberError,
    fingerprint64,
    sortable_sequence_number,
)
from airflow_provider_cdc.sources.spanner.sequence_numbers import spanner_change_sequence_number

parse = ChangeSequenceNumber.parse
UINT64 = st.integers(min_value=0, max_value=2**64 - 1)
SECTIONS = st.lists(UINT64, min_size=1, max_size=4).map(tuple)


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("77", "7B"),  # 119 < 123
        ("FFF/B", "FFF/ABC"),  # 4095/11 < 4095/2748
        ("BA/FFFFFFFF", "ABC"),  # 186/4294967295 < 2748
        ("ABC", "FFF/ABC"),  # 2748 < 4095/2748
    ],
)
def test_the_four_documented_comparisons(older: str, newer: str) -> None:
    assert parse(newer) > parse(older)
    assert parse(older) < parse(newer)
    assert parse(newer).sortable() > parse(older).sortable()
    assert max([parse(older), parse(newer)]) == parse(newer)


def test_letters_of_either_case_and_leading_zeros_mean_the_same_number() -> None:
    assert parse("fff/abc") == parse("FFF/ABC") == parse("0FFF/000abc")
    assert str(parse("0fff/00abc")) == "FFF/ABC"
    assert parse("0fff/00abc").sortable() == "0000000000000FFF/0000000000000ABC"


def test_range_limits_are_accepted() -> None:
    assert parse("0/0/0/0").sections == (0, 0, 0, 0)
    top = "/".join(["FFFFFFFFFFFFFFFF"] * 4)
    assert parse(top).sections == (2**64 - 1,) * 4
    assert parse(top).sortable() == top


def test_a_prefix_sorts_before_its_extensions_in_both_forms() -> None:
    assert parse("ABC") < parse("ABC/0") < parse("ABC/0/0")
    assert parse("ABC").sortable() < parse("ABC/0").sortable() < parse("ABC/0/0").sortable()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "section 1 is empty"),
        ("A//B", "section 2 is empty"),
        ("/A", "section 1 is empty"),
        ("A/", "section 2 is empty"),
        ("12G4", "non-hex character 'G'"),
        ("0x1F", "non-hex character 'x'"),
        (" 1F", "non-hex character ' '"),
        ("1F/-2", "non-hex character '-'"),
        ("\uff11", "non-hex character"),  # a full-width digit is not a hex digit
        ("1/2/3/4/5", "5 sections; at most 4"),
        ("1" * 17, "17 digits; at most 16"),
        ("1/" + "F" * 17, "section 2 has 17 digits"),
    ],
)
def test_malformed_text_is_refused_with_the_reason(text: str, problem: str) -> None:
    with pytest.raises(InvalidSequenceNumberError, match=problem.replace("(", r"\(")):
        parse(text)


@pytest.mark.parametrize("value", [None, 123, b"7B", ["7B"]])
def test_non_text_is_refused(value: object) -> None:
    with pytest.raises(InvalidSequenceNumberError, match="must be text"):
        parse(value)  # type: ignore[arg-type]


def test_the_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse("nope")


@pytest.mark.parametrize("sections", [(), (1, 2, 3, 4, 5), (-1,), (2**64,), (1.0,), (True,)])
def test_sections_out_of_range_are_refused(sections: tuple) -> None:
    with pytest.raises(InvalidSequenceNumberError):
        ChangeSequenceNumber(sections)


@given(SECTIONS, SECTIONS)
def test_order_is_section_by_section_unsigned(left: tuple[int, ...], right: tuple[int, ...]) -> None:
    a, b = ChangeSequenceNumber(left), ChangeSequenceNumber(right)
    assert (a < b) == (left < right)
    assert (a == b) == (left == right)
    # The stored form sorts as plain text exactly like the numbers do.
    assert (a.sortable() < b.sortable()) == (left < right)
    assert (a.sortable() == b.sortable()) == (left == right)


@given(SECTIONS, st.randoms())
def test_text_round_trips_in_any_letter_case(sections: tuple[int, ...], random) -> None:
    number = ChangeSequenceNumber(sections)
    text = "".join(c.lower() if random.random() < 0.5 else c for c in str(number))
    assert parse(text) == number
    assert parse(number.sortable()) == number
    assert sortable_sequence_number(text) == number.sortable()
    assert len(number.sortable()) == 16 * len(sections) + len(sections) - 1


def test_fingerprint_is_the_first_eight_bytes_of_blake2b() -> None:
    expected = int.from_bytes(hashlib.blake2b(b"6329047911", digest_size=8).digest(), "big")
    assert fingerprint64("6329047911") == expected
    assert fingerprint64("6329047911") != fingerprint64("6329047912")


def test_spanner_sequence_number_has_four_fixed_width_sections() -> None:
    text = spanner_change_sequence_number(1_664_281_800_123_456, "6329047911", "00000001", 3)
    sections = text.split("/")
    assert [len(section) for section in sections] == [16, 16, 16, 16]
    assert parse(text).sections == (1_664_281_800_123_456, fingerprint64("6329047911"), 1, 3)
    assert text == text.upper()


@given(
    st.tuples(UINT64, st.text(min_size=1, max_size=12), st.integers(0, 10**12), st.integers(0, 2**31)),
    st.tuples(UINT64, st.text(min_size=1, max_size=12), st.integers(0, 10**12), st.integers(0, 2**31)),
)
def test_spanner_sequence_numbers_sort_in_commit_order(left: tuple, right: tuple) -> None:
    def order(mod: tuple) -> tuple[int, int, int, int]:
        micros, transaction, sequence, index = mod
        return micros, fingerprint64(transaction), sequence, index

    a = spanner_change_sequence_number(left[0], left[1], str(left[2]).zfill(8), left[3])
    b = spanner_change_sequence_number(right[0], right[1], str(right[2]).zfill(8), right[3])
    assert (a < b) == (order(left) < order(right))
    assert (a == b) == (order(left) == order(right))


def test_later_commits_and_later_records_of_one_transaction_sort_later() -> None:
    first = spanner_change_sequence_number(1000, "tx", "00000000", 0)
    second_mod = spanner_change_sequence_number(1000, "tx", "00000000", 1)
    second_record = spanner_change_sequence_number(1000, "tx", "00000002", 0)
    later_commit = spanner_change_sequence_number(1001, "aaa", "00000000", 0)
    assert first < second_mod < second_record < later_commit


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ((-1, "tx", "0", 0), "commit_micros"),
        ((2**64, "tx", "0", 0), "commit_micros"),
        ((1.5, "tx", "0", 0), "commit_micros"),
        ((True, "tx", "0", 0), "commit_micros"),
        ((1, "", "0", 0), "server_transaction_id"),
        ((1, None, "0", 0), "server_transaction_id"),
        ((1, "tx", "", 0), "record_sequence"),
        ((1, "tx", "12a", 0), "record_sequence"),
        ((1, "tx", "-1", 0), "record_sequence"),
        ((1, "tx", " 1", 0), "record_sequence"),
        ((1, "tx", "\u0661\u0662", 0), "record_sequence"),  # Arabic-Indic digits
        ((1, "tx", 12, 0), "record_sequence"),
        ((1, "tx", "9" * 21, 0), "does not fit in 64 bits"),
        ((1, "tx", "0", -1), "mod_index"),
        ((1, "tx", "0", "0"), "mod_index"),
    ],
)
def test_spanner_sequence_number_refuses_bad_fields(arguments: tuple, problem: str) -> None:
    with pytest.raises(InvalidSequenceNumberError, match=problem):
        spanner_change_sequence_number(*arguments)
