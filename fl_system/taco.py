"""TACO's math as plain functions on arrays (TACO spec 1.3, 1.4, 7 A1, A5, A8).

Uploads are Delta_i = w_t - w_{i,K} (start minus end, so they point downhill), flattened over
the trainable layers. From one round's uploads the server computes each client's tailored
coefficient

    alpha_i = (1 - |Delta_i| / sum_j |Delta_j|) * max(cos(Delta_i, mean_j Delta_j), 0)

(the mean is unweighted, over this round's active clients, the client itself included),
averages the uploads with weights alpha_i / sum alpha (uniform if every alpha is 0:
`fl_system.aggregation.normalized_or_uniform`), and gives
a strike to every client with alpha_i >= kappa: lam strikes expel it. Next round the client
shifts every local step by the constant gamma (1 - alpha_i) Delta_t, Delta_t the last global
update in per-step units.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fl_system.aggregation import cosines_to_mean, relative_norms


def tailored_coefficients(uploads: np.ndarray) -> np.ndarray:
    """alpha_i for each row of `uploads` (clients x parameters), computed in float64.

    Scale-free: uploads multiplied by any positive factor get the same alpha. A zero
    upload, or a zero mean, has cosine 0 and so alpha 0 (no NaN); with one client the
    magnitude factor 1 - |Delta| / |Delta| is 0.
    """
    cos = cosines_to_mean(uploads)
    norms = relative_norms(uploads)
    total = norms.sum()
    magnitude = 1.0 - norms / total if total > 0 else np.ones_like(norms)
    return magnitude * np.maximum(cos, 0.0)


def correction_per_step(
    last_update: np.ndarray,
    *,
    alpha: float,
    gamma: float,
    local_steps: int,
    delta_scale: float,
) -> np.ndarray:
    """The constant weight shift lr gamma (1 - alpha) delta_scale Delta_t of every local step.

    `last_update` is u_t = w_{t-1} - w_t in model units; Delta_t = u_t / (K lr), so the lr
    cancels: the shift is gamma (1 - alpha) delta_scale u_t / K, and a round of K steps moves
    the weights by gamma (1 - alpha) delta_scale u_t in all. delta_scale = 1 is the paper read
    literally (a negligible correction at gamma = 1/K), delta_scale = K the reconstructed
    reading (a per-client heavy-ball momentum 1 - alpha at gamma = 1/K; spec A1).
    """
    if local_steps < 1:
        raise ValueError(f"taco needs local_steps >= 1, got {local_steps}")
    return np.asarray(last_update) * (gamma * (1.0 - alpha) * delta_scale / local_steps)


def record_strikes(
    alpha: Mapping[int, float], strikes: Mapping[int, int], *, kappa: float, lam: int
) -> tuple[dict[int, int], list[int]]:
    """(strikes after this round, clients reaching lam strikes now): a strike for every
    alpha_i >= kappa, counted cumulatively, not consecutively (spec A8)."""
    updated = dict(strikes)
    expelled = []
    for pid, a in alpha.items():
        before = updated.get(pid, 0)
        updated[pid] = before + (a >= kappa)
        if updated[pid] >= lam > before:
            expelled.append(pid)
    return updated, sorted(expelled)
