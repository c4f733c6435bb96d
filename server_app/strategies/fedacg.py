"""FedACG (Kim et al., CVPR 2024), server half, as TACO spec 2 takes it from the authors' code.

Server state: the momentum m (zeros at first). Each round the clients receive the lookahead
model w_hat = w + lam m instead of w and train with FedProx's term (beta / 2)|w - w_hat|^2
(the client half is FedProx's rule with mu = beta); then

    delta <- sum_k p_k w_k - w_hat        p_k: data size (or an add-on's weights)
    m     <- lam m + delta
    w     <- w_hat + delta  (= w + m, the clients' average)

The server evaluates w.
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


class FedAcg(ServerVectorStrategy):
    """Clients start from the lookahead w + lam m; the momentum follows their average.

    Parameters
    ----------
    lam : Optional[float] (default: 0.85)
        The server momentum, in [0, 1).
    beta : Optional[float] (default: 0.001)
        The clients' proximal weight towards the lookahead model.
    **common
        The arguments every strategy takes (`FederatedStrategy`): num_clients,
        fraction_train, num_classes, train, seed, options, experiment, addons.
    """

    own_start = "the lookahead model w + lambda m"

    def __init__(
        self, *, lam: float | None = None, beta: float | None = None, **common: Unpack[Common]
    ) -> None:
        super().__init__(settings={"algorithm.lam": lam, "algorithm.beta": beta}, **common)
        lam = self.experiment.algorithm.lam
        if isinstance(lam, bool) or not isinstance(lam, int | float) or not 0 <= lam < 1:
            raise ValueError(f"algorithm.lam must be a number in [0, 1), got {lam!r}")
        self.lam = float(lam)
        self.momentum = LayerState("fedacg/m")
        self._lookahead: tuple[ArrayRecord, ArrayRecord] | None = None  # (w, w_hat)

    def lookahead(self, arrays: ArrayRecord) -> ArrayRecord:
        """w_hat = w + lam m for the given w (cached per round)."""
        if self._lookahead is not None and self._lookahead[0] is arrays:
            return self._lookahead[1]
        ahead = self.momentum.shifted(arrays, self.lam)
        self._lookahead = (arrays, ahead)
        return ahead

    def node_content(self, plan: RoundPlan, partition_id: int) -> RecordDict:
        return super().node_content(replace(plan, arrays=self.lookahead(plan.arrays)), partition_id)

    def reference(self, plan: RoundPlan, partition_id: int, reply: ClientReply) -> list[np.ndarray]:
        if not plan.arrays:
            return super().reference(plan, partition_id, reply)
        return self.as_numpy(self.lookahead(plan.arrays))

    def aggregate(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> list[np.ndarray]:
        new_model = self.average(plan, replies, weights)
        sent = self.lookahead(plan.arrays)
        m = self.momentum.ensure(plan.arrays)
        for name, layer in zip(plan.arrays.keys(), new_model, strict=True):
            if name in m:
                m[name] = self.lam * m[name] + (
                    layer.astype(np.float64) - sent[name].numpy().astype(np.float64)
                )
        self._lookahead = None
        return new_model

    def server_vector(self) -> LayerState:
        return self.momentum

    def forget_derived(self) -> None:
        self._lookahead = None
