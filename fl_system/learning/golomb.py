"""Golomb-Rice coding of the kept positions of a sparse tensor (STC; EFL spec 2.9).

Positions p_1 < ... < p_k of a tensor of n entries become gaps d_i = p_i - p_(i-1) >= 1
(p_0 = -1). With the parameter b, d - 1 is coded as its quotient (d - 1) >> b in unary (that
many ones, then a zero) and its low b bits: about b + 1 / (1 - (1 - p)^(2^b)) bits a
position for a kept fraction p, against ceil(log2 n) bits packed. b is spec 2.9's b* at the
tensor's own fraction p = k / n, which both sides know.

The stream holds the k remainders first (b bits each, most significant first), then the k
unary quotients, zero-padded to a whole byte: the bits of interleaved Rice codes, laid out
so that both halves are read with array operations, no loop over positions.
"""

from __future__ import annotations

import math

import numpy as np

GOLDEN = (1 + math.sqrt(5)) / 2


def rice_parameter(p: float) -> int:
    """b* = 1 + floor(log2(ln(phi - 1) / ln(1 - p))) for a kept fraction p in (0, 1] (STC),
    at least 0: unary alone once more than about half the entries are kept."""
    if not 0 < p <= 1:
        raise ValueError(f"kept fraction must be in (0, 1], got {p!r}")
    if p == 1:
        return 0
    return max(0, 1 + math.floor(math.log2(math.log(GOLDEN - 1) / math.log1p(-p))))


def golomb_position_bits(p: float) -> float:
    """Mean bits a position for gaps with kept fraction p (independent entries):
    b + 1 / (1 - (1 - p)^(2^b)), b = rice_parameter(p); 1 bit when every entry is kept."""
    b = rice_parameter(p)
    return b + 1 / (1 - (1 - p) ** (2**b))


def golomb_bits(positions: np.ndarray, n: int) -> int:
    """The exact bits `encode_positions` spends on these positions, before byte padding."""
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size == 0:
        return 0
    b = rice_parameter(positions.size / n)
    gaps = np.diff(positions, prepend=-1) - 1
    return int((gaps >> b).sum()) + positions.size * (1 + b)


def encode_positions(positions: np.ndarray, n: int) -> bytes:
    """Strictly increasing positions in 0..n-1, Golomb-Rice coded (see the module)."""
    positions = np.asarray(positions, dtype=np.int64)
    k = positions.size
    if k == 0:
        return b""
    gaps = np.diff(positions, prepend=-1) - 1
    if gaps.min() < 0 or positions[-1] >= n:
        raise ValueError(f"positions must be strictly increasing in 0..{n - 1}")
    b = rice_parameter(k / n)
    shifts = np.arange(b - 1, -1, -1, dtype=np.int64)
    remainders = (gaps[:, None] >> shifts) & 1
    quotients = gaps >> b
    unary = np.ones(int(quotients.sum()) + k, dtype=np.uint8)
    unary[np.cumsum(quotients + 1) - 1] = 0
    return np.packbits(np.concatenate([remainders.reshape(-1).astype(np.uint8), unary])).tobytes()


def decode_positions(data: bytes, n: int, k: int) -> np.ndarray:
    """The k positions `encode_positions` coded for a tensor of n entries.

    Raises ValueError naming the fault when `data` is not exactly such a stream: too short,
    trailing bytes or set padding bits, a position past n.
    """
    if k == 0:
        if data:
            raise ValueError(f"{len(data)} position bytes where no position was kept")
        return np.zeros(0, dtype=np.int64)
    if not 0 < k <= n:
        raise ValueError(f"{k} positions cannot be kept of {n} entries")
    b = rice_parameter(k / n)
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8))
    if bits.size < k * (b + 1):
        raise ValueError(f"position stream truncated: {len(data)} bytes for {k} positions")
    weights = np.left_shift(1, np.arange(b - 1, -1, -1, dtype=np.int64))
    remainders = bits[: k * b].reshape(k, b).astype(np.int64) @ weights
    unary = bits[k * b :]
    ends = np.flatnonzero(unary == 0)[:k]
    if ends.size < k:
        raise ValueError(f"position stream truncated: {ends.size} of {k} gaps")
    used = k * b + int(ends[-1]) + 1
    if len(data) != (used + 7) // 8 or bits[used:].any():
        raise ValueError(f"position stream has {len(data)} bytes, its {k} gaps use {used} bits")
    quotients = np.diff(ends, prepend=-1) - 1
    if int(quotients.sum()) > (n - k) >> b:  # also keeps the shift below from overflowing
        raise ValueError(f"position stream reaches past a tensor of {n} entries")
    positions = np.cumsum((quotients << b) + remainders + 1) - 1
    if positions[-1] >= n:
        raise ValueError(f"position {positions[-1]} is past a tensor of {n} entries")
    return positions
