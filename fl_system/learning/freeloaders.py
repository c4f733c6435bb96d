"""Freeloaders for experiments (TACO spec 1.6, 7 A8): clients that train nothing and reply
with a model that looks like work. Applied on the client, so the server sees only behaviour.

    global  the received global model back (a zero update)
    echo    the last global update as their own: w_t - (w_{t-1} - w_t), w_{t-1} the global
            model received the time before (zero update the first time)
    noise   w_t plus Gaussian noise with, per tensor, the root mean square of that update
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

KINDS = ("global", "echo", "noise")


def freeload(
    kind: str,
    received: Mapping[str, np.ndarray],
    previous: Mapping[str, np.ndarray] | None,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """The model a freeloader of `kind` replies with, given the global model it received and
    the one it received before (None the first time). Non-float layers come back as received."""
    if kind not in KINDS:
        raise ValueError(
            f"clients.freeloaders.kind must be one of {', '.join(KINDS)}, got {kind!r}"
        )
    out = {}
    for name, w in received.items():
        if kind == "global" or previous is None or not np.issubdtype(w.dtype, np.floating):
            out[name] = w.copy()
            continue
        last = previous[name].astype(np.float64) - w.astype(np.float64)  # u = w_{t-1} - w_t
        if kind == "echo":
            out[name] = (w - last).astype(w.dtype)
        else:
            scale = float(np.sqrt(np.mean(last * last))) if last.size else 0.0
            out[name] = (w + rng.normal(0.0, scale, size=w.shape)).astype(w.dtype)
    return out
