"""Hostile or broken replies for tests and demonstrations (`clients.malicious`): chosen
partitions train as usual, then tamper with what they send, so that the server's guards
(reply screening, `aggregation.robust`) can be seen at work with every algorithm.

    nan, inf  the first floating-point layer filled with NaN / +inf
    shape     the first floating-point layer one row short
    dtype     every floating-point layer as float64 (the model's are float32)
    missing   the last layer left out
    huge      the model as trained, but a claim of HUGE_EXAMPLES examples
    scaled    the update multiplied: w_t + scale (w - w_t)
    oversized the model as trained and a PADDING layer of 5x the model's values + 2 MiB,
              beyond the server's reply size limit (aggregation.max_reply_ratio)
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

KINDS = ("nan", "inf", "shape", "dtype", "missing", "huge", "scaled", "oversized")
HUGE_EXAMPLES = 10**12
PADDING = "padding"  # the extra layer of an oversized reply
PADDING_FACTOR, PADDING_EXTRA = 5, 2**19  # its float32 values: 5 x the model's + 2 MiB


def tamper(
    kind: str,
    model: Mapping[str, np.ndarray],
    received: Mapping[str, np.ndarray],
    num_examples: int,
    *,
    scale: float,
) -> tuple[dict[str, np.ndarray], int]:
    """(layers, claimed example count) a malicious client of `kind` sends instead of its
    trained `model` and true `num_examples`; `received` is the model it started from."""
    if kind not in KINDS:
        raise ValueError(f"clients.malicious.kind must be one of {', '.join(KINDS)}, got {kind!r}")
    out = {name: w.copy() for name, w in model.items()}
    floating = [name for name, w in out.items() if np.issubdtype(w.dtype, np.floating)]
    first = floating[0] if floating else None
    if kind in ("nan", "inf") and first is not None:
        out[first].fill(np.nan if kind == "nan" else np.inf)
    elif kind == "shape" and first is not None:
        out[first] = out[first][:-1] if out[first].ndim else out[first].reshape(1)
    elif kind == "dtype":
        out.update({name: out[name].astype(np.float64) for name in floating})
    elif kind == "missing" and out:
        out.pop(next(reversed(out)))
    elif kind == "huge":
        num_examples = HUGE_EXAMPLES
    elif kind == "oversized":
        size = PADDING_FACTOR * sum(w.size for w in model.values()) + PADDING_EXTRA
        out[PADDING] = np.random.default_rng(0).standard_normal(size, dtype=np.float32)
    elif kind == "scaled":
        for name in floating:
            start = received[name].astype(np.float64)
            out[name] = (start + scale * (out[name].astype(np.float64) - start)).astype(
                model[name].dtype
            )
    return out, num_examples
