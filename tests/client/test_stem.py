"""STEM's client rule on a tiny linear model: two steps and the reply's momentum against a
hand computation with plain autograd; a = 1 without a received momentum is FedAvg bitwise."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, RecordDict

from client_app.algorithms.fedavg import FedAvgRule
from client_app.algorithms.stem import _LAST_BATCH_SEED, StemRule
from client_app.trainer import TrainSettings, batches, train_locally
from fl_system.algorithms.stem import STEM_MOMENTUM
from fl_system.learning.seeding import derive_seed
from tests.client.tiny import linear_data, linear_model

CPU = torch.device("cpu")
SEED, LR, A = 5, 0.1, 0.2


def _train(rule, received=None, steps: int = 2):
    model = linear_model()
    x, y = linear_data()
    settings = TrainSettings(batch_size=8, lr=LR, local_steps=steps)
    result = train_locally(model, x, y, rule, settings, seed=SEED, device=CPU, received=received)
    return model, result


def _grad(w: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    leaves = [t.detach().clone().requires_grad_(True) for t in w]
    loss = torch.nn.functional.cross_entropy(x @ leaves[0].T + leaves[1], y)
    return list(torch.autograd.grad(loss, leaves))


def test_two_steps_and_the_reply_momentum_by_hand() -> None:
    """w1 = w0 - lr d0 (d0 received); d1 = g(w1; b1) + 0.8 (d0 - g(w0; b1)); w2 = w1 - lr d1;
    the reply carries d2 = g(w2; b) + 0.8 (d1 - g(w1; b)) on one more batch b."""
    d0 = [torch.full((2, 4), 0.3), torch.tensor([0.1, -0.1])]
    names = [k for k, _ in linear_model().named_parameters()]
    received = RecordDict(
        {STEM_MOMENTUM: ArrayRecord({k: Array(d.numpy()) for k, d in zip(names, d0, strict=True)})}
    )
    model, result = _train(StemRule(a=A, batch_size=8), received)
    x, y = (torch.as_tensor(v) for v in linear_data())
    y = y.long()
    order = list(
        batches(
            len(y), TrainSettings(batch_size=8, local_steps=2), torch.Generator().manual_seed(SEED)
        )
    )
    w0 = [p.detach().clone() for p in linear_model().parameters()]
    w1 = [w - LR * d for w, d in zip(w0, d0, strict=True)]
    b1 = order[1]
    g1, g0 = _grad(w1, x[b1], y[b1]), _grad(w0, x[b1], y[b1])
    d1 = [g + (1 - A) * (d - gp) for g, gp, d in zip(g1, g0, d0, strict=True)]
    w2 = [w - LR * d for w, d in zip(w1, d1, strict=True)]
    for p, expected in zip(model.parameters(), w2, strict=True):
        torch.testing.assert_close(p.detach(), expected, rtol=1e-5, atol=1e-6)
    rng = np.random.default_rng(derive_seed(SEED, _LAST_BATCH_SEED))
    b = torch.as_tensor(rng.choice(len(y), size=8, replace=False))
    g2, g1b = _grad(w2, x[b], y[b]), _grad(w1, x[b], y[b])
    d2 = [g + (1 - A) * (d - gp) for g, gp, d in zip(g2, g1b, d1, strict=True)]
    sent = result.extras.array_records[STEM_MOMENTUM]
    for name, expected in zip(names, d2, strict=True):
        torch.testing.assert_close(
            torch.as_tensor(sent[name].numpy()), expected, rtol=1e-5, atol=1e-6
        )


def test_a_of_one_without_a_momentum_is_fedavg() -> None:
    stem, _ = _train(StemRule(a=1.0, batch_size=8), steps=3)
    fedavg, _ = _train(FedAvgRule(), steps=3)
    for a, b in zip(stem.parameters(), fedavg.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_momentum_that_does_not_fit_is_refused() -> None:
    received = RecordDict(
        {STEM_MOMENTUM: ArrayRecord({"classifier.weight": Array(np.zeros(3, np.float32))})}
    )
    with pytest.raises(ValueError, match=r"momentum does not fit parameter 'classifier\.weight'"):
        _train(StemRule(), received)


def test_a_outside_the_unit_interval_is_named() -> None:
    with pytest.raises(ValueError, match=r"algorithm.a must be a number in \[0, 1\], got 1.5"):
        StemRule(a=1.5)
