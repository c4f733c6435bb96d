"""FedAvg (McMahan et al., 2017): average client models weighted by their data size."""

from __future__ import annotations

import numpy as np

from server_app.federated.replies import ClientReply
from server_app.federated.strategy import FederatedStrategy
from server_app.rounds import RoundPlan


class FedAvg(FederatedStrategy):
    """w <- sum_k p_k w_k over the round's usable replies (p_k: data size, or an add-on's).

    Parameters
    ----------
    **common
        The arguments every strategy takes (`FederatedStrategy`): num_clients,
        fraction_train, num_classes, train, seed, options, experiment, addons.
    """

    weighting = None  # data sizes, which differential privacy turns uniform

    def aggregate(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> list[np.ndarray]:
        return self.average(plan, replies, weights)
