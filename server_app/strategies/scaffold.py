"""SCAFFOLD (Karimireddy et al., ICML 2020), server half, option II control variates.

Server state: the global control variate c, zeros at the start, one array per float layer
of the model (SCAFFOLD's client only uses the entries of trainable parameters; the others
stay zero). Each round

    sent down:  the global model w and c (ArrayRecord `SCAFFOLD_C`)
    sent up:    the local model w_k and dc_k = c_k+ - c_k (ArrayRecord `SCAFFOLD_DELTA_C`)
    w  <- sum_{k in S_t} p_k w_k          p_k: data sizes, or an add-on weighting's
    c  <- c + (1/K) sum_{k in S_t} dc_k   K = all clients, not |S_t|; no FedDisco reweighting

(the global step size eta_g is 1, as in FedDisco's and NIID-Bench's code). A reply without a
usable dc_k (missing record, unknown layer, wrong shape, non-finite values) still contributes
its model; its dc_k is left out of the c update and a warning is logged.
The client half is `client_app/algorithms/scaffold.py`.
"""

from __future__ import annotations

import logging
from typing import Unpack

import numpy as np
from flwr.app import ArrayRecord, RecordDict

from fl_system.algorithms.scaffold import SCAFFOLD_C, SCAFFOLD_DELTA_C
from server_app.federated.experiment_binding import Common
from server_app.federated.layer_state import LayerState, ServerVectorStrategy
from server_app.federated.replies import ClientReply
from server_app.rounds import RoundPlan

log = logging.getLogger(__name__)


class Scaffold(ServerVectorStrategy):
    """Data-size (or FedDisco) weighted model average plus the global control variate c.
    Parameters
    ----------
    **common
        The arguments every strategy takes (`FederatedStrategy`): num_clients (K,
        c's 1/K),
        fraction_train, num_classes, train, seed, options, experiment, addons.
    """

    extra_down = "the control variate c"
    extra_up = "the change of its control variate"
    summed_up = (SCAFFOLD_DELTA_C,)  # c needs only their sum: secure aggregation carries it
    weighting = None  # data sizes, which differential privacy turns uniform

    partial_work = True  # c_i uses the steps actually taken

    def __init__(self, **common: Unpack[Common]) -> None:
        super().__init__(**common)
        self.num_clients = int(self.experiment.num_clients)  # c's 1/K: K all clients
        self.c = LayerState("scaffold/c")
        self._c_record: ArrayRecord | None = None  # c as sent this round (cached per round)

    # ----- sending -------------------------------------------------------------------------
    def node_content(self, plan: RoundPlan, partition_id: int) -> RecordDict:
        content = super().node_content(plan, partition_id)
        if self._c_record is None:
            self._c_record = self.c.record(plan.arrays)
        content[SCAFFOLD_C] = self._c_record
        return content

    # ----- receiving -----------------------------------------------------------------------
    def aggregate(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> list[np.ndarray]:
        new_model = self.average(plan, replies, weights)
        c = self.c.ensure(plan.arrays)
        total = {name: np.zeros_like(v) for name, v in c.items()}
        for r in replies:
            delta, problem = _delta_c(r, c)
            if problem is not None:
                log.warning(
                    "round %d: partition %d: %s; its model is averaged but c is updated without it",
                    plan.round,
                    r.partition_id,
                    problem,
                )
                continue
            for name, v in delta.items():
                total[name] += v
        for name in c:
            c[name] += total[name] / self.num_clients
        self._c_record = None
        return new_model

    def server_vector(self) -> LayerState:
        return self.c

    def forget_derived(self) -> None:
        self._c_record = None


def _delta_c(
    reply: ClientReply, c: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], str | None]:
    """The reply's dc_k as float64 arrays by layer name, or the reason it cannot be used."""
    record = reply.content.array_records.get(SCAFFOLD_DELTA_C)
    if record is None:
        return {}, f"reply lacks ArrayRecord '{SCAFFOLD_DELTA_C}'"
    out: dict[str, np.ndarray] = {}
    for name in record:
        if name not in c:
            return {}, f"delta c has layer '{name}' that c does not have"
        arr = record[name].numpy().astype(np.float64)
        if arr.shape != c[name].shape:
            return {}, f"delta c layer '{name}' has shape {arr.shape}, c has {c[name].shape}"
        if not np.all(np.isfinite(arr)):
            return {}, f"delta c layer '{name}' is not finite"
        out[name] = arr
    return out, None
