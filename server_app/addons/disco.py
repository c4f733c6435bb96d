"""Disco weighting (FedDisco, Ye et al., ICML 2023), the add-on's server half:
discrepancy-aware aggregation weights.

FedDisco changes only the coefficients of the model average, so it is an add-on weighting that
every averaging strategy accepts (`algorithm.disco.enabled=true`); `algorithm=feddisco` is
FedAvg with it switched on. Each client reports its scalar d_k (see `client_app/addons/
disco.py`); the server keeps the first value per partition id and computes
p_k = ReLU(n_k - a d_k + b) / sum ReLU(...) over the round's participants. With
`target=global` the clients' label counts make T: reported at the handshake in the clear, or,
under `secagg=secaggplus`, summed securely once over every connected node (the server learns
the total only, as the paper assumes; a node that joins later does not change T, since a sum
of it alone would reveal its counts).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence

import numpy as np
from flwr.app import MetricRecord

from fl_system.addons import check_settings
from fl_system.addons.disco import (
    DISCO_COUNTS,
    DISCO_D,
    DISCO_TARGET,
    disco_weights,
    label_distribution,
    normalization_for,
)
from server_app.addons import ServerAddon
from server_app.federated.replies import ClientReply

log = logging.getLogger(__name__)


class DiscoWeighting(ServerAddon):
    """Replaces data-size weights with FedDisco's; keeps the d_k cache (checkpointed)."""

    name = "disco"
    state_prefix = "disco/"
    weighting = "Disco's discrepancy-aware weights"
    classification_only = "Disco weighs clients by how far their label distributions are"

    def __init__(
        self,
        *,
        a: float = 0.5,
        b: float = 0.1,
        metric: str = "kl",
        normalize_d: str = "auto",
        target: str = "uniform",
        secagg: str = "none",
    ) -> None:
        settings = {"a": a, "b": b, "metric": metric, "normalize_d": normalize_d, "target": target}
        check_settings(self.name, settings)
        self.a, self.b = float(a), float(b)
        self.metric, self.target = metric, target
        self.normalize_d = normalization_for(metric, normalize_d)  # "sum" or "none"
        self.d_by_partition: dict[int, float] = {}
        self.counts_by_partition: dict[int, np.ndarray] = {}
        self.secure = secagg != "none"
        self.summed_counts: np.ndarray | None = None  # under secagg: the clients' total

    # ----- target distribution (non-uniform variant) ---------------------------------------
    def on_join(self, partition_id: int, metrics: MetricRecord) -> None:
        """Label counts a client shared at the handshake (target=global only)."""
        if DISCO_COUNTS in metrics:
            counts = np.asarray(list(metrics[DISCO_COUNTS]), dtype=np.float64)
            self.counts_by_partition[partition_id] = counts

    def secure_sum(self) -> str | None:
        """The label counts, while target=global under secagg has no T yet."""
        wanted = self.target == "global" and self.secure and self.summed_counts is None
        return DISCO_COUNTS if wanted else None

    def take_secure_sum(self, total: list[np.ndarray]) -> None:
        """The clients' label counts in total: whole numbers, so the quantisation error
        (below one count for fewer than about a hundred clients) rounds away."""
        counts = np.rint(total[0])
        label_distribution(counts)  # refuses an empty or negative total
        self.summed_counts = counts

    def shared_config(self) -> dict[str, list[float]]:
        """T from the summed counts of every client seen, for target=global."""
        if self.target != "global":
            return {}
        if self.secure:
            counts = self.summed_counts
        else:
            counts = sum(self.counts_by_partition.values()) if self.counts_by_partition else None
        if counts is None:
            return {}
        return {DISCO_TARGET: label_distribution(counts).tolist()}

    # ----- weights -------------------------------------------------------------------------
    def weights(self, replies: Sequence[ClientReply]) -> np.ndarray:
        """p_k for the replies; clients with an invalid d_k get weight 0 (logged)."""
        for r in replies:
            if r.partition_id not in self.d_by_partition and DISCO_D in r.metrics:
                d = float(r.metrics[DISCO_D])
                if math.isfinite(d) and d >= 0:
                    self.d_by_partition[r.partition_id] = d
                else:
                    log.warning(
                        "partition %d reported disco-d=%r (must be finite and >= 0): "
                        "excluded from the average",
                        r.partition_id,
                        d,
                    )
        usable = [i for i, r in enumerate(replies) if r.partition_id in self.d_by_partition]
        missing = sorted(
            r.partition_id for r in replies if r.partition_id not in self.d_by_partition
        )
        if missing:
            log.warning("no valid disco-d from partitions %s: excluded from the average", missing)
        p = np.zeros(len(replies))
        if not usable:
            log.warning("no client has a valid disco-d: falling back to data-size weights")
            sizes = np.array([r.num_examples for r in replies], dtype=np.float64)
            return sizes / sizes.sum()
        sub, fell_back = disco_weights(
            [replies[i].num_examples for i in usable],
            [self.d_by_partition[replies[i].partition_id] for i in usable],
            a=self.a,
            b=self.b,
            normalize_d=self.normalize_d,
        )
        if fell_back:
            log.warning(
                "every FedDisco weight was clipped to 0 (a=%s, b=%s): using data-size weights",
                self.a,
                self.b,
            )
        p[usable] = sub
        return p

    # ----- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        pids = sorted(self.d_by_partition)
        state = {
            "disco/pids": np.array(pids, dtype=np.int64),
            "disco/d": np.array([self.d_by_partition[p] for p in pids], dtype=np.float64),
        }
        if self.counts_by_partition:
            cpids = sorted(self.counts_by_partition)
            state["disco/count_pids"] = np.array(cpids, dtype=np.int64)
            state["disco/counts"] = np.stack([self.counts_by_partition[p] for p in cpids])
        if self.summed_counts is not None:
            state["disco/summed_counts"] = self.summed_counts
        return state

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        self.d_by_partition = {
            int(p): float(d)
            for p, d in zip(state.get("disco/pids", []), state.get("disco/d", []), strict=True)
        }
        self.counts_by_partition = {
            int(p): np.asarray(c)
            for p, c in zip(
                state.get("disco/count_pids", []), state.get("disco/counts", []), strict=True
            )
        }
        if "disco/summed_counts" in state:
            self.summed_counts = np.asarray(state["disco/summed_counts"], dtype=np.float64)
