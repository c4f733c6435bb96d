"""EFL (Elastic Federated Learning), server half (EFL spec 2.3, 2.5, 2.8).

Server state: U = sum u_k and V = sum u_k * w_k over the clients that reported in the last
round (spec 6.1 `fisher_sum="prev_round"`, Algorithm 1), zeros before the first round, so the
elastic penalty starts inactive. Each round

    sent down:  the global model w, U and V (`EFL_FISHER_SUM`, `EFL_WEIGHTED_SUM`)
    sent up:    the local model w_k, u_k and u_k * w_k (`EFL_FISHER`, `EFL_WEIGHTED`)
    w  <- sum_k p_k w_k         p_k: data size over the round's reporters (or an add-on's)
    U, V <- sums of this round's u_k, u_k * w_k (unweighted)

`fisher_comm` (spec 2.9) says how u, v and U, V travel: dense float32 (the paper: EFL then
moves about twice FedAvg's bytes each way), float16, or the `fisher_q` fraction of largest
entries with their positions (`fisher_records` in fl_system/algorithms/efl.py). With
`fisher_every` = K the clients compute and send u, v only in rounds 1, K + 1, 2K + 1, ...
(`EFL_FISHER_DUE`) and U, V stay as those rounds left them. A reply without usable u_k, v_k
in such a round still contributes its model; it is left out of U and V with a warning. The
client half is `client_app/algorithms/efl.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Unpack

import numpy as np
from flwr.app import ConfigRecord, RecordDict

from fl_system.algorithms.efl import (
    EFL_DOWN,
    EFL_FISHER_DUE,
    EFL_PENALTY,
    EFL_UP,
    fisher_records,
    read_fisher,
)
from fl_system.learning.codecs import CodecError
from fl_system.messages import protocol
from server_app.federated.experiment_binding import Common
from server_app.federated.layer_state import LayerState, float_layers
from server_app.federated.replies import ClientReply, reply_mean
from server_app.federated.state import StrategyState
from server_app.federated.strategy import FederatedStrategy
from server_app.rounds import RoundPlan

log = logging.getLogger(__name__)


class Efl(FederatedStrategy):
    """FedAvg's model average, plus the Fisher sums U and V every client trains against.

    Parameters
    ----------
    lam : Optional[float] (default: 0.01)
        The strength of the clients' elastic penalty.
    fisher_samples : Optional[int] (default: 256)
        The examples per client for the Fisher diagonal at its end model.
    fisher_mode : Optional[str] (default: "empirical")
        "empirical" (per-sample gradients) or "batch" (squared batch mean gradient, biased).
    fisher_comm : Optional[str] (default: "dense")
        How u, v and U, V travel: "dense" (the paper), "fp16" or "topk".
    fisher_q : Optional[float] (default: 0.01)
        Under "topk", the fraction of largest u (with their v) sent.
    fisher_every : Optional[int] (default: 1)
        Compute and send u, v every this many rounds; U, V are kept in between.
    theta : Optional[float] (default: None)
        A cap on a straggler's E / s compensation.
    **common
        The arguments every strategy takes (`FederatedStrategy`): num_clients,
        fraction_train, num_classes, train, seed, options, experiment, addons.
    """

    extra_down = "the Fisher sums U and V"
    classification_only = "its Fisher diagonals are of the cross-entropy loss"
    extra_up = "its Fisher diagonal"

    partial_work = True  # the client scales partial progress by E / s

    def __init__(
        self,
        *,
        lam: float | None = None,
        fisher_samples: int | None = None,
        fisher_mode: str | None = None,
        fisher_comm: str | None = None,
        fisher_q: float | None = None,
        fisher_every: int | None = None,
        theta: float | None = None,
        **common: Unpack[Common],
    ) -> None:
        given = {
            "lam": lam,
            "fisher_samples": fisher_samples,
            "fisher_mode": fisher_mode,
            "fisher_comm": fisher_comm,
            "fisher_q": fisher_q,
            "fisher_every": fisher_every,
            "theta": theta,
        }
        super().__init__(settings={f"algorithm.{k}": v for k, v in given.items()}, **common)
        algorithm = self.experiment.algorithm
        fisher_comm, fisher_q = algorithm.fisher_comm, algorithm.fisher_q
        fisher_every = algorithm.fisher_every  # each checked as composed (algorithm_settings)
        self.fisher_comm, self.fisher_q, self.fisher_every = fisher_comm, fisher_q, fisher_every
        self.fisher_sum = LayerState("efl/U")
        self.weighted_sum = LayerState("efl/V")
        self._sent: RecordDict | None = None  # U, V as sent this round

    def fisher_due(self, round_: int) -> bool:
        """Whether clients send u, v in this round (rounds 1, K + 1, 2K + 1, ...)."""
        return (round_ - 1) % self.fisher_every == 0

    def node_content(self, plan: RoundPlan, partition_id: int) -> RecordDict:
        content = super().node_content(plan, partition_id)
        if self._sent is None:
            fisher = self.fisher_sum.ensure(plan.arrays)
            weighted = self.weighted_sum.ensure(plan.arrays)
            pairs = {k: (fisher[k], weighted[k]) for k in float_layers(plan.arrays)}
            self._sent = fisher_records(pairs, EFL_DOWN, comm=self.fisher_comm, q=self.fisher_q)
        for name, record in self._sent.items():
            content[name] = record
        config = dict(content.config_records[protocol.CONFIG])
        config[EFL_FISHER_DUE] = self.fisher_due(plan.round)
        content[protocol.CONFIG] = ConfigRecord(config)
        return content

    def aggregate(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> list[np.ndarray]:
        new_model = self.average(plan, replies, weights)
        if not self.fisher_due(plan.round):
            return new_model
        shapes = {k: v.shape for k, v in self.fisher_sum.ensure(plan.arrays).items()}
        fisher = {k: np.zeros(shape) for k, shape in shapes.items()}
        weighted = {k: np.zeros(shape) for k, shape in shapes.items()}
        for r in replies:
            terms, problem = _fisher_terms(r, shapes)
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
        metrics = {"efl_fisher_sum_norm": self.fisher_sum.norm()}
        if any(EFL_PENALTY in r.metrics for r in replies):  # lambda > 0
            metrics["efl_penalty"] = reply_mean(replies, EFL_PENALTY)
        return metrics

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
    reply: ClientReply, shapes: Mapping[str, tuple[int, ...]]
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], str | None]:
    """{layer: (u_k, u_k * w_k)} as float64, or the reason the reply's cannot be used."""
    try:
        terms = read_fisher(reply.content, EFL_UP, shapes)
    except CodecError as err:
        return {}, f"reply's u, v: {err}"
    out = {}
    for name, (u, v) in terms.items():
        if not (np.isfinite(u).all() and np.isfinite(v).all()) or (u < 0).any():
            return {}, f"u or u * w of layer '{name}' is not finite, or u < 0"
        out[name] = (u.astype(np.float64), v.astype(np.float64))
    return out, None
