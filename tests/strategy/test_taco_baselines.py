"""The baselines TACO is measured against, on mock replies, against hand computations:
FoolsGold's cosine weights, STEM's averaged momentum, FedACG's lookahead and momentum."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, RecordDict

from fl_system.algorithms.stem import STEM_MOMENTUM
from fl_system.messages import protocol
from server_app.strategies.fedacg import FedAcg
from server_app.strategies.foolsgold import FoolsGold
from server_app.strategies.stem import Stem
from tests.mock_replies import aggregate, plan, reply


def _record(w: list[float]) -> ArrayRecord:
    return ArrayRecord(
        {"w": Array(np.array(w, np.float32)), "steps": Array(np.array([7], np.int64))}
    )


def _reply(node: int, pid: int, n: int, w: list[float], momentum: list[float] | None = None):
    extra = None
    if momentum is not None:
        extra = RecordDict(
            {STEM_MOMENTUM: ArrayRecord({"w": Array(np.array(momentum, np.float32))})}
        )
    arrays = [np.array(w, np.float32), np.array([7], np.int64)]
    return reply(node, arrays, partition_id=pid, num_examples=n, extra=extra)


def _sent_model(strategy, arrays: ArrayRecord, rnd: int = 1) -> np.ndarray:
    (msg,) = strategy.train_messages(plan({11: 0}, arrays, rnd))
    return msg.content.array_records[protocol.ARRAYS]["w"].numpy()


def test_foolsgold_weighs_by_the_cosine_to_the_mean_update() -> None:
    """Uploads w - w_i = (1, 0), (0, 1), (1, 1): cos to the mean (2/3, 2/3) = 1/sqrt 2,
    1/sqrt 2, 1; weights / (1 + sqrt 2); the new model -(1/sqrt 2) in both coordinates."""
    replies = [
        _reply(11, 0, 5, [-1.0, 0.0]),
        _reply(12, 1, 1, [0.0, -1.0]),
        _reply(13, 2, 9, [-1.0, -1.0]),
    ]
    result = aggregate(FoolsGold(), replies, arrays=_record([0.0, 0.0]))
    s = 1 + math.sqrt(2)
    for pid, weight in enumerate([1 / math.sqrt(2) / s, 1 / math.sqrt(2) / s, 1 / s]):
        assert result.metrics[f"weight_{pid}"] == pytest.approx(weight, abs=1e-12)
    np.testing.assert_allclose(result.arrays["w"].numpy(), [-1 / math.sqrt(2)] * 2, rtol=1e-6)
    assert result.metrics["foolsgold_uniform_fallback"] == 0


def test_foolsgold_falls_back_to_uniform_when_nobody_agrees(caplog) -> None:
    replies = [_reply(11, 0, 5, [-1.0, 0.0]), _reply(12, 1, 1, [1.0, 0.0])]
    with caplog.at_level(logging.WARNING):
        result = aggregate(FoolsGold(), replies, arrays=_record([0.0, 0.0]))
    assert result.metrics["foolsgold_uniform_fallback"] == 1
    assert "averaging uniformly" in caplog.text


def test_stem_averages_models_and_momenta_and_sends_the_momentum_back(caplog) -> None:
    """Data-size weights 1/4, 3/4: model (2.5, -1), momentum (1.75, 0.5); no momentum goes
    down before the first aggregate. A reply without one counts for the model only."""
    strategy = Stem()
    first = _record([0.0, 0.0])
    (msg,) = strategy.train_messages(plan({11: 0}, first))
    assert STEM_MOMENTUM not in msg.content.array_records
    replies = [
        _reply(11, 0, 1, [1.0, 2.0], momentum=[1.0, 2.0]),
        _reply(12, 1, 3, [3.0, -2.0], momentum=[2.0, 0.0]),
    ]
    result = aggregate(strategy, replies, arrays=first)
    np.testing.assert_allclose(result.arrays["w"].numpy(), [2.5, -1.0])
    (msg,) = strategy.train_messages(plan({11: 0}, result.arrays, rnd=2))
    sent = msg.content.array_records[STEM_MOMENTUM]
    np.testing.assert_allclose(sent["w"].numpy(), [1.75, 0.5])
    assert result.metrics["server_state_norm"] == pytest.approx(math.hypot(1.75, 0.5))
    with caplog.at_level(logging.WARNING):
        aggregate(strategy, [_reply(11, 0, 1, [0.0, 0.0]), *replies[1:]], arrays=first, rnd=2)
    assert "partition 0: reply lacks ArrayRecord 'stem-d'" in caplog.text
    np.testing.assert_allclose(strategy.momentum.values["w"], [2.0, 0.0])
    restored = Stem()
    restored.load_state_dict(strategy.state_dict())
    np.testing.assert_array_equal(restored.momentum.values["w"], [2.0, 0.0])


def test_fedacg_sends_the_lookahead_and_keeps_the_momentum() -> None:
    """lam = 0.5. Round 1: m = 0, clients get w = (1, 1) and average (3, 0) (weights 1/2):
    delta = (2, -1), m = (2, -1), w = (3, 0). Round 2: clients get w + 0.5 m = (4, -0.5)
    and average (4, 1.5): delta = (0, 2), m = 0.5 (2, -1) + (0, 2) = (1, 1.5), w = (4, 1.5)."""
    strategy = FedAcg(lam=0.5)
    first = _record([1.0, 1.0])
    np.testing.assert_array_equal(_sent_model(strategy, first), [1.0, 1.0])
    replies = [_reply(11, 0, 2, [2.0, 1.0]), _reply(12, 1, 2, [4.0, -1.0])]
    result = aggregate(strategy, replies, arrays=first)
    np.testing.assert_allclose(result.arrays["w"].numpy(), [3.0, 0.0])
    np.testing.assert_allclose(strategy.momentum.values["w"], [2.0, -1.0])
    second = result.arrays
    np.testing.assert_allclose(_sent_model(strategy, second, rnd=2), [4.0, -0.5])
    replies = [_reply(11, 0, 2, [4.0, 1.0]), _reply(12, 1, 2, [4.0, 2.0])]
    result = aggregate(strategy, replies, arrays=second, rnd=2)
    np.testing.assert_allclose(result.arrays["w"].numpy(), [4.0, 1.5])
    np.testing.assert_allclose(strategy.momentum.values["w"], [1.0, 1.5])
    restored = FedAcg(lam=0.5)
    restored.load_state_dict(strategy.state_dict())
    np.testing.assert_allclose(_sent_model(restored, result.arrays, rnd=3), [4.5, 2.25])


def test_fedacg_momentum_outside_the_unit_interval_is_named() -> None:
    with pytest.raises(ValueError, match=r"algorithm.lam must be a number in \[0, 1\), got 1"):
        FedAcg(lam=1)
