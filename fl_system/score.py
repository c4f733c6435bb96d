"""Which metrics.csv column a run is judged by: best, final and the target follow it.

Central evaluation writes test_* columns, federated evaluation fed_* columns; with both,
the central one leads. `evaluation.select` picks the metric (accuracy unless named).
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf


def prefix(cfg: DictConfig) -> str:
    mode = OmegaConf.select(cfg, "evaluation.mode", default="central")
    return "fed" if mode == "federated" else "test"


LOWER_IS_BETTER = frozenset({"loss", "mse", "mae"})


def metric(cfg: DictConfig) -> str:
    """`evaluation.select`; under task=regression, accuracy (the default) means R^2."""
    name = str(OmegaConf.select(cfg, "evaluation.select", default="accuracy"))
    return "r2" if name == "accuracy" and cfg.get("task") == "regression" else name


def column(cfg: DictConfig) -> str:
    """The selected metric's column (test_accuracy by default)."""
    return f"{prefix(cfg)}_{metric(cfg)}"


def lower_is_better(cfg: DictConfig) -> bool:
    return metric(cfg) in LOWER_IS_BETTER


def reached(cfg: DictConfig, value: float | None, target: float) -> bool:
    """Whether a round's selected metric reached `target_accuracy` (at or below it for an
    error, at or above it otherwise)."""
    if value is None:
        return False
    return value <= target if lower_is_better(cfg) else value >= target


def accuracy(cfg: DictConfig) -> str:
    return f"{prefix(cfg)}_accuracy"


def loss(cfg: DictConfig) -> str:
    return f"{prefix(cfg)}_loss"
