"""Per-sample gradient moments: the mean of squares is the empirical Fisher diagonal that EFL
sends (EFL spec 2.2, 7), checked against a hand computation on a two-parameter logistic model."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from client_app.per_sample import gradient_moments


class Logistic(nn.Module):
    """p(y = 1 | x) = sigmoid(w x + b), as two logits [0, w x + b] for cross-entropy."""

    def __init__(self, w: float, b: float) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor(w))
        self.b = nn.Parameter(torch.tensor(b))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.w * x[:, 0] + self.b
        return torch.stack([torch.zeros_like(z), z], dim=-1)


def test_mean_of_squares_is_the_empirical_fisher_of_a_logistic_model() -> None:
    """d(-log p(y|x))/dw = (p - y) x and d/db = (p - y): u = mean of their squares."""
    x = np.array([[0.5], [-1.0], [2.0], [0.0]], dtype=np.float32)
    y = np.array([1, 0, 0, 1])
    w, b = 0.8, -0.3
    p = 1 / (1 + np.exp(-(w * x[:, 0].astype(np.float64) + b)))
    expected_u = [np.mean(((p - y) * x[:, 0]) ** 2), np.mean((p - y) ** 2)]
    expected_mean = [np.mean((p - y) * x[:, 0]), np.mean(p - y)]

    mean, second, used = gradient_moments(Logistic(w, b), x, y, samples=256, seed=0)

    assert used == 4  # fewer examples than asked: all of them
    np.testing.assert_allclose(second, expected_u, rtol=1e-5)
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-5)
    assert np.all(second >= 0)
