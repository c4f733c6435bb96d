"""FedNova (Wang et al., NeurIPS 2020): average step-normalised client updates.

The client is plain local SGD and reports its number of optimiser steps tau_k
(`protocol.NUM_STEPS`). The server, with p_k from `aggregation_weights` (data sizes, or
FedDisco's weights when enabled; re-weighting happens before the normalisation), computes

    tau_eff = sum_k p_k tau_k,    w+ = w + sum_k (p_k tau_eff / tau_k) (w_k - w),

where w is the model sent this round. With equal tau_k this is FedAvg. A reply without a
positive step count cannot be normalised: it is dropped as a failure of that client.

tau_k counts optimiser steps. FedNova's paper normalises momentum SGD by ||a_k||_1 instead;
like the FedDisco authors' code, this uses the plain step count whatever the momentum.
"""

from __future__ import annotations

import math

import numpy as np

from fl_system import protocol
from fl_system.fednova import fednova_update
from server_app.strategies.base import ClientReply, FederatedStrategy


class FedNova(FederatedStrategy):
    """Server half of FedNova: normalised averaging with `aggregation_weights` as p_k."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.last_tau_eff = float("nan")

    def reject(self, reply: ClientReply) -> str | None:
        if protocol.NUM_STEPS not in reply.metrics:
            return f"reply lacks metric '{protocol.NUM_STEPS}' (FedNova needs the local step count)"
        steps = float(reply.metrics[protocol.NUM_STEPS])
        if not math.isfinite(steps) or steps <= 0:
            return f"reported {protocol.NUM_STEPS}={steps}: no update to normalise"
        return None

    def aggregate(self, server_round: int, replies: list[ClientReply]) -> list[np.ndarray]:
        if not self.global_arrays:
            raise RuntimeError("FedNova needs the model sent this round (train_messages first)")
        weights = self.aggregation_weights(server_round, replies)
        steps = [float(r.metrics[protocol.NUM_STEPS]) for r in replies]
        layers, self.last_tau_eff = fednova_update(
            self.global_arrays.to_numpy_ndarrays(), [r.arrays for r in replies], weights, steps
        )
        return layers

    def round_metrics(self, server_round: int, replies: list[ClientReply]) -> dict[str, float]:
        return {"tau_eff": self.last_tau_eff}
