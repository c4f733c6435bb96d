"""Reading the FedDisco runs: one run by setting, method, seed and (a, b), the per-seed Disco
gain, the weights Disco should have used."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchmarks.feddisco_reproduction.arms import DEFAULT_A, DEFAULT_B, Method, sweep_extra
from benchmarks.harness.outcome import RunOutcome
from benchmarks.harness.same_start import StartState
from benchmarks.harness.seeds import difference
from fl_system.addons.disco import disco_weights, discrepancy, label_distribution, uniform_target


def expected_weights(state: StartState, a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    """(raw KL d_k to uniform, Disco p_k) from the partition's label counts."""
    target = uniform_target(len(state.label_counts[0]))
    raw = np.array([discrepancy(label_distribution(c), target) for c in state.label_counts])
    p, _ = disco_weights(state.sizes, raw, a=a, b=b)
    return raw, p


# ----- statistics and formatting ----------------------------------------------------------
def find(
    outcomes: Sequence[RunOutcome], setting: str, method: str, seed: int, ab: tuple[float, float]
) -> RunOutcome:
    for o in outcomes:
        s = o.spec
        if (s.setting, s.arm, s.seed, s.extra) == (setting, method, seed, sweep_extra(ab)):
            return o
    raise KeyError((setting, method, seed, ab))


@dataclass
class Gain:
    """Disco minus its baseline, per seed, for best, last-10 and all-rounds mean accuracy."""

    best: list[float]
    last10: list[float | None]  # None: one of the pair diverged
    all_rounds: list[float | None]


def disco_gain(
    outcomes: Sequence[RunOutcome],
    setting: str,
    method: Method,
    seeds: Sequence[int],
    ab: tuple[float, float] = (DEFAULT_A, DEFAULT_B),
) -> Gain:
    """Gain of Disco `method` over its baseline (same setting, same seed)."""
    pairs = [
        (
            find(outcomes, setting, method.base_label, s, (DEFAULT_A, DEFAULT_B)),
            find(outcomes, setting, method.label, s, ab),
        )
        for s in seeds
    ]
    return Gain(
        [d.best - b.best for b, d in pairs],
        [difference(d.last10, b.last10) for b, d in pairs],
        [difference(d.all_rounds, b.all_rounds) for b, d in pairs],
    )
