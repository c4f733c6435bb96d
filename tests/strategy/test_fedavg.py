"""FedAvg/FedProx server math on mock replies, against Flower's own FedAvg."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, MessageType, RecordDict
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg

from fl_system.config.compose import compose_experiment
from fl_system.messages import protocol
from server_app.strategies.fedavg import FedAvg
from server_app.strategies.fedprox import FedProx
from tests.mock_replies import aggregate, plan, reply


def _replies(seed: int = 0) -> list[Message]:
    rng = np.random.default_rng(seed)
    shapes = [(6, 1, 5, 5), (6,), (10, 24)]
    sizes = [120, 37, 843]
    return [
        reply(
            100 + k,
            [rng.normal(size=s).astype(np.float32) for s in shapes],
            partition_id=k,
            num_examples=n,
            train_loss=float(k),
        )
        for k, n in enumerate(sizes)
    ]


def test_fedavg_equals_flowers_fedavg_on_the_same_replies() -> None:
    replies = _replies()
    ours = aggregate(FedAvg(), replies).arrays
    theirs, _ = FlowerFedAvg().aggregate_train(1, replies)
    assert ours is not None and theirs is not None
    diffs = [
        np.max(np.abs(a - b))
        for a, b in zip(ours.to_numpy_ndarrays(), theirs.to_numpy_ndarrays(), strict=True)
    ]
    assert max(diffs) <= 1e-6


def test_fedavg_weights_by_examples_exactly() -> None:
    replies = [
        reply(1, [np.array([1.0, 2.0], np.float32)], partition_id=0, num_examples=1),
        reply(2, [np.array([4.0, 8.0], np.float32)], partition_id=1, num_examples=3),
    ]
    result = aggregate(FedAvg(), replies)
    np.testing.assert_allclose(result.arrays.to_numpy_ndarrays()[0], [3.25, 6.5])
    assert result.metrics["train_loss"] == 0.0
    assert result.metrics["weight_0"] == 0.25 and result.metrics["weight_1"] == 0.75
    assert result.participants == 2 and result.failures == []


def test_fedprox_server_is_fedavg() -> None:
    replies = _replies(seed=3)
    a = aggregate(FedAvg(), replies).arrays
    b = aggregate(FedProx(), replies).arrays
    for x, y in zip(a.to_numpy_ndarrays(), b.to_numpy_ndarrays(), strict=True):
        np.testing.assert_array_equal(x, y)


def test_failed_and_malformed_replies_are_dropped_with_reasons() -> None:
    good = _replies()
    sent = Message(RecordDict(), dst_node_id=7, message_type=MessageType.TRAIN)
    error = Message(Error(code=1, reason="out of memory"), reply_to=sent)
    sent2 = Message(RecordDict(), dst_node_id=8, message_type=MessageType.TRAIN)
    no_metrics = Message(RecordDict({protocol.ARRAYS: ArrayRecord()}), reply_to=sent2)
    result = aggregate(FedAvg(), [*good, error, no_metrics])
    expected = aggregate(FedAvg(), good).arrays
    for x, y in zip(result.arrays.to_numpy_ndarrays(), expected.to_numpy_ndarrays(), strict=True):
        np.testing.assert_array_equal(x, y)
    assert result.participants == 3
    reasons = {f.node_id: f.reason for f in result.failures}
    assert reasons[7] == "client error: out of memory"
    assert "MetricRecord 'metrics'" in reasons[8]


def test_a_diverged_local_model_is_dropped_not_averaged() -> None:
    """NaN or inf in any layer would poison the global model: the reply is a failure."""
    nan = np.array([1.0, np.nan], np.float32)
    inf = np.array([np.inf, 0.0], np.float32)
    fine = np.array([2.0, 4.0], np.float32)
    replies = [
        reply(1, [fine, nan], partition_id=0, num_examples=5),
        reply(2, [inf, fine], partition_id=1, num_examples=5),
        reply(3, [fine, fine], partition_id=2, num_examples=5),
    ]
    result = aggregate(FedAvg(), replies)
    for layer in result.arrays.to_numpy_ndarrays():
        np.testing.assert_array_equal(layer, fine)
    reasons = {f.node_id: f.reason for f in result.failures}
    assert sorted(reasons) == [1, 2]
    assert reasons[1].startswith(
        "partition 0: local model has NaN or inf in 1 of 2 layers, first '1' "
    )
    assert reasons[2].startswith(
        "partition 1: local model has NaN or inf in 1 of 2 layers, first '0' "
    )
    assert "train.lr" in reasons[1]


def test_extra_records_do_not_reject_a_reply() -> None:
    extra = RecordDict({"extra-stats": ConfigRecord({"note": "hi"})})
    replies = [
        reply(1, [np.ones(2, np.float32)], partition_id=0, num_examples=2, extra=extra),
        reply(2, [np.zeros(2, np.float32)], partition_id=1, num_examples=2),
    ]
    arrays = aggregate(FedAvg(), replies).arrays
    np.testing.assert_allclose(arrays.to_numpy_ndarrays()[0], [0.5, 0.5])


def test_no_usable_reply_gives_nothing() -> None:
    sent = Message(RecordDict(), dst_node_id=7, message_type=MessageType.TRAIN)
    error = Message(Error(code=1, reason="boom"), reply_to=sent)
    result = aggregate(FedAvg(), [error])
    assert result.arrays is None and result.participants == 0
    assert [f.reason for f in result.failures] == ["client error: boom"]


def test_train_messages_are_per_node_and_keep_layer_names() -> None:
    arrays = ArrayRecord.from_numpy_ndarrays([np.zeros(3, np.float32)])
    msgs = FedAvg().train_messages(plan({11: 0, 12: 1}, arrays, rnd=4))
    assert [m.metadata.dst_node_id for m in msgs] == [11, 12]
    assert all(m.metadata.message_type == MessageType.TRAIN for m in msgs)
    assert msgs[0].content.config_records[protocol.CONFIG][protocol.SERVER_ROUND] == 4


def test_stateless_strategy_rejects_foreign_state() -> None:
    with pytest.raises(ValueError, match="does not keep state"):
        FedAvg().load_state_dict({"c": np.zeros(1)})


def _model() -> ArrayRecord:
    return ArrayRecord(
        {
            "w": Array(np.array([0.0, 0.0], np.float32)),
            "bn.num_batches_tracked": Array(np.array(7, np.int64)),
        }
    )


def _layers(w: list[float], dtype=np.float32, steps: int = 7, **extra) -> dict:
    return {"w": np.array(w, dtype), "bn.num_batches_tracked": np.array(steps, np.int64), **extra}


@pytest.mark.parametrize(
    ("layers", "reason"),
    [
        (_layers([1.0]), "layer 'w' has shape (1,), the global model's (2,)"),
        (
            _layers([1.0, 1.0], np.float64),
            "layer 'w' has dtype float64, the global model's float32",
        ),
        (
            {"w": np.array([1.0, 1.0], np.float32)},
            "model layers differ from the global model's: missing ['bn.num_batches_tracked']",
        ),
        (
            _layers([1.0, 1.0], extra=np.zeros(1, np.float32)),
            "model layers differ from the global model's: unexpected ['extra']",
        ),
        (
            {"bn.num_batches_tracked": np.array(7, np.int64), "w": np.ones(2, np.float32)},
            "model layers are in another order than the global model's",
        ),
    ],
)
def test_a_reply_that_does_not_match_the_model_is_refused_and_the_round_goes_on(
    layers: dict, reason: str
) -> None:
    good = reply(101, _layers([2.0, 4.0]), partition_id=0, num_examples=10)
    bad = reply(102, layers, partition_id=1, num_examples=10)
    result = aggregate(FedAvg(), [good, bad], arrays=_model())
    assert result.participants == 1
    assert [f.reason for f in result.failures] == [f"partition 1: {reason}"]
    assert result.arrays["w"].numpy().tolist() == [2.0, 4.0]


def test_integer_buffers_keep_the_first_replys_value() -> None:
    """Counters cannot be averaged: the first usable reply's value is kept (documented in
    `fl_system.learning.aggregation.weighted_average`)."""
    replies = [
        reply(101, _layers([2.0, 4.0], steps=9), partition_id=0, num_examples=10),
        reply(102, _layers([4.0, 8.0], steps=12), partition_id=1, num_examples=30),
    ]
    result = aggregate(FedAvg(), replies, arrays=_model())
    assert result.arrays["w"].numpy().tolist() == [3.5, 7.0]
    assert int(result.arrays["bn.num_batches_tracked"].numpy()) == 9


def test_under_central_dp_fedavg_averages_uniformly_and_disco_keeps_its_weights() -> None:
    """The noise of central DP is calibrated to the plain mean of the clipped updates."""
    replies = [
        reply(1, [np.array([1.0, 2.0], np.float32)], partition_id=0, num_examples=1),
        reply(2, [np.array([4.0, 8.0], np.float32)], partition_id=1, num_examples=3),
    ]
    private = FedAvg(experiment=compose_experiment(["privacy=central_fixed"]))
    np.testing.assert_allclose(aggregate(private, replies).arrays.to_numpy_ndarrays()[0], [2.5, 5])
    local = FedAvg(experiment=compose_experiment(["privacy=local"]))  # no server noise
    np.testing.assert_allclose(aggregate(local, replies).arrays.to_numpy_ndarrays()[0], [3.25, 6.5])
    disco = compose_experiment(["algorithm=feddisco", "privacy=central_fixed"])
    assert not FedAvg(experiment=disco).uniform_weights  # its own weights, unaccounted
