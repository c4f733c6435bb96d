"""Update codecs (learning.codecs) on exact vectors: kept entries, values, sizes, round trips,
error feedback, analytic bits (EFL spec 2.6, 2.9, 6.12, 7) and rejected encodings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fl_system.learning.codecs import (
    CodecError,
    Dense,
    HalfPrecision,
    Qsgd,
    SparseTernary,
    TopK,
    feedback_scale,
    kept_count,
    pack_uints,
    position_width,
    top_k,
    unpack_uints,
    with_feedback,
)
from fl_system.learning.golomb import encode_positions, golomb_bits, golomb_position_bits

RNG = np.random.default_rng(0)
X = np.array([0.5, -3.0, 0.0, 2.0, -2.0, 1.0, 0.25, -0.125], dtype=np.float32)


def rng() -> np.random.Generator:
    return np.random.default_rng(7)


def test_kept_count_is_floor_with_at_least_one() -> None:
    assert kept_count(1000, 0.01) == 10
    assert kept_count(1000, 0.0149) == 14
    assert kept_count(50, 0.01) == 1  # n*q < 1
    assert kept_count(8, 1.0) == 8
    assert kept_count(3, 0.9) == 2


def test_top_k_breaks_ties_towards_lower_positions() -> None:
    assert top_k(X, 1).tolist() == [1]
    assert top_k(X, 2).tolist() == [1, 3]  # |2.0| and |-2.0| tie: the lower position
    assert top_k(X, 3).tolist() == [1, 3, 4]
    assert top_k(np.ones(6), 4).tolist() == [0, 1, 2, 3]
    assert top_k(X, 20).tolist() == list(range(8))


def test_top_k_refuses_non_finite_updates() -> None:
    with pytest.raises(ValueError, match="NaN or inf"):
        top_k(np.array([1.0, np.nan]), 1)


def test_dense_is_the_identity() -> None:
    codec = Dense()
    data = codec.encode(X, rng())
    assert len(data) == 4 * X.size
    assert np.array_equal(codec.decode(data, X.size), X)


def test_fp16_halves_the_bytes() -> None:
    codec = HalfPrecision()
    data = codec.encode(X, rng())
    assert len(data) == 2 * X.size
    assert np.array_equal(codec.decode(data, X.size), X)  # these values are exact in fp16
    assert codec.decode(codec.encode(np.array([0.1], np.float32), rng()), 1)[0] == np.float16(0.1)


def test_top_k_keeps_exactly_k_values_and_their_positions() -> None:
    codec = TopK(q=0.375)  # k = 3 of 8
    data = codec.encode(X, rng())
    # 3 float32, then positions 1, 3, 4 at b = 1: remainders 1 1 0, quotients 0 0 0
    assert data[:12] == np.array([-3.0, 2.0, -2.0], np.float32).tobytes()
    assert data[12:] == bytes([0b110_000_00])
    assert codec.decode(data, X.size).tolist() == [0, -3.0, 0, 2.0, -2.0, 0, 0, 0]


def test_sparse_ternary_values_are_plus_minus_the_mean_kept_magnitude() -> None:
    codec = SparseTernary(q=0.375)
    data = codec.encode(X, rng())
    # mu, count, 3 sign bits (- + -), positions 1, 3, 4 as for top-k
    assert data[4:] == np.uint32(3).tobytes() + bytes([0b101_00000, 0b110_000_00])
    mu = np.float32(7.0 / 3)
    assert codec.decode(data, X.size).tolist() == [0, -mu, 0, mu, -mu, 0, 0, 0]


def test_sparse_ternary_with_q_one_still_ternarises() -> None:
    """Every entry kept: mu = mean |X| over all 8 (the zero counts), the zero stays zero."""
    decoded = SparseTernary(q=1.0).decode(SparseTernary(q=1.0).encode(X, rng()), X.size)
    mu = np.float32(8.875 / 8)
    assert decoded.tolist() == [mu, -mu, 0, mu, -mu, mu, mu, -mu]


def test_sparse_ternary_of_a_zero_tensor_is_zero() -> None:
    codec = SparseTernary(q=0.5)
    assert np.array_equal(codec.decode(codec.encode(np.zeros(5), rng()), 5), np.zeros(5))


def test_sparse_ternary_has_exactly_k_nonzeros_on_random_tensors() -> None:
    x = RNG.standard_normal(10_000).astype(np.float32)
    codec = SparseTernary(q=0.01)
    decoded = codec.decode(codec.encode(x, rng()), x.size)
    kept = np.flatnonzero(decoded)
    assert kept.size == 100
    assert np.array_equal(kept, np.sort(np.argsort(-np.abs(x))[:100]))
    assert np.isclose(np.abs(decoded[kept]).mean(), np.abs(x[kept]).mean(), rtol=1e-6)
    assert np.array_equal(np.sign(decoded[kept]), np.sign(x[kept]))


def test_qsgd_levels_and_sizes() -> None:
    x = np.array([3.0, -4.0, 0.0], dtype=np.float32)  # norm 5
    codec = Qsgd(levels=5)  # |x|/5*5 = 3, 4, 0: integral, so no rounding happens
    data = codec.encode(x, rng())
    assert codec.width == 4  # sign + 3 bits for levels 0..5
    assert len(data) == 4 + 2  # norm + 3 x 4 bits
    assert np.array_equal(codec.decode(data, 3), x)


def test_qsgd_is_unbiased() -> None:
    """Each decoded entry is within one level (norm / levels) of x; over N draws the mean is
    within 5 standard errors (std <= norm / (2 levels))."""
    x = RNG.standard_normal(20).astype(np.float32)
    codec, draws = Qsgd(levels=2), 20_000
    generator = np.random.default_rng(3)
    decoded = np.array([codec.decode(codec.encode(x, generator), x.size) for _ in range(draws)])
    step = np.linalg.norm(x) / 2
    assert np.all(np.abs(decoded - x) <= step * (1 + 1e-6))
    assert np.allclose(decoded.mean(axis=0), x, atol=5 * step / 2 / np.sqrt(draws))


@pytest.mark.parametrize(
    "codec", [Dense(), HalfPrecision(), TopK(q=0.1), SparseTernary(q=0.1), Qsgd(levels=4)]
)
def test_error_feedback_loses_nothing_over_rounds(codec: object) -> None:
    """Sum of the decoded messages + the last residual = sum of the inputs."""
    inputs = [RNG.standard_normal(300).astype(np.float32) for _ in range(12)]
    residual = np.zeros(300, dtype=np.float32)
    sent_total = np.zeros(300, dtype=np.float64)
    generator = np.random.default_rng(1)
    for x in inputs:
        _, sent, residual = with_feedback(codec, x, residual, generator)
        sent_total += sent
    assert np.allclose(sent_total + residual, np.sum(inputs, axis=0), atol=1e-4)


N_FEEDBACK = 5000
CONTRACTIONS = [  # (codec, delta): E|x - C(x)|^2 <= (1 - delta)|x|^2 under error feedback
    (Dense(), 1.0),
    (HalfPrecision(), 1.0 - 2.0**-22),  # relative rounding of at most 2^-11 per entry
    (TopK(q=0.01), 0.01),  # k / n
    (SparseTernary(q=0.01), 0.01),  # top-k, then mu: |x - ST(x)|^2 = |x|^2 - k mu^2
    (Qsgd(levels=16), 1 / (1 + math.sqrt(N_FEEDBACK) / 16)),  # 1 / (1 + omega)
]


@pytest.mark.parametrize(("codec", "delta"), CONTRACTIONS)
def test_error_feedback_residual_stays_bounded_over_a_thousand_messages(
    codec: object, delta: float
) -> None:
    """1,000 messages of N(0, 1) updates, n = 5,000: for a delta-contraction the residual's
    mean square settles at most at (1 - delta) n / delta, and never passes its root. QSGD
    (levels 16, omega = sqrt(n) / 16 = 4.4) is unbiased but no contraction: unscaled, its
    residual norm passed 6.9e5 within 100 messages; scaled by 1 / (1 + omega) it stays
    below 149."""
    generator = np.random.default_rng(3)
    residual = np.zeros(N_FEEDBACK, dtype=np.float32)
    largest = 0.0
    for _ in range(1000):
        x = generator.standard_normal(N_FEEDBACK).astype(np.float32)
        _, _, residual = with_feedback(codec, x, residual, generator)
        largest = max(largest, float(np.linalg.norm(residual)))
    assert largest <= math.sqrt((1 - delta) * N_FEEDBACK / delta) + 1e-6


def test_only_unbiased_codecs_are_scaled_under_feedback() -> None:
    """omega = min(n / s^2, sqrt(n) / s): 100 / 256 at n = 100, 16 / 4 = 4 at n = 256, s = 4."""
    assert Qsgd(levels=16).variance_bound(100) == 100 / 256
    assert feedback_scale(Qsgd(levels=4), 256) == 1 / 5
    for codec in (Dense(), HalfPrecision(), TopK(q=0.1), SparseTernary(q=0.1)):
        assert feedback_scale(codec, 256) == 1.0


def test_error_feedback_residual_is_exact_where_nothing_was_sent() -> None:
    _, sent, residual = with_feedback(SparseTernary(q=0.25), X, np.zeros(8, np.float32), rng())
    unsent = sent == 0
    assert np.array_equal(residual[unsent], X[unsent])
    assert np.array_equal(sent + residual, X)


def test_packing_round_trips_and_uses_the_promised_width() -> None:
    values = np.array([0, 1, 1023, 512, 7], dtype=np.uint64)
    data = pack_uints(values, 10)
    assert len(data) == 7  # 50 bits
    assert unpack_uints(data, 10, 5).tolist() == values.tolist()
    assert position_width(1) == 1
    assert position_width(1024) == 10
    assert position_width(1025) == 11


def test_analytic_bits() -> None:
    n = 10_000
    assert Dense().analytic_bits(n) == 320_000
    assert HalfPrecision().analytic_bits(n) == 160_000
    assert TopK(q=0.01).analytic_bits(n) == 100 * (32 + 14)
    assert SparseTernary(q=0.01).analytic_bits(n) == 32 + 100 * (1 + 14)
    assert SparseTernary(q=0.01).analytic_bits(n, golomb=True) == pytest.approx(
        32 + 100 * (1 + golomb_position_bits(0.01))
    )
    assert Qsgd(levels=4).analytic_bits(n) == 32 + n * 4


def test_qsgd_bytes_are_its_analytic_bits_rounded_up() -> None:
    for n in (1, 7, 100, 4097):
        data = Qsgd(levels=3).encode(RNG.standard_normal(n).astype(np.float32), rng())
        assert len(data) == math.ceil(Qsgd(levels=3).analytic_bits(n) / 8)


@pytest.mark.parametrize("codec", [TopK(q=0.05), SparseTernary(q=0.05)])
def test_sparse_bytes_are_the_golomb_bits_of_their_positions_plus_framing(codec: object) -> None:
    """Exactly: values (32 bits each, or mu and a sign bit each, with the ternary codec's
    32-bit count), the positions' Golomb-Rice bits, each part padded to a byte; and within
    2 % + 3 bytes of spec 2.9's analytic Golomb count on a large random tensor."""
    for n in (1, 7, 100, 4097, 100_000):
        x = RNG.standard_normal(n).astype(np.float32)
        data = codec.encode(x, rng())
        kept = top_k(x, kept_count(n, codec.q))
        positions = math.ceil(golomb_bits(kept, n) / 8)
        if isinstance(codec, TopK):
            assert len(data) == 4 * kept.size + positions
        else:
            assert len(data) == 8 + math.ceil(kept.size / 8) + positions
    framing = 32 if isinstance(codec, SparseTernary) else 0
    analytic = codec.analytic_bits(n, golomb=True) + framing
    assert abs(8 * len(data) - analytic) < 0.02 * analytic + 24


@pytest.mark.parametrize(
    "codec", [Dense(), HalfPrecision(), TopK(q=0.2), SparseTernary(q=0.2), Qsgd(levels=3)]
)
def test_truncated_encodings_are_rejected(codec: object) -> None:
    data = codec.encode(RNG.standard_normal(40).astype(np.float32), rng())
    with pytest.raises(CodecError, match=r"expected|position stream"):
        codec.decode(data[:-1], 40)


def test_out_of_range_positions_are_rejected() -> None:
    codec = TopK(q=0.25)  # n = 6 -> k = 1, b = 2: remainder 10, quotient 10 -> position 6
    data = np.float32(1.0).tobytes() + bytes([0b1010_0000])
    with pytest.raises(CodecError, match="position 6 is past a tensor of 6 entries"):
        codec.decode(data, 6)


def test_positions_with_trailing_bytes_are_rejected() -> None:
    codec = SparseTernary(q=0.5)  # n = 4 -> k = 2, b = 0
    header = np.float32(1.0).tobytes() + np.uint32(2).tobytes() + bytes(1)
    data = header + encode_positions(np.array([1, 2]), 4) + bytes(1)
    with pytest.raises(CodecError, match="position stream has 2 bytes, its 2 gaps use 3 bits"):
        codec.decode(data, 4)


def test_more_ternary_entries_than_k_are_rejected() -> None:
    data = np.float32(1.0).tobytes() + np.uint32(3).tobytes() + bytes(2)
    with pytest.raises(CodecError, match="3 ternary entries, more than k = 2"):
        SparseTernary(q=0.5).decode(data, 4)


def test_qsgd_levels_above_the_maximum_are_rejected() -> None:
    codec = Qsgd(levels=4)  # width 4: level field of 3 bits holds up to 7
    data = np.float32(1.0).tobytes() + pack_uints(np.array([7]), 4)
    with pytest.raises(CodecError, match="level is above 4"):
        codec.decode(data, 1)


@pytest.mark.parametrize("q", [0, -0.1, 1.5, True, "0.1"])
def test_bad_fractions_are_named(q: object) -> None:
    for codec in (TopK, SparseTernary):
        with pytest.raises(ValueError, match=r"q must be a fraction in \(0, 1\]"):
            codec(q=q)


@pytest.mark.parametrize("levels", [0, -1, 2.5, True])
def test_bad_levels_are_named(levels: object) -> None:
    with pytest.raises(ValueError, match="levels must be an integer >= 1"):
        Qsgd(levels=levels)
