"""One fl-run of a study: what it ran (`RunSpec`) and what it measured (`RunOutcome`)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fl_system.records.results import summarize


@dataclass(frozen=True)
class RunSpec:
    """One fl-run of a reproduction: which setting, which arm, which seed, its overrides."""

    setting: str
    arm: str
    seed: int
    overrides: tuple[str, ...]
    rounds: int  # num_rounds (a run stopped by target_accuracy may have fewer)
    extra: tuple[tuple[str, object], ...] = ()  # anything else the report groups by

    def command(self, run_dir: Path) -> list[str]:
        return ["fl-run", *self.overrides, f"hydra.run.dir={run_dir}"]

    @property
    def name(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in self.extra)
        return f"{self.setting} {self.arm}{extra} seed {self.seed}"


@dataclass
class RunOutcome:
    """One fl-run's metrics. A diverged run (every client's model NaN/inf: fl-run stops with
    that reason) keeps the rounds before it; it has a best accuracy but no last-10 or
    all-rounds mean, which the tables show as 'diverged'."""

    spec: RunSpec
    command: str
    rows: list[dict[str, str]]
    process_seconds: float  # fl-run from start to exit, as seen from here
    diverged_round: int | None = None  # the round whose local models were all NaN/inf
    accuracies: list[float] = field(init=False)  # the evaluated rounds' test accuracy
    evaluated: list[int] = field(init=False)  # their round numbers
    best: float = field(init=False)
    best_round: int = field(init=False)
    last10: float | None = field(init=False)
    all_rounds: float | None = field(init=False)  # mean over every evaluated round

    def __post_init__(self) -> None:
        summary = summarize(self.rows, target_accuracy=None)
        done = [r for r in self.rows if r.get("test_accuracy")]
        self.accuracies = [float(r["test_accuracy"]) for r in done]
        self.evaluated = [int(r["round"]) for r in done]
        self.best, self.best_round = summary["best_accuracy"] or 0.0, summary["best_round"] or 0
        finished = self.diverged_round is None
        self.last10 = summary["mean_last10_accuracy"] if finished else None
        self.all_rounds = statistics.fmean(self.accuracies) if finished else None

    def column(self, name: str, round_: int = 1) -> float | None:
        if round_ > len(self.rows):
            return None
        cell = self.rows[round_ - 1].get(name, "")
        return float(cell) if cell else None

    def columns(self, prefix: str, round_: int = 1) -> dict[int, float]:
        """{partition: value} of the `<prefix><pid>` columns of one round."""
        if round_ > len(self.rows):
            return {}
        row = self.rows[round_ - 1]
        n = len(prefix)
        return {
            int(k[n:]): float(v)
            for k, v in row.items()
            if k.startswith(prefix) and k[n:].isdigit() and v
        }

    def rounds_to(self, target: float) -> int | None:
        """The first evaluated round at or above `target` (None: never reached)."""
        reached = zip(self.evaluated, self.accuracies, strict=True)
        return next((r for r, a in reached if a >= target), None)

    @property
    def seconds_per_round(self) -> float:
        """In-run wall time per round after round 1 (which carries the warm-up)."""
        ends = [float(r["wall_seconds"]) for r in self.rows] or [0.0]
        return (ends[-1] - ends[0]) / max(1, len(ends) - 1)

    @property
    def fixed_seconds(self) -> float:
        """Process wall time not explained by rounds x seconds_per_round (start-up, teardown)."""
        return self.process_seconds - len(self.rows) * self.seconds_per_round


def find(outcomes: Sequence[RunOutcome], **match: object) -> RunOutcome:
    """The outcome whose spec has these field values (`extra` keys count as fields)."""
    for o in outcomes:
        fields = {**vars(o.spec), **dict(o.spec.extra)}
        if all(fields.get(k) == v for k, v in match.items()):
            return o
    raise KeyError(match)
