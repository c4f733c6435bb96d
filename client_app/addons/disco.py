"""Disco weighting (FedDisco, Ye et al., ICML 2023), the add-on's client half: the scalar d_k,
never the label histogram.

Local training is the base algorithm's; FedDisco only needs each client's distance d_k
between its label distribution and the target T (uniform, or the one the server derives from
every client's label counts with `disco.target=global`). An add-on: `algorithm.disco.client`.
Under `secagg=secaggplus` the label counts are summed securely (the server learns only the
total), and d_k goes with the protocol's setup, where the weights are fixed before masking.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from flwr.app import ConfigRecord

from client_app.addons import ClientHooks, LocalData
from fl_system.addons.disco import (
    DISCO_COUNTS,
    DISCO_D,
    DISCO_TARGET,
    discrepancy,
    label_distribution,
    uniform_target,
)


def label_counts(labels: np.ndarray, num_classes: int) -> np.ndarray:
    return np.bincount(np.asarray(labels, dtype=np.int64), minlength=num_classes)


class DiscoReport(ClientHooks):
    """Reports d_k with every train reply, and label counts for target=global: at the
    handshake in the clear, or as its term of a secure sum under secagg=secaggplus."""

    def __init__(
        self,
        *,
        num_classes: int,
        metric: str = "kl",
        target: str = "uniform",
        secagg: str = "none",
    ) -> None:
        self.num_classes = int(num_classes)
        self.metric = metric
        self.target = target
        self.secure = secagg != "none"
        self.summed = DISCO_COUNTS if target == "global" and self.secure else None

    def handshake_metrics(self, data: Callable[[], LocalData]) -> dict[str, list[float]]:
        """Label counts for the server's target T, sent in the clear only when
        `disco.target=global` without secure aggregation (they reveal the histogram)."""
        if self.target != "global" or self.secure:
            return {}
        counts = label_counts(data()[1], self.num_classes)
        return {DISCO_COUNTS: counts.astype(float).tolist()}

    def summand(self, data: LocalData) -> np.ndarray:
        """The label counts, as this client's term of the secure sum T is made from."""
        return label_counts(data[1], self.num_classes).astype(np.float64)

    def reply_metrics(self, data: LocalData, config: ConfigRecord) -> dict[str, float]:
        return self.weighing_metrics(data, config)

    def weighing_metrics(self, data: LocalData, config: ConfigRecord) -> dict[str, float]:
        """{disco-d: d_k}, against the target the server sent or the uniform one."""
        if DISCO_TARGET in config:
            target = np.maximum(np.asarray(config[DISCO_TARGET], dtype=np.float64), 1e-12)
            target = target / target.sum()
        else:
            target = uniform_target(self.num_classes)
        dist = label_distribution(label_counts(data[1], self.num_classes))
        return {DISCO_D: discrepancy(dist, target, self.metric)}
