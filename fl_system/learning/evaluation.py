"""Accuracy and loss of a model on a labelled array set (central and local evaluation)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from flwr.app import Array, ArrayRecord
from omegaconf import DictConfig
from torch import nn

from fl_system.learning import score
from fl_system.learning.pooled_metrics import (
    BINS,
    confusion,
    pooled_metrics,
    pooled_moments,
    regression_metrics,
    score_histograms,
)


@dataclass
class Counts:
    """What scoring a model on labelled records leaves, summable across nodes: the
    confusion matrix, the sum of the cross-entropy losses and, when asked for, the
    one-vs-rest score histograms AUROC needs (`fl_system.learning.pooled_metrics`)."""

    confusion: np.ndarray
    loss_sum: float
    histograms: np.ndarray | None = None

    def __add__(self, other: Counts) -> Counts:
        hist = (
            None
            if self.histograms is None or other.histograms is None
            else self.histograms + other.histograms
        )
        return Counts(self.confusion + other.confusion, self.loss_sum + other.loss_sum, hist)

    def metrics(self) -> dict[str, float]:
        return pooled_metrics(self.confusion, self.loss_sum, self.histograms)


@dataclass
class RegressionCounts:
    """task=regression's summable counts: records, squared and absolute error sums, the
    targets' sum and their squared deviation from their own mean (pooled by
    `pooled_moments`, which stays exact where sums of raw squares would not)."""

    n: float
    sse: float
    sae: float
    sum_y: float
    m2_y: float

    def __add__(self, other: RegressionCounts) -> RegressionCounts:
        _, m2 = pooled_moments(
            [self.n, other.n], [self.sum_y, other.sum_y], [self.m2_y, other.m2_y]
        )
        return RegressionCounts(
            self.n + other.n,
            self.sse + other.sse,
            self.sae + other.sae,
            self.sum_y + other.sum_y,
            float(m2),
        )

    def metrics(self) -> dict[str, float]:
        return regression_metrics(self.n, self.sse, self.sae, self.m2_y)


@torch.no_grad()
def regression_count(
    model: nn.Module, x: np.ndarray, y: np.ndarray, *, device: torch.device, batch_size: int = 512
) -> RegressionCounts:
    """Score a one-output `model` on (x, y) with numeric targets y."""
    model.to(device).eval()
    predicted = []
    for start in range(0, len(x), batch_size):
        xb = torch.tensor(x[start : start + batch_size], device=device)
        predicted.append(model(xb)[:, 0].double().cpu().numpy())
    model.to("cpu")
    target = np.asarray(y, np.float64)
    error = np.concatenate(predicted) - target
    return RegressionCounts(
        float(len(target)),
        float((error**2).sum()),
        float(np.abs(error).sum()),
        float(target.sum()),
        float(((target - target.mean()) ** 2).sum()),
    )


@torch.no_grad()
def count(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    device: torch.device,
    num_classes: int,
    histograms: bool = False,
    batch_size: int = 512,
) -> Counts:
    """Score `model` on (x, y) in batches."""
    model.to(device).eval()
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    matrix = np.zeros((num_classes, num_classes), dtype=np.int64)
    hist = np.zeros((num_classes, 2, BINS), dtype=np.int64) if histograms else None
    loss = 0.0
    for start in range(0, len(x), batch_size):
        # torch.tensor copies: the loaded splits are read-only (frozen in the cache), and a
        # tensor sharing their memory could write into them
        xb = torch.tensor(x[start : start + batch_size], device=device)
        yb = torch.tensor(y[start : start + batch_size], dtype=torch.long, device=device)
        logits = model(xb)
        loss += float(loss_fn(logits, yb))
        labels = yb.cpu().numpy()
        matrix += confusion(labels, logits.argmax(dim=1).cpu().numpy(), num_classes)
        if hist is not None:
            hist += score_histograms(logits.double().cpu().numpy(), labels)
    model.to("cpu")
    return Counts(matrix, loss, hist)


def counts_for(
    cfg: DictConfig, model: nn.Module, x: np.ndarray, y: np.ndarray, *, device: torch.device
) -> Counts | RegressionCounts:
    """`model` scored on (x, y) as the run's evaluation needs: regression counts under
    task=regression, else the confusion matrix and loss (and AUROC's histograms if asked)."""
    if score.regression(cfg):
        return regression_count(model, x, y, device=device)
    return count(
        model,
        x,
        y,
        device=device,
        num_classes=int(cfg.dataset.num_classes),
        histograms="auroc" in score.reported(cfg),
    )


def evaluate(
    model: nn.Module, x: np.ndarray, y: np.ndarray, *, device: torch.device, batch_size: int = 512
) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of `model` on (x, y)."""
    num_classes = _outputs(model)
    counts = count(model, x, y, device=device, num_classes=num_classes, batch_size=batch_size)
    return float(np.trace(counts.confusion)) / len(x), counts.loss_sum / len(x)


def counts_record(counts: Counts | RegressionCounts) -> ArrayRecord:
    """Counts as they travel (an evaluate reply's `protocol.EVAL_COUNTS`)."""
    if isinstance(counts, RegressionCounts):
        values = [counts.n, counts.sse, counts.sae, counts.sum_y, counts.m2_y]
        return ArrayRecord({"regression": Array(np.array(values, dtype=np.float64))})
    arrays = {
        "confusion": counts.confusion.astype(np.int64),
        "loss_sum": np.array([counts.loss_sum], dtype=np.float64),
    }
    if counts.histograms is not None:
        arrays["histograms"] = counts.histograms.astype(np.int32)
    return ArrayRecord({k: Array(v) for k, v in arrays.items()})


def counts_from_record(record: ArrayRecord) -> Counts | RegressionCounts:
    if "regression" in record:
        return RegressionCounts(*(float(v) for v in record["regression"].numpy()))
    hist = record["histograms"].numpy().astype(np.int64) if "histograms" in record else None
    return Counts(
        record["confusion"].numpy().astype(np.int64),
        float(record["loss_sum"].numpy()[0]),
        hist,
    )


def _outputs(model: nn.Module) -> int:
    """The number of classes a model scores (its last linear layer's outputs)."""
    last = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
    return int(last.out_features)


WORST_SHARE = 0.1  # "worst decile": the mean of the lowest-scoring 10 % of clients


def client_accuracy_summary(accuracies: Sequence[float]) -> tuple[float, float]:
    """(mean, worst-decile mean) of per-client accuracies, every client weighing the same;
    the worst decile is the mean of the ceil(10 %) lowest, at least one client."""
    if not accuracies:
        raise ValueError("no client accuracies to summarise")
    ordered = sorted(accuracies)
    worst = ordered[: max(1, math.ceil(WORST_SHARE * len(ordered)))]
    return sum(ordered) / len(ordered), sum(worst) / len(worst)
