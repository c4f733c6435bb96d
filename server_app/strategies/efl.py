"""EFL (Elastic Federated Learning), server half (EFL spec 2.3, 2.5, 2.8).

Server state: U = sum u_k and V = sum u_k * w_k over the clients that reported in the last
round (spec 6.1 `fisher_sum="prev_round"`, Algorithm 1), zeros before the first round, so the
elastic penalty starts inactive. Each round

    sent down:  the global model w, U and V (`protocol.EFL_FISHER_SUM`, `EFL_WEIGHTED_SUM`)
    sent up:    the local model w_k, u_k and u_k * w_k (`protocol.EFL_FISHER`, `EFL_WEIGHTED`)
    w  <- sum_k p_k w_k         p_k: data size over the round's reporters (or an add-on's)
    U, V <- sums of this round's u_k, u_k * w_k (unweighted)

A reply without usable u_k, v_k still contributes its model; it is left out of U and V with a
warning. The client half is `client_app/algorithms/efl.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
from flwr.app import ArrayRecord, RecordDict

from fl_system import protocol
from fl_system.aggregation import weighted_average
from server_app.addons import ServerAddon
from server_app.rounds import RoundPlan
from server_app.strategies.base import ClientReply, FederatedStrategy, StrategyState
from server_app.strategies.layer_state import LayerState

log = logging.getLogger(__name__)


class Efl(FederatedStrategy):
    """FedAvg's model average, plus the Fisher sums U and V every client trains against."""

    partial_work = True  # the client scales partial progress by E / s

    def __init__(self, *, addons: Sequence[ServerAddon] = ()) -> None:
        super().__init__(addons=addons)
        self.fisher_sum = LayerState("efl/U")
        self.weighted_sum = LayerState("efl/V")
        self._sent: tuple[ArrayRecord, ArrayRecord] | None = None  # U, V as sent this round

    def node_content(self, plan: RoundPlan, partition_id: int) -> RecordDict:
        content = super().node_content(plan, partition_id)
        if self._sent is None:
            self._sent = (
                self.fisher_sum.record(plan.arrays),
                self.weighted_sum.record(plan.arrays),
            )
        content[protocol.EFL_FISHER_SUM], content[protocol.EFL_WEIGHTED_SUM] = self._sent
        return content

    def aggregate(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> list[np.ndarray]:
        new_model = weighted_average([r.arrays for r in replies], weights)
        fisher = {k: np.zeros_like(v) for k, v in self.fisher_sum.ensure(plan.arrays).items()}
        weighted = {k: np.zeros_like(v) for k, v in fisher.items()}
        for r in replies:
            terms, problem = _fisher_terms(r, fisher)
            if problem is not None:
                log.warning(
                    "round %d: partition %d: %s; its model is averaged but U, V go without it",
                    plan.round,
                    r.partition_id,
                    problem,
                )
                continue
            for name, (u, v) in terms.items():
                fisher[name] += u
                weighted[name] += v
        self.fisher_sum.values, self.weighted_sum.values = fisher, weighted
        self._sent = None
        return new_model

    def round_metrics(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> dict[str, float]:
        return {"efl_fisher_sum_norm": self.fisher_sum.norm()}

    def state_dict(self) -> StrategyState:
        return {
            **super().state_dict(),
            **self.fisher_sum.state_dict(),
            **self.weighted_sum.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        rest = self.weighted_sum.take_state(self.fisher_sum.take_state(state))
        self._sent = None
        super().load_state_dict(rest)


def _fisher_terms(
    reply: ClientReply, layers: Mapping[str, np.ndarray]
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], str | None]:
    """{layer: (u_k, u_k * w_k)} as float64, or the reason the reply's cannot be used."""
    records = [
        reply.content.array_records.get(k) for k in (protocol.EFL_FISHER, protocol.EFL_WEIGHTED)
    ]
    if any(r is None for r in records):
        return {}, f"reply lacks '{protocol.EFL_FISHER}' or '{protocol.EFL_WEIGHTED}'"
    fisher, weighted = records
    if set(fisher.keys()) != set(weighted.keys()):
        return {}, "u and u * w name different layers"
    out = {}
    for name in fisher:
        if name not in layers:
            return {}, f"u has layer '{name}' that the model does not have"
        u = fisher[name].numpy().astype(np.float64)
        v = weighted[name].numpy().astype(np.float64)
        if u.shape != layers[name].shape or v.shape != layers[name].shape:
            return {}, f"u or u * w of layer '{name}' is not shaped like it"
        if not (np.isfinite(u).all() and np.isfinite(v).all()) or (u < 0).any():
            return {}, f"u or u * w of layer '{name}' is not finite, or u < 0"
        out[name] = (u, v)
    return out, None
