"""SCAFFOLD server math on mock replies, against hand computations."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, RecordDict

from fl_system.algorithms.scaffold import SCAFFOLD_C, SCAFFOLD_DELTA_C
from fl_system.messages import protocol
from server_app.strategies.scaffold import Scaffold
from tests.mock_replies import aggregate, plan, reply


def _global() -> ArrayRecord:
    """A two-parameter float layer and an integer counter (which has no control variate)."""
    return ArrayRecord(
        {
            "layer.weight": Array(np.array([0.0, 0.0], np.float32)),
            "layer.steps": Array(np.array([7], np.int64)),
        }
    )


def _reply(node: int, pid: int, n: int, w: list[float], dc: list[float] | None):
    extra = None
    if dc is not None:
        delta = ArrayRecord({"layer.weight": Array(np.array(dc, np.float32))})
        extra = RecordDict({SCAFFOLD_DELTA_C: delta})
    arrays = [np.array(w, np.float32), np.array([7], np.int64)]
    return reply(node, arrays, partition_id=pid, num_examples=n, extra=extra)


def _c_sent(strategy: Scaffold, arrays: ArrayRecord, nodes: dict[int, int]) -> list[np.ndarray]:
    msgs = strategy.train_messages(plan(nodes, arrays, rnd=2))
    records = [m.content.array_records[SCAFFOLD_C] for m in msgs]
    assert all(list(r.keys()) == ["layer.weight"] for r in records)
    return [r["layer.weight"].numpy() for r in records]


def test_first_round_sends_zero_c_to_every_node() -> None:
    strategy = Scaffold(num_clients=4)
    msgs = strategy.train_messages(plan({11: 0, 12: 1}, _global()))
    for m in msgs:
        c = m.content.array_records[SCAFFOLD_C]
        assert list(c.keys()) == ["layer.weight"]
        np.testing.assert_array_equal(c["layer.weight"].numpy(), [0.0, 0.0])
        assert c["layer.weight"].numpy().dtype == np.float32
        assert m.content.array_records[protocol.ARRAYS] is not None


def test_one_round_with_two_of_four_clients() -> None:
    strategy = Scaffold(num_clients=4)
    replies = [
        _reply(11, 0, 1, [1.0, 2.0], [0.4, -0.8]),
        _reply(12, 2, 3, [3.0, 6.0], [1.2, 0.4]),
    ]
    result = aggregate(strategy, replies, arrays=_global())
    arrays, metrics = result.arrays, result.metrics
    # model: data-size weights 1/4, 3/4
    model = arrays.to_numpy_ndarrays()
    np.testing.assert_allclose(model[0], [0.25 * 1 + 0.75 * 3, 0.25 * 2 + 0.75 * 6])
    np.testing.assert_array_equal(model[1], [7])
    # c += (1/K) sum dc_k with K = 4 (not the 2 participants): [1.6, -0.4] / 4
    expected_c = np.array([0.4, -0.1])
    np.testing.assert_allclose(strategy.c.values["layer.weight"], expected_c, rtol=1e-6)
    assert metrics["server_state_norm"] == pytest.approx(np.sqrt(0.17), rel=1e-6)
    for c in _c_sent(strategy, arrays, {11: 0, 13: 3}):
        np.testing.assert_allclose(c, expected_c, rtol=1e-6)

    # round 2: one client, c accumulates
    aggregate(strategy, [_reply(13, 3, 5, [0.0, 0.0], [0.4, 0.4])], arrays=arrays, rnd=2)
    np.testing.assert_allclose(strategy.c.values["layer.weight"], [0.5, 0.0], atol=1e-7)


def test_model_average_uses_aggregation_weights() -> None:
    """The hook FedDisco replaces: here it gives all weight to the second client."""

    class Second(Scaffold):
        def aggregation_weights(self, plan, replies):
            return np.array([0.0, 1.0])

    strategy = Second(num_clients=2)
    arrays = aggregate(
        strategy,
        [_reply(11, 0, 9, [1.0, 1.0], [1.0, 1.0]), _reply(12, 1, 1, [5.0, 3.0], [1.0, 3.0])],
        arrays=_global(),
    ).arrays
    np.testing.assert_array_equal(arrays.to_numpy_ndarrays()[0], [5.0, 3.0])
    # c is not reweighted: (dc_0 + dc_1) / 2
    np.testing.assert_allclose(strategy.c.values["layer.weight"], [1.0, 2.0])


def test_reply_without_delta_c_is_averaged_but_left_out_of_c(
    caplog: pytest.LogCaptureFixture,
) -> None:
    strategy = Scaffold(num_clients=4)
    bad_shape = ArrayRecord({"layer.weight": Array(np.zeros(3, np.float32))})
    replies = [
        _reply(11, 0, 1, [4.0, 4.0], [2.0, -2.0]),
        _reply(12, 1, 1, [0.0, 0.0], None),
        reply(
            13,
            [np.array([2.0, 2.0], np.float32), np.array([7], np.int64)],
            partition_id=2,
            num_examples=2,
            extra=RecordDict({SCAFFOLD_DELTA_C: bad_shape}),
        ),
    ]
    with caplog.at_level(logging.WARNING):
        result = aggregate(strategy, replies, arrays=_global())
    np.testing.assert_allclose(result.arrays.to_numpy_ndarrays()[0], [2.0, 2.0])  # (4+0+2*2)/4
    np.testing.assert_allclose(strategy.c.values["layer.weight"], [0.5, -0.5])
    assert "partition 1: reply lacks ArrayRecord 'scaffold-delta-c'" in caplog.text
    assert "partition 2: delta c layer 'layer.weight' has shape (3,)" in caplog.text
    assert result.failures == []


def test_state_dict_round_trip_restores_c() -> None:
    strategy = Scaffold(num_clients=2)
    assert strategy.state_dict() == {}
    arrays = aggregate(
        strategy, [_reply(11, 0, 1, [1.0, 1.0], [0.5, -1.5])], arrays=_global()
    ).arrays
    state = strategy.state_dict()
    assert list(state) == ["scaffold/c/layer.weight"]
    np.testing.assert_allclose(state["scaffold/c/layer.weight"], [0.25, -0.75])

    restored = Scaffold(num_clients=2)
    restored.load_state_dict(state)
    (c,) = _c_sent(restored, arrays, {21: 0})
    np.testing.assert_allclose(c, [0.25, -0.75])
    with pytest.raises(ValueError, match="does not keep state"):
        Scaffold(num_clients=2).load_state_dict({"feddyn/h/layer.weight": np.zeros(2)})


def test_checkpoint_of_another_model_is_rejected() -> None:
    strategy = Scaffold(num_clients=2)
    strategy.load_state_dict({"scaffold/c/other.weight": np.zeros(2)})
    with pytest.raises(ValueError, match="scaffold/c state has layers"):
        strategy.train_messages(plan({11: 0}, _global()))


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "4"])
def test_num_clients_is_validated(bad: object) -> None:
    with pytest.raises(ValueError, match=r"^num_clients must be a positive integer, got "):
        Scaffold(num_clients=bad)  # type: ignore[arg-type]
