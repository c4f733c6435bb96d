"""FedDisco (Ye et al., ICML 2023), client half: the scalar d_k, never the label histogram.

Local training is the base algorithm's; FedDisco only needs each client's distance d_k
between its label distribution and the target T (uniform, or the one the server derives from
every client's label counts with `disco.target=global`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from flwr.app import ConfigRecord
from omegaconf import DictConfig

from fl_system import protocol
from fl_system.disco import discrepancy, label_distribution, uniform_target


def _settings(cfg: DictConfig) -> DictConfig | None:
    disco = cfg.algorithm.get("disco")
    return disco if disco is not None and disco.enabled else None


def label_counts(labels: np.ndarray, num_classes: int) -> np.ndarray:
    return np.bincount(np.asarray(labels, dtype=np.int64), minlength=num_classes)


def handshake_metrics(cfg: DictConfig, labels: Callable[[], np.ndarray]) -> dict[str, list[float]]:
    """Label counts for the server's target T, sent only when `disco.target=global`.

    This reveals the histogram to the server; the paper sums them with secure aggregation.
    """
    disco = _settings(cfg)
    if disco is None or disco.target != "global":
        return {}
    counts = label_counts(labels(), int(cfg.dataset.num_classes))
    return {protocol.DISCO_COUNTS: counts.astype(float).tolist()}


def train_metrics(cfg: DictConfig, labels: np.ndarray, config: ConfigRecord) -> dict[str, float]:
    """{disco-d: d_k} when FedDisco weighting is on (attached to every reply; tiny)."""
    disco = _settings(cfg)
    if disco is None:
        return {}
    num_classes = int(cfg.dataset.num_classes)
    if protocol.DISCO_TARGET in config:
        target = np.maximum(np.asarray(config[protocol.DISCO_TARGET], dtype=np.float64), 1e-12)
        target = target / target.sum()
    else:
        target = uniform_target(num_classes)
    dist = label_distribution(label_counts(labels, num_classes))
    return {protocol.DISCO_D: discrepancy(dist, target, disco.metric)}
