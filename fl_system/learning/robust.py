"""Robust aggregation (`aggregation.robust`): how the round's client models become one, when
some clients may send hostile updates.

Every rule sees the models the usable replies carry, the model each client started from
(`reference`) and the strategy's p_k, and returns the combined model. `mean` is the plain
p_k-weighted average every averaging strategy uses; the others bound what one client can do:

    clip          each update w_k - reference scaled down to norm at most `max_norm` (null:
                  the round's median update norm), then the p_k-weighted average
    median        coordinate-wise median of the models (Yin et al., 2018), unweighted
    trimmed_mean  coordinate-wise mean after cutting `trim` of the values at each end,
                  unweighted

The median and trimmed mean are Flower's own (`flwr.server.strategy.aggregate`). Integer
layers (counters such as BatchNorm's num_batches_tracked) keep the first model's value, as in
`weighted_average`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
from flwr.server.strategy.aggregate import aggregate_median, aggregate_trimmed_avg

from fl_system.learning.aggregation import weighted_average

Layers = Sequence[np.ndarray]
log = logging.getLogger(__name__)


def update_norm(model: Layers, reference: Layers) -> float:
    """The L2 norm of model - reference over all floating-point layers."""
    total = 0.0
    for w, r in zip(model, reference, strict=True):
        if np.issubdtype(w.dtype, np.floating):
            d = w.astype(np.float64) - r.astype(np.float64)
            total += float(np.vdot(d, d))
    return float(np.sqrt(total))


class WeightedMean:
    """The strategy's p_k-weighted average, unchanged (the default)."""

    name = "mean"

    def combine(
        self, models: Sequence[Layers], references: Sequence[Layers], weights: np.ndarray
    ) -> list[np.ndarray]:
        return weighted_average(models, weights)


class NormClip:
    """Updates clipped to a norm bound, then the p_k-weighted average."""

    name = "clip"

    def __init__(self, *, max_norm: float | None = None) -> None:
        if max_norm is not None and (
            isinstance(max_norm, bool) or not isinstance(max_norm, int | float) or max_norm <= 0
        ):
            raise ValueError(
                f"aggregation.robust.max_norm must be a positive number or null, got {max_norm!r}"
            )
        self.max_norm = None if max_norm is None else float(max_norm)

    def bound(self, norms: Sequence[float]) -> float:
        """The clipping norm: the configured one, else the median of this round's norms."""
        return self.max_norm if self.max_norm is not None else float(np.median(norms))

    def combine(
        self, models: Sequence[Layers], references: Sequence[Layers], weights: np.ndarray
    ) -> list[np.ndarray]:
        norms = [update_norm(m, r) for m, r in zip(models, references, strict=True)]
        bound = self.bound(norms)
        clipped = []
        for model, ref, norm in zip(models, references, norms, strict=True):
            scale = 1.0 if norm <= bound else bound / norm
            clipped.append(
                [
                    (r.astype(np.float64) + scale * (w.astype(np.float64) - r)).astype(w.dtype)
                    if np.issubdtype(w.dtype, np.floating)
                    else w
                    for w, r in zip(model, ref, strict=True)
                ]
            )
        return weighted_average(clipped, weights)


class CoordinateMedian:
    """Coordinate-wise median of the models (p_k ignored: one vote per client)."""

    name = "median"

    def combine(
        self, models: Sequence[Layers], references: Sequence[Layers], weights: np.ndarray
    ) -> list[np.ndarray]:
        return _float_layers(models, lambda ms: aggregate_median([(m, 1) for m in ms]))


class TrimmedMean:
    """Coordinate-wise mean after cutting a share `trim` of the values at each end."""

    name = "trimmed_mean"

    def __init__(self, *, trim: float = 0.1) -> None:
        if isinstance(trim, bool) or not isinstance(trim, int | float) or not 0 <= trim < 0.5:
            raise ValueError(f"aggregation.robust.trim must be a number in [0, 0.5), got {trim!r}")
        self.trim = float(trim)
        self._warned = False

    def combine(
        self, models: Sequence[Layers], references: Sequence[Layers], weights: np.ndarray
    ) -> list[np.ndarray]:
        if int(self.trim * len(models)) == 0 and not self._warned:
            self._warned = True
            log.warning(
                "aggregation.robust.trim=%g cuts nothing from %d replies (a value is cut at "
                "each end once trim x replies >= 1): this round's trimmed mean is the plain mean",
                self.trim,
                len(models),
            )
        return _float_layers(
            models, lambda ms: aggregate_trimmed_avg([(m, 1) for m in ms], self.trim)
        )


def _float_layers(models: Sequence[Layers], rule) -> list[np.ndarray]:
    """`rule` over the floating-point layers (in float64, cast back); other layers keep the
    first model's value."""
    first = models[0]
    floating = [i for i, w in enumerate(first) if np.issubdtype(w.dtype, np.floating)]
    combined = rule([[m[i].astype(np.float64) for i in floating] for m in models])
    out = [w.copy() for w in first]
    for i, layer in zip(floating, combined, strict=True):
        out[i] = np.asarray(layer).astype(first[i].dtype)
    return out
