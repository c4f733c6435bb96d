"""A tiny seeded task for local-rule tests: 4 features, 2 classes, a linear classifier."""

from __future__ import annotations

import numpy as np
import torch

from fl_system.learning.models import MLP


def linear_data(n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.int64)


def linear_model() -> MLP:
    """No hidden layer: parameters `classifier.weight` and `classifier.bias`."""
    torch.manual_seed(0)
    return MLP(input_shape=[4], num_classes=2, hidden=())
