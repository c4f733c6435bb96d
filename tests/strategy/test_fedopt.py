"""FedAdam, FedYogi and FedAdagrad on mock replies, against Flower's own strategies.

Flower's strategies average the replies themselves (in float32) and ours in float64, so the
replies here hold multiples of 1/8 from clients of 1, 1 and 2 examples: both averages are
exact, and the comparison is of the adaptive step alone, which must be bit-equal.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message
from flwr.serverapp.strategy import FedAdagrad as FlowerFedAdagrad
from flwr.serverapp.strategy import FedAdam as FlowerFedAdam
from flwr.serverapp.strategy import FedYogi as FlowerFedYogi

from fl_system.addons.disco import DISCO_D
from fl_system.config.compose import compose_experiment
from fl_system.config.experiment import build_strategy
from fl_system.messages import protocol
from fl_system.records.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from server_app.addons.disco import DiscoWeighting
from server_app.strategies.fedadagrad import FedAdagrad
from server_app.strategies.fedadam import FedAdam
from server_app.strategies.fedavg import FedAvg
from server_app.strategies.fedopt import FedOpt
from server_app.strategies.fedyogi import FedYogi
from tests.mock_replies import aggregate, reply

SHAPES = {"conv.weight": (2, 1, 3, 3), "conv.bias": (2,), "fc.weight": (4, 18)}
SIZES = [1, 1, 2]
PAIRS = [  # ours, Flower's, settings away from the defaults where Flower takes them
    (FedAdam, FlowerFedAdam, {"eta": 0.05, "beta_1": 0.8, "beta_2": 0.9, "tau": 0.01}),
    (FedYogi, FlowerFedYogi, {"eta": 0.03, "beta_1": 0.7, "beta_2": 0.95, "tau": 0.002}),
    (FedAdagrad, FlowerFedAdagrad, {"eta": 0.2, "tau": 0.05}),
]


class _Grid:
    """What Flower's `configure_train` asks of a grid: the connected nodes."""

    def get_node_ids(self) -> list[int]:
        return [100 + k for k in range(len(SIZES))]


def _record(layers: dict[str, np.ndarray]) -> ArrayRecord:
    return ArrayRecord({k: Array(v) for k, v in layers.items()})


def _model(seed: int = 0) -> ArrayRecord:
    rng = np.random.default_rng(seed)
    return _record({k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()})


def _replies(rnd: int, d: list[float] | None = None) -> list[Message]:
    """Round `rnd`'s replies: multiples of 1/8, so that any average of them is exact."""
    rng = np.random.default_rng(100 + rnd)
    msgs = []
    for k, n in enumerate(SIZES):
        layers = {
            name: (rng.integers(-16, 17, size=s) / 8).astype(np.float32)
            for name, s in SHAPES.items()
        }
        msg = reply(100 + k, layers, partition_id=k, num_examples=n)
        if d is not None:
            msg.content.metric_records[protocol.METRICS][DISCO_D] = d[k]
        msgs.append(msg)
    return msgs


def _layers(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: record[k].numpy() for k in record}


def _assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert list(a) == list(b)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        assert np.array_equal(a[key], b[key]), key


def _run(strategy: FedOpt, model: ArrayRecord, rounds: range) -> ArrayRecord:
    for rnd in rounds:
        model = aggregate(strategy, _replies(rnd), arrays=model, rnd=rnd).arrays
    return model


@pytest.mark.parametrize(("ours", "theirs", "settings"), PAIRS)
def test_five_rounds_are_bit_equal_to_flowers_own_strategy(ours, theirs, settings) -> None:
    """The global model and m_t, v_t after every round. Flower's FedAdam returns float64 (its
    bias-corrected eta is a numpy float64); the next round gets the model in its own dtype,
    float32, as the model the clients train and the global model hold it."""
    strategy, flower = ours(**settings), theirs(**settings)
    model = flower_model = _model()
    for rnd in range(1, 6):
        replies = _replies(rnd)
        model = aggregate(strategy, replies, arrays=model, rnd=rnd).arrays
        flower.configure_train(rnd, flower_model, ConfigRecord(), _Grid())
        stepped, _ = flower.aggregate_train(rnd, replies)
        flower_model = _record({k: v.astype(np.float32) for k, v in _layers(stepped).items()})
        _assert_same(_layers(model), _layers(flower_model))
        _assert_same(strategy.optimizer.m_t, flower.m_t)
        _assert_same(strategy.optimizer.v_t, flower.v_t)
    assert not np.array_equal(model["fc.weight"].numpy(), _model()["fc.weight"].numpy())


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        # m = Delta = [1, -3], v = Delta^2 = [1, 9]: 0.5 [1, -3] / ([1, 3] + 1)
        (FedAdagrad(eta=0.5, tau=1.0), [0.25, -0.375]),
        # m = 0.5 Delta = [0.5, -1.5]; v = 0 - 0.25 Delta^2 sign(0 - Delta^2) = [0.25, 2.25]:
        # 0.5 [0.5, -1.5] / ([0.5, 1.5] + 0.5)
        (FedYogi(eta=0.5, beta_1=0.5, beta_2=0.75, tau=0.5), [0.25, -0.375]),
        # Adam's v = 0.25 Delta^2 as Yogi's; its rate, bias-corrected in round 1 with Flower's
        # t + 1 = 2: 0.5 sqrt(1 - 0.75^2) / (1 - 0.5^2)
        (
            FedAdam(eta=0.5, beta_1=0.5, beta_2=0.75, tau=0.5),
            [0.5 * np.sqrt(0.4375) / 0.75 * x for x in (0.5, -0.75)],
        ),
        # Adagrad with the paper's momentum: m = 0.5 Delta, v = Delta^2
        (FedAdagrad(eta=0.5, beta_1=0.5, tau=1.0), [0.125, -0.1875]),
    ],
)
def test_one_step_by_hand(strategy: FedOpt, expected: list[float]) -> None:
    start = _record({"w": np.zeros(2, np.float32)})
    replies = [reply(1, {"w": np.array([1.0, -3.0], np.float32)}, partition_id=0, num_examples=1)]
    new = aggregate(strategy, replies, arrays=start).arrays["w"].numpy()
    assert new.dtype == np.float32
    np.testing.assert_allclose(new, expected, rtol=1e-7)


def test_integer_buffers_take_the_average_and_only_float_layers_are_stepped() -> None:
    start = _record({"w": np.zeros(2, np.float32), "steps": np.array(7, np.int64)})
    replies = [
        reply(k, {"w": np.array([1.0, -3.0], np.float32), "steps": np.array(9 + k, np.int64)},
              partition_id=k, num_examples=1)
        for k in (1, 2)
    ]  # fmt: skip
    strategy = FedAdagrad(eta=0.5, tau=1.0)
    new = aggregate(strategy, replies, arrays=start).arrays
    assert new["w"].numpy().tolist() == [0.25, -0.375]
    assert new["steps"].numpy().dtype == np.int64 and int(new["steps"].numpy()) == 10
    assert list(strategy.optimizer.v_t) == ["w"]


def test_disco_weights_make_the_average_the_optimiser_steps_from() -> None:
    """With Disco enabled, the pseudo-gradient is Disco's weighted average less the model:
    the step equals Flower's own FedAdam given that average (one reply of weight 1, which its
    averaging returns unchanged) after FedAvg's, with the same weights, made it."""
    experiment = compose_experiment(["algorithm=fedadam", "algorithm.disco.enabled=true"])
    strategy = build_strategy(experiment)
    assert [type(a) for a in strategy.addons] == [DiscoWeighting]
    flower = FlowerFedAdam(eta=0.1, beta_1=0.9, beta_2=0.99, tau=1e-3)
    model = flower_model = _model()
    d = [0.9, 0.1, 0.4]
    for rnd in (1, 2, 3):
        result = aggregate(strategy, _replies(rnd, d), arrays=model, rnd=rnd)
        weights = [result.metrics[f"weight_{k}"] for k in range(3)]
        # d / sum d = [9, 1, 4] / 14; p ~ n/N - 0.5 d + 0.1 = [1, 11, 16] / 35, not 1:1:2
        assert weights == pytest.approx([1 / 28, 11 / 28, 16 / 28], rel=1e-12)
        fedavg = FedAvg(addons=[DiscoWeighting()])
        disco_average = aggregate(fedavg, _replies(rnd, d), arrays=model, rnd=rnd).arrays
        single = reply(1, _layers(disco_average), partition_id=0, num_examples=1)
        flower.configure_train(rnd, flower_model, ConfigRecord(), _Grid())
        stepped, _ = flower.aggregate_train(rnd, [single])
        flower_model = _record({k: v.astype(np.float32) for k, v in _layers(stepped).items()})
        model = result.arrays
        _assert_same(_layers(model), _layers(flower_model))


@pytest.mark.parametrize(("ours", "settings"), [(p[0], p[2]) for p in PAIRS])
def test_a_checkpointed_run_resumes_bit_equal(ours, settings, tmp_path: Path) -> None:
    """Two rounds, the checkpoint file, a new strategy restored from it, three more rounds:
    the model and m_t, v_t are those of five rounds in one go."""
    straight = ours(**settings)
    assert straight.state_dict() == {}
    end = _run(straight, _model(), range(1, 6))

    first = ours(**settings)
    halfway = _run(first, _model(), range(1, 3))
    path = tmp_path / "checkpoint.npz"
    save_checkpoint(path, Checkpoint(2, _layers(halfway), first.state_dict(), 0.0, {}))
    ckpt = load_checkpoint(path)
    assert sorted(ckpt.strategy_state) == sorted(
        f"fedopt/{moment}/{layer}" for moment in ("m_t", "v_t") for layer in SHAPES
    )
    resumed = ours(**settings)
    resumed.load_state_dict(ckpt.strategy_state)
    again = _run(resumed, _record(ckpt.model), range(3, 6))
    _assert_same(_layers(again), _layers(end))
    _assert_same(resumed.state_dict(), straight.state_dict())
    with pytest.raises(ValueError, match="does not keep state"):
        ours(**settings).load_state_dict({"feddyn/h/w": np.zeros(1)})


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: FedAdam(eta=0), "algorithm.eta must be a number > 0, got 0"),
        (lambda: FedYogi(eta=float("inf")), "algorithm.eta must be a number > 0, got inf"),
        (lambda: FedAdam(beta_1=1.5), r"algorithm.beta_1 must be a number in \[0, 1\), got 1.5"),
        (lambda: FedYogi(beta_2=1), r"algorithm.beta_2 must be a number in \[0, 1\), got 1"),
        (lambda: FedAdagrad(beta_1=-0.1), r"algorithm.beta_1 must be a number in \[0, 1\)"),
        (lambda: FedAdagrad(tau=-1), "algorithm.tau must be a number > 0, got -1"),
        (lambda: FedAdam(tau=0), "algorithm.tau must be a number > 0, got 0"),
        (lambda: FedYogi(eta="0.1"), "algorithm.eta must be a number > 0, got '0.1'"),
        (lambda: FedAdam(eta_l=0), "algorithm.eta_l must be a number > 0, got 0"),
        (
            lambda: FedAdam(eta_l=0.1, experiment=compose_experiment(["algorithm=fedadam"])),
            r"algorithm.eta_l is the clients' learning rate, train.lr \(0.05\): set "
            r"train.lr=0.1 instead of algorithm.eta_l",
        ),
    ],
)
def test_bad_settings_are_refused(build, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()


def test_eta_l_is_train_lr() -> None:
    """One source of truth: algorithm.eta_l follows train.lr, which the clients train with."""
    for name in ("fedadam", "fedyogi", "fedadagrad"):
        experiment = compose_experiment([f"algorithm={name}", "train.lr=0.02"])
        assert experiment.algorithm.eta_l == 0.02
        assert build_strategy(experiment).optimizer.eta_l == 0.02
        assert FedAdam(experiment=experiment).optimizer.eta_l == 0.02


@pytest.mark.parametrize(
    ("name", "flower_class"),
    [("fedadam", FlowerFedAdam), ("fedyogi", FlowerFedYogi), ("fedadagrad", FlowerFedAdagrad)],
)
def test_the_shipped_settings_are_flowers_defaults(name: str, flower_class) -> None:
    """All but FedAdagrad's eta: 0.01, since its first step moves every weight by about eta."""
    ours = build_strategy(compose_experiment([f"algorithm={name}"])).optimizer
    theirs = flower_class()
    for key in ("eta", "beta_1", "beta_2", "tau"):
        expected = 0.01 if (name, key) == ("fedadagrad", "eta") else getattr(theirs, key)
        assert getattr(ours, key) == expected, key
    shipped = compose_experiment([f"algorithm={name}"]).algorithm
    assert ("beta_2" in shipped) == (name != "fedadagrad")  # Adagrad's v does not decay
