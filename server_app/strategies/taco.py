"""TACO (Liu et al., ICDCS 2025), server half: tailored coefficients, tailored aggregation and
freeloader expulsion (TACO spec 1.4, 1.7, 7).

Server state: alpha_i per partition (0.1 before a client's first upload), strikes per
partition, the expelled partitions, and the last global update u = w_{t-1} - w_t (zeros at
first). Each round

    sent down:  the global model w, u (`TACO_LAST_UPDATE`) and the client's alpha_i
                (config `TACO_ALPHA`); the client shifts every step by
                gamma (1 - alpha_i) Delta_t, Delta_t = u / (K lr)
    sent up:    the local model w_i; the server takes Delta_i = w - w_i
    alpha_i  <- (1 - |Delta_i| / sum_j |Delta_j|) max(cos(Delta_i, mean_j Delta_j), 0)
    w        <- sum_i alpha_i w_i / sum_i alpha_i      (eta_g = K lr; uniform if all alpha = 0)
    strike   for alpha_i >= kappa after the first warmup_rounds, unless every client of the
             round is flagged (strike_all=True: the paper's rule, strikes then too); lam
             strikes expel the partition for good; a round whose strikes would expel every
             client left gives none

Delta_i in alpha is the upload less the share of the correction that the K-scaled reading
(delta_scale = K) adds beyond the literal one (`fl_system.algorithms.taco.literal_uploads`), so that
alpha keeps the paper's meaning; the aggregation averages the models as they came.

Norms and cosines use the float layers of the model (every parameter the clients train, plus
float buffers, which the models here do not have). Dataset sizes play no part (spec A7).
`tailored_aggregation=False` averages uniformly (the ablation of Table VI); an expelled
partition is never sampled again (`excluded`) and a reply from it is refused. u is sent
explicitly so that clients that skipped rounds need no memory; it doubles the downlink.
The client half is `client_app/algorithms/taco.py`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Unpack

import numpy as np
from flwr.app import ConfigRecord, RecordDict

from fl_system.algorithms.taco import (
    TACO_ALPHA,
    TACO_LAST_UPDATE,
    correction_constants,
    literal_uploads,
    record_strikes,
    tailored_coefficients,
)
from fl_system.learning.aggregation import normalized_or_uniform
from fl_system.messages import protocol
from server_app.addons import ServerAddon, StepSchedule
from server_app.federated.experiment_binding import Common
from server_app.federated.layer_state import LayerState, flat_uploads, float_layers
from server_app.federated.replies import ClientReply
from server_app.federated.state import StrategyState
from server_app.federated.strategy import FederatedStrategy
from server_app.rounds import RoundPlan

log = logging.getLogger(__name__)

INITIAL_ALPHA = 0.1  # alpha_i^0 (it never matters: u = 0 in the first round)
MIN_DEFAULT_LAM = 3  # lam's default is T / 5, but never one or two rounds of agreement


class Taco(FederatedStrategy):
    """alpha-weighted model average; strikes and expulsion for clients with alpha >= kappa.

    Parameters
    ----------
    kappa : Optional[float] (default: 0.6)
        A client earns a strike in a round its alpha_i >= kappa.
    lam : Optional[int] (default: max(ceil(num_rounds / 5), 3))
        The strikes that expel a client.
    expel : Optional[bool] (default: True)
        False: strikes are counted and logged, nobody is expelled.
    warmup_rounds : Optional[int] (default: 0)
        The first rounds give no strikes.
    strike_all : Optional[bool] (default: False)
        True: a round that flags every client gives each a strike (the paper's rule); False:
        it gives none (all agree: no sign of a freeloader).
    gamma : Optional[float] (default: 1 / local_steps)
        The largest local correction.
    delta_scale : Optional[float] (default: local_steps)
        The correction's scale (1: the paper read literally).
    tailored_correction, tailored_aggregation : Optional[bool] (default: True)
        False switches the local correction, or the alpha-weighted average, off (Table VI).
    num_rounds : Optional[int] (default: the experiment's, 5)
        The run's rounds (lam's default is a fifth of them).
    local_steps : Optional[int]
        K, every client's local steps a round (`train["local_steps"]`; required).
    **common
        The arguments every strategy takes (`FederatedStrategy`): num_clients,
        fraction_train, num_classes, train, seed, options, experiment, addons.
    """

    extra_down = "the last global update u"
    weighting = "its tailored coefficients alpha_i"
    decides_from_updates = "its coefficients alpha_i and its expulsions"
    refused_addons = (
        (StepSchedule, "TACO's correction and alpha assume every client runs K local steps"),
        (ServerAddon, "TACO weighs clients by its tailored coefficients alpha_i"),
    )

    def __init__(
        self,
        *,
        kappa: float | None = None,
        lam: int | None = None,
        expel: bool | None = None,
        warmup_rounds: int | None = None,
        strike_all: bool | None = None,
        gamma: float | None = None,
        delta_scale: float | None = None,
        tailored_correction: bool | None = None,
        tailored_aggregation: bool | None = None,
        num_rounds: int | None = None,
        local_steps: int | None = None,
        **common: Unpack[Common],
    ) -> None:
        given = {
            "kappa": kappa,
            "lam": lam,
            "expel": expel,
            "warmup_rounds": warmup_rounds,
            "strike_all": strike_all,
            "gamma": gamma,
            "delta_scale": delta_scale,
            "tailored_correction": tailored_correction,
            "tailored_aggregation": tailored_aggregation,
        }
        settings = {f"algorithm.{k}": v for k, v in given.items()}
        settings |= {"num_rounds": num_rounds, "train.local_steps": local_steps}
        super().__init__(settings=settings, **common)
        cfg, algorithm = self.experiment, self.experiment.algorithm
        for key in ("tailored_correction", "tailored_aggregation"):
            if not isinstance(algorithm[key], bool):
                raise ValueError(f"algorithm.{key} must be true or false, got {algorithm[key]!r}")
        self.num_clients = int(cfg.num_clients)
        self.expulsions = Expulsions.from_settings(algorithm, self.num_clients, int(cfg.num_rounds))
        self.tailored_aggregation = bool(algorithm.tailored_aggregation)
        self.local_steps, self.gamma, self.delta_scale = correction_constants(
            cfg.train.local_steps, algorithm.gamma, algorithm.delta_scale
        )
        self.tailored_correction = bool(algorithm.tailored_correction)
        self.alpha = np.full(self.num_clients, INITIAL_ALPHA)
        self.last_update = LayerState("taco/u")
        self._round: dict[int, tuple[float, float]] = {}  # pid -> (alpha sent, alpha new)
        self._fallback = False

    def excluded(self) -> frozenset[int]:
        return self.expulsions.excluded()

    # ----- sending -------------------------------------------------------------------------
    def node_content(self, plan: RoundPlan, partition_id: int) -> RecordDict:
        content = super().node_content(plan, partition_id)
        content[TACO_LAST_UPDATE] = self.last_update.record(plan.arrays)
        config = dict(content.config_records[protocol.CONFIG])
        config[TACO_ALPHA] = float(self.alpha[partition_id])
        content[protocol.CONFIG] = ConfigRecord(config)
        return content

    # ----- receiving -----------------------------------------------------------------------
    def reject(self, reply: ClientReply) -> str | None:
        if not 0 <= reply.partition_id < self.num_clients:
            return f"partition {reply.partition_id} is outside 0..{self.num_clients - 1}"
        return self.expulsions.refusal(reply.partition_id)

    def base_weights(self, plan: RoundPlan, replies: list[ClientReply]) -> list[float]:
        """alpha_i / sum alpha from this round's uploads (which also sets the alpha_i that
        clients correct with next round), or uniform without tailored aggregation."""
        alpha = tailored_coefficients(self.literal_uploads(plan, replies))
        self._round = {
            r.partition_id: (float(self.alpha[r.partition_id]), float(a))
            for r, a in zip(replies, alpha, strict=True)
        }
        weights, self._fallback = normalized_or_uniform(alpha)
        if self._fallback:
            log.warning(
                "round %d: every alpha is 0 (no upload agrees with the mean); averaging uniformly",
                plan.round,
            )
        if not self.tailored_aggregation:
            return [1.0] * len(replies)
        return weights.tolist()

    def literal_uploads(self, plan: RoundPlan, replies: list[ClientReply]) -> np.ndarray:
        """Delta_i less the correction the K-scaled reading adds beyond the paper's literal
        one (`literal_uploads` of fl_system.algorithms.taco), over the float layers: what alpha
        compares.
        A client's steps are its reported count, at most K (stragglers run fewer)."""
        uploads = flat_uploads(plan.arrays, replies)
        if not self.tailored_correction or self.delta_scale == 1.0:
            return uploads
        steps = [
            min(float(r.metrics.get(protocol.NUM_STEPS, self.local_steps)), self.local_steps)
            for r in replies
        ]
        return literal_uploads(
            uploads,
            self.last_update.flat(plan.arrays),
            alpha_sent=np.array([self.alpha[r.partition_id] for r in replies]),
            steps=np.maximum(steps, 0.0),
            gamma=self.gamma,
            delta_scale=self.delta_scale,
            local_steps=self.local_steps,
        )

    def aggregate(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> list[np.ndarray]:
        new_model = self.average(plan, replies, weights)
        names = list(plan.arrays.keys())
        start = float_layers(plan.arrays)
        u = self.last_update.ensure(plan.arrays)
        for name, layer in zip(names, new_model, strict=True):
            if name in u:
                u[name] = start[name].astype(np.float64) - layer.astype(np.float64)
        new_alpha = {pid: a for pid, (_, a) in self._round.items()}
        for pid, a in new_alpha.items():
            self.alpha[pid] = a
        self.expulsions.record(plan.round, new_alpha)
        return new_model

    def round_metrics(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for pid, (sent, new) in sorted(self._round.items()):
            metrics[f"alpha_{pid}"] = new
            metrics[f"correction_{pid}"] = 1.0 - sent
        metrics["alpha_mean"] = float(np.mean([new for _, new in self._round.values()]))
        kappa = self.expulsions.kappa
        metrics["flagged"] = sum(new >= kappa for _, new in self._round.values())
        metrics["taco_uniform_fallback"] = int(self._fallback)
        return {**metrics, **self.expulsions.metrics(plan.round)}

    def summarize(self, rows: Sequence[Mapping[str, object]]) -> dict[str, object]:
        """summary.json: the expelled partitions with the round and their alpha history."""
        return {**super().summarize(rows), "expelled": self.expulsions.summary(rows)}

    # ----- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> StrategyState:
        return {
            **super().state_dict(),
            **self.last_update.state_dict(),
            "taco/alpha": self.alpha.copy(),
            **self.expulsions.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        rest = self.expulsions.take_state(self.last_update.take_state(state))
        self.alpha = _per_client(rest.pop("taco/alpha"), "taco/alpha", self.num_clients)
        super().load_state_dict(rest)


def _per_client(value: object, name: str, num_clients: int) -> np.ndarray:
    """A saved per-partition array, checked against the federation's size."""
    array = np.asarray(value)
    if array.shape != (num_clients,):
        raise ValueError(f"{name} has shape {array.shape}, expected ({num_clients},)")
    return array.copy()


@dataclass
class Expulsions:
    """TACO's freeloader ledger: a strike for each alpha_i >= kappa after the first
    `warmup_rounds`, lam strikes expel a partition for good (with `expel`); a round that flags
    every client gives none unless `strike_all`, and a round whose strikes would expel every
    client left gives none."""

    num_clients: int
    kappa: float
    lam: int
    expel: bool
    warmup_rounds: int
    strike_all: bool
    strikes: np.ndarray = field(init=False)
    expelled_at: np.ndarray = field(init=False)  # the round of expulsion, 0 = not expelled

    def __post_init__(self) -> None:
        self.strikes = np.zeros(self.num_clients, dtype=np.int64)
        self.expelled_at = np.zeros(self.num_clients, dtype=np.int64)

    @classmethod
    def from_settings(
        cls, algorithm: Mapping[str, object], num_clients: int, num_rounds: int
    ) -> Expulsions:
        """The ledger of `algorithm.*`, each setting checked (ValueError naming it)."""
        kappa, lam, warmup = algorithm["kappa"], algorithm["lam"], algorithm["warmup_rounds"]
        if isinstance(kappa, bool) or not isinstance(kappa, int | float) or not 0 < kappa <= 1:
            raise ValueError(f"algorithm.kappa must be a number in (0, 1], got {kappa!r}")
        if lam is None:
            lam = max(math.ceil(num_rounds / 5), MIN_DEFAULT_LAM)
        if isinstance(lam, bool) or not isinstance(lam, int) or lam < 1:
            raise ValueError(
                f"algorithm.lam must be null (T / 5, at least {MIN_DEFAULT_LAM}) or an integer "
                f">= 1, got {lam!r}"
            )
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise ValueError(f"algorithm.warmup_rounds must be an integer >= 0, got {warmup!r}")
        for key in ("expel", "strike_all"):
            if not isinstance(algorithm[key], bool):
                raise ValueError(f"algorithm.{key} must be true or false, got {algorithm[key]!r}")
        return cls(
            num_clients,
            float(kappa),
            lam,
            bool(algorithm["expel"]),
            warmup,
            bool(algorithm["strike_all"]),
        )

    def excluded(self) -> frozenset[int]:
        return frozenset(int(p) for p in np.flatnonzero(self.expelled_at))

    def refusal(self, partition_id: int) -> str | None:
        """Why a reply from this partition is refused (None: it is not expelled)."""
        if not self.expelled_at[partition_id]:
            return None
        return (
            f"partition {partition_id} was expelled at round "
            f"{self.expelled_at[partition_id]} (freeloader)"
        )

    def record(self, round_: int, alpha: Mapping[int, float]) -> None:
        """This round's strikes from its alpha_i, and the expulsions they bring."""
        if round_ <= self.warmup_rounds:
            return  # early rounds, where honest updates agree too: no strikes
        strikes, expelled = record_strikes(
            alpha,
            {pid: int(self.strikes[pid]) for pid in alpha},
            kappa=self.kappa,
            lam=self.lam,
            strike_all=self.strike_all,
        )
        left = set(range(self.num_clients)) - self.excluded()
        if self.expel and expelled and left <= set(expelled):
            log.warning(
                "round %d: every client left (%s) would reach %d strikes: none is expelled "
                "and the round gives no strikes, as alpha cannot tell freeloaders from honest "
                "clients that all agree",
                round_,
                ", ".join(map(str, expelled)),
                self.lam,
            )
            return
        for pid, count in strikes.items():
            self.strikes[pid] = count
        if self.expel:
            for pid in expelled:
                self.expelled_at[pid] = round_
                log.warning(
                    "round %d: partition %d expelled as a freeloader: alpha >= %g in %d rounds "
                    "(alpha this round %.3f; its history is alpha_%d in metrics.csv)",
                    round_,
                    pid,
                    self.kappa,
                    strikes[pid],
                    alpha[pid],
                    pid,
                )

    def metrics(self, round_: int) -> dict[str, float | str]:
        """metrics.csv: how many are expelled, and which were this round."""
        now = np.flatnonzero(self.expelled_at == round_)
        return {"expelled": len(self.excluded()), "expelled_now": " ".join(map(str, now))}

    def summary(self, rows: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
        """Each expelled partition with its round and its alpha history (metrics.csv rows)."""
        expelled = []
        for pid in sorted(self.excluded()):
            column = f"alpha_{pid}"
            history = [
                [int(str(row["round"])), float(str(row[column]))]
                for row in rows
                if row.get(column) not in (None, "")
            ]
            expelled.append(
                {"partition": pid, "round": int(self.expelled_at[pid]), "alpha": history}
            )
        return expelled

    def state_dict(self) -> StrategyState:
        return {"taco/strikes": self.strikes.copy(), "taco/expelled_at": self.expelled_at.copy()}

    def take_state(self, state: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Load this ledger's keys; the rest of `state`."""
        rest = dict(state)
        for name in ("strikes", "expelled_at"):
            key = f"taco/{name}"
            setattr(self, name, _per_client(rest.pop(key), key, self.num_clients))
        return rest
