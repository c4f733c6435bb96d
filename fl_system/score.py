"""Which metrics.csv column a run is judged by: best, final and the target follow it.

Central evaluation writes test_* columns, federated evaluation fed_* columns; with both,
the central one leads. `evaluation.select` picks the metric (accuracy unless named).
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf


def prefix(cfg: DictConfig) -> str:
    mode = OmegaConf.select(cfg, "evaluation.mode", default="central")
    return "fed" if mode == "federated" else "test"


def column(cfg: DictConfig) -> str:
    """The selected metric's column (test_accuracy by default)."""
    return f"{prefix(cfg)}_{OmegaConf.select(cfg, 'evaluation.select', default='accuracy')}"


def accuracy(cfg: DictConfig) -> str:
    return f"{prefix(cfg)}_accuracy"


def loss(cfg: DictConfig) -> str:
    return f"{prefix(cfg)}_loss"
