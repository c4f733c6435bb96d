"""FoolsGold as TACO's paper runs it (TACO spec 2, [interp]): each client's model weighs by
how well its upload agrees with the others'.

    Delta_i = w - w_i,   rho_i = max(cos(Delta_i, mean_j Delta_j), 0)
    w      <- sum_i rho_i w_i / sum_i rho_i        (uniform when every rho_i is 0)

The paper's formula weighs by the cosine to the aggregate it is computing (circular); the
unweighted mean of this round's uploads stands in for it, as the spec recommends. The
original FoolsGold (Fung et al., RAID 2020: update histories, pairwise similarities,
pardoning, logit) is a sybil defence and is not this. Clients train plain SGD (FedAvg's rule).
"""

from __future__ import annotations

import logging

import numpy as np

from fl_system.learning.aggregation import cosines_to_mean, normalized_or_uniform
from server_app.addons import ServerAddon, StepSchedule
from server_app.federated.layer_state import flat_uploads
from server_app.federated.replies import ClientReply
from server_app.federated.strategy import FederatedStrategy
from server_app.rounds import RoundPlan

log = logging.getLogger(__name__)


class FoolsGold(FederatedStrategy):
    """Cosine-to-the-mean weighted model average.

    Parameters
    ----------
    **common
        The arguments every strategy takes (`FederatedStrategy`): num_clients,
        fraction_train, num_classes, train, seed, options, experiment, addons.
    """

    weighting = "cosine-similarity weights"
    decides_from_updates = "its cosine-similarity weights"
    refused_addons = (
        (StepSchedule, "FoolsGold runs as TACO's paper compares it, every client with K steps"),
        (ServerAddon, "FoolsGold weighs clients by its cosine-similarity weights"),
    )

    _fallback = False  # whether this round's weights fell back to uniform

    def base_weights(self, plan: RoundPlan, replies: list[ClientReply]) -> list[float]:
        rho = np.maximum(cosines_to_mean(flat_uploads(plan.arrays, replies)), 0.0)
        weights, self._fallback = normalized_or_uniform(rho)
        if self._fallback:
            log.warning("round %d: no upload agrees with the mean; averaging uniformly", plan.round)
        return weights.tolist()

    def aggregate(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> list[np.ndarray]:
        return self.average(plan, replies, weights)

    def round_metrics(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> dict[str, float]:
        return {"foolsgold_uniform_fallback": int(self._fallback)}
