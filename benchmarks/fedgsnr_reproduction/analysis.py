"""Reading the FedGSNR runs: targets, rounds to them, speedups, GSNR medians, the allocation."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from scipy.stats import spearmanr

from benchmarks.harness.outcome import RunOutcome, find
from benchmarks.harness.seeds import mean_std
from fl_system.records.results import partition_columns


# ----- analysis ---------------------------------------------------------------------------
def target_for(
    outcomes: Sequence[RunOutcome], partition: str, seeds: Sequence[int], at: int
) -> float:
    """FedAvg's seed-mean accuracy at round `at`, rounded down to half a point."""
    runs = [find(outcomes, setting=partition, arm="FedAvg", seed=s, extra=()) for s in seeds]
    values = [o.accuracies[o.evaluated.index(at)] for o in runs]
    return math.floor(statistics.fmean(values) * 200) / 200


def rounds_to(
    outcomes: Sequence[RunOutcome], partition: str, arm: str, seeds: Sequence[int], target: float
) -> list[int | None]:
    """Per seed, the first evaluated round of this arm's clean run at or above `target`."""
    return [
        find(outcomes, setting=partition, arm=arm, seed=s, extra=()).rounds_to(target)
        for s in seeds
    ]


def rounds_cell(values: Sequence[int | None], rounds: int) -> str:
    reached = [v for v in values if v is not None]
    if len(reached) < len(values):
        return f"> {rounds} ({len(values) - len(reached)}/{len(values)} seeds)"
    mean, std = mean_std([float(v) for v in reached])
    return f"{mean:.0f} ± {std:.0f}"


def speedups(base: Sequence[int | None], gsnr: Sequence[int | None]) -> list[float | None]:
    return [
        b / g if b is not None and g is not None else None for b, g in zip(base, gsnr, strict=True)
    ]


def speedup_cell(values: Sequence[float | None]) -> str:
    finite = [v for v in values if v is not None]
    if not finite:
        return "n/a"
    mean, std = mean_std(finite)
    return f"{mean:.2f}x ± {std:.2f}" + (
        "" if len(finite) == len(values) else f" ({len(finite)} seeds)"
    )


def gsnr_medians(run: RunOutcome) -> dict[int, float]:
    """Median GSNR per partition over the rounds it was sampled (from metrics.csv)."""
    history = partition_columns(run.rows, "gsnr_")
    return {pid: statistics.median(v) for pid, v in sorted(history.items())}


def allocation(run: RunOutcome, sizes: Sequence[int]) -> tuple[float, float, int, float]:
    """Mean entropy, mean max E_k, rounds with a client left out (E_k = 0), and the mean over
    rounds of the rank correlation between E_k and the client's data size n_k."""
    rows = range(1, len(run.rows) + 1)
    entropy = statistics.fmean(run.column("gsnr_entropy", r) for r in rows)
    max_steps = statistics.fmean(run.column("gsnr_max_steps", r) for r in rows)
    idle = sum(1 for r in rows if min(run.columns("steps_", r).values()) == 0)
    rho = []
    for r in rows:
        steps = run.columns("steps_", r)
        if len(set(steps.values())) > 1:  # a uniform allocation has no rank order
            rho.append(spearmanr(list(steps.values()), [sizes[p] for p in steps]).statistic)
    return entropy, max_steps, idle, statistics.fmean(rho) if rho else float("nan")
