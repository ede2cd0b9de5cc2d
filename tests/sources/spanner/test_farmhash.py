"""FarmHash ``Fingerprint64`` equals Spanner's ``FARM_FINGERPRINT``: the values below are what Google's
Cloud Spanner emulator answered for the same text, over every length class of the algorithm (0-3, 4-7,
8-16, 17-32, 33-64 bytes, and the 64-byte loop with each tail)."""

from __future__ import annotations

import pytest

from airflow_provider_cdc.sources.spanner.farmhash import farm_fingerprint, fingerprint64

TEXT = "".join(chr(33 + (i * 7) % 90) for i in range(300))
BY_LENGTH = [
    (0, -7286425919675154353),
    (1, -1459307080660855630),
    (2, -3245377973713539183),
    (3, 1502982227347875767),
    (4, -7424819112018868904),
    (5, -3921774311996671860),
    (7, -1238588302023414526),
    (8, -4618267448730141395),
    (9, -7719392999312537872),
    (15, -6468016915773840548),
    (16, -9180809909646999030),
    (17, 7191860352405642139),
    (31, 4409253577682726317),
    (32, 4804526956740888522),
    (33, 5848330678568374769),
    (63, 2720222154143330047),
    (64, -1685061677210618414),
    (65, -7192304837148531078),
    (95, -8732899822723311738),
    (96, -2810767695962826015),
    (97, -7389613911210308726),
    (127, -2728430008850768694),
    (128, 6164712265338775278),
    (129, 1138458046925123604),
    (191, 5909892612803075048),
    (192, -823926574748876424),
    (193, -8527402282545683487),
    (255, 7875589329485567805),
    (256, 6758326557201487175),
    (300, -4388354149994854456),
]


@pytest.mark.parametrize(("length", "expected"), BY_LENGTH, ids=[str(n) for n, _ in BY_LENGTH])
def test_fingerprint_of_each_length_is_spanners(length: int, expected: int) -> None:
    assert farm_fingerprint(TEXT[:length]) == expected


def test_text_is_fingerprinted_as_utf8_and_bytes_as_they_are() -> None:
    assert farm_fingerprint("hello") == farm_fingerprint(b"hello") == -5436999610281751320
    assert farm_fingerprint("日本") == 5676833963740711883
    assert farm_fingerprint("\U0001f600") == 7642301103428097395
    assert farm_fingerprint('say "hi"') == 525747818713835970


def test_the_signed_value_is_the_unsigned_fingerprint_in_twos_complement() -> None:
    unsigned = fingerprint64(b"")
    assert unsigned == 0x9AE16A3B2F90404F and farm_fingerprint(b"") == unsigned - 2**64
