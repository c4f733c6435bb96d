"""DP noise from the operating system's entropy: Flower's wrappers, with NumPy's global
generator seeded as an experiment would seed it, draw noise nobody can regenerate."""

from __future__ import annotations

import math
import multiprocessing

import numpy as np
import pytest
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp.strategy import (
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping,
    FedAvg,
)

from fl_system import privacy
from fl_system.privacy import noise

SHAPES = {"a": (300, 200), "b": (200,), "c": (200, 100)}  # d = 80,200
CLIENTS, SIGMA, CLIP, SEED = 4, 1.0, 0.5, 0


class _Grid:
    """What Flower's FedAvg asks of a grid to configure a round: the connected nodes."""

    def get_node_ids(self) -> list[int]:
        return list(range(1, CLIENTS + 1))


def _model(rng: np.random.Generator) -> ArrayRecord:
    return ArrayRecord({k: Array(rng.normal(size=s).astype(np.float32)) for k, s in SHAPES.items()})


def _replies(model: ArrayRecord, rng: np.random.Generator) -> list[Message]:
    out = []
    for node in range(1, CLIENTS + 1):
        sent = Message(RecordDict(), dst_node_id=node, message_type=MessageType.TRAIN)
        arrays = ArrayRecord(
            {
                k: Array(model[k].numpy() + rng.normal(size=model[k].shape).astype(np.float32))
                for k in model
            }
        )
        content = RecordDict({"arrays": arrays, "metrics": MetricRecord({"num-examples": 10})})
        out.append(Message(content, reply_to=sent))
    return out


def _layers(record: ArrayRecord) -> list[np.ndarray]:
    return [record[k].numpy().astype(np.float64) for k in record]


def _norm(layers: list[np.ndarray]) -> float:
    return math.sqrt(sum(float(np.sum(v * v)) for v in layers))


def _released(sigma: float, model: ArrayRecord, replies: list[Message], rnd: int) -> ArrayRecord:
    """Flower's server-side fixed clipping around Flower's FedAvg, after an experiment seeded
    NumPy's global generator with its seed (as this project's models were built until now)."""
    wrapper = DifferentialPrivacyServerSideFixedClipping(
        FedAvg(), noise_multiplier=sigma, clipping_norm=CLIP, num_sampled_clients=CLIENTS
    )
    wrapper.configure_train(rnd, model, ConfigRecord(), _Grid())
    np.random.seed(SEED)
    released, _ = wrapper.aggregate_train(rnd, replies)
    assert released is not None
    return released


def test_after_install_flowers_wrappers_and_mods_draw_through_this_module() -> None:
    privacy.install()
    for name in noise.NOISE_USERS:
        module = __import__(name, fromlist=[noise.NOISE_FUNCTION])
        assert getattr(module, noise.NOISE_FUNCTION) is noise.gaussian_noise_inplace, name
    base = DifferentialPrivacyServerSideAdaptiveClipping.__mro__[1]
    assert base._noisy_fraction is noise.noisy_fraction
    assert noise.problems() == []


def test_three_rounds_of_noise_have_their_size_and_are_not_the_seeds() -> None:
    """Round by round, the noise Flower's wrapper adds (released model minus the same round
    at sigma = 0) has norm sigma C / m sqrt(d), differs between two releases of the same
    round, and subtracting the draws regenerated from the seed leaves it whole."""
    privacy.install()
    rng = np.random.default_rng(7)
    model = _model(rng)
    std = SIGMA * CLIP / CLIENTS
    d = sum(math.prod(s) for s in SHAPES.values())
    for rnd in (1, 2, 3):
        replies = _replies(model, rng)
        clean = _layers(_released(0.0, model, replies, rnd))
        first, again = (
            [
                n - c
                for n, c in zip(_layers(_released(SIGMA, model, replies, rnd)), clean, strict=True)
            ]
            for _ in range(2)
        )
        assert 0.97 < _norm(first) / (std * math.sqrt(d)) < 1.03
        assert _norm([a - b for a, b in zip(first, again, strict=True)]) > _norm(first)
        np.random.seed(SEED)
        guess = [np.random.normal(0, std, v.shape).astype(np.float32) for v in first]
        assert _norm([n - g for n, g in zip(first, guess, strict=True)]) / _norm(first) > 0.9
        model = ArrayRecord(
            {k: Array(v.astype(np.float32)) for k, v in zip(SHAPES, clean, strict=True)}
        )


def test_the_noise_keeps_each_arrays_dtype_and_leaves_numpys_generator_alone() -> None:
    arrays = [np.zeros(1000, np.float32), np.zeros(10, np.float64)]
    np.random.seed(3)
    before = np.random.get_state()[1].copy()
    noise.gaussian_noise_inplace(arrays, 2.0)
    assert [a.dtype for a in arrays] == [np.float32, np.float64]
    assert 1.8 < float(np.std(arrays[0])) < 2.2
    assert np.array_equal(np.random.get_state()[1], before)


def _child_draw(conn) -> None:  # type: ignore[no-untyped-def]
    arrays = [np.zeros(1000)]
    noise.gaussian_noise_inplace(arrays, 1.0)
    conn.send(arrays[0])


def test_a_forked_process_draws_other_noise_than_its_parent() -> None:
    """Flower's ClientApps and simulated clients are forked from a warm process: each must
    draw its own noise, not a copy of the parent's stream."""
    ctx = multiprocessing.get_context("fork")
    draws = []
    for _ in range(2):
        ours, theirs = ctx.Pipe()
        child = ctx.Process(target=_child_draw, args=(theirs,))
        child.start()
        draws.append(ours.recv())
        child.join()
    mine = [np.zeros(1000)]
    noise.gaussian_noise_inplace(mine, 1.0)
    assert not np.array_equal(draws[0], draws[1])
    assert not np.array_equal(draws[0], mine[0])


def test_reproducible_noise_repeats_inside_its_context_only() -> None:
    def draw() -> np.ndarray:
        arrays = [np.zeros(50)]
        noise.gaussian_noise_inplace(arrays, 1.0)
        return arrays[0]

    with noise.reproducible(0, 1):
        a = draw()
    with noise.reproducible(0, 1):
        b = draw()
    with noise.reproducible(0, 2):
        c = draw()
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert not np.array_equal(draw(), draw())


def test_adaptive_clippings_noisy_count_is_drawn_fresh() -> None:
    privacy.install()
    wrapper = DifferentialPrivacyServerSideAdaptiveClipping(
        FedAvg(), noise_multiplier=0.0, num_sampled_clients=10, clipped_count_stddev=1.0
    )
    fractions = set()
    for _ in range(3):
        np.random.seed(SEED)
        fractions.add(wrapper._noisy_fraction(5, 10))
    assert len(fractions) == 3
    assert all(abs(f - 0.5) < 1.0 for f in fractions)


@pytest.mark.parametrize("std", [1e-12, 1e6])
def test_the_noise_scales_with_its_std(std: float) -> None:
    arrays = [np.zeros(20_000)]
    noise.gaussian_noise_inplace(arrays, std)
    assert 0.97 < float(np.std(arrays[0])) / std < 1.03
