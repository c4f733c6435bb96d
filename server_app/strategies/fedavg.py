"""FedAvg (McMahan et al., 2017): average client models weighted by their data size."""

from __future__ import annotations

import numpy as np

from fl_system.aggregation import weighted_average
from server_app.strategies.base import ClientReply, FederatedStrategy


class FedAvg(FederatedStrategy):
    """w <- sum_k (n_k / n) w_k over the round's usable replies."""

    def aggregate(self, server_round: int, replies: list[ClientReply]) -> list[np.ndarray]:
        weights = self.aggregation_weights(server_round, replies)
        return weighted_average([r.arrays for r in replies], weights)
