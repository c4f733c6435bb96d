"""FedGSNR's step schedule on mock replies: both exchanges of a round, against hand computations.

The round below: five sampled clients, B = 4, E_const = 10, 2-parameter statistics.

    pid  n_k  m_k        v_k      query reply
    0    2    [1, 0]     [0, 0]   ok
    1    2    [1, 0]     [0, 0]   ok
    2    4    [0, 1]     [4, 0]   ok
    3    1    [-1, -1]   [0, 0]   ok (points away from the others)
    4    -    -          -        client error
    5    3    [nan, 0]   [0, 0]   not finite

Pooled over pids 0-3 with p = n / 9: m_g = [1/3, 1/3]; v_g = p.v + p.(m - m_g)^2
= [16/9, 0] + [4/9, 4/9] = [20/9, 4/9]; L = |m_g|^2 + sum(v_g)/B = 2/9 + 6/9 = 8/9.
    pid 0, 1: N = 1, M = 1/3: n_opt = 1/3, cos = 1/(2 sqrt 2),
              GSNR = (1/3)/sqrt(8/9 - 1/9) = 1/sqrt 7
    pid 2:    N = 1 + 4/4 = 2, M = 1/3 + 2 sqrt(20/9)/4 = (1 + sqrt 5)/3:
              n_opt = (1 + sqrt 5)/6, cos = (1 + sqrt 5)/4, GSNR = (1 + sqrt 5)/sqrt(10 - 2 sqrt 5)
    pid 3:    M = -2/3 < 0: n_opt = 0, GSNR = 0, cos = (-2/3)/sqrt(8/9 * 2) = -1/2
Steps: 4 * 10 = 40 shared as 40 n_opt / sum = [11.056, 11.056, 17.889, 0]: floors [11, 11, 17, 0],
the one left over to pid 2 (largest remainder): E = [11, 11, 18, 0]. pid 3 trains nothing.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from flwr.app import (
    Array,
    ArrayRecord,
    Error,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)

from fl_system.addons.gsnr import GSNR_MEAN, GSNR_SAMPLES, GSNR_STATS, GSNR_VARIANCE
from fl_system.messages import protocol
from server_app.addons.gsnr import STATS_EXCHANGE, GsnrSchedule
from server_app.rounds import Exchange
from server_app.strategies.fedavg import FedAvg
from server_app.strategies.fedgsnr import FedGsnr
from tests.mock_replies import drive, plan, reply

SQRT5 = math.sqrt(5)
GLOBAL = ArrayRecord({"w": Array(np.zeros(2, np.float32))})
NODES = {10 + pid: pid for pid in range(6)}
STATS = {  # pid -> (n_k, m_k, v_k)
    0: (2, [1.0, 0.0], [0.0, 0.0]),
    1: (2, [1.0, 0.0], [0.0, 0.0]),
    2: (4, [0.0, 1.0], [4.0, 0.0]),
    3: (1, [-1.0, -1.0], [0.0, 0.0]),
    5: (3, [float("nan"), 0.0], [0.0, 0.0]),
}


def _stats_reply(query: Message, n: int, mean: list[float], variance: list[float]) -> Message:
    stats = ArrayRecord(
        {
            GSNR_MEAN: Array(np.array(mean, np.float32)),
            GSNR_VARIANCE: Array(np.array(variance, np.float32)),
        }
    )
    metrics = MetricRecord({protocol.NUM_EXAMPLES: n, GSNR_SAMPLES: n})
    return Message(RecordDict({GSNR_STATS: stats, protocol.METRICS: metrics}), reply_to=query)


def _client(stats: dict, trained_to: dict[int, float] | None = None):
    """Answers the query from `stats`, and training with w = [value, value] by partition."""

    def answer(exchange: Exchange) -> list[Message]:
        out = []
        for msg in exchange.messages:
            pid = NODES[msg.metadata.dst_node_id]
            if exchange.label == STATS_EXCHANGE:
                if pid in stats:
                    out.append(_stats_reply(msg, *stats[pid]))
                else:
                    out.append(Message(Error(code=1, reason="out of memory"), reply_to=msg))
            else:
                value = (trained_to or {}).get(pid, float(pid))
                w = np.full(2, value, np.float32)
                out.append(
                    reply(
                        msg.metadata.dst_node_id, [w], partition_id=pid, num_examples=stats[pid][0]
                    )
                )
        return out

    return answer


def _schedule(**kwargs) -> GsnrSchedule:
    return GsnrSchedule(**{"local_steps": 10, "batch_size": 4, **kwargs})


def test_a_round_asks_then_trains_each_client_its_own_steps(caplog) -> None:
    strategy = FedGsnr(addons=[_schedule()])
    with caplog.at_level(logging.WARNING):
        result, exchanges = drive(strategy, plan(NODES, GLOBAL), _client(STATS))
    query, train = exchanges
    assert query.label == STATS_EXCHANGE and train.label == "train"
    assert {m.metadata.message_type for m in query.messages} == {protocol.ASK}
    assert [m.metadata.dst_node_id for m in query.messages] == list(NODES)
    asked = query.messages[0].content
    assert asked.config_records[protocol.CONFIG][protocol.QUESTION] == GSNR_STATS
    assert asked.array_records[protocol.ARRAYS] is GLOBAL

    # pid 4 failed the query, pid 5 sent NaN, pid 3 got E = 0: none of them is trained
    steps = {
        NODES[m.metadata.dst_node_id]: m.content.config_records[protocol.CONFIG][
            "train.local_steps"
        ]
        for m in train.messages
    }
    assert steps == {0: 11, 1: 11, 2: 18}
    assert {m.metadata.message_type for m in train.messages} == {MessageType.TRAIN}

    metrics = result.metrics
    assert [metrics[f"steps_{p}"] for p in range(4)] == [11, 11, 18, 0]
    expected = {
        "n_opt": [1 / 3, 1 / 3, (1 + SQRT5) / 6, 0.0],
        "gsnr": [1 / math.sqrt(7), 1 / math.sqrt(7), (1 + SQRT5) / math.sqrt(10 - 2 * SQRT5), 0.0],
        "cos": [1 / (2 * math.sqrt(2)), 1 / (2 * math.sqrt(2)), (1 + SQRT5) / 4, -0.5],
    }
    for name, values in expected.items():
        got = [metrics[f"{name}_{p}"] for p in range(4)]
        np.testing.assert_allclose(got, values, rtol=1e-6, atol=1e-12)
    assert not any(f"steps_{p}" in metrics for p in (4, 5))
    q = np.array([1 / 3, 1 / 3, (1 + SQRT5) / 6]) / (2 / 3 + (1 + SQRT5) / 6)
    assert metrics["gsnr_entropy"] == pytest.approx(float(-(q * np.log(q)).sum()), rel=1e-9)
    assert metrics["gsnr_max_steps"] == 18

    # the average: data sizes renormalised over the trained clients (2, 2, 4), w = [pid, pid]
    assert [metrics[f"weight_{p}"] for p in range(3)] == [0.25, 0.25, 0.5]
    assert "weight_3" not in metrics
    np.testing.assert_allclose(result.arrays["w"].numpy(), [1.25, 1.25])
    assert result.participants == 3
    reasons = {f.node_id: f.reason for f in result.failures}
    assert reasons == {
        14: "gradient statistics query: client error: out of memory",
        15: "gradient statistics query: statistics are NaN or infinite",
    }
    assert "node 14 left out of training" in caplog.text


def test_identical_clients_train_e_const_steps_like_the_baseline() -> None:
    same = {pid: (5, [0.3, -0.2], [0.5, 0.1]) for pid in range(4)}
    nodes = {10 + p: p for p in range(4)}
    result, (_, train) = drive(FedGsnr(addons=[_schedule()]), plan(nodes, GLOBAL), _client(same))
    assert [result.metrics[f"n_opt_{p}"] for p in range(4)] == pytest.approx([1.0] * 4, rel=1e-12)
    assert [result.metrics[f"steps_{p}"] for p in range(4)] == [10] * 4
    baseline, (plain,) = drive(FedAvg(), plan(nodes, GLOBAL), _client(same))
    for ours, theirs in zip(train.messages, plain.messages, strict=True):
        config = dict(ours.content.config_records[protocol.CONFIG])
        assert config.pop("train.local_steps") == 10
        assert config == dict(theirs.content.config_records[protocol.CONFIG])
    np.testing.assert_array_equal(result.arrays["w"].numpy(), baseline.arrays["w"].numpy())


def test_all_zero_gradients_give_uniform_steps_with_a_warning(caplog) -> None:
    zero = {pid: (3, [0.0, 0.0], [0.0, 0.0]) for pid in range(3)}
    nodes = {10 + p: p for p in range(3)}
    with caplog.at_level(logging.WARNING):
        result, _ = drive(FedGsnr(addons=[_schedule()]), plan(nodes, GLOBAL), _client(zero))
    assert [result.metrics[f"steps_{p}"] for p in range(3)] == [10, 10, 10]
    assert "every client's n_opt is 0" in caplog.text


def test_scaled_mode_and_the_cap() -> None:
    stats = {p: STATS[p] for p in range(4)}
    nodes = {10 + p: p for p in range(4)}
    scaled, _ = drive(
        FedGsnr(addons=[_schedule(allocation="scaled")]), plan(nodes, GLOBAL), _client(stats)
    )
    # round(10 * n_opt) = round([3.33, 3.33, 5.39, 0])
    assert [scaled.metrics[f"steps_{p}"] for p in range(4)] == [3, 3, 5, 0]
    capped, _ = drive(
        FedGsnr(addons=[_schedule(max_steps=15)]), plan(nodes, GLOBAL), _client(stats)
    )
    # 40 shared with pid 2 capped at 15: the other 25 split equally
    assert [capped.metrics[f"steps_{p}"] for p in range(4)] == [13, 12, 15, 0]


def test_no_usable_statistics_fails_the_round_with_the_reasons() -> None:
    nodes = {14: 4, 15: 5}
    result, exchanges = drive(FedGsnr(addons=[_schedule()]), plan(nodes, GLOBAL), _client(STATS))
    assert exchanges[1].messages == []
    assert result.arrays is None and result.participants == 0
    assert len(result.failures) == 2


def test_contribution_is_the_median_and_mean_gsnr_over_rounds() -> None:
    rows = [
        {"round": 1, "gsnr_0": 1.0, "gsnr_1": 4.0, "gsnr_entropy": 0.5},
        {"round": 2, "gsnr_0": 3.0, "gsnr_1": "", "gsnr_2": 0.5},
        {"round": 3, "gsnr_0": 8.0, "gsnr_1": 6.0, "gsnr_2": 0.5},
    ]
    summary = FedGsnr(addons=[_schedule()]).summarize(rows)
    assert summary["contribution"] == {
        "0": {"median": 3.0, "mean": 4.0},
        "1": {"median": 5.0, "mean": 5.0},
        "2": {"median": 0.5, "mean": 0.5},
    }
    assert summary["low_contribution"] == [2]  # 0.5 < 0.5 * median(3, 5, 0.5) = 1.5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"local_steps": None}, "algorithm.gsnr needs train.local_steps"),
        ({"allocation": "greedy"}, "algorithm.gsnr.allocation must be one of matched, scaled"),
        ({"max_steps": 0}, "algorithm.gsnr.max_steps must be null or an integer >= 1"),
    ],
)
def test_bad_settings_are_named(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        _schedule(**kwargs)
