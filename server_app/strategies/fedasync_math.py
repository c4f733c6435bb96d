"""FedAsync's server step (Xie, Koyejo and Gupta 2019, Algorithm 1) on plain arrays.

Every update is a step: the client's model y, trained from the server's version tau, is mixed
into the current model x with alpha_t = alpha * s(t - tau):

    x+ = (1 - alpha_t) x + alpha_t y

(the staleness function s: `fl_system.learning.staleness`). alpha_t = 1 takes the client's
model as it is; alpha_t = 0 leaves x unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def fedasync_step(
    current: Sequence[np.ndarray], model: Sequence[np.ndarray], alpha_t: float
) -> list[np.ndarray]:
    """(1 - alpha_t) x + alpha_t y, layer by layer, in float64, cast back to x's dtype."""
    if not 0.0 <= alpha_t <= 1.0:
        raise ValueError(f"the mixing weight alpha_t must be in [0, 1], got {alpha_t}")
    if len(current) != len(model):
        raise ValueError(f"the update has {len(model)} layers, the model {len(current)}")
    out: list[np.ndarray] = []
    for x, y in zip(current, model, strict=True):
        if not np.issubdtype(x.dtype, np.floating):
            out.append(x.copy())  # counters (BatchNorm's batches seen) are not mixed
            continue
        mixed = (1.0 - alpha_t) * x.astype(np.float64) + alpha_t * y.astype(np.float64)
        out.append(mixed.astype(x.dtype))
    return out
