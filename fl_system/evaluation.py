"""Accuracy and loss of a model on a labelled array set (central and local evaluation)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn


@torch.no_grad()
def evaluate(
    model: nn.Module, x: np.ndarray, y: np.ndarray, *, device: torch.device, batch_size: int = 512
) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of `model` on (x, y)."""
    model.to(device).eval()
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    correct = 0
    loss = 0.0
    for start in range(0, len(x), batch_size):
        # torch.tensor copies: the loaded splits are read-only (frozen in the cache), and a
        # tensor sharing their memory could write into them
        xb = torch.tensor(x[start : start + batch_size], device=device)
        yb = torch.tensor(y[start : start + batch_size], dtype=torch.long, device=device)
        logits = model(xb)
        loss += float(loss_fn(logits, yb))
        correct += int((logits.argmax(dim=1) == yb).sum())
    model.to("cpu")
    return correct / len(x), loss / len(x)


WORST_SHARE = 0.1  # "worst decile": the mean of the lowest-scoring 10 % of clients


def client_accuracy_summary(accuracies: Sequence[float]) -> tuple[float, float]:
    """(mean, worst-decile mean) of per-client accuracies, every client weighing the same;
    the worst decile is the mean of the ceil(10 %) lowest, at least one client."""
    if not accuracies:
        raise ValueError("no client accuracies to summarise")
    ordered = sorted(accuracies)
    worst = ordered[: max(1, math.ceil(WORST_SHARE * len(ordered)))]
    return sum(ordered) / len(ordered), sum(worst) / len(worst)
