"""FedDisco weighting inside strategies, on mock replies."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from flwr.app import MetricRecord

from fl_system.addons.disco import DISCO_COUNTS, DISCO_D, DISCO_TARGET
from fl_system.heterogeneity.timeline import Task
from fl_system.messages import protocol
from fl_system.settings.value_checks import ConfigError
from server_app.addons.disco import DiscoWeighting
from server_app.async_loop import Update
from server_app.federated.screening import unpack_replies
from server_app.strategies.fedasync import FedAsync
from server_app.strategies.fedavg import FedAvg
from server_app.strategies.fedbuff import FedBuff
from server_app.strategies.feddisco import FedDisco
from tests.mock_replies import aggregate, plan, reply


def _reply(pid: int, value: float, n: int, d: float | None):
    msg = reply(100 + pid, [np.array([value], np.float32)], partition_id=pid, num_examples=n)
    if d is not None:
        msg.content.metric_records[protocol.METRICS][DISCO_D] = d
    return msg


def test_counts_vector_gives_the_spec_weights_in_a_round() -> None:
    # Counts [[50,50,0],[10,10,10],[90,0,0]] -> KL to uniform, as the clients would report.
    d = [np.log(3) - np.log(2), 0.0, np.log(3)]
    replies = [_reply(0, 1.0, 100, d[0]), _reply(1, 2.0, 30, d[1]), _reply(2, 4.0, 90, d[2])]
    result = aggregate(FedDisco(num_classes=3, addons=[DiscoWeighting()]), replies)
    arrays, metrics = result.arrays, result.metrics
    p = [0.524696, 0.295455, 0.179849]
    np.testing.assert_allclose([metrics[f"weight_{k}"] for k in range(3)], p, atol=5e-7)
    np.testing.assert_allclose(
        arrays.to_numpy_ndarrays()[0], [p[0] + 2 * p[1] + 4 * p[2]], rtol=1e-6
    )


@pytest.mark.parametrize(
    ("normalize_d", "p"),
    [
        ({}, [0.483444, 0.516556, 0.0]),  # the default follows the authors: L1 raw
        ({"normalize_d": "sum"}, [0.484848, 0.295455, 0.219697]),
    ],
)
def test_l1_distances_are_used_raw_unless_sum_is_asked_for(normalize_d: dict, p) -> None:
    # the same counts, L1 to uniform: 2/3, 0, 4/3
    replies = [_reply(0, 1.0, 100, 2 / 3), _reply(1, 2.0, 30, 0.0), _reply(2, 4.0, 90, 4 / 3)]
    result = aggregate(
        FedDisco(num_classes=3, addons=[DiscoWeighting(metric="l1", **normalize_d)]), replies
    )
    np.testing.assert_allclose([result.metrics[f"weight_{k}"] for k in range(3)], p, atol=5e-7)


def test_a_zero_b_zero_equals_fedavg() -> None:
    replies = [_reply(0, 1.0, 10, 0.7), _reply(1, 3.0, 30, 0.1)]
    disco = aggregate(FedAvg(addons=[DiscoWeighting(a=0, b=0)]), replies).arrays
    plain = aggregate(FedAvg(), replies).arrays
    np.testing.assert_array_equal(disco.to_numpy_ndarrays()[0], plain.to_numpy_ndarrays()[0])


@pytest.mark.parametrize("bad", [float("nan"), -0.5, None])
def test_invalid_or_missing_d_is_excluded_with_a_warning(bad, caplog) -> None:
    replies = [_reply(0, 1.0, 10, 0.2), _reply(1, 5.0, 10, 0.2), _reply(2, 100.0, 10, bad)]
    strategy = FedAvg(addons=[DiscoWeighting()])
    with caplog.at_level(logging.WARNING):
        result = aggregate(strategy, replies)
    arrays, metrics = result.arrays, result.metrics
    assert metrics["weight_2"] == 0.0
    np.testing.assert_allclose(arrays.to_numpy_ndarrays()[0], [3.0])  # the mean of 1 and 5
    assert "excluded from the average" in caplog.text


def test_every_weight_clipped_falls_back_to_sizes_with_warning(caplog) -> None:
    replies = [_reply(0, 0.0, 10, 0.9), _reply(1, 4.0, 30, 0.1)]
    strategy = FedAvg(addons=[DiscoWeighting(a=50.0, b=0.0)])
    with caplog.at_level(logging.WARNING):
        arrays = aggregate(strategy, replies).arrays
    np.testing.assert_allclose(arrays.to_numpy_ndarrays()[0], [3.0])
    assert "every FedDisco weight was clipped" in caplog.text


def test_first_reported_d_is_cached_and_checkpointed() -> None:
    disco = DiscoWeighting()
    strategy = FedAvg(addons=[disco])
    aggregate(strategy, [_reply(0, 1.0, 10, 0.3), _reply(1, 1.0, 10, 0.1)])
    aggregate(strategy, [_reply(0, 1.0, 10, 0.9), _reply(1, 1.0, 10, None)], rnd=2)
    assert disco.d_by_partition == {0: 0.3, 1: 0.1}
    restored = DiscoWeighting()
    FedAvg(addons=[restored]).load_state_dict(strategy.state_dict())
    assert restored.d_by_partition == {0: 0.3, 1: 0.1}


def test_global_target_from_handshake_counts_reaches_the_config() -> None:
    strategy = FedAvg(addons=[DiscoWeighting(target="global")])
    strategy.on_handshake(0, MetricRecord({DISCO_COUNTS: [30.0, 10.0]}))
    strategy.on_handshake(1, MetricRecord({DISCO_COUNTS: [10.0, 30.0]}))
    content = strategy.node_content(plan({11: 0}), 0)
    assert content.config_records[protocol.CONFIG][DISCO_TARGET] == [0.5, 0.5]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"a": -1}, "disco.a must be a number >= 0, got -1"),
        ({"metric": "hamming"}, "disco.metric must be one of kl, l1, l2, cosine, got 'hamming'"),
        ({"target": "skewed"}, "disco.target must be one of uniform, global"),
    ],
)
def test_bad_settings_are_named(kwargs, message) -> None:
    with pytest.raises(ValueError) as err:
        DiscoWeighting(**kwargs)
    assert message in str(err.value)


def test_fedbuff_weighs_a_buffer_by_disco_as_a_round() -> None:
    """A buffer of the three clients above, all fresh, eta 1, s = 1: FedBuff's step is the
    Disco-weighted average the round gives, p = (0.524696, 0.295455, 0.179849)."""
    d = [np.log(3) - np.log(2), 0.0, np.log(3)]
    messages = [_reply(0, 1.0, 100, d[0]), _reply(1, 2.0, 30, d[1]), _reply(2, 4.0, 90, d[2])]
    ok, _ = unpack_replies(messages)
    buffer = [
        Update(Task(i, r.partition_id, 0, 0.0, 1.0), 0, r.arrays, None, r.num_examples, r)
        for i, r in enumerate(reversed(ok))  # taken in any order: summed by partition
    ]
    fedbuff = FedBuff(addons=[DiscoWeighting()], experiment=["async.staleness=constant"])
    stepped = fedbuff.step([np.zeros(1, np.float32)], buffer)
    p = [0.524696, 0.295455, 0.179849]
    np.testing.assert_allclose(stepped[0], [p[0] + 2 * p[1] + 4 * p[2]], rtol=1e-6)
    plain = FedBuff(experiment=["async.staleness=constant"]).step([np.zeros(1, np.float32)], buffer)
    np.testing.assert_allclose(plain[0], [(100 + 2 * 30 + 4 * 90) / 220], rtol=1e-6)


def test_fedasync_refuses_disco_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"algorithm\.disco\.enabled=true is refused: each step"):
        FedAsync(experiment=["algorithm.disco.enabled=true"])
