"""How a run is evaluated, and which metrics.csv column it is judged by.

Central evaluation writes test_* columns, federated evaluation fed_* columns; with both,
the central one leads. `evaluation.select` picks the metric best, final and the target
follow (accuracy unless named; R^2 under task=regression).
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from fl_system.learning.pooled_metrics import REGRESSION_METRICS


def mode(cfg: DictConfig) -> str:
    """`evaluation.mode`: central, federated or both."""
    return str(OmegaConf.select(cfg, "evaluation.mode", default="central"))


def regression(cfg: DictConfig) -> bool:
    """`task=regression`: the label is a number to predict."""
    return cfg.get("task", "classification") == "regression"


def reported(cfg: DictConfig) -> tuple[str, ...]:
    """The metrics an evaluation reports: mse, mae, r2 (and the loss) under task=regression;
    else accuracy, loss and `evaluation.metrics`, AUROC with its error bound."""
    if regression(cfg):
        return REGRESSION_METRICS
    wanted = list(OmegaConf.select(cfg, "evaluation.metrics", default=[]))
    bound = ["auroc_error"] if "auroc" in wanted else []
    return tuple(dict.fromkeys(["accuracy", "loss", *wanted, *bound]))


def prefix(cfg: DictConfig) -> str:
    return "fed" if mode(cfg) == "federated" else "test"


LOWER_IS_BETTER = frozenset({"loss", "mse", "mae"})


def metric(cfg: DictConfig) -> str:
    """`evaluation.select`; under task=regression, accuracy (the default) means R^2."""
    name = str(OmegaConf.select(cfg, "evaluation.select", default="accuracy"))
    return "r2" if name == "accuracy" and regression(cfg) else name


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
