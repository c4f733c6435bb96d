"""FedNova's normalised averaging (Wang et al., NeurIPS 2020), as a plain function on arrays.

Each client's change is divided by its number of local steps tau_k, the normalised changes are
averaged with weights p_k, and the average is scaled back by tau_eff = sum_k p_k tau_k:

    w+ = w + tau_eff * sum_k p_k (w_k - w) / tau_k
       = w + sum_k (p_k tau_eff / tau_k) (w_k - w)

With equal tau_k every coefficient is p_k and this is FedAvg's sum_k p_k w_k. The p_k are
whatever weights the server averages with (data sizes, or FedDisco's), taken before the
normalisation (FedDisco paper, Sec. 5; the authors' `algorithms/fednova.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fl_system.learning.aggregation import normalized


def fednova_coefficients(
    weights: Sequence[float], steps: Sequence[float]
) -> tuple[np.ndarray, float]:
    """(c_k = p_k tau_eff / tau_k, tau_eff) for weights p_k (normalised here) and steps tau_k."""
    p = normalized(weights)
    tau = np.asarray(steps, dtype=np.float64)
    if tau.shape != p.shape:
        raise ValueError(f"{len(p)} weights but {tau.size} step counts")
    if not np.all(np.isfinite(tau)) or np.any(tau <= 0):
        raise ValueError(f"local step counts must be finite and positive, got {tau.tolist()}")
    tau_eff = float(p @ tau)
    return p * tau_eff / tau, tau_eff


def fednova_update(
    global_layers: Sequence[np.ndarray],
    models: Sequence[Sequence[np.ndarray]],
    weights: Sequence[float],
    steps: Sequence[float],
) -> tuple[list[np.ndarray], float]:
    """The new global layers w+ and tau_eff (see the module docstring).

    Accumulates in float64 and casts back to each layer's dtype. Integer layers (counters
    such as BatchNorm's num_batches_tracked) keep the first model's value, as in
    `fl_system.learning.aggregation.weighted_average`.
    """
    if len(models) != len(weights) or not models:
        raise ValueError(f"{len(models)} models but {len(weights)} weights")
    coeffs, tau_eff = fednova_coefficients(weights, steps)
    out: list[np.ndarray] = []
    for layer_index, (w, *local) in enumerate(zip(global_layers, *models, strict=True)):
        if not np.issubdtype(w.dtype, np.floating):
            out.append(local[0].copy())
            continue
        base = w.astype(np.float64)
        acc = base.copy()
        for ck, wk in zip(coeffs, local, strict=True):
            if wk.shape != w.shape:
                raise ValueError(
                    f"layer {layer_index}: client shape {wk.shape} != global shape {w.shape}"
                )
            acc += ck * (wk.astype(np.float64, copy=False) - base)
        out.append(acc.astype(w.dtype))
    return out, tau_eff
