"""FedCat (Hu et al., 2022), server half: K model copies trained along chains of devices
(FedCat spec 1.2-1.10, 5).

One round is one hop. A cycle is K rounds: at its first round every copy starts from the
global model; in the round at cycle position pos the schedule (`fedcat_math.py`) picks one
device per random group and copy i goes to the device picked in group (pos + i) mod K, which
trains it as FedAvg would and sends it back; the copy remembers the samples it met. After the
K-th hop the global model becomes the copies' sample-weighted average (Eq. 3). Inside a cycle
the global model stands still, so the driver evaluates the copies' current sample-weighted
average instead (metrics.csv's `eval_model` says which: `copies_average` or `global`).

A device that fails or does not answer leaves its copy where it was: the copy skips that hop
(logged) and the cycle still closes; a copy that trained nowhere in a cycle drops out of the
average, and if none trained the global model stays (spec 5.11). Devices are partition ids, so
a seed gives the same chains in every runtime. The copies, their sample counts and the
schedule's counts, groups and generator are checkpointed: a run resumed inside a cycle ends
with the model an uninterrupted one reaches.

`concatenate=False` is "FedCat w/ GC" (the same picks, averaged every round like FedAvg);
`count_selection=False` is "FedCat w/ DC" (chains over K devices drawn uniformly). The clients
run FedAvg's local rule (or any other that needs nothing from the server, e.g. FedProx's).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Unpack

import numpy as np
from flwr.app import ArrayRecord, Message, RecordDict
from omegaconf import DictConfig

from fl_system.learning.aggregation import weighted_average
from fl_system.messages import protocol
from server_app.addons import ServerAddon
from server_app.federated.experiment_binding import Common
from server_app.federated.replies import ClientReply, arrays_like
from server_app.federated.state import StrategyState
from server_app.federated.strategy import FederatedStrategy
from server_app.rounds import RoundPlan, RoundResult, RoundSteps
from server_app.strategies.fedcat_math import ChainSchedule, copies_average, cycle_position

log = logging.getLogger(__name__)

_COPY = "fedcat/copy"  # checkpoint keys fedcat/copy<i>/<layer>


class FedCat(FederatedStrategy):
    """Chains of K model copies over count-balanced picks from K random groups.

    Parameters
    ----------
    k : Optional[int] (default: 10 % of num_clients, at least 1)
        Copies = groups = devices per round = rounds per cycle.
    eps : Optional[float] (default: 0.5)
        The probability of the greedy pick (the least used device).
    lam : Optional[int] (default: 1)
        New random groups every lam cycles.
    concatenate : Optional[bool] (default: True)
        False: "FedCat w/ GC", the same picks averaged every round (no chains).
    count_selection : Optional[bool] (default: True)
        False: "FedCat w/ DC", k devices drawn uniformly (no groups, no counts).
    num_rounds : Optional[int] (default: the experiment's, 5)
        The run's rounds, a multiple of k.
    clients_per_round : None
        FedCat picks k devices itself; another value is refused.
    **common
        The arguments every strategy takes (`FederatedStrategy`), but `fraction_train`.
    """

    own_start = "their chain's model copy"
    refused_addons = (
        (
            ServerAddon,
            "FedCat trains model copies along chains of devices, one device per copy "
            "and round, and averages the copies by the samples they met",
        ),
    )

    robust_aggregation = False  # copies are concatenated, not averaged per round

    def __init__(
        self,
        *,
        k: int | None = None,
        eps: float | None = None,
        lam: int | None = None,
        concatenate: bool | None = None,
        count_selection: bool | None = None,
        num_rounds: int | None = None,
        clients_per_round: int | None = None,
        **common: Unpack[Common],
    ) -> None:
        given = {"k": k, "eps": eps, "lam": lam, "concatenate": concatenate}
        settings = {f"algorithm.{key}": v for key, v in given.items()}
        settings |= {
            "algorithm.count_selection": count_selection,
            "num_rounds": num_rounds,
            "clients_per_round": clients_per_round,
        }
        super().__init__(settings=settings, **common)
        self.k, self.concatenate, self.schedule = _chain_settings(self.experiment)
        self.copies: list[dict[str, np.ndarray]] = []  # copy i's layers, inside a cycle
        self.samples = np.zeros(self.k, dtype=np.int64)  # samples each copy met this cycle
        self._copy_of: dict[int, int] = {}  # partition -> copy index, this round
        self._devices: list[int] = []
        self._copy_weights = np.zeros(self.k)  # at a cycle's end: samples_i / sum of samples

    # ----- choosing and sending ------------------------------------------------------------
    def choose(self, server_round: int, available: Sequence[int]) -> list[int]:
        self._devices = self.schedule.devices(server_round)
        self._copy_of = {d: i for i, d in enumerate(self._devices)}
        connected = set(available)
        missing = [d for d in self._devices if d not in connected]
        for d in missing:
            log.warning(
                "round %d: partition %d (copy %d) is not connected; the copy skips this hop",
                server_round,
                d,
                self._copy_of[d],
            )
        return [d for d in self._devices if d not in missing]

    def round(self, plan: RoundPlan) -> RoundSteps:
        if self.concatenate and cycle_position(plan.round, self.k) == 0:
            start = dict(zip(plan.arrays.keys(), plan.arrays.to_numpy_ndarrays(), strict=True))
            self.copies = [dict(start) for _ in range(self.k)]
            self.samples[:] = 0
        return (yield from super().round(plan))

    def node_content(self, plan: RoundPlan, partition_id: int) -> RecordDict:
        content = super().node_content(plan, partition_id)
        if self.concatenate:
            copy = self.copies[self._copy_of[partition_id]]
            content[protocol.ARRAYS] = arrays_like(plan.arrays, _layers(copy, plan.arrays.keys()))
        return content

    # ----- receiving -----------------------------------------------------------------------
    def reference(self, plan: RoundPlan, partition_id: int, reply: ClientReply) -> list[np.ndarray]:
        """A chain's device started from its copy."""
        if not self.concatenate or partition_id not in self._copy_of or not self.copies:
            return super().reference(plan, partition_id, reply)
        return _layers(self.copies[self._copy_of[partition_id]], plan.arrays.keys())

    def reject(self, reply: ClientReply) -> str | None:
        if reply.partition_id not in self._copy_of:
            return f"partition {reply.partition_id} was not picked this round"
        return None

    def finish_round(self, plan: RoundPlan, replies: Sequence[Message]) -> RoundResult:
        result = super().finish_round(plan, replies)
        if not self.concatenate or cycle_position(plan.round, self.k) == self.k - 1:
            return result
        return dataclasses.replace(result, scored=self._copies_average(plan))

    def aggregate(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> list[np.ndarray]:
        if not self.concatenate:  # w/ GC: FedAvg over this round's picks
            return weighted_average([r.arrays for r in replies], weights)
        names = list(plan.arrays.keys())
        trained = set()
        for r in replies:
            i = self._copy_of[r.partition_id]
            self.copies[i] = dict(zip(names, r.arrays, strict=True))
            self.samples[i] += r.num_examples
            trained.add(i)
        for i in sorted(set(range(self.k)) - trained):
            log.warning(
                "round %d: copy %d skips this hop (partition %d gave no usable reply)",
                plan.round,
                i,
                self._devices[i],
            )
        global_layers = plan.arrays.to_numpy_ndarrays()
        if cycle_position(plan.round, self.k) < self.k - 1:
            return global_layers
        average = self._copies_average(plan)
        self._copy_weights = self.samples / max(int(self.samples.sum()), 1)
        self.copies = []
        if average is None:
            log.warning("round %d: no copy trained this cycle; the global model stays", plan.round)
            return global_layers
        return average.to_numpy_ndarrays()

    def _copies_average(self, plan: RoundPlan) -> ArrayRecord | None:
        """The copies' sample-weighted average (None while no copy has trained)."""
        names = list(plan.arrays.keys())
        average = copies_average([_layers(c, names) for c in self.copies], self.samples)
        return None if average is None else arrays_like(plan.arrays, average)

    def weight_columns(self, replies: list[ClientReply], weights: np.ndarray) -> dict[str, float]:
        """Chains average copies, not replies: no per-reply weights (unless w/ GC)."""
        return {} if self.concatenate else super().weight_columns(replies, weights)

    def round_metrics(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> dict[str, float]:
        pos = cycle_position(plan.round, self.k)
        inside = self.concatenate and pos < self.k - 1
        weights = {}
        if self.concatenate and not inside:  # each copy's share of the new global model
            weights = {f"copy_weight_{i}": float(w) for i, w in enumerate(self._copy_weights)}
        return {
            "chain_pos": pos,
            **{f"copy_{i}": d for i, d in enumerate(self._devices)},
            "eval_model": "copies_average" if inside else "global",
            **weights,
        }

    def summarize(self, rows: Sequence[Mapping[str, object]]) -> dict[str, object]:
        """summary.json: how often each partition was picked (what the counts flatten)."""
        picks = _picks(rows, self.k, self.schedule.num_devices)
        return {
            **super().summarize(rows),
            "participation": {str(p): int(n) for p, n in enumerate(picks)},
            "participation_min": int(picks.min()),
            "participation_max": int(picks.max()),
        }

    # ----- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> StrategyState:
        return {
            **super().state_dict(),
            **self.schedule.state_dict(),
            **{
                f"{_COPY}{i}/{name}": layer.copy()
                for i, c in enumerate(self.copies)
                for name, layer in c.items()
            },
            "fedcat/samples": self.samples.copy(),
        }

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        rest = dict(state)
        self.schedule.load_state_dict(
            {k: rest.pop(k) for k in list(rest) if k in self.schedule.state_dict()}
        )
        self.samples = np.asarray(rest.pop("fedcat/samples")).astype(np.int64)
        self.copies = _take_copies(rest, self.k)
        super().load_state_dict(rest)


def _layers(copy: Mapping[str, np.ndarray], names: Sequence[str]) -> list[np.ndarray]:
    return [copy[name] for name in names]


def _chain_settings(cfg: DictConfig) -> tuple[int, bool, ChainSchedule]:
    """k, concatenate and the chain schedule of `algorithm.*`, each setting checked (a
    ValueError naming it)."""
    algorithm, num_clients = cfg.algorithm, int(cfg.num_clients)
    k, eps, lam = algorithm.k, algorithm.eps, algorithm.lam
    if cfg.clients_per_round is not None:
        raise ValueError(
            "fedcat picks algorithm.k clients per round itself: leave clients_per_round "
            f"null (got {cfg.clients_per_round})"
        )
    if k is None:
        k = max(1, round(0.1 * num_clients))
    for key, value in (("k", k), ("lam", lam)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"algorithm.{key} must be an integer, got {value!r}")
    if isinstance(eps, bool) or not isinstance(eps, int | float) or math.isnan(eps):
        raise ValueError(f"algorithm.eps must be a number in [0, 1], got {eps!r}")
    schedule = ChainSchedule(
        num_devices=num_clients,
        k=k,
        greedy_prob=eps,
        regroup_every=lam,
        seed=int(cfg.seed),
        count_selection=algorithm.count_selection,
    )
    if algorithm.concatenate and int(cfg.num_rounds) % k:
        raise ValueError(
            f"num_rounds ({cfg.num_rounds}) must be a multiple of algorithm.k ({k}): a FedCat "
            "cycle is k rounds, and the global model is set at a cycle's end"
        )
    return k, bool(algorithm.concatenate), schedule


def _picks(rows: Sequence[Mapping[str, object]], k: int, num_devices: int) -> np.ndarray:
    """How often each partition was picked, from metrics.csv's copy_<i> columns."""
    picks = np.zeros(num_devices, dtype=np.int64)
    for row in rows:
        for i in range(k):
            value = row.get(f"copy_{i}")
            if value not in (None, ""):
                picks[int(float(str(value)))] += 1
    return picks


def _take_copies(rest: dict[str, np.ndarray], k: int) -> list[dict[str, np.ndarray]]:
    """The model copies a checkpoint holds (none outside a cycle), their keys taken."""
    copies: dict[int, dict[str, np.ndarray]] = {}
    for key in [name for name in rest if name.startswith(_COPY)]:
        index, name = key[len(_COPY) :].split("/", 1)
        copies.setdefault(int(index), {})[name] = np.asarray(rest.pop(key))
    if copies and sorted(copies) != list(range(k)):
        raise ValueError(f"fedcat checkpoint holds copies {sorted(copies)}, expected k={k}")
    return [copies[i] for i in sorted(copies)]
