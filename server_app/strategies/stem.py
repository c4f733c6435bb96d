"""STEM (Khanduri et al., NeurIPS 2021), server half, as TACO spec 2 recommends.

Server state: the momentum d, the weighted average of the clients' last momenta (none before
the first round). Each round

    sent down:  the global model w and d (`STEM_MOMENTUM`, from the second round)
    sent up:    the local model w_k and its momentum d_k at that model
    w <- sum_k p_k w_k,   d <- sum_k p_k d_k       p_k: data size (or an add-on's weights)

A reply without a usable momentum still contributes its model; the momentum is averaged over
the replies that have one (weights renormalised) and a warning names the others. The client
half is `client_app/algorithms/stem.py`.
"""

from __future__ import annotations

import logging
from typing import Unpack

import numpy as np
from flwr.app import ArrayRecord, RecordDict

from fl_system.algorithms.stem import STEM_MOMENTUM
from fl_system.learning.aggregation import weighted_average
from server_app.federated.experiment_binding import Common
from server_app.federated.layer_state import LayerState, ServerVectorStrategy
from server_app.federated.replies import ClientReply
from server_app.rounds import RoundPlan

log = logging.getLogger(__name__)


class Stem(ServerVectorStrategy):
    """Model and momentum averaged with the same weights.

    Parameters
    ----------
    a : Optional[float] (default: 0.2)
        The clients' momentum parameter alpha_t, kept constant (TACO's setting).
    **common
        The arguments every strategy takes (`FederatedStrategy`): num_clients,
        fraction_train, num_classes, train, seed, options, experiment, addons.
    """

    extra_down = "the averaged momentum d"
    extra_up = "its momentum d"
    classification_only = "its second gradient on every batch is of the cross-entropy loss"
    step_cost = 2.0  # a second gradient, at the previous weights, on every step's batch

    def __init__(self, *, a: float | None = None, **common: Unpack[Common]) -> None:
        super().__init__(settings={"algorithm.a": a}, **common)
        self.momentum = LayerState("stem/d")

    def node_content(self, plan: RoundPlan, partition_id: int) -> RecordDict:
        content = super().node_content(plan, partition_id)
        if self.momentum.values is not None:
            content[STEM_MOMENTUM] = self.momentum.record(plan.arrays)
        return content

    def aggregate(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> list[np.ndarray]:
        new_model = self.average(plan, replies, weights)
        usable, kept = [], []
        for r, w in zip(replies, weights, strict=True):
            momentum, problem = _momentum(r, plan.arrays)
            if problem is None:
                usable.append(momentum)
                kept.append(w)
            else:
                log.warning(
                    "round %d: partition %d: %s; its model is averaged, the momentum without it",
                    plan.round,
                    r.partition_id,
                    problem,
                )
        if usable:
            names = list(usable[0])
            average = weighted_average([[m[k] for k in names] for m in usable], kept)
            values = self.momentum.ensure(plan.arrays)
            for name, v in zip(names, average, strict=True):
                values[name] = v
        return new_model

    def server_vector(self) -> LayerState:
        return self.momentum


def _momentum(reply: ClientReply, model: ArrayRecord) -> tuple[dict[str, np.ndarray], str | None]:
    """The reply's momentum as float64 arrays by layer name, or why it cannot be used."""
    record = reply.content.array_records.get(STEM_MOMENTUM)
    if record is None:
        return {}, f"reply lacks ArrayRecord '{STEM_MOMENTUM}'"
    out = {}
    for name in record:
        if name not in model:
            return {}, f"momentum has layer '{name}' that the model does not have"
        arr = record[name].numpy().astype(np.float64)
        if arr.shape != model[name].numpy().shape or not np.all(np.isfinite(arr)):
            return {}, f"momentum layer '{name}' does not fit the model or is not finite"
        out[name] = arr
    return out, None
