"""TACO's server half on mock replies: alpha by hand for three clients, the alpha-weighted
update, the last update and alpha sent back, expulsion after exactly lam strikes at kappa,
an expelled client's reply refused, and the state through a checkpoint."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from fl_system.algorithms.taco import TACO_ALPHA, TACO_LAST_UPDATE
from fl_system.messages import protocol
from server_app.strategies.taco import Taco
from tests.mock_replies import aggregate, plan, reply

# Uploads Delta_i = w - w_i with w = 0: (1, 0), (0, 1), (1, 1). Norms 1, 1, sqrt 2, their sum
# S = 2 + sqrt 2, mean (2/3, 2/3): cos = 1/sqrt 2, 1/sqrt 2, 1, and alpha = (1 - n_i / S) cos
# = 0.5, 0.5 and 2 / (2 + sqrt 2) = 2 - sqrt 2.
DELTAS = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
ALPHA = [0.5, 0.5, 2 - math.sqrt(2)]


def _global(w: list[float] | None = None) -> ArrayRecord:
    return ArrayRecord(
        {
            "w": Array(np.array(w or [0.0, 0.0], np.float32)),
            "steps": Array(np.array([7], np.int64)),
        }
    )


def _replies(
    deltas: list[list[float]], start: list[float] | None = None, steps: list[int] | None = None
) -> list:
    w = np.array(start or [0.0, 0.0], np.float32)
    return [
        reply(
            11 + pid,
            [w - np.array(d, np.float32), np.array([7], np.int64)],
            partition_id=pid,
            num_examples=10 * (pid + 1),  # TACO ignores data sizes
            metrics={protocol.NUM_STEPS: K if steps is None else steps[pid]},
        )
        for pid, d in enumerate(deltas)
    ]


K = 4


def _taco(**kwargs) -> Taco:
    return Taco(**{"num_clients": 3, "num_rounds": 10, "local_steps": K, **kwargs})


def test_alpha_by_hand_for_three_clients_and_the_weighted_update() -> None:
    strategy = _taco()
    result = aggregate(strategy, _replies(DELTAS), arrays=_global())
    for pid, a in enumerate(ALPHA):
        assert result.metrics[f"alpha_{pid}"] == pytest.approx(a, abs=1e-12)
        assert result.metrics[f"correction_{pid}"] == pytest.approx(0.9)  # 1 - alpha^0
        assert result.metrics[f"weight_{pid}"] == pytest.approx(a / sum(ALPHA), abs=1e-12)
    step = (ALPHA[0] + ALPHA[2]) / sum(ALPHA)  # both coordinates
    np.testing.assert_allclose(result.arrays["w"].numpy(), [-step, -step], rtol=1e-6)
    assert result.arrays["steps"].numpy().tolist() == [7]
    assert result.metrics["taco_uniform_fallback"] == 0


def test_next_round_sends_the_last_update_and_each_clients_alpha() -> None:
    strategy = _taco()
    first = [m.content for m in strategy.train_messages(plan({11: 0, 12: 2}, _global()))]
    for content in first:
        assert content.array_records[TACO_LAST_UPDATE]["w"].numpy().tolist() == [0, 0]
        assert content.config_records[protocol.CONFIG][TACO_ALPHA] == 0.1
    result = aggregate(strategy, _replies(DELTAS), arrays=_global())
    new = result.arrays
    messages = strategy.train_messages(plan({11: 0, 13: 2}, new, rnd=2))
    for msg, pid in zip(messages, (0, 2), strict=True):
        u = msg.content.array_records[TACO_LAST_UPDATE]
        assert list(u.keys()) == ["w"]  # float layers only
        np.testing.assert_allclose(u["w"].numpy(), -new["w"].numpy())  # w_prev - w, w_prev = 0
        alpha = msg.content.config_records[protocol.CONFIG][TACO_ALPHA]
        assert alpha == pytest.approx(ALPHA[pid], abs=1e-12)


@pytest.mark.parametrize("delta_scale", [None, 1.0])
def test_alpha_compares_the_uploads_without_the_k_scaled_share_of_the_correction(
    delta_scale: float | None,
) -> None:
    """Round 2, u = (1, -3), every alpha sent 0.2, K = 4, gamma = 1/4: under the K-scaled
    reading each client adds (s / K) gamma (K - 1)(1 - 0.2) u = 0.6 (s / K) u beyond the
    literal correction (client 0 a straggler with s = 2 steps: 0.3 u). Taken out again, alpha
    is the hand value of DELTAS; read literally (delta_scale 1) nothing is taken out."""
    strategy = _taco(delta_scale=delta_scale)
    strategy.alpha[:] = 0.2
    u = np.array([1.0, -3.0])
    strategy.last_update.ensure(_global())["w"][:] = u
    share = [0.3, 0.6, 0.6] if delta_scale is None else [0.0, 0.0, 0.0]
    shifted = [list(np.array(d) + c * u) for d, c in zip(DELTAS, share, strict=True)]
    result = aggregate(strategy, _replies(shifted, steps=[2, K, K]), arrays=_global(), rnd=2)
    for pid, a in enumerate(ALPHA):
        assert result.metrics[f"alpha_{pid}"] == pytest.approx(a, abs=1e-6)


def test_untailored_aggregation_averages_uniformly_but_still_scores() -> None:
    result = aggregate(_taco(tailored_aggregation=False), _replies(DELTAS), arrays=_global())
    np.testing.assert_allclose(result.arrays["w"].numpy(), [-2 / 3, -2 / 3], rtol=1e-6)
    assert result.metrics["alpha_2"] == pytest.approx(ALPHA[2], abs=1e-12)


def test_opposed_uploads_fall_back_to_uniform_weights() -> None:
    result = aggregate(_taco(), _replies([[1.0, 0.0], [-1.0, 0.0]]), arrays=_global())
    assert result.metrics["taco_uniform_fallback"] == 1
    np.testing.assert_allclose(result.arrays["w"].numpy(), [0.0, 0.0], atol=1e-7)


def test_expelled_after_exactly_lam_strikes_then_refused_and_never_sampled() -> None:
    """kappa = 0.55: only client 2 (alpha 0.586) gets strikes; lam = 2 expels it after the
    second round; its reply in round 3 is refused and the round goes on without it."""
    strategy = _taco(kappa=0.55, lam=2)
    first = aggregate(strategy, _replies(DELTAS), arrays=_global(), rnd=1)
    assert strategy.excluded() == frozenset() and first.metrics["expelled"] == 0
    assert first.metrics["flagged"] == 1
    second = aggregate(strategy, _replies(DELTAS), arrays=_global(), rnd=2)
    assert strategy.excluded() == frozenset({2})
    assert second.metrics["expelled"] == 1 and second.metrics["expelled_now"] == "2"
    third = aggregate(strategy, _replies(DELTAS), arrays=_global(), rnd=3)
    assert third.participants == 2 and "alpha_2" not in third.metrics
    (failure,) = third.failures
    assert failure.node_id == 13 and "expelled at round 2" in failure.reason
    assert third.metrics["expelled_now"] == ""
    rows = [{"round": r, "alpha_2": str(ALPHA[2])} for r in (1, 2)]
    assert strategy.summarize(rows)["expelled"] == [
        {"partition": 2, "round": 2, "alpha": [[1, ALPHA[2]], [2, ALPHA[2]]]}
    ]


def test_no_strikes_in_the_warm_up_rounds() -> None:
    """warmup_rounds = 2: client 2's alpha (0.586 >= 0.55) gives no strike in rounds 1 and 2;
    with lam = 1 it is expelled in round 3, the first round that counts."""
    strategy = _taco(kappa=0.55, lam=1, warmup_rounds=2)
    for rnd in (1, 2):
        result = aggregate(strategy, _replies(DELTAS), arrays=_global(), rnd=rnd)
        assert result.metrics["flagged"] == 1 and strategy.expulsions.strikes.tolist() == [0, 0, 0]
    aggregate(strategy, _replies(DELTAS), arrays=_global(), rnd=3)
    assert strategy.excluded() == frozenset({2}) and strategy.expulsions.expelled_at[2] == 3


def test_a_round_that_flags_every_client_strikes_none_unless_strike_all() -> None:
    """kappa = 0.4 flags all three (alpha 0.5, 0.5, 0.586): agreement by all is no sign of a
    freeloader (4 honest IID clients were expelled together this way); the paper's rule
    (strike_all) strikes them all."""
    strategy = _taco(kappa=0.4, lam=1)
    result = aggregate(strategy, _replies(DELTAS), arrays=_global(), rnd=1)
    assert result.metrics["flagged"] == 3 and strategy.expulsions.strikes.tolist() == [0, 0, 0]
    assert strategy.excluded() == frozenset()
    paper = _taco(kappa=0.4, lam=3, strike_all=True)
    aggregate(paper, _replies(DELTAS), arrays=_global(), rnd=1)
    assert paper.expulsions.strikes.tolist() == [1, 1, 1]


def test_strikes_that_would_expel_every_client_left_expel_none_and_warn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The round is no evidence: its strikes are not counted either, so a client kept in it
    can still be expelled later."""
    strategy = _taco(kappa=0.4, lam=1, strike_all=True)
    with caplog.at_level(logging.WARNING):
        result = aggregate(strategy, _replies(DELTAS), arrays=_global(), rnd=1)
    assert strategy.expulsions.strikes.tolist() == [0, 0, 0] and strategy.excluded() == frozenset()
    assert result.metrics["expelled"] == 0 and result.metrics["expelled_now"] == ""
    assert "round 1: every client left (0, 1, 2) would reach 1 strikes: none is expelled" in (
        caplog.text
    )
    strategy.expulsions.kappa = 0.55  # now only client 2 (alpha 0.586) is flagged: it alone goes
    aggregate(strategy, _replies(DELTAS), arrays=_global(), rnd=2)
    assert strategy.excluded() == frozenset({2})


def test_strikes_without_expulsion_when_expel_is_off() -> None:
    strategy = _taco(kappa=0.55, lam=1, expel=False)
    aggregate(strategy, _replies(DELTAS), arrays=_global())
    assert strategy.excluded() == frozenset() and strategy.expulsions.strikes.tolist() == [0, 0, 1]


def test_state_survives_a_checkpoint() -> None:
    strategy = _taco(kappa=0.55, lam=1)
    aggregate(strategy, _replies(DELTAS), arrays=_global())
    restored = _taco(kappa=0.55, lam=1)
    restored.load_state_dict(strategy.state_dict())
    assert restored.excluded() == frozenset({2})
    np.testing.assert_array_equal(restored.alpha, strategy.alpha)
    sent = restored.train_messages(plan({11: 0}, _global(), rnd=2))[0].content
    np.testing.assert_array_equal(
        sent.array_records[TACO_LAST_UPDATE]["w"].numpy(),
        strategy.last_update.values["w"].astype(np.float32),
    )


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"kappa": 0.0}, r"algorithm.kappa must be a number in \(0, 1\], got 0.0"),
        ({"kappa": 1.5}, r"algorithm.kappa must be a number in \(0, 1\], got 1.5"),
        ({"lam": 0}, r"algorithm.lam must be null \(T / 5, at least 3\) or an integer >= 1, got 0"),
        ({"strike_all": "yes"}, "algorithm.strike_all must be true or false, got 'yes'"),
        ({"warmup_rounds": -1}, r"algorithm.warmup_rounds must be an integer >= 0, got -1"),
    ],
)
def test_bad_server_settings_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _taco(**kwargs)


def test_lam_defaults_to_a_fifth_of_the_rounds_and_at_least_three() -> None:
    """A 5-round run's T / 5 = 1 strike expelled 4 honest IID clients in round 1."""
    lams = [_taco(num_rounds=t).expulsions.lam for t in (100, 12, 5)]
    assert lams == [20, 3, 3] and _taco(num_rounds=5, lam=1).expulsions.lam == 1
