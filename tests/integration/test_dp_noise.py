"""DP noise nobody can regenerate, and what a DP run publishes, through fl-run (one sweep on a
warm simulation engine: sigma 0 and 1, noise from the OS and from the seed, each twice)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from fl_system.records.checkpoint import load_checkpoint
from fl_system.records.results import MetricsLog
from tests.integration.conftest import QUICK, env_in, run_sweep
from tests.integration.tracked import tensorboard

pytestmark = pytest.mark.integration

CLIP, CLIENTS = 0.5, 3
# eval_every=1,2 changes nothing in a one-round run: each pair is the same run twice.
SWEEP = [
    "runtime=simulation",
    *QUICK,
    f"num_clients={CLIENTS}",
    "num_rounds=1",
    "privacy=central_fixed",
    f"privacy.clipping_norm={CLIP}",
    "privacy.noise_multiplier=0,1",
    "privacy.reproducible_noise=false,true",
    "eval_every=1,2",
    "tracking=tensorboard",
]
# Everything a DP run publishes by default: the central evaluation, the account, and what
# the protocol fixes whatever the clients' data.
COLUMNS = [
    "round",
    "wall_seconds",
    "test_accuracy",
    "test_loss",
    "participants",
    "failures",
    "bytes_up",
    "bytes_down",
]
SUMMARY = {
    "final_accuracy",
    "best_accuracy",
    "best_round",
    "rounds",
    "rounds_to_target",
    "seconds_to_target",
    "bytes_up",
    "bytes_down",
    "wall_seconds",
    "mean_last10_accuracy",
    "mean_last10_evaluations",
    "dp_noise",
}
UN_NOISED = ("train_loss", "train loss", "update_norm", "weight_", "compute_seconds")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[float, bool], list[Path]]:
    """(sigma, reproducible) -> the two identical runs of that setting."""
    root = tmp_path_factory.mktemp("dp-noise")
    out: dict[tuple[float, bool], list[Path]] = {}
    for run_dir in run_sweep(SWEEP, root / "sweep", env_in(root)):
        cfg = OmegaConf.load(run_dir / "config.yaml")
        key = (float(cfg.privacy.noise_multiplier), bool(cfg.privacy.reproducible_noise))
        out.setdefault(key, []).append(run_dir)
    assert sorted(out) == [(0.0, False), (0.0, True), (1.0, False), (1.0, True)]
    assert all(len(pair) == 2 for pair in out.values())
    return out


def _model(run_dir: Path) -> list[np.ndarray]:
    return [
        v.astype(np.float64) for v in load_checkpoint(run_dir / "checkpoint.npz").model.values()
    ]


def _norm(layers: list[np.ndarray]) -> float:
    return math.sqrt(sum(float(np.sum(v * v)) for v in layers))


def _seed_noise(seed: int, like: list[np.ndarray], std: float) -> list[np.ndarray]:
    """The noise an attacker regenerates from the seed: NumPy's global generator seeded with
    it, one draw per layer in model order, as Flower's wrapper draws."""
    np.random.seed(seed)
    return [np.random.normal(0, std, v.shape).astype(np.float32).astype(np.float64) for v in like]


def test_the_noise_cannot_be_regenerated_from_the_seed_and_has_its_size(runs) -> None:
    """sigma = 0 stays reproducible to the bit; two sigma = 1 runs with the same seed differ;
    subtracting the noise regenerated from the seed leaves the model as far from the sigma = 0
    model as the noise itself; the noise's norm is sigma C / m sqrt(d)."""
    clean = [_model(r) for r in runs[(0.0, False)]]
    for a, b in zip(*clean, strict=True):
        assert np.array_equal(a, b)
    noised = [_model(r) for r in runs[(1.0, False)]]
    assert any(not np.array_equal(a, b) for a, b in zip(*noised, strict=True))
    std = 1.0 * CLIP / CLIENTS
    d = sum(v.size for v in clean[0])
    for model in noised:
        noise = [m - c for m, c in zip(model, clean[0], strict=True)]
        assert 0.97 < _norm(noise) / (std * math.sqrt(d)) < 1.03
        guess = _seed_noise(0, model, std)
        left = [m - g - c for m, g, c in zip(model, guess, clean[0], strict=True)]
        assert _norm(left) / _norm(noise) > 0.9


def test_reproducible_noise_repeats_bit_for_bit_and_voids_epsilon(runs) -> None:
    first, second = ([*_model(r)] for r in runs[(1.0, True)])
    for a, b in zip(first, second, strict=True):
        assert np.array_equal(a, b)
    for run_dir in runs[(1.0, True)]:
        rows = MetricsLog(run_dir / "metrics.csv").rows()
        assert "dp_epsilon" not in rows[0] and float(rows[0]["dp_epsilon_void"]) > 0
        summary = json.loads((run_dir / "summary.json").read_text())
        assert "dp_epsilon" not in summary and summary["dp_epsilon_void"] > 0
        assert "epsilon is void" in summary["dp_noise"]
        tags = _tags(run_dir)
        assert "dp_epsilon_void" in tags and "dp_epsilon" not in tags
        assert "summary/dp_epsilon_void" in tags and "summary/dp_epsilon" not in tags
        log = (run_dir / "logs" / "serverapp.log").read_text()
        assert "warning: privacy=central_fixed with privacy.reproducible_noise=true" in log


def test_a_dp_run_publishes_the_evaluation_and_the_account_only(runs) -> None:
    """metrics.csv's columns, summary.json's keys, TensorBoard's tags and the server log of
    every DP run: no statistic of the clients' un-noised updates."""
    for (sigma, reproducible), pair in runs.items():
        accounted = ["dp_epsilon_void" if reproducible else "dp_epsilon"] if sigma else []
        for run_dir in pair:
            assert MetricsLog(run_dir / "metrics.csv").columns == [*COLUMNS, *accounted]
            summary = json.loads((run_dir / "summary.json").read_text())
            assert set(summary) == SUMMARY | ({*accounted, "dp_delta"} if sigma else set())
            tags = _tags(run_dir)
            rounds = {t for t in tags if not t.startswith("summary/")}
            assert rounds == set(COLUMNS[1:]) | set(accounted), run_dir
            numbers = {k for k, v in summary.items() if isinstance(v, int | float)}
            assert {t.removeprefix("summary/") for t in tags - rounds} == numbers
            log = (run_dir / "logs" / "serverapp.log").read_text()
            assert not [w for w in UN_NOISED if w in log], log[-2000:]
            if not reproducible:
                assert "DP noise from operating system entropy: not reproducible" in log


def _tags(run_dir: Path) -> set[str]:
    """TensorBoard's scalars: every round's metrics, and summary.json's numbers under
    summary/ (the config, tags and status are text)."""
    return set(tensorboard(run_dir).Tags()["scalars"])
