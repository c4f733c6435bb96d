"""TACO's math as plain functions on arrays (TACO spec 1.3, 1.4, 7 A1, A5, A8).

Uploads are Delta_i = w_t - w_{i,K} (start minus end, so they point downhill), flattened over
the trainable layers. From one round's uploads the server computes each client's tailored
coefficient

    alpha_i = (1 - |Delta_i| / sum_j |Delta_j|) * max(cos(Delta_i, mean_j Delta_j), 0)

(the mean is unweighted, over this round's active clients, the client itself included),
averages the uploads with weights alpha_i / sum alpha (uniform if every alpha is 0:
`fl_system.learning.aggregation.normalized_or_uniform`), and gives
a strike to every client with alpha_i >= kappa: lam strikes expel it. Next round the client
shifts every local step by the constant gamma (1 - alpha_i) Delta_t, Delta_t the last global
update in per-step units.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fl_system.learning.aggregation import cosines_to_mean, relative_norms

# TACO: the last global update u = w_{t-1} - w_t (down, ArrayRecord by layer name) and this
# client's tailored coefficient alpha_i (config, down), which sets its correction 1 - alpha_i.
TACO_LAST_UPDATE = "taco-u"
TACO_ALPHA = "taco-alpha"


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


def correction_constants(
    local_steps: int | None, gamma: float | None, delta_scale: float | None
) -> tuple[int, float, float]:
    """(K, gamma, delta_scale) with the defaults resolved (1 / K and K); a bad value is named."""
    if local_steps is None:
        raise ValueError(
            "taco needs train.local_steps (K, the local steps its correction is scaled by), "
            "e.g. train.local_steps=100"
        )
    resolved_gamma = 1.0 / local_steps if gamma is None else gamma
    if isinstance(resolved_gamma, bool) or not isinstance(resolved_gamma, int | float):
        raise ValueError(f"algorithm.gamma must be null (1 / K) or a number, got {gamma!r}")
    if resolved_gamma < 0:
        raise ValueError(f"algorithm.gamma must be >= 0, got {gamma!r}")
    resolved_scale = float(local_steps if delta_scale is None else delta_scale)
    if not resolved_scale > 0:
        raise ValueError(
            f"algorithm.delta_scale must be null (K) or a number > 0, got {delta_scale!r}"
        )
    return int(local_steps), float(resolved_gamma), resolved_scale


def literal_uploads(
    uploads: np.ndarray,
    last_update: np.ndarray,
    *,
    alpha_sent: np.ndarray,
    steps: np.ndarray,
    gamma: float,
    delta_scale: float,
    local_steps: int,
) -> np.ndarray:
    """The uploads as the paper's literal correction (delta_scale = 1) would have left them:
    Delta_i - (s_i / K) gamma (delta_scale - 1) (1 - alpha_i) u, s_i the client's steps.

    Beyond the literal correction, the K-scaled one puts gamma (K - 1)(1 - alpha_i) u, one
    vector u for everyone, into every upload: every honest client then leans towards last
    round's step, as an echo freeloader does, and its cosine to the mean rises (honest alpha
    0.48 against 0.28 on the same uploads without it; benchmarks/taco_expulsions/report.md). alpha
    is computed on these uploads, so it keeps the paper's meaning under either reading; at
    delta_scale = 1 they are the uploads themselves. The correction is known exactly: the
    server sent u and alpha_i, and a client adds it on each of its plain SGD steps.
    """
    extra = (
        np.asarray(steps, dtype=np.float64)
        / local_steps
        * gamma
        * (delta_scale - 1.0)
        * (1.0 - np.asarray(alpha_sent, dtype=np.float64))
    )
    return np.asarray(uploads, dtype=np.float64) - extra[:, None] * np.asarray(last_update)[None, :]


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
    alpha: Mapping[int, float],
    strikes: Mapping[int, int],
    *,
    kappa: float,
    lam: int,
    strike_all: bool = True,
) -> tuple[dict[int, int], list[int]]:
    """(strikes after this round, clients reaching lam strikes now): a strike for every
    alpha_i >= kappa, counted cumulatively, not consecutively (spec A8). With `strike_all`
    False a round that flags every client of `alpha` gives no strikes: agreement by all is
    no sign of a freeloader (IID data, first rounds), and it would expel them together."""
    flagged = {pid for pid, a in alpha.items() if a >= kappa}
    if not strike_all and flagged == set(alpha):
        flagged = set()
    updated = dict(strikes)
    expelled = []
    for pid in alpha:
        before = updated.get(pid, 0)
        updated[pid] = before + (pid in flagged)
        if updated[pid] >= lam > before:
            expelled.append(pid)
    return updated, sorted(expelled)
