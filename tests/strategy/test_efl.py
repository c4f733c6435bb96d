"""EFL's server half on mock replies: U and V are the unweighted sums of this round's u_k and
u_k * w_k, sent to every client next round; a reply without them still counts for the model."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, RecordDict

from fl_system.algorithms.efl import (
    EFL_FISHER,
    EFL_FISHER_DUE,
    EFL_FISHER_SUM,
    EFL_PENALTY,
    EFL_POSITIONS,
    EFL_SUM_POSITIONS,
    EFL_WEIGHTED,
    EFL_WEIGHTED_SUM,
)
from fl_system.messages import protocol
from server_app.strategies.efl import Efl
from tests.mock_replies import aggregate, plan, reply


def _global() -> ArrayRecord:
    return ArrayRecord(
        {
            "w": Array(np.array([0.0, 0.0], np.float32)),
            "steps": Array(np.array([7], np.int64)),
        }
    )


def _reply(node: int, pid: int, n: int, w: list[float], u: list[float] | None):
    extra = None
    if u is not None:
        v = np.array(u, np.float32) * np.array(w, np.float32)
        extra = RecordDict(
            {
                EFL_FISHER: ArrayRecord({"w": Array(np.array(u, np.float32))}),
                EFL_WEIGHTED: ArrayRecord({"w": Array(v)}),
            }
        )
    arrays = [np.array(w, np.float32), np.array([7], np.int64)]
    return reply(node, arrays, partition_id=pid, num_examples=n, extra=extra)


def _sent(strategy: Efl) -> tuple[np.ndarray, np.ndarray]:
    (msg,) = strategy.train_messages(plan({11: 0}, _global(), rnd=2))
    records = msg.content.array_records
    assert list(records[EFL_FISHER_SUM].keys()) == ["w"]  # float layers only
    return (
        records[EFL_FISHER_SUM]["w"].numpy(),
        records[EFL_WEIGHTED_SUM]["w"].numpy(),
    )


def test_the_first_round_sends_zero_sums() -> None:
    u, v = _sent(Efl())
    assert u.tolist() == [0.0, 0.0] and v.tolist() == [0.0, 0.0]


def test_sums_of_this_rounds_reporters_and_a_data_size_average() -> None:
    strategy = Efl()
    replies = [
        _reply(11, 0, 1, [1.0, 2.0], [0.5, 0.25]),
        _reply(12, 1, 3, [3.0, -2.0], [1.5, 0.0]),
    ]
    result = aggregate(strategy, replies, arrays=_global())
    np.testing.assert_allclose(result.arrays["w"].numpy(), [2.5, -1.0])  # (1*1 + 3*3) / 4
    u, v = _sent(strategy)
    np.testing.assert_allclose(u, [2.0, 0.25])
    np.testing.assert_allclose(v, [0.5 * 1.0 + 1.5 * 3.0, 0.25 * 2.0 + 0.0])
    # The next round replaces the sums (last round's reporters only), it does not add to them.
    aggregate(strategy, [_reply(13, 2, 2, [1.0, 1.0], [1.0, 1.0])], arrays=_global(), rnd=2)
    u, v = _sent(strategy)
    assert u.tolist() == [1.0, 1.0] and v.tolist() == [1.0, 1.0]


def test_the_clients_penalties_are_averaged_by_data_size() -> None:
    """efl_penalty: (1 * 4 + 3 * -2) / 4 over the replies that report one; none at lambda = 0
    (no client reports it)."""
    penalties = {0: 4.0, 1: -2.0}
    replies = [
        reply(
            11 + pid,
            [np.array([1.0, 2.0], np.float32), np.array([7], np.int64)],
            partition_id=pid,
            num_examples=n,
            metrics={EFL_PENALTY: penalties[pid]},
        )
        for pid, n in ((0, 1), (1, 3))
    ]
    result = aggregate(Efl(), replies, arrays=_global())
    assert result.metrics["efl_penalty"] == pytest.approx(-0.5)
    plain = [_reply(11, 0, 1, [1.0, 2.0], [0.5, 0.25])]
    assert "efl_penalty" not in aggregate(Efl(), plain, arrays=_global()).metrics


def test_a_reply_without_fisher_terms_counts_for_the_model_only(caplog) -> None:
    strategy = Efl()
    replies = [_reply(11, 0, 1, [1.0, 2.0], [0.5, 0.5]), _reply(12, 1, 1, [3.0, 4.0], None)]
    with caplog.at_level(logging.WARNING):
        result = aggregate(strategy, replies, arrays=_global())
    np.testing.assert_allclose(result.arrays["w"].numpy(), [2.0, 3.0])
    assert "partition 1: reply's u, v: lacks 'efl-u' or 'efl-v'" in caplog.text
    u, _ = _sent(strategy)
    assert u.tolist() == [0.5, 0.5]


def test_negative_fisher_values_are_refused(caplog) -> None:
    strategy = Efl()
    with caplog.at_level(logging.WARNING):
        aggregate(strategy, [_reply(11, 0, 1, [1.0, 2.0], [-0.5, 0.5])], arrays=_global())
    assert "not finite, or u < 0" in caplog.text
    assert _sent(strategy)[0].tolist() == [0.0, 0.0]


def test_sums_survive_a_checkpoint() -> None:
    strategy = Efl()
    aggregate(strategy, [_reply(11, 0, 1, [1.0, 2.0], [0.5, 0.25])], arrays=_global())
    state = strategy.state_dict()
    assert sorted(state) == ["efl/U/w", "efl/V/w"]
    restored = Efl()
    restored.load_state_dict(state)
    for a, b in zip(_sent(strategy), _sent(restored), strict=True):
        assert a.tolist() == b.tolist()
    with pytest.raises(ValueError, match="does not keep state"):
        Efl().load_state_dict({**state, "other/x": np.zeros(1)})


def test_fisher_every_keeps_the_sums_between_refresh_rounds() -> None:
    """fisher_every = 2: round 1 refreshes U, V and says u, v are due; round 2 does not ask
    for them and keeps U, V even when its reply has no u, v; round 3 refreshes again."""
    strategy = Efl(fisher_every=2)
    due = [
        strategy.node_content(plan({11: 0}, _global(), rnd=r), 0).config_records[protocol.CONFIG][
            EFL_FISHER_DUE
        ]
        for r in (1, 2, 3)
    ]
    assert due == [True, False, True]
    aggregate(strategy, [_reply(11, 0, 1, [1.0, 2.0], [0.5, 0.25])], arrays=_global())
    aggregate(strategy, [_reply(12, 1, 1, [1.0, 2.0], None)], arrays=_global(), rnd=2)
    assert _sent(strategy)[0].tolist() == [0.5, 0.25]
    aggregate(strategy, [_reply(13, 2, 1, [1.0, 1.0], [2.0, 2.0])], arrays=_global(), rnd=3)
    assert _sent(strategy)[0].tolist() == [2.0, 2.0]


def test_topk_fisher_comm_sends_the_largest_sums_with_positions() -> None:
    strategy = Efl(fisher_comm="topk", fisher_q=0.5)
    aggregate(strategy, [_reply(11, 0, 1, [4.0, 2.0], [0.5, 3.0])], arrays=_global())
    (msg,) = strategy.train_messages(plan({11: 0}, _global(), rnd=2))
    records = msg.content.array_records
    assert records[EFL_FISHER_SUM]["w"].numpy().tolist() == [3.0]
    assert records[EFL_WEIGHTED_SUM]["w"].numpy().tolist() == [6.0]
    assert records[EFL_SUM_POSITIONS]["w"].numpy().tolist() == [0b1000_0000]


def test_a_reply_with_unreadable_topk_positions_is_left_out_of_the_sums(caplog) -> None:
    one = ArrayRecord({"w": Array(np.array([0.5, 0.25], np.float32))})
    extra = RecordDict(
        {
            EFL_FISHER: one,
            EFL_WEIGHTED: one,
            EFL_POSITIONS: ArrayRecord({"w": Array(np.array([255], np.uint8))}),
        }
    )
    arrays = [np.array([1.0, 2.0], np.float32), np.array([7], np.int64)]
    bad = reply(11, arrays, partition_id=0, num_examples=1, extra=extra)
    strategy = Efl()
    with caplog.at_level(logging.WARNING):
        aggregate(strategy, [bad], arrays=_global())
    assert "layer 'w': position stream truncated: 0 of 2 gaps" in caplog.text
    assert _sent(strategy)[0].tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (
            {"fisher_comm": "zip"},
            "algorithm.fisher_comm must be one of dense, fp16, topk, got 'zip'",
        ),
        ({"fisher_q": 0.0}, r"algorithm.fisher_q must be a number in \(0, 1\], got 0.0"),
        ({"fisher_every": 0}, "algorithm.fisher_every must be an integer >= 1, got 0"),
    ],
)
def test_bad_server_settings_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Efl(**kwargs)
