"""TACO's client rule on a tiny linear model: with the data gradient zeroed a round moves the
weights by exactly gamma (1 - alpha) delta_scale u (spec 1.9 item 3), u = 0 is FedAvg
bitwise, and what it cannot work with is named."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from client_app.algorithms.base import LocalContext
from client_app.algorithms.fedavg import FedAvgRule
from client_app.algorithms.taco import TacoRule
from client_app.trainer import TrainSettings, train_locally
from fl_system.algorithms.taco import TACO_ALPHA, TACO_LAST_UPDATE
from fl_system.messages import protocol
from tests.client.tiny import linear_data, linear_model

CPU = torch.device("cpu")
K = 4


def _received(u: float, alpha: float) -> RecordDict:
    shapes = {k: tuple(p.shape) for k, p in linear_model().named_parameters()}
    return RecordDict(
        {
            TACO_LAST_UPDATE: ArrayRecord(
                {k: Array(np.full(s, u, np.float32)) for k, s in shapes.items()}
            ),
            protocol.CONFIG: ConfigRecord({TACO_ALPHA: alpha}),
        }
    )


def _train(rule, received: RecordDict | None = None, lr: float = 0.1):
    model = linear_model()
    x, y = linear_data()
    settings = TrainSettings(batch_size=8, lr=lr, local_steps=K)
    train_locally(model, x, y, rule, settings, seed=5, device=CPU, received=received)
    return model


class _NoDataGradient(TacoRule):
    """The data loss multiplied by 0: only the correction moves the weights."""

    def before_step(self, ctx: LocalContext) -> None:
        for p in ctx.model.parameters():
            p.grad.zero_()
        super().before_step(ctx)


@pytest.mark.parametrize("delta_scale,factor", [(1.0, 0.1 * 0.8), (None, 0.1 * 0.8 * K)])
def test_a_round_moves_the_weights_by_gamma_one_minus_alpha_scale_u(
    delta_scale: float | None, factor: float
) -> None:
    """gamma 0.1, alpha 0.2, u = 0.5: literal 0.08 u in all, reconstructed (K = 4) 0.32 u."""
    rule = _NoDataGradient(local_steps=K, gamma=0.1, delta_scale=delta_scale)
    moved = _train(rule, _received(0.5, alpha=0.2), lr=0.05)
    for p0, p in zip(linear_model().parameters(), moved.parameters(), strict=True):
        torch.testing.assert_close(p0 - p, torch.full_like(p, factor * 0.5), rtol=1e-5, atol=1e-7)


def test_a_zero_last_update_trains_exactly_like_fedavg() -> None:
    taco = _train(TacoRule(local_steps=K), _received(0.0, alpha=0.1))
    fedavg = _train(FedAvgRule())
    for a, b in zip(taco.parameters(), fedavg.parameters(), strict=True):
        assert torch.equal(a, b)


def test_without_tailored_correction_nothing_is_needed_from_the_server() -> None:
    off = _train(TacoRule(local_steps=K, correction=False), RecordDict())
    fedavg = _train(FedAvgRule())
    for a, b in zip(off.parameters(), fedavg.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_message_without_the_last_update_is_refused() -> None:
    with pytest.raises(ValueError, match="lacks 'taco-u' or 'taco-alpha'"):
        _train(TacoRule(local_steps=K), RecordDict())


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"local_steps": None}, "taco needs train.local_steps"),
        ({"local_steps": K, "gamma": -0.1}, "algorithm.gamma must be >= 0, got -0.1"),
        ({"local_steps": K, "delta_scale": 0}, "algorithm.delta_scale must be null"),
    ],
)
def test_bad_settings_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TacoRule(**kwargs)
