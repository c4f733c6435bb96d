"""Update codecs: what one tensor of a model update becomes on the wire, and back.

Every codec turns a float32 tensor into bytes whose length is what its encoding promises,
and decodes them given the tensor's size (both sides know the model's shapes). Encodings are
compact: kept positions Golomb-Rice coded (`golomb`), signs as bits, one float per
tensor where the codec has a scale. A received encoding that does not fit (wrong length,
a position stream that is cut short or reaches past the tensor) raises `CodecError` naming
the problem.

`top_k` keeps exactly k = max(1, floor(q * n)) entries, ties broken towards lower positions.
`SparseTernary` is top-k followed by one magnitude per tensor (Sattler et al.'s STC; EFL
spec section 2.6). `with_feedback` adds error feedback to any codec: the part of the input
that was not sent is carried into the next message. `analytic_bits` gives the bit counts of
EFL spec section 2.9 (naive ceil(log2 n)-bit positions, and Golomb-coded gaps at the kept
fraction k / n the codecs send with) beside the measured bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from fl_system.learning.golomb import decode_positions, encode_positions, golomb_position_bits

FLOAT = np.dtype("<f4")


class CodecError(ValueError):
    """A received encoding that cannot be decoded."""


class Codec(Protocol):
    """One tensor to bytes and back; `rng` feeds codecs that round stochastically."""

    def encode(self, x: np.ndarray, rng: np.random.Generator) -> bytes: ...

    def decode(self, data: bytes, n: int) -> np.ndarray: ...

    def analytic_bits(self, n: int, *, golomb: bool = False) -> float: ...


@runtime_checkable
class Unbiased(Protocol):
    """A codec whose decode is unbiased, E C(x) = x, with E|C(x) - x|^2 <= omega(n) |x|^2."""

    def variance_bound(self, n: int) -> float: ...


# ----- pure functions ---------------------------------------------------------------------
def kept_count(n: int, q: float) -> int:
    """k = max(1, floor(q * n)) entries kept of n (all of them when n is smaller)."""
    return min(n, max(1, math.floor(q * n)))


def top_k(x: np.ndarray, k: int) -> np.ndarray:
    """Increasing positions of the k largest |x|; among equal magnitudes the lower positions."""
    magnitude = np.abs(np.asarray(x).reshape(-1))
    n = magnitude.size
    if not np.isfinite(magnitude).all():
        raise ValueError("the update holds NaN or inf: it cannot be compressed")
    if k >= n:
        return np.arange(n)
    threshold = np.partition(magnitude, n - k)[n - k]  # the k-th largest magnitude
    above = np.flatnonzero(magnitude > threshold)
    tied = np.flatnonzero(magnitude == threshold)[: k - above.size]
    return np.sort(np.concatenate([above, tied]))


def position_width(n: int) -> int:
    """Bits per position in a tensor of n entries: ceil(log2 n), at least 1."""
    return max(1, (n - 1).bit_length())


def pack_uints(values: np.ndarray, width: int) -> bytes:
    """Unsigned integers below 2**width, `width` bits each, most significant first."""
    shifts = np.arange(width - 1, -1, -1, dtype=np.uint64)
    bits = (np.asarray(values, dtype=np.uint64)[:, None] >> shifts) & np.uint64(1)
    return np.packbits(bits.astype(np.uint8).reshape(-1)).tobytes()


def unpack_uints(data: bytes, width: int, count: int) -> np.ndarray:
    """The `count` integers `pack_uints` wrote (`data` must be exactly that long)."""
    if len(data) != packed_size(count, width):
        raise CodecError(f"expected {packed_size(count, width)} bytes, got {len(data)}")
    raw = np.unpackbits(np.frombuffer(data, dtype=np.uint8))[: count * width]
    bits = raw.reshape(count, width).astype(np.uint64)
    return (bits << np.arange(width - 1, -1, -1, dtype=np.uint64)).sum(axis=1, dtype=np.uint64)


def packed_size(count: int, width: int) -> int:
    return (count * width + 7) // 8


def feedback_scale(codec: Codec, n: int) -> float:
    """The factor both ends multiply a decoded tensor of n entries by under error feedback.

    Error feedback keeps its residual bounded only for a contraction, E|x - C(x)|^2 <=
    (1 - delta)|x|^2 with delta > 0. Top-k, sparse ternary, dense and fp16 are contractions
    (factor 1). An unbiased codec of variance bound omega is not once omega > 1 (QSGD with
    sqrt(n) > levels): its residual grows without bound. Scaled by 1 / (1 + omega) it is a
    contraction with delta = 1 / (1 + omega) (Beznosikov, Horvath, Richtarik, Safaryan, "On
    Biased Compression for Distributed Learning", 2020, Lemma 1; Stich and Karimireddy, "The
    Error-Feedback Framework", 2020, use the same scaling).
    """
    return 1.0 / (1.0 + codec.variance_bound(n)) if isinstance(codec, Unbiased) else 1.0


def with_feedback(
    codec: Codec, x: np.ndarray, residual: np.ndarray | float, rng: np.random.Generator
) -> tuple[bytes, np.ndarray, np.ndarray]:
    """(encoding, decoded, new residual) of x plus the residual carried from earlier messages.

    The decoded tensor is scaled by `feedback_scale` (the receiver does the same). Over any
    number of messages, the decoded messages plus the last residual sum to the inputs (up to
    float32 rounding in the kept entries).
    """
    delta = (np.asarray(x, dtype=FLOAT) + residual).astype(FLOAT)
    data, sent = transmit(codec, delta, rng, scale=feedback_scale(codec, delta.size))
    return data, sent, delta - sent


def transmit(
    codec: Codec, x: np.ndarray, rng: np.random.Generator, *, scale: float = 1.0
) -> tuple[bytes, np.ndarray]:
    """(encoding, what the receiver decodes from it, times `scale`) of a float32 tensor."""
    x = np.asarray(x, dtype=FLOAT)
    data = codec.encode(x, rng)
    return data, codec.decode(data, x.size).reshape(x.shape) * scale


def _check_length(data: bytes, expected: int, what: str) -> None:
    if len(data) != expected:
        raise CodecError(f"{what}: expected {expected} bytes, got {len(data)}")


def read_positions(data: bytes, n: int, k: int) -> np.ndarray:
    """The k Golomb-Rice coded positions in `data` (the whole of it), in 0..n-1."""
    try:
        return decode_positions(data, n, k)
    except ValueError as err:
        raise CodecError(str(err)) from err


def _check_q(q: float) -> float:
    if isinstance(q, bool) or not isinstance(q, int | float) or not 0 < q <= 1:
        raise ValueError(f"q must be a fraction in (0, 1], got {q!r}")
    return float(q)


# ----- codecs (config builds them: conf/compression/*.yaml) -------------------------------
@dataclass(frozen=True)
class Dense:
    """No compression: float32 as is."""

    def encode(self, x: np.ndarray, rng: np.random.Generator) -> bytes:
        return np.asarray(x, dtype=FLOAT).reshape(-1).tobytes()

    def decode(self, data: bytes, n: int) -> np.ndarray:
        _check_length(data, 4 * n, "dense tensor")
        return np.frombuffer(data, dtype=FLOAT).copy()

    def analytic_bits(self, n: int, *, golomb: bool = False) -> float:
        return 32.0 * n


@dataclass(frozen=True)
class HalfPrecision:
    """float16: half the bytes; magnitudes above 65504 become inf."""

    def encode(self, x: np.ndarray, rng: np.random.Generator) -> bytes:
        return np.asarray(x, dtype=FLOAT).reshape(-1).astype("<f2").tobytes()

    def decode(self, data: bytes, n: int) -> np.ndarray:
        _check_length(data, 2 * n, "fp16 tensor")
        return np.frombuffer(data, dtype="<f2").astype(FLOAT)

    def analytic_bits(self, n: int, *, golomb: bool = False) -> float:
        return 16.0 * n


@dataclass(frozen=True)
class _Sparse:
    """A codec that keeps k = max(1, floor(q n)) entries of a tensor of n."""

    q: float

    def __post_init__(self) -> None:
        _check_q(self.q)

    def _kept_bits(self, n: int, per_entry: int, golomb: bool) -> float:
        k = kept_count(n, self.q)
        return k * (per_entry + (golomb_position_bits(k / n) if golomb else position_width(n)))


@dataclass(frozen=True)
class TopK(_Sparse):
    """The k largest magnitudes: their float32 values, then their positions."""

    def encode(self, x: np.ndarray, rng: np.random.Generator) -> bytes:
        flat = np.asarray(x, dtype=FLOAT).reshape(-1)
        kept = top_k(flat, kept_count(flat.size, self.q))
        return flat[kept].tobytes() + encode_positions(kept, flat.size)

    def decode(self, data: bytes, n: int) -> np.ndarray:
        k = kept_count(n, self.q)
        if len(data) < 4 * k:
            raise CodecError(f"top-k tensor (n={n}, k={k}): expected {4 * k}+ bytes")
        out = np.zeros(n, dtype=FLOAT)
        out[read_positions(data[4 * k :], n, k)] = np.frombuffer(data[: 4 * k], dtype=FLOAT)
        return out

    def analytic_bits(self, n: int, *, golomb: bool = False) -> float:
        return self._kept_bits(n, 32, golomb)


@dataclass(frozen=True)
class SparseTernary(_Sparse):
    """Top-k, then every kept entry becomes mu * sign, mu the mean kept magnitude: mu, the
    count of non-zero kept entries (a kept zero stays zero), their signs (one bit each,
    1 = negative) and their positions. q = 1 still ternarises: it is not the identity."""

    def encode(self, x: np.ndarray, rng: np.random.Generator) -> bytes:
        flat = np.asarray(x, dtype=FLOAT).reshape(-1)
        kept = top_k(flat, kept_count(flat.size, self.q))
        mu = np.abs(flat[kept]).mean(dtype=np.float64)
        kept = kept[flat[kept] != 0]
        header = np.array([mu], dtype=FLOAT).tobytes() + np.array([kept.size], "<u4").tobytes()
        signs = np.packbits(flat[kept] < 0).tobytes()
        return header + signs + encode_positions(kept, flat.size)

    def decode(self, data: bytes, n: int) -> np.ndarray:
        if len(data) < 8:
            raise CodecError(f"ternary tensor: expected at least 8 bytes, got {len(data)}")
        mu = np.frombuffer(data[:4], dtype=FLOAT)[0]
        count = int(np.frombuffer(data[4:8], dtype="<u4")[0])
        if not np.isfinite(mu) or mu < 0:
            raise CodecError(f"ternary magnitude {mu} is not a finite non-negative number")
        if count > kept_count(n, self.q):
            raise CodecError(f"{count} ternary entries, more than k = {kept_count(n, self.q)}")
        split = 8 + packed_size(count, 1)
        if len(data) < split:
            raise CodecError(f"ternary tensor (n={n}, {count} kept): expected {split}+ bytes")
        signs = np.unpackbits(np.frombuffer(data[8:split], dtype=np.uint8))[:count]
        out = np.zeros(n, dtype=FLOAT)
        out[read_positions(data[split:], n, count)] = np.where(signs == 1, -mu, mu)
        return out

    def analytic_bits(self, n: int, *, golomb: bool = False) -> float:
        """Spec 2.9: mu and, per kept entry, a position and a sign (the count is framing)."""
        return 32 + self._kept_bits(n, 1, golomb)


@dataclass(frozen=True)
class Qsgd:
    """QSGD: the tensor's L2 norm, then per entry a sign bit and a level l in 0..levels,
    rounded stochastically so that the decoded tensor norm * sign * l / levels is unbiased."""

    levels: int

    def __post_init__(self) -> None:
        if isinstance(self.levels, bool) or not isinstance(self.levels, int) or self.levels < 1:
            raise ValueError(f"levels must be an integer >= 1, got {self.levels!r}")

    @property
    def width(self) -> int:  # sign bit + level bits
        return 1 + self.levels.bit_length()

    def encode(self, x: np.ndarray, rng: np.random.Generator) -> bytes:
        flat = np.asarray(x, dtype=np.float64).reshape(-1)
        if not np.isfinite(flat).all():
            raise ValueError("the update holds NaN or inf: it cannot be compressed")
        norm = float(np.float32(np.linalg.norm(flat)))  # the norm that travels
        scaled = np.abs(flat) / norm * self.levels if norm > 0 else np.zeros_like(flat)
        lower = np.floor(scaled)
        level = np.minimum(lower + (rng.random(flat.size) < scaled - lower), self.levels)
        code = (flat < 0).astype(np.uint64) << np.uint64(self.width - 1) | level.astype(np.uint64)
        return np.array([norm], dtype=FLOAT).tobytes() + pack_uints(code, self.width)

    def decode(self, data: bytes, n: int) -> np.ndarray:
        _check_length(data, 4 + packed_size(n, self.width), f"QSGD tensor (n={n})")
        norm = np.frombuffer(data[:4], dtype=FLOAT)[0]
        if not np.isfinite(norm) or norm < 0:
            raise CodecError(f"QSGD norm {norm} is not a finite non-negative number")
        code = unpack_uints(data[4:], self.width, n)
        level = code & np.uint64((1 << (self.width - 1)) - 1)
        if np.any(level > self.levels):
            raise CodecError(f"a QSGD level is above {self.levels}")
        sign = np.where(code >> np.uint64(self.width - 1), -1.0, 1.0)
        return (norm * sign * level / self.levels).astype(FLOAT)

    def analytic_bits(self, n: int, *, golomb: bool = False) -> float:
        return 32.0 + n * self.width

    def variance_bound(self, n: int) -> float:
        """omega = min(n / s^2, sqrt(n) / s), s the levels (Alistarh et al., QSGD, 2017,
        Lemma 3.1)."""
        return min(n / self.levels**2, math.sqrt(n) / self.levels)
