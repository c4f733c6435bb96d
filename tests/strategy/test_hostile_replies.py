"""Hostile or broken replies are refused before aggregation with a reason naming the
partition, and the round goes on with the rest; robust rules bound what a scaled-up update
can do (mock replies, as a SuperNode would send them)."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message

from fl_system.learning.malicious import tamper
from fl_system.learning.robust import CoordinateMedian, NormClip, TrimmedMean, WeightedMean
from fl_system.messages import protocol
from server_app.strategies.fedavg import FedAvg
from server_app.strategies.fednova import FedNova
from server_app.strategies.foolsgold import FoolsGold
from tests.mock_replies import aggregate, reply

F = np.float32
MODEL = {"w": np.zeros((2, 3), F), "b": np.full(3, 0.5, F)}
HONEST = 4  # partitions 0..3 are honest, partition 4 is not


def _honest_model(k: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(k)
    return {name: (w + 0.01 * rng.normal(size=w.shape)).astype(F) for name, w in MODEL.items()}


def _honest() -> list[Message]:
    return [reply(10 + k, _honest_model(k), partition_id=k, num_examples=20) for k in range(HONEST)]


def _strategy(rule=None) -> FedAvg:
    strategy = FedAvg()
    strategy.norm_ratio, strategy.examples_ratio = 50.0, 1000.0  # conf/config.yaml's defaults
    strategy.robust = rule or WeightedMean()
    return strategy


def _bad(kind: str) -> Message:
    """Partition 4's reply of `kind`: clients.malicious's kinds and hand-made ones."""
    trained = _honest_model(HONEST)
    if kind in ("nan", "inf", "shape", "dtype", "missing", "huge", "scaled"):
        layers, n = tamper(kind, trained, MODEL, 20, scale=1000.0)
        return reply(99, layers, partition_id=HONEST, num_examples=n)
    if kind == "extra":
        return reply(99, {**trained, "x": np.ones(2, F)}, partition_id=HONEST, num_examples=20)
    counts = {"float count": 20.0, "list count": [20], "negative count": -3, "zero count": 0}
    return reply(99, trained, partition_id=HONEST, num_examples=counts[kind])


REASONS = {
    "nan": "local model has NaN or inf in 1 of 2 layers, first 'w'",
    "inf": "local model has NaN or inf in 1 of 2 layers, first 'w'",
    "shape": "layer 'w' has shape (1, 3), the global model's (2, 3)",
    "dtype": "layer 'w' has dtype float64, the global model's float32",
    "missing": "model layers differ from the global model's: missing ['b']",
    "extra": "model layers differ from the global model's: unexpected ['x']",
    "huge": "claims 1000000000000 examples, above aggregation.examples_ratio=1000 x the round's",
    "scaled": "update norm",
    "float count": "metric 'num-examples' is 20.0 (float), not an integer",
    "list count": "metric 'num-examples' is [20] (list), not an integer",
    "negative count": "metric 'num-examples' is -3: a model trained on no data",
    "zero count": "metric 'num-examples' is 0: a model trained on no data",
}


@pytest.mark.parametrize("kind", list(REASONS))
def test_a_bad_reply_is_refused_by_name_and_the_round_goes_on(kind: str) -> None:
    model = ArrayRecord({k: Array(v) for k, v in MODEL.items()})
    result = aggregate(_strategy(), [*_honest(), _bad(kind)], arrays=model)
    assert [f.node_id for f in result.failures] == [99]
    reason = result.failures[0].reason
    assert reason.startswith(f"partition {HONEST}: "), reason
    assert REASONS[kind] in reason, reason
    assert result.participants == HONEST
    honest = aggregate(_strategy(), _honest(), arrays=model)
    for name in MODEL:
        np.testing.assert_array_equal(result.arrays[name].numpy(), honest.arrays[name].numpy())


@pytest.mark.parametrize("strategy", [FoolsGold(), FedNova()], ids=lambda s: type(s).__name__)
def test_the_screen_is_the_base_strategys_so_every_algorithm_has_it(strategy) -> None:
    model = ArrayRecord({k: Array(v) for k, v in MODEL.items()})
    strategy.norm_ratio = 50.0
    replies = [*_honest(), _bad("scaled")]
    for m in replies:  # FedNova needs each client's step count
        m.content.metric_records[protocol.METRICS][protocol.NUM_STEPS] = 5
    result = aggregate(strategy, replies, arrays=model)
    assert [f.node_id for f in result.failures] == [99]
    assert "update norm" in result.failures[0].reason


@pytest.mark.parametrize(
    "rule", [NormClip(), CoordinateMedian(), TrimmedMean(trim=0.2)], ids=lambda r: r.name
)
def test_a_scaled_update_moves_the_model_a_bounded_amount(rule) -> None:
    """Screening off: the plain mean follows the attacker 1000x out; a robust rule moves the
    model no further than the largest honest update."""
    model = ArrayRecord({k: Array(v) for k, v in MODEL.items()})
    replies = [*_honest(), _bad("scaled")]
    start = np.concatenate([w.ravel() for w in MODEL.values()])

    def moved(strategy: FedAvg) -> float:
        strategy.norm_ratio = None
        out = aggregate(strategy, replies, arrays=model).arrays
        return float(
            np.linalg.norm(np.concatenate([out[k].numpy().ravel() for k in MODEL]) - start)
        )

    largest_honest = max(
        float(
            np.linalg.norm(np.concatenate([v.ravel() for v in _honest_model(k).values()]) - start)
        )
        for k in range(HONEST + 1)
    )
    assert moved(_strategy()) > 100 * largest_honest
    assert moved(_strategy(rule)) <= largest_honest
