"""FedDyn server math on mock replies, against hand computations.

Hand computation (alpha = 0.5, K = 4), written in both of the specs' formulations:
  round 1: theta_t = [1, 2]; replies theta_0 = [2, 2], theta_2 = [0, 6]
    theta_avg = [1, 4] (uniform, whatever the data sizes)
    h = -(0.5 / 4) * ([1, 0] + [-1, 4]) = [0, -0.5]
    theta_cld = theta_avg - h / alpha = [1, 5]
    (authors' code: h_0 = [1, 0], h_2 = [-1, 4], mean over K = 4: [0, 1]; [1, 4] + [0, 1])
  round 2: clients receive [1, 5]; replies theta_0 = [1, 5], theta_3 = [3, 5]
    theta_avg = [2, 5]; h = [0, -0.5] - (0.5 / 4) * [2, 0] = [-0.25, -0.5]
    theta_cld = [2, 5] + [0.5, 1] = [2.5, 6]
    (authors' code: h_0 = [1, 0], h_2 = [-1, 4], h_3 = [2, 0]; mean [0.5, 1])
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from fl_system.messages import protocol
from server_app.strategies.feddyn import FedDyn
from tests.mock_replies import aggregate, plan, reply


def _record(w: list[float]) -> ArrayRecord:
    return ArrayRecord(
        {
            "layer.weight": Array(np.array(w, np.float32)),
            "layer.steps": Array(np.array([7], np.int64)),
        }
    )


def _reply(node: int, pid: int, n: int, w: list[float]):
    arrays = [np.array(w, np.float32), np.array([7], np.int64)]
    return reply(node, arrays, partition_id=pid, num_examples=n)


def _sent(strategy: FedDyn, rnd: int, arrays: ArrayRecord, nodes: dict[int, int]):
    msgs = strategy.train_messages(plan(nodes, arrays, rnd))
    models = [m.content.array_records[protocol.ARRAYS] for m in msgs]
    for m in models[1:]:
        np.testing.assert_array_equal(m["layer.weight"].numpy(), models[0]["layer.weight"].numpy())
    assert list(models[0].keys()) == ["layer.weight", "layer.steps"]
    np.testing.assert_array_equal(models[0]["layer.steps"].numpy(), [7])
    return models[0]["layer.weight"].numpy()


def test_two_rounds_with_two_of_four_clients() -> None:
    strategy = FedDyn(alpha=0.5, num_clients=4)
    first = _record([1.0, 2.0])
    np.testing.assert_array_equal(_sent(strategy, 1, first, {11: 0, 12: 2}), [1, 2])
    result = aggregate(
        strategy, [_reply(11, 0, 1, [2.0, 2.0]), _reply(12, 2, 3, [0.0, 6.0])], arrays=first
    )
    arrays, metrics = result.arrays, result.metrics
    # evaluated/reported model: theta_avg, uniform weights
    np.testing.assert_array_equal(arrays.to_numpy_ndarrays()[0], [1.0, 4.0])
    np.testing.assert_array_equal(arrays.to_numpy_ndarrays()[1], [7])
    np.testing.assert_array_equal(strategy.h.values["layer.weight"], [0.0, -0.5])
    assert metrics["server_state_norm"] == pytest.approx(0.5)
    assert (metrics["weight_0"], metrics["weight_2"]) == (0.5, 0.5)

    # clients receive theta_cld, not the theta_avg the driver hands in
    np.testing.assert_array_equal(_sent(strategy, 2, arrays, {11: 0, 13: 3}), [1.0, 5.0])
    result = aggregate(
        strategy, [_reply(11, 0, 1, [1.0, 5.0]), _reply(13, 3, 1, [3.0, 5.0])], arrays=arrays, rnd=2
    )
    arrays, metrics = result.arrays, result.metrics
    np.testing.assert_array_equal(arrays.to_numpy_ndarrays()[0], [2.0, 5.0])
    np.testing.assert_array_equal(strategy.h.values["layer.weight"], [-0.25, -0.5])
    assert metrics["server_state_norm"] == pytest.approx(np.sqrt(0.25**2 + 0.5**2))
    np.testing.assert_array_equal(_sent(strategy, 3, arrays, {11: 0}), [2.5, 6.0])


def test_model_average_uses_aggregation_weights() -> None:
    """The hook FedDisco replaces; h still sums the participants' drifts uniformly."""

    class First(FedDyn):
        def aggregation_weights(self, plan, replies):
            return np.array([1.0, 0.0])

    strategy = First(alpha=0.5, num_clients=4)
    arrays = aggregate(
        strategy,
        [_reply(11, 0, 1, [2.0, 2.0]), _reply(12, 2, 3, [0.0, 6.0])],
        arrays=_record([1.0, 2.0]),
    ).arrays
    np.testing.assert_array_equal(arrays.to_numpy_ndarrays()[0], [2.0, 2.0])
    np.testing.assert_array_equal(strategy.h.values["layer.weight"], [0.0, -0.5])


def test_state_dict_round_trip_gives_the_same_cloud_model() -> None:
    strategy = FedDyn(alpha=0.5, num_clients=4)
    assert strategy.state_dict() == {}
    arrays = aggregate(
        strategy,
        [_reply(11, 0, 1, [2.0, 2.0]), _reply(12, 2, 3, [0.0, 6.0])],
        arrays=_record([1.0, 2.0]),
    ).arrays
    state = strategy.state_dict()
    assert list(state) == ["feddyn/h/layer.weight"]

    # a resumed run: the checkpointed model (theta_avg) and h give the same theta_cld
    restored = FedDyn(alpha=0.5, num_clients=4)
    restored.load_state_dict(state)
    checkpointed = ArrayRecord(
        {k: Array(v) for k, v in zip(arrays.keys(), arrays.to_numpy_ndarrays(), strict=True)}
    )
    np.testing.assert_array_equal(_sent(restored, 2, checkpointed, {21: 0}), [1.0, 5.0])
    with pytest.raises(ValueError, match="does not keep state"):
        FedDyn(alpha=0.5, num_clients=4).load_state_dict({"scaffold/c/x": np.zeros(1)})


def test_a_reply_with_other_layers_is_refused_before_the_update() -> None:
    strategy = FedDyn(alpha=0.1, num_clients=2)
    one_layer = reply(1, {"w": np.zeros(2, np.float32)}, partition_id=0, num_examples=1)
    result = aggregate(strategy, [one_layer], arrays=_record([0.0, 0.0]))
    assert result.arrays is None and strategy.h.values is None
    assert result.failures[0].reason.startswith("partition 0: model layers differ")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": 0.0, "num_clients": 2}, "algorithm.alpha must be a number > 0"),
        ({"alpha": -1, "num_clients": 2}, "algorithm.alpha must be a number > 0"),
        ({"alpha": "0.1", "num_clients": 2}, "algorithm.alpha must be a number > 0"),
        ({"alpha": 0.1, "num_clients": 0}, "^num_clients must be a positive integer, got "),
        ({"alpha": 0.1, "num_clients": 2.0}, "^num_clients must be a positive integer, got "),
    ],
)
def test_arguments_are_validated(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FedDyn(**kwargs)
