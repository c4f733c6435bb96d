"""Golomb-Rice coded positions (fl_system.learning.golomb): hand-checked bit strings, edge cases,
random round trips, exact sizes, and malformed streams refused with the fault named."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fl_system.learning.golomb import (
    decode_positions,
    encode_positions,
    golomb_bits,
    golomb_position_bits,
    rice_parameter,
)

RNG = np.random.default_rng(11)


def bits_of(data: bytes) -> str:
    return "".join(f"{byte:08b}" for byte in data)


def test_rice_parameter_is_the_spec_b_star_at_least_zero() -> None:
    """b* = 1 + floor(log2(ln(phi - 1) / ln(1 - p))): ln(0.618) / ln(0.96) = 11.8 -> 1 + 3."""
    assert rice_parameter(1 / 25) == 4
    assert rice_parameter(1 / 50) == 5
    assert rice_parameter(1 / 100) == 6
    assert rice_parameter(0.25) == 1  # 1.67 -> 1 + 0
    assert rice_parameter(0.5) == 0  # 0.69 -> 1 - 1
    assert rice_parameter(0.9) == 0  # the formula's -2, clamped
    assert rice_parameter(1.0) == 0
    with pytest.raises(ValueError, match=r"kept fraction must be in \(0, 1\]"):
        rice_parameter(0.0)


def test_mean_bits_match_the_spec_table_and_unary_when_dense() -> None:
    """EFL spec 2.9: bits per non-zero (Golomb-coded position + 1 sign bit)."""
    for q, bits in ((1 / 25, 7.09), (1 / 100, 9.11), (1 / 400, 11.11)):
        assert round(golomb_position_bits(q) + 1, 2) == bits
    assert golomb_position_bits(1.0) == 1.0
    assert golomb_position_bits(0.9) == pytest.approx(1 / 0.9)  # unary: mean gap 1 / p


@pytest.mark.parametrize(
    "positions,n,bits",
    [
        # b = 1; gaps - 1 = 0, 4, 0, 8: remainders 0 0 0 0, quotients 0, 2, 0, 4 in unary
        ([0, 5, 6, 15], 16, "0000" + "0" + "110" + "0" + "11110" + "00"),
        # k = 1, last position: b = 6, gap - 1 = 99 = 1 * 64 + 35
        ([99], 100, "100011" + "10"),
        # n = 1 and k = n: b = 0, every gap 1: one zero each
        ([0], 1, "0" + "0000000"),
        ([0, 1, 2, 3, 4], 5, "00000" + "000"),
        # b = 0 at k / n = 1/2: gaps - 1 = 1, 1, 0 in unary alone
        ([1, 3, 4], 6, "10" + "10" + "0" + "000"),
        # huge gap: b = 18, 999998 = 3 * 2^18 + 213566
        ([0, 999_999], 1_000_000, "0" * 18 + f"{213566:018b}" + "0" + "1110" + "0000000"),
    ],
)
def test_exact_bit_strings(positions: list[int], n: int, bits: str) -> None:
    data = encode_positions(np.array(positions), n)
    assert bits_of(data) == bits
    assert decode_positions(data, n, len(positions)).tolist() == positions
    assert math.ceil(golomb_bits(np.array(positions), n) / 8) == len(data)


def test_no_positions_is_no_bytes() -> None:
    assert encode_positions(np.array([], dtype=np.int64), 10) == b""
    assert decode_positions(b"", 10, 0).tolist() == []
    assert golomb_bits(np.array([], dtype=np.int64), 10) == 0


def test_random_positions_round_trip_in_exactly_their_golomb_bits() -> None:
    for _ in range(200):
        n = int(RNG.integers(1, 5000))
        k = int(RNG.integers(1, n + 1))
        positions = np.sort(RNG.choice(n, size=k, replace=False))
        data = encode_positions(positions, n)
        assert len(data) == math.ceil(golomb_bits(positions, n) / 8)
        assert np.array_equal(decode_positions(data, n, k), positions)


@pytest.mark.parametrize("q", [1 / 25, 1 / 50, 1 / 100, 1 / 400])
def test_random_positions_take_about_the_analytic_bits(q: float) -> None:
    """Uniformly drawn positions have near-geometric gaps: within 2 % of spec 2.9's mean,
    plus at most 7 bits of padding."""
    n = 200_000
    k = math.floor(q * n)
    positions = np.sort(RNG.choice(n, size=k, replace=False))
    measured = 8 * len(encode_positions(positions, n))
    analytic = k * golomb_position_bits(k / n)
    assert abs(measured - analytic) < 0.02 * analytic + 8


@pytest.mark.parametrize(
    "data,n,k,problem",
    [
        (b"", 16, 4, "truncated: 0 bytes for 4 positions"),
        (bytes([0b00000110, 0b01111111]), 16, 4, "truncated: 3 of 4 gaps"),
        (bytes([0b00000110, 0b01111000, 0]), 16, 4, "has 3 bytes, its 4 gaps use 14 bits"),
        (bytes([0b00000110, 0b01111010]), 16, 4, "has 2 bytes, its 4 gaps use 14 bits"),
        (bytes([0b00000110, 0b01111000]), 15, 4, "reaches past a tensor of 15 entries"),
        (bytes([0b10100000]), 6, 1, "position 6 is past a tensor of 6"),  # b = 2: 10|10
        (bytes([0b11111111, 0]), 16, 1, "reaches past a tensor of 16 entries"),
        (bytes([0]), 10, 0, "1 position bytes where no position was kept"),
        (bytes([0]), 3, 4, "4 positions cannot be kept of 3 entries"),
    ],
)
def test_malformed_streams_are_refused(data: bytes, n: int, k: int, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        decode_positions(data, n, k)


def test_unsorted_or_out_of_range_positions_are_not_encoded() -> None:
    for positions in ([3, 1], [2, 2], [0, 10]):
        with pytest.raises(ValueError, match=r"strictly increasing in 0\.\.9"):
            encode_positions(np.array(positions), 10)
