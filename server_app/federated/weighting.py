"""How the round's usable replies are weighed (p_k) and combined: an add-on's weighting if one
is enabled, uniform under central DP, else the algorithm's own `base_weights`."""

from __future__ import annotations

import numpy as np

from fl_system.learning.aggregation import normalized
from server_app.federated.replies import ClientReply
from server_app.rounds import RoundPlan


class Weighting:
    """p_k for every strategy, so that a reweighting such as FedDisco's composes with all of
    them, and the average they feed (through the run's `aggregation.robust` rule)."""

    uniform_weights: bool

    def average(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> list[np.ndarray]:
        """The replies' models combined with the p_k by the run's aggregation.robust rule
        (the weighted average by default)."""
        return self.robust.combine(
            [r.arrays for r in replies],
            [self.reference(plan, r.partition_id, r) for r in replies],
            weights,
        )

    def base_weights(self, plan: RoundPlan, replies: list[ClientReply]) -> list[float]:
        """The algorithm's own averaging weights (unnormalised): data size by default; `plan`
        holds the model the replies started from."""
        return [float(r.num_examples) for r in replies]

    def aggregation_weights(self, plan: RoundPlan, replies: list[ClientReply]) -> np.ndarray:
        """p_k, summing to one: an add-on's weighting if one is enabled, else `base_weights`.

        Every strategy averages with these, so a reweighting such as FedDisco's composes with
        all of them. They also go to metrics.csv as `weight_<partition>`.
        """
        if self.uniform_weights:
            return np.full(len(replies), 1.0 / len(replies))
        p = self.addon_weights(replies)
        return p if p is not None else normalized(self.base_weights(plan, replies))

    def addon_weights(self, replies: list[ClientReply]) -> np.ndarray | None:
        """An enabled add-on's p_k for the replies (FedDisco's), or None."""
        for addon in self.addons:
            p = addon.weights(replies)
            if p is not None:
                return p
        return None

    def weight_columns(self, replies: list[ClientReply], weights: np.ndarray) -> dict[str, float]:
        """p_k in metrics.csv as `weight_<partition>`."""
        return {f"weight_{r.partition_id}": float(w) for r, w in zip(replies, weights, strict=True)}
