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

from fl_system.messages import protocol
from server_app.addons import StepSchedule
from server_app.federated.replies import ClientReply
from server_app.federated.strategy import FederatedStrategy
from server_app.rounds import RoundPlan
from server_app.strategies.fednova_math import fednova_coefficients, fednova_update


class FedNova(FederatedStrategy):
    """Server half of FedNova: normalised averaging with `aggregation_weights` as p_k.

    Parameters
    ----------
    **common
        The arguments every strategy takes (`FederatedStrategy`): num_clients,
        fraction_train, num_classes, train, seed, options, experiment, addons.
    """

    weighting = "its local steps (normalised averaging)"

    partial_work = True  # updates are normalised by the steps actually taken
    robust_aggregation = False  # normalised updates, combined by FedNova's own rule

    refused_addons = (
        (
            StepSchedule,
            "FedNova divides each client's update by its number of steps, which cancels "
            "GSNR's step allocation",
        ),
    )

    def reject(self, reply: ClientReply) -> str | None:
        if protocol.NUM_STEPS not in reply.metrics:
            return f"reply lacks metric '{protocol.NUM_STEPS}' (FedNova needs the local step count)"
        steps = float(reply.metrics[protocol.NUM_STEPS])
        if not math.isfinite(steps) or steps <= 0:
            return f"reported {protocol.NUM_STEPS}={steps}: no update to normalise"
        return None

    def aggregate(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> list[np.ndarray]:
        layers, _ = fednova_update(
            plan.arrays.to_numpy_ndarrays(), [r.arrays for r in replies], weights, _steps(replies)
        )
        return layers

    def round_metrics(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> dict[str, float]:
        return {"tau_eff": fednova_coefficients(weights, _steps(replies))[1]}


def _steps(replies: list[ClientReply]) -> list[float]:
    return [float(r.metrics[protocol.NUM_STEPS]) for r in replies]
