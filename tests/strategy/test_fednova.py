"""FedNova's server on mock replies: a hand-computed round, the FedAvg special case, tau = 0."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message

from fl_system.addons.disco import DISCO_D
from fl_system.messages import protocol
from server_app.strategies.fedavg import FedAvg
from server_app.strategies.fednova import FedNova
from tests.mock_replies import aggregate, reply

GLOBAL = [np.array([1.0, 2.0], np.float32), np.array([[0.5]], np.float32)]


def _reply(node: int, arrays, *, pid: int, n: int, tau: float | None, loss: float = 0.0):
    msg = reply(node, arrays, partition_id=pid, num_examples=n, train_loss=loss)
    if tau is not None:
        msg.content.metric_records[protocol.METRICS][protocol.NUM_STEPS] = tau
    return msg


def _round(strategy, replies, global_layers=GLOBAL):
    """A round that sent `global_layers`: FedNova measures every update from them."""
    return aggregate(strategy, replies, arrays=ArrayRecord.from_numpy_ndarrays(global_layers))


def _two_clients() -> list[Message]:
    # client A: 1 example, 2 steps, moved layer 0 by [+2, 0], layer 1 by +1
    # client B: 3 examples, 4 steps, moved layer 0 by [0, +4], layer 1 by -0.5
    return [
        _reply(
            1,
            [np.array([3.0, 2.0], np.float32), np.array([[1.5]], np.float32)],
            pid=0,
            n=1,
            tau=2,
            loss=1.0,
        ),
        _reply(
            2,
            [np.array([1.0, 6.0], np.float32), np.array([[0.0]], np.float32)],
            pid=1,
            n=3,
            tau=4,
            loss=2.0,
        ),
    ]


def test_one_round_matches_the_hand_computation() -> None:
    # p = [1/4, 3/4]; tau_eff = 1/4 * 2 + 3/4 * 4 = 3.5
    # coefficients p_k tau_eff / tau_k = [0.4375, 0.65625]
    # layer 0: [1, 2] + 0.4375 * [2, 0] + 0.65625 * [0, 4] = [1.875, 4.625]
    # layer 1: 0.5 + 0.4375 * 1 + 0.65625 * (-0.5) = 0.609375
    result = _round(FedNova(), _two_clients())
    arrays, metrics = result.arrays, result.metrics
    out = arrays.to_numpy_ndarrays()
    np.testing.assert_array_equal(out[0], np.array([1.875, 4.625], np.float32))
    np.testing.assert_array_equal(out[1], np.array([[0.609375]], np.float32))
    assert out[0].dtype == np.float32
    assert metrics["tau_eff"] == 3.5
    assert metrics["train_loss"] == 1.75  # (1 * 1.0 + 3 * 2.0) / 4
    # FedAvg on the same replies differs: [0.25 * 3 + 0.75 * 1, 0.25 * 2 + 0.75 * 6]
    fedavg = aggregate(FedAvg(), _two_clients()).arrays
    np.testing.assert_array_equal(fedavg.to_numpy_ndarrays()[0], [1.5, 5.0])


def test_p_k_come_from_aggregation_weights() -> None:
    class UniformNova(FedNova):
        def base_weights(self, plan, replies):
            return [1.0] * len(replies)

    # p = [1/2, 1/2]; tau_eff = 3; coefficients [0.75, 0.375]
    # layer 0: [1, 2] + 0.75 * [2, 0] + 0.375 * [0, 4] = [2.5, 3.5]
    result = _round(UniformNova(), _two_clients())
    arrays, metrics = result.arrays, result.metrics
    np.testing.assert_array_equal(arrays.to_numpy_ndarrays()[0], [2.5, 3.5])
    assert metrics["tau_eff"] == 3.0


def test_equal_steps_is_fedavg() -> None:
    rng = np.random.default_rng(0)
    shapes = [(6, 1, 5, 5), (6,), (10, 24)]
    global_layers = [rng.normal(size=s).astype(np.float32) for s in shapes]
    replies = [
        _reply(
            1 + k,
            [(g + rng.normal(size=g.shape)).astype(np.float32) for g in global_layers],
            pid=k,
            n=n,
            tau=7,
        )
        for k, n in enumerate([120, 37, 843])
    ]
    result = _round(FedNova(), replies, global_layers)
    nova, metrics = result.arrays, result.metrics
    avg = aggregate(FedAvg(), replies).arrays
    for x, y in zip(nova.to_numpy_ndarrays(), avg.to_numpy_ndarrays(), strict=True):
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-6)
    assert metrics["tau_eff"] == 7.0


def test_a_reply_with_zero_steps_is_dropped_as_a_failure() -> None:
    stalled = _reply(
        3,
        [np.array([100.0, 100.0], np.float32), np.array([[100.0]], np.float32)],
        pid=2,
        n=50,
        tau=0,
        loss=9.0,
    )
    result = _round(FedNova(), [*_two_clients(), stalled])
    np.testing.assert_array_equal(result.arrays.to_numpy_ndarrays()[0], [1.875, 4.625])
    assert result.metrics["tau_eff"] == 3.5 and result.metrics["train_loss"] == 1.75
    assert [f.node_id for f in result.failures] == [3]
    assert "num-steps=0" in result.failures[0].reason


def test_a_reply_without_a_step_count_is_dropped() -> None:
    silent = _reply(
        3, [np.zeros(2, np.float32), np.zeros((1, 1), np.float32)], pid=2, n=50, tau=None
    )
    result = _round(FedNova(), [*_two_clients(), silent])
    np.testing.assert_array_equal(result.arrays.to_numpy_ndarrays()[0], [1.875, 4.625])
    assert [f.node_id for f in result.failures] == [3]
    assert "lacks metric 'num-steps'" in result.failures[0].reason


def test_only_stalled_replies_give_nothing() -> None:
    only = _reply(1, [np.zeros(2, np.float32), np.zeros((1, 1), np.float32)], pid=0, n=5, tau=0)
    result = _round(FedNova(), [only])
    assert result.arrays is None and result.participants == 0
    assert [f.node_id for f in result.failures] == [1]


def test_fednova_keeps_layer_names_of_the_sent_model() -> None:
    named = ArrayRecord({"fc.weight": Array(GLOBAL[0])})
    only = _reply(1, [np.array([3.0, 2.0], np.float32)], pid=0, n=1, tau=2)
    arrays = aggregate(FedNova(), [only], arrays=named).arrays
    assert list(arrays.keys()) == ["fc.weight"]
    np.testing.assert_array_equal(arrays.to_numpy_ndarrays()[0], [3.0, 2.0])


def test_disco_reweights_before_the_normalisation() -> None:
    from server_app.addons.disco import DiscoWeighting

    replies = _two_clients()
    for msg, d in zip(replies, [0.2, 0.8], strict=True):
        msg.content.metric_records[protocol.METRICS][DISCO_D] = d
    # n = [0.25, 0.75], d = [0.2, 0.8] (sum 1): s = [0.25 - 0.1 + 0.1, 0.75 - 0.4 + 0.1]
    # p = [0.25, 0.45] / 0.7 = [5/14, 9/14]; tau_eff = 10/14 + 36/14 = 23/7
    # layer 0: [1, 2] + [2 * (5/14)(23/7)/2, 4 * (9/14)(23/7)/4] = [1 + 115/98, 2 + 207/98]
    result = _round(FedNova(addons=[DiscoWeighting(a=0.5, b=0.1)]), replies)
    arrays, metrics = result.arrays, result.metrics
    expected = np.array([1 + 115 / 98, 2 + 207 / 98], np.float32)
    np.testing.assert_allclose(arrays.to_numpy_ndarrays()[0], expected, rtol=0, atol=1e-6)
    assert metrics["tau_eff"] == pytest.approx(23 / 7, abs=1e-12)
