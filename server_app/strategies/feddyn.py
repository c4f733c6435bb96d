"""FedDyn (Acar et al., ICLR 2021), server half.

Server state: h, zeros at the start, one array per float layer of the model. With P the
round's usable replies, K the number of clients, alpha the FedDyn coefficient and theta_t
the model the clients received this round:

    theta_avg = sum_{k in P} p_k theta_k        p_k uniform (FedDyn's np.mean), or FedDisco's
    h         <- h - (alpha / K) sum_{k in P} (theta_k - theta_t)
    theta_cld = theta_avg - h / alpha           the model the clients start from next round

The two formulations in the specs agree. TACO's spec writes the rule above. FedDisco's spec
(the authors' code) keeps per-client h_k += theta_k - theta_cld and sends
theta_cld = theta_avg + mean_{all K}(h_k). With H = (1/K) sum_k h_k, a round adds
(1/K) sum_{k in P} (theta_k - theta_t) to H, so H = -h / alpha at every round and the two
theta_cld are the same. On the client, g_k = -alpha h_k (see `client_app/algorithms/feddyn.py`),
so h is the mean over all K clients of their gradient states g_k.

Which model is which, without changing the round driver: the driver evaluates and
checkpoints the arrays a round returns and starts the next round's plan from them.
`aggregate` therefore returns theta_avg (the model FedDyn reports), and `node_content`
turns the theta_avg it is given into theta_cld = theta_avg - h/alpha before it goes to the
clients. theta_cld is a function of (theta_avg, h), so the checkpoint (model theta_avg +
strategy state h) resumes exactly. In round 1, h = 0 and theta_cld is the initial model.

Variant: the plain rule (the paper's Algorithm 1). The authors' extras (weight decay
alpha + 1e-5 standing in for the quadratic term, gradient clipping at 10, adaptive
alpha_k = alpha / (K n_k)) are not used; clipping is available on the client as
`max_grad_norm`. h covers every float layer; the paper's models have no float buffers.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Unpack

import numpy as np
from flwr.app import ArrayRecord, RecordDict

from server_app.federated.experiment_binding import Common
from server_app.federated.layer_state import LayerState, ServerVectorStrategy
from server_app.federated.replies import ClientReply
from server_app.rounds import RoundPlan


class FedDyn(ServerVectorStrategy):
    """Uniform model average, dynamic-regulariser state h, clients start from theta_cld.
    Parameters
    ----------
    alpha : Optional[float] (default: 0.01)
        The dynamic regulariser's coefficient, on the clients and in h's update.
    max_grad_norm : Optional[float] (default: None)
        Clip the clients' local gradients at this norm (the authors' code: 10).
    **common
        The arguments every strategy takes (`FederatedStrategy`): num_clients,
        fraction_train, num_classes, train, seed, options, experiment, addons.
    """

    own_start = "the cloud model"

    def __init__(
        self,
        *,
        alpha: float | None = None,
        max_grad_norm: float | None = None,
        **common: Unpack[Common],
    ) -> None:
        settings = {"algorithm.alpha": alpha, "algorithm.max_grad_norm": max_grad_norm}
        super().__init__(settings=settings, **common)
        alpha, num_clients = self.experiment.algorithm.alpha, self.experiment.num_clients
        self.alpha = float(alpha)
        self.num_clients = int(num_clients)
        self.h = LayerState("feddyn/h")
        self._cloud: tuple[ArrayRecord, ArrayRecord] | None = None  # (theta_avg, theta_cld)

    def cloud_model(self, arrays: ArrayRecord) -> ArrayRecord:
        """theta_cld = theta_avg - h / alpha for the given theta_avg (cached per round)."""
        if self._cloud is not None and self._cloud[0] is arrays:
            return self._cloud[1]
        cloud = self.h.shifted(arrays, -1.0 / self.alpha)
        self._cloud = (arrays, cloud)
        return cloud

    # ----- sending -------------------------------------------------------------------------
    def node_content(self, plan: RoundPlan, partition_id: int) -> RecordDict:
        return super().node_content(
            replace(plan, arrays=self.cloud_model(plan.arrays)), partition_id
        )

    # ----- receiving -----------------------------------------------------------------------
    def base_weights(self, plan: RoundPlan, replies: list[ClientReply]) -> list[float]:
        """FedDyn averages participants uniformly (the authors' np.mean), not by data size."""
        return [1.0] * len(replies)

    def aggregate(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> list[np.ndarray]:
        sent = self.cloud_model(plan.arrays)  # theta_t: what the clients received
        names = list(sent.keys())  # every reply has these layers (`unpack_replies` checks)
        theta_avg = self.average(plan, replies, weights)
        h = self.h.ensure(sent)
        scale = self.alpha / self.num_clients
        for i, name in enumerate(names):
            if name not in h:
                continue
            theta_t = sent[name].numpy().astype(np.float64)
            drift = sum(r.arrays[i].astype(np.float64) - theta_t for r in replies)
            h[name] -= scale * drift
        self._cloud = None  # h changed: theta_cld must be recomputed
        return theta_avg

    def server_vector(self) -> LayerState:
        return self.h

    def forget_derived(self) -> None:
        self._cloud = None
