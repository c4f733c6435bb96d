"""FedAvg (McMahan et al., 2017): average client models weighted by their data size."""

from __future__ import annotations

import numpy as np

from fl_system.aggregation import weighted_average
from server_app.strategies.base import ClientReply, FederatedStrategy


class FedAvg(FederatedStrategy):
    """w <- sum_k (n_k / n) w_k over the round's usable replies."""

    def aggregation_weights(self, server_round: int, replies: list[ClientReply]) -> list[float]:
        """Each client's share of the average; data size here, overridable (e.g. FedDisco)."""
        return [float(r.num_examples) for r in replies]

    def aggregate(self, server_round: int, replies: list[ClientReply]) -> list[np.ndarray]:
        weights = self.aggregation_weights(server_round, replies)
        return weighted_average([r.arrays for r in replies], weights)
