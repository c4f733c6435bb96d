"""FedGSNR's client statistics: exact per-sample gradients, against plain backward passes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from client_app.addons.gsnr import gradient_statistics
from fl_system.addons import gsnr
from fl_system.data.corruption import corrupt


def _data(n: int, features: int, classes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = rng.integers(0, classes, size=n)
    return x, y


def _per_sample_gradients(model: nn.Module, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """One ordinary backward pass per sample: rows of flattened trainable gradients."""
    rows = []
    for i in range(len(x)):
        model.zero_grad()
        logits = model(torch.as_tensor(x[i : i + 1]))
        nn.functional.cross_entropy(logits, torch.as_tensor(y[i : i + 1])).backward()
        rows.append(torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.requires_grad]))
    return torch.stack(rows).double().numpy()


def test_statistics_equal_one_backward_pass_per_sample() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 3))
    x, y = _data(40, 6, 3)
    mean, variance, used = gradient_statistics(model, x, y, samples=40, seed=1, chunk_size=7)
    rows = _per_sample_gradients(model, x, y)
    assert used == 40 and mean.shape == variance.shape == (4 * 6 + 4 + 3 * 4 + 3,)
    np.testing.assert_allclose(mean, rows.mean(axis=0), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(variance, rows.var(axis=0), rtol=1e-5, atol=1e-9)  # biased 1/s


def test_statistics_agree_with_the_micro_batch_estimate_on_a_linear_model() -> None:
    """m_k is the mean of micro-batch means; v_k ~ b * Var_j(micro-batch mean), spec 1.10."""
    torch.manual_seed(1)
    model = nn.Linear(8, 4)
    x, y = _data(2048, 8, 4, seed=2)
    mean, variance, _ = gradient_statistics(model, x, y, samples=2048, seed=0, chunk_size=256)
    b = 16
    micro = []
    for j in range(0, len(x), b):
        model.zero_grad()
        logits = model(torch.as_tensor(x[j : j + b]))
        nn.functional.cross_entropy(logits, torch.as_tensor(y[j : j + b])).backward()
        micro.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).double())
    g = torch.stack(micro).numpy()
    np.testing.assert_allclose(mean, g.mean(axis=0), rtol=1e-4, atol=1e-7)
    estimate = b * g.var(axis=0, ddof=1)
    assert estimate.sum() / variance.sum() == pytest.approx(1.0, abs=0.15)


def test_a_client_with_fewer_samples_than_asked_uses_what_it_has() -> None:
    model = nn.Linear(5, 2)
    x, y = _data(10, 5, 2)
    asked = gradient_statistics(model, x, y, samples=64, seed=3)
    exact = gradient_statistics(model, x, y, samples=10, seed=4)
    assert asked[2] == exact[2] == 10
    np.testing.assert_allclose(asked[0], exact[0], rtol=1e-6)
    np.testing.assert_allclose(asked[1], exact[1], rtol=1e-6)


def test_statistics_are_taken_in_eval_mode_over_trainable_parameters_only() -> None:
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(6, 5), nn.Dropout(p=0.5), nn.Linear(5, 3))
    model[0].requires_grad_(False)
    model.train()
    x, y = _data(30, 6, 3)
    first = gradient_statistics(model, x, y, samples=30, seed=0)
    second = gradient_statistics(model, x, y, samples=30, seed=9)
    assert model.training  # the caller's mode is restored
    assert first[0].shape == (5 * 3 + 3,)  # the frozen first layer is not part of d
    # no dropout: the same samples in another order give the same statistics
    np.testing.assert_allclose(first[0], second[0], rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(first[1], second[1], rtol=1e-5, atol=1e-9)
    model.eval()
    np.testing.assert_allclose(first[0], _per_sample_gradients(model, x, y).mean(axis=0), rtol=1e-5)


def test_samples_below_one_is_refused() -> None:
    x, y = _data(4, 3, 2)
    with pytest.raises(ValueError, match="samples and chunk_size must be >= 1"):
        gradient_statistics(nn.Linear(3, 2), x, y, samples=0, seed=0)


def test_a_label_shifted_client_has_a_lower_median_gsnr_than_its_clean_self() -> None:
    """Spec 6, last unit test: five clients of one linear task, client 0 with l -> (l+1) mod 4.

    Its GSNR at five points along a training run (median over these "rounds") is measured
    once clean and once shifted, the other clients' statistics unchanged.
    """
    rng = np.random.default_rng(0)
    teacher = rng.normal(size=(10, 4))
    clients = []
    for _ in range(5):
        x = rng.normal(size=(200, 10)).astype(np.float32)
        clients.append((x, np.argmax(x @ teacher, axis=1)))
    x0, y0 = clients[0]
    shifted = [(x0, corrupt(x0, y0, kind="label_shift", shift=1, num_classes=4, seed=0)[1])]

    torch.manual_seed(0)
    model = nn.Linear(10, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    pooled_x = torch.as_tensor(np.concatenate([x for x, _ in clients]))
    pooled_y = torch.as_tensor(np.concatenate([y for _, y in clients]))
    clean_scores, shifted_scores = [], []
    for _ in range(5):
        for data, scores in ((clients, clean_scores), (shifted + clients[1:], shifted_scores)):
            stats = [gradient_statistics(model, x, y, samples=64, seed=1) for x, y in data]
            means = np.stack([m for m, _, _ in stats])
            variances = np.stack([v for _, v, _ in stats])
            m_g, v_g = gsnr.global_statistics(means, variances, [len(y) for _, y in data])
            scores.append(gsnr.client_terms(means, variances, m_g, v_g, 16).gsnr[0])
        for _ in range(10):  # the next "round": the model trains on
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(pooled_x), pooled_y).backward()
            optimizer.step()
    assert np.median(shifted_scores) < 0.5 * np.median(clean_scores)
