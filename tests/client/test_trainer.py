"""Local training engine and the FedAvg/FedProx local rules on tiny models."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from client_app.algorithms.base import LocalContext
from client_app.algorithms.fedavg import FedAvgRule
from client_app.algorithms.fedprox import FedProxRule
from client_app.trainer import TrainSettings, batches, train_locally
from fl_system.learning.evaluation import evaluate
from tests.client.tiny import linear_data, linear_model

CPU = torch.device("cpu")


def _train(rule, settings: TrainSettings | None = None, seed: int = 5) -> nn.Module:
    settings = settings or TrainSettings(batch_size=8, lr=0.1)
    model = linear_model()
    x, y = linear_data()
    train_locally(model, x, y, rule, settings, seed=seed, device=CPU)
    return model


def test_same_seed_same_model_other_seed_otherlinear_model() -> None:
    a, b, c = _train(FedAvgRule()), _train(FedAvgRule()), _train(FedAvgRule(), seed=6)
    assert torch.equal(a.classifier.weight, b.classifier.weight)
    assert not torch.equal(a.classifier.weight, c.classifier.weight)


def test_fedprox_with_mu_zero_is_fedavg() -> None:
    assert torch.equal(
        _train(FedProxRule(mu=0.0)).classifier.weight, _train(FedAvgRule()).classifier.weight
    )


def test_fedprox_term_gradient_is_mu_times_drift() -> None:
    model = linear_model()
    ctx = LocalContext(
        model=model,
        global_params=[p.detach().clone() for p in model.parameters()],
        device=CPU,
        lr=0.1,
        received=None,  # type: ignore[arg-type]
    )
    with torch.no_grad():
        model.classifier.weight.add_(1.5)
    term = FedProxRule(mu=0.2).loss_term(ctx, None, None, None, None)  # type: ignore[arg-type]
    term.backward()
    torch.testing.assert_close(
        model.classifier.weight.grad, torch.full_like(model.classifier.weight, 0.2 * 1.5)
    )
    torch.testing.assert_close(model.classifier.bias.grad, torch.zeros_like(model.classifier.bias))
    assert term.item() == pytest.approx(0.5 * 0.2 * 1.5**2 * 8)


def test_fedprox_pulls_towards_the_globallinear_model() -> None:
    start = linear_model().classifier.weight.detach().clone()
    drift_avg = (_train(FedAvgRule()).classifier.weight - start).norm()
    drift_prox = (_train(FedProxRule(mu=5.0)).classifier.weight - start).norm()
    assert drift_prox < drift_avg


def test_fedprox_rejects_negative_mu() -> None:
    with pytest.raises(ValueError, match="mu must be >= 0"):
        FedProxRule(mu=-1)


def test_batches_epochs_and_fixed_steps() -> None:
    g = torch.Generator().manual_seed(0)
    epochs = list(batches(10, TrainSettings(local_epochs=2, batch_size=4), g))
    assert [len(b) for b in epochs] == [4, 4, 2, 4, 4, 2]
    assert sorted(torch.cat(epochs[:3]).tolist()) == list(range(10))
    steps = list(batches(10, TrainSettings(local_steps=7, batch_size=4), g))
    assert len(steps) == 7
    dropped = list(batches(10, TrainSettings(batch_size=4, drop_last=True), g))
    assert [len(b) for b in dropped] == [4, 4]


def test_result_reports_examples_steps_and_loss() -> None:
    x, y = linear_data()
    result = train_locally(
        linear_model(), x, y, FedAvgRule(), TrainSettings(batch_size=8), seed=1, device=CPU
    )
    assert result.num_examples == 40 and result.steps == 5
    assert 0 < result.mean_loss < 5 and result.seconds > 0


def test_augmentation_transforms_every_training_batch_and_not_the_local_score() -> None:
    x, y = linear_data()
    seen: list[torch.Tensor] = []

    def negate(batch: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        seen.append(batch)
        return -batch

    settings = TrainSettings(batch_size=8, lr=0.1, local_steps=3)
    plain, flipped = linear_model(), linear_model()
    a = train_locally(plain, x, y, FedAvgRule(), settings, seed=5, device=CPU, evaluate_on=(x, y))
    b = train_locally(
        flipped, x, y, FedAvgRule(), settings, seed=5, device=CPU, evaluate_on=(x, y),
        augment=negate,
    )  # fmt: skip
    assert len(seen) == b.steps == 3 and all(len(s) == 8 for s in seen)
    assert not torch.equal(plain.classifier.weight, flipped.classifier.weight)
    mirrored = linear_model()  # training on -x is training a model of -w on x
    c = train_locally(mirrored, -x, y, FedAvgRule(), settings, seed=5, device=CPU)
    assert torch.allclose(mirrored.classifier.weight, flipped.classifier.weight)
    assert (
        b.local_eval == evaluate(flipped, x, y, device=CPU) != evaluate(flipped, -x, y, device=CPU)
    )
    assert a.local_eval is not None and c.steps == 3
