"""FedCat's server half on mock replies: each copy goes to its chain's device, a cycle of fake
clients adding fixed vectors ends in the exact weighted average, the copies' average is scored
inside a cycle, a failed hop leaves its copy, the GC ablation averages every round, and a
checkpoint taken inside a cycle continues exactly."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message

from fl_system.messages import protocol
from server_app.rounds import RoundResult
from server_app.strategies.fedcat import FedCat
from server_app.strategies.fedcat_math import ChainSchedule
from tests.mock_replies import drive, plan, reply

N, K = 6, 3
V = np.arange(N * 2, dtype=np.float64).reshape(N, 2) / 8 - 0.5  # device d adds V[d]
SAMPLES = [10, 20, 30, 40, 50, 60]  # device d holds SAMPLES[d] examples


def _chain_average(w0: np.ndarray, chains: list[list[int]]) -> np.ndarray:
    """w0 + sum_i acc_i (sum of V along chain i) / sum_i acc_i, acc_i the chain's samples."""
    acc = [sum(SAMPLES[d] for d in c) for c in chains]
    moved = [V[c].sum(axis=0) for c in chains]
    return w0 + sum(a * m for a, m in zip(acc, moved, strict=True)) / sum(acc)


def _fedcat(**kwargs) -> FedCat:
    return FedCat(**{"num_clients": N, "num_rounds": 12, "seed": 3, "k": K, **kwargs})


def _model(w: list[float]) -> ArrayRecord:
    return ArrayRecord(
        {"w": Array(np.array(w, np.float64)), "steps": Array(np.array([7], np.int64))}
    )


def _adding(fail: frozenset[int] = frozenset()):
    """Clients that add V[d] to the model they receive (partition d = node d + 100)."""

    def answer(exchange) -> list[Message]:
        out = []
        for m in exchange.messages:
            pid = m.metadata.dst_node_id - 100
            if pid in fail:
                continue
            w = m.content.array_records[protocol.ARRAYS]["w"].numpy()
            out.append(
                reply(
                    m.metadata.dst_node_id,
                    [w + V[pid], np.array([7], np.int64)],
                    partition_id=pid,
                    num_examples=SAMPLES[pid],
                )
            )
        return out

    return answer


def _round(
    strategy: FedCat, rnd: int, model: ArrayRecord, fail: frozenset[int] = frozenset()
) -> tuple[RoundResult, list]:
    chosen = strategy.choose(rnd, list(range(N)))
    return drive(strategy, plan({100 + p: p for p in chosen}, model, rnd), _adding(fail))


def _sent(exchanges) -> dict[int, np.ndarray]:
    (exchange,) = exchanges
    return {
        m.metadata.dst_node_id - 100: m.content.array_records[protocol.ARRAYS]["w"].numpy()
        for m in exchange.messages
    }


def test_a_cycle_of_fixed_vector_clients_ends_in_the_exact_weighted_average() -> None:
    strategy = _fedcat()
    reference = ChainSchedule(num_devices=N, k=K, greedy_prob=0.5, regroup_every=1, seed=3)
    w0 = np.array([1.0, -2.0])
    model = _model(w0.tolist())
    chains: list[list[int]] = [[] for _ in range(K)]
    for rnd in (1, 2, 3):
        devices = reference.devices(rnd)
        result, sent = _round(strategy, rnd, model)
        received = _sent(sent)
        for i, d in enumerate(devices):  # copy i reached the device of its chain, as it was
            np.testing.assert_array_equal(received[d], w0 + V[chains[i]].sum(axis=0))
            chains[i].append(d)
            assert result.metrics[f"copy_{i}"] == d
        assert result.metrics["chain_pos"] == rnd - 1
        model = result.arrays
        if rnd < 3:  # the global model stands still; the copies' average is scored
            np.testing.assert_array_equal(model["w"].numpy(), w0)
            assert result.metrics["eval_model"] == "copies_average"
            expected = _chain_average(w0, chains)
            np.testing.assert_allclose(result.scored["w"].numpy(), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(model["w"].numpy(), _chain_average(w0, chains), rtol=0, atol=1e-12)
    assert model["steps"].numpy().tolist() == [7]
    assert result.scored is None and result.metrics["eval_model"] == "global"
    assert not any(k.startswith("weight_") for k in result.metrics)
    acc = [sum(SAMPLES[d] for d in c) for c in chains]
    for i, a in enumerate(acc):
        assert result.metrics[f"copy_weight_{i}"] == pytest.approx(a / sum(acc), abs=1e-15)


def test_the_next_cycle_starts_every_copy_from_the_new_global_model() -> None:
    strategy = _fedcat()
    model = _model([0.0, 0.0])
    for rnd in (1, 2, 3):
        result, _ = _round(strategy, rnd, model)
        model = result.arrays
    _, sent = _round(strategy, 4, model)
    for w in _sent(sent).values():
        np.testing.assert_array_equal(w, model["w"].numpy())


def test_a_failed_device_leaves_its_copy_where_it_was_and_the_cycle_closes(caplog) -> None:
    strategy = _fedcat()
    reference = ChainSchedule(num_devices=N, k=K, greedy_prob=0.5, regroup_every=1, seed=3)
    plans = [reference.devices(r) for r in (1, 2, 3)]
    lost = plans[1][0]  # copy 0's device in the second hop fails
    model = _model([0.0, 0.0])
    with caplog.at_level(logging.WARNING):
        for rnd in (1, 2, 3):
            fail = frozenset({lost}) if rnd == 2 else frozenset()
            result, sent = _round(strategy, rnd, model, fail)
            if rnd == 3:  # copy 0 arrives at its third device as its first one left it
                np.testing.assert_array_equal(_sent(sent)[plans[2][0]], V[plans[0][0]])
            model = result.arrays
    assert f"copy 0 skips this hop (partition {lost} gave no usable reply)" in caplog.text
    chains = [[p[i] for p in plans] for i in range(K)]
    chains[0].remove(lost)
    expected = _chain_average(np.zeros(2), chains)
    np.testing.assert_allclose(model["w"].numpy(), expected, rtol=0, atol=1e-12)


def test_an_unconnected_device_is_not_sent_to_and_its_copy_skips(caplog) -> None:
    strategy = _fedcat()
    devices = ChainSchedule(num_devices=N, k=K, greedy_prob=0.5, regroup_every=1, seed=3).devices(1)
    available = [p for p in range(N) if p != devices[1]]
    with caplog.at_level(logging.WARNING):
        chosen = strategy.choose(1, available)
    assert chosen == [devices[0], devices[2]]
    assert f"partition {devices[1]} (copy 1) is not connected" in caplog.text


def test_a_reply_from_a_partition_not_picked_is_refused() -> None:
    strategy = _fedcat()
    chosen = strategy.choose(1, list(range(N)))
    other = next(p for p in range(N) if p not in chosen)
    arrays = _model([0.0, 0.0])
    round_plan = plan({100 + p: p for p in chosen}, arrays, 1)
    strategy.round(round_plan).send(None)  # start the cycle's copies
    layers = {"w": np.zeros(2), "steps": np.array([7], np.int64)}
    bad = reply(100 + other, layers, partition_id=other, num_examples=5)
    result = strategy.finish_round(round_plan, [bad])
    assert result.failures[0].reason == f"partition {other} was not picked this round"


def test_without_concatenation_the_picks_are_averaged_every_round() -> None:
    strategy = _fedcat(concatenate=False, num_rounds=7)
    devices = ChainSchedule(num_devices=N, k=K, greedy_prob=0.5, regroup_every=1, seed=3).devices(1)
    result, sent = _round(strategy, 1, _model([0.0, 0.0]))
    assert all(np.array_equal(w, [0.0, 0.0]) for w in _sent(sent).values())
    expected = sum(SAMPLES[d] * V[d] for d in devices) / sum(SAMPLES[d] for d in devices)
    np.testing.assert_allclose(result.arrays["w"].numpy(), expected, rtol=0, atol=1e-12)
    assert result.scored is None and result.metrics["eval_model"] == "global"
    assert {f"weight_{d}" for d in devices} <= set(result.metrics)


@pytest.mark.parametrize("stop", [1, 2, 4])
def test_a_checkpoint_inside_a_cycle_continues_exactly(stop: int) -> None:
    def run(strategy: FedCat, first: int, last: int, model: ArrayRecord) -> ArrayRecord:
        for rnd in range(first, last + 1):
            model = _round(strategy, rnd, model)[0].arrays
        return model

    start = _model([0.5, 0.25])
    whole = run(_fedcat(), 1, 6, start)
    before = _fedcat()
    middle = run(before, 1, stop, start)
    state = {k: v.copy() for k, v in before.state_dict().items()}
    after = _fedcat()
    after.load_state_dict(state)
    resumed = run(after, stop + 1, 6, middle)
    np.testing.assert_array_equal(resumed["w"].numpy(), whole["w"].numpy())


def test_participation_per_partition_goes_to_the_summary() -> None:
    strategy = _fedcat()
    rows = []
    model = _model([0.0, 0.0])
    for rnd in range(1, 7):
        result, _ = _round(strategy, rnd, model)
        model = result.arrays
        rows.append({"round": rnd, **result.metrics})
    summary = strategy.summarize(rows)
    counts = strategy.schedule.counts.sum(axis=1)
    assert summary["participation"] == {str(p): int(n) for p, n in enumerate(counts)}
    assert sum(summary["participation"].values()) == 6 * K


def test_k_defaults_to_a_tenth_of_the_clients() -> None:
    assert FedCat(num_clients=100, num_rounds=20, seed=0).k == 10
    assert FedCat(num_clients=4, num_rounds=5, seed=0).k == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 7}, "algorithm.k must be in 1..6"),
        ({"eps": -0.1}, "algorithm.eps must be a number in [0, 1]"),
        ({"eps": "a lot"}, "algorithm.eps must be a number in [0, 1]"),
        ({"lam": 0}, "algorithm.lam must be an integer >= 1"),
        ({"lam": 1.5}, "algorithm.lam must be an integer"),
        ({"num_rounds": 10}, "num_rounds (10) must be a multiple of algorithm.k (3)"),
        ({"clients_per_round": 3}, "leave clients_per_round null"),
    ],
)
def test_bad_settings_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _fedcat(**kwargs)
