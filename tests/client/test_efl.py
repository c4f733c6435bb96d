"""EFL's client rule on a tiny linear model: lambda = 0 is FedAvg bitwise, one step carries the
elastic penalty's gradient exactly, and the reply holds the Fisher diagonal u and u * w."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from client_app.algorithms.efl import _FISHER_SEED, EflRule, batch_fisher
from client_app.algorithms.fedavg import FedAvgRule
from client_app.per_sample import gradient_moments
from client_app.trainer import TrainSettings, train_locally
from fl_system.algorithms.efl import (
    EFL_FISHER,
    EFL_FISHER_DUE,
    EFL_FISHER_SUM,
    EFL_PENALTY,
    EFL_POSITIONS,
    EFL_WEIGHTED,
    EFL_WEIGHTED_SUM,
)
from fl_system.learning.seeding import derive_seed
from fl_system.messages import protocol
from tests.client.tiny import linear_data, linear_model

CPU = torch.device("cpu")


def _sums(u: float, v: float) -> RecordDict:
    model = linear_model()
    shapes = {k: tuple(p.shape) for k, p in model.named_parameters()}
    return RecordDict(
        {
            EFL_FISHER_SUM: ArrayRecord(
                {k: Array(np.full(s, u, np.float32)) for k, s in shapes.items()}
            ),
            EFL_WEIGHTED_SUM: ArrayRecord(
                {k: Array(np.full(s, v, np.float32)) for k, s in shapes.items()}
            ),
        }
    )


def _train(rule, settings: TrainSettings, received: RecordDict | None = None):
    model = linear_model()
    x, y = linear_data()
    result = train_locally(model, x, y, rule, settings, seed=5, device=CPU, received=received)
    return model, result


def test_lambda_zero_trains_exactly_like_fedavg() -> None:
    settings = TrainSettings(batch_size=8, lr=0.1)
    efl, _ = _train(EflRule(lam=0.0, fisher_samples=16), settings, _sums(3.0, 1.0))
    fedavg, _ = _train(FedAvgRule(), settings)
    for a, b in zip(efl.parameters(), fedavg.parameters(), strict=True):
        assert torch.equal(a, b)


def test_one_step_adds_the_penalty_gradient() -> None:
    """w1 = w0 - lr (grad f(w0) + lam (U w0 - V)), with U = 2, V = 0.5 everywhere."""
    settings = TrainSettings(batch_size=40, lr=0.1, local_steps=1)
    lam, lr = 0.3, 0.1
    plain, _ = _train(FedAvgRule(), settings)
    efl, _ = _train(EflRule(lam=lam, fisher_samples=8), settings, _sums(2.0, 0.5))
    start = linear_model()
    for p0, p_plain, p_efl in zip(
        start.parameters(), plain.parameters(), efl.parameters(), strict=True
    ):
        penalty = lam * (2.0 * p0.detach() - 0.5)
        torch.testing.assert_close(p_efl, p_plain - lr * penalty, rtol=1e-6, atol=1e-7)


def test_the_reply_reports_the_penalty_at_the_end_model() -> None:
    """0.5 lam sum(U w^2) - lam sum(V w) with U = 2, V = 0.5 everywhere, at the weights
    reached; no such metric with lambda = 0."""
    lam, settings = 0.3, TrainSettings(batch_size=8, lr=0.1, local_steps=3)
    rule = EflRule(lam=lam, fisher_samples=8)
    model, _ = _train(rule, settings, _sums(2.0, 0.5))
    w = np.concatenate([p.detach().double().numpy().reshape(-1) for p in model.parameters()])
    expected = 0.5 * lam * 2.0 * np.sum(w * w) - lam * 0.5 * np.sum(w)
    reported = rule.reply_metrics(linear_data(), ConfigRecord())[EFL_PENALTY]
    assert reported == pytest.approx(expected, rel=1e-6)
    plain = EflRule(lam=0.0, fisher_samples=8)
    _train(plain, settings, _sums(2.0, 0.5))
    assert plain.reply_metrics(linear_data(), ConfigRecord()) == {}


def test_reply_holds_the_fisher_diagonal_and_its_product_with_the_endlinear_model() -> None:
    settings = TrainSettings(batch_size=8, lr=0.1)
    model, result = _train(EflRule(lam=0.0, fisher_samples=16), settings)
    u_record = result.extras.array_records[EFL_FISHER]
    v_record = result.extras.array_records[EFL_WEIGHTED]
    assert list(u_record.keys()) == [k for k, _ in model.named_parameters()]
    x, y = linear_data()
    _, second, used = gradient_moments(model, x, y, samples=16, seed=derive_seed(5, _FISHER_SEED))
    assert used == 16
    flat = np.concatenate([u_record[k].numpy().reshape(-1) for k in u_record])
    np.testing.assert_allclose(flat, second.astype(np.float32), rtol=1e-6)
    for name, p in model.named_parameters():
        u = u_record[name].numpy()
        assert (u >= 0).all() and u.any()
        np.testing.assert_allclose(v_record[name].numpy(), u * p.detach().numpy(), rtol=1e-6)


def test_a_penalty_without_the_sums_is_refused() -> None:
    with pytest.raises(ValueError, match="lacks 'efl-U' or 'efl-V'"):
        _train(EflRule(lam=0.1), TrainSettings(local_steps=1), RecordDict())


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"lam": -1.0}, "efl lam must be a number >= 0, got -1.0"),
        ({"lam": 0.1, "fisher_samples": 0}, "efl fisher_samples must be an integer >= 1, got 0"),
        ({"lam": 0.1, "theta": 0.5}, r"efl theta \(the cap on E / s\) must be null or >= 1"),
    ],
)
def test_bad_settings_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EflRule(**kwargs)


def test_a_straggler_scales_its_progress_by_e_over_s() -> None:
    """2 of E = 8 steps: the reply's model is w0 + 4 (w2 - w0); capped at theta = 3."""
    settings = TrainSettings(batch_size=8, lr=0.1, local_steps=2)
    plain, _ = _train(FedAvgRule(), settings)
    start = linear_model()
    for theta, factor in ((None, 4.0), (3.0, 3.0)):
        rule = EflRule(lam=0.0, fisher_samples=8, max_steps=8, theta=theta)
        scaled, _ = _train(rule, settings)
        for p0, p, q in zip(
            start.parameters(), plain.parameters(), scaled.parameters(), strict=True
        ):
            torch.testing.assert_close(q, p0 + factor * (p - p0))
    complete, _ = _train(EflRule(lam=0.0, fisher_samples=8, max_steps=2), settings)
    for p, q in zip(plain.parameters(), complete.parameters(), strict=True):
        assert torch.equal(p, q)  # s = E: nothing to compensate


def test_batch_fisher_is_the_empirical_fisher_at_batch_size_one_and_biased_above() -> None:
    """B = 1: per-sample squares exactly; one batch of all s examples: s (mean gradient)^2,
    which is the per-sample Fisher plus (s - 1) m^2 minus the variance (spec 2.2)."""
    model = linear_model()
    x, y = linear_data()
    mean, second, used = gradient_moments(model, x, y, samples=16, seed=3)
    per_sample = batch_fisher(model, x, y, samples=16, seed=3, batch_size=1)
    np.testing.assert_allclose(per_sample, second, rtol=1e-5, atol=1e-9)
    one_batch = batch_fisher(model, x, y, samples=16, seed=3, batch_size=16)
    np.testing.assert_allclose(one_batch, used * mean * mean, rtol=1e-5, atol=1e-9)


def test_batch_mode_and_topk_shape_the_reply() -> None:
    settings = TrainSettings(batch_size=8, lr=0.1)
    rule = EflRule(
        lam=0.0,
        fisher_samples=16,
        fisher_mode="batch",
        fisher_comm="topk",
        fisher_q=0.25,
        batch_size=8,
    )
    model, result = _train(rule, settings)
    records = result.extras.array_records
    assert set(records) == {EFL_FISHER, EFL_WEIGHTED, EFL_POSITIONS}
    x, y = linear_data()
    expected = batch_fisher(
        model, x, y, samples=16, seed=derive_seed(5, _FISHER_SEED), batch_size=8
    )
    weight = expected[:8].astype(np.float32)  # classifier.weight: 2 x 4, k = 2 of 8
    kept = np.sort(np.argsort(-weight, kind="stable")[:2])
    sent = records[EFL_FISHER]["classifier.weight"].numpy()
    np.testing.assert_allclose(sent, weight[kept], rtol=1e-6)
    w = model.classifier.weight.detach().numpy().reshape(-1)
    np.testing.assert_allclose(
        records[EFL_WEIGHTED]["classifier.weight"].numpy(),
        weight[kept] * w[kept],
        rtol=1e-6,
    )


def test_no_fisher_terms_when_the_server_says_they_are_not_due() -> None:
    received = RecordDict({protocol.CONFIG: ConfigRecord({EFL_FISHER_DUE: False})})
    _, result = _train(EflRule(lam=0.0), TrainSettings(local_steps=1), received)
    assert not result.extras.array_records
