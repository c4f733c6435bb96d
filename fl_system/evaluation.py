"""Accuracy and loss of a model on a labelled array set (central and local evaluation)."""

from __future__ import annotations

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
        xb = torch.as_tensor(x[start : start + batch_size]).to(device)
        yb = torch.as_tensor(y[start : start + batch_size], dtype=torch.long).to(device)
        logits = model(xb)
        loss += float(loss_fn(logits, yb))
        correct += int((logits.argmax(dim=1) == yb).sum())
    model.to("cpu")
    return correct / len(x), loss / len(x)
