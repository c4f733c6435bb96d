"""Disco weighting (FedDisco, Ye et al., ICML 2023), the add-on's client half: the scalar d_k,
never the label histogram.

Local training is the base algorithm's; FedDisco only needs each client's distance d_k
between its label distribution and the target T (uniform, or the one the server derives from
every client's label counts with `disco.target=global`). An add-on: `algorithm.disco.client`.
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
    """Reports d_k with every train reply, and label counts at the handshake for target=global."""

    def __init__(self, *, num_classes: int, metric: str = "kl", target: str = "uniform") -> None:
        self.num_classes = int(num_classes)
        self.metric = metric
        self.target = target

    def handshake_metrics(self, data: Callable[[], LocalData]) -> dict[str, list[float]]:
        """Label counts for the server's target T, sent only when `disco.target=global`.

        This reveals the histogram to the server; the paper sums them with secure aggregation.
        """
        if self.target != "global":
            return {}
        counts = label_counts(data()[1], self.num_classes)
        return {DISCO_COUNTS: counts.astype(float).tolist()}

    def reply_metrics(self, data: LocalData, config: ConfigRecord) -> dict[str, float]:
        """{disco-d: d_k}, against the target the server sent or the uniform one."""
        if DISCO_TARGET in config:
            target = np.maximum(np.asarray(config[DISCO_TARGET], dtype=np.float64), 1e-12)
            target = target / target.sum()
        else:
            target = uniform_target(self.num_classes)
        dist = label_distribution(label_counts(data[1], self.num_classes))
        return {DISCO_D: discrepancy(dist, target, self.metric)}
