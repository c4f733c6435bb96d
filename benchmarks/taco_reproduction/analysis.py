"""Reading the TACO runs: targets, client time, alpha per group, freeloader detection."""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence

from benchmarks.harness.outcome import RunOutcome, find
from benchmarks.harness.seeds import mean_std
from benchmarks.taco_reproduction.arms import NUM_CLIENTS, TIMING_ROUNDS, freeloader_ids
from fl_system.algorithms.taco import record_strikes
from fl_system.data.partitions import LabelGroupsPartition
from fl_system.records.results import partition_columns


# ----- analysis ---------------------------------------------------------------------------
def runs(outcomes: Sequence[RunOutcome], group: str, arm: str, seeds: Sequence[int]):
    return [find(outcomes, setting=group, arm=arm, seed=s) for s in seeds]


def target_for(outcomes: Sequence[RunOutcome], args: argparse.Namespace) -> float:
    """FedAvg's seed-mean accuracy at round T/2, rounded down to half a point."""
    at = args.rounds // 2
    values = [
        o.accuracies[o.evaluated.index(at)] for o in runs(outcomes, "main", "FedAvg", args.seeds)
    ]
    return math.floor(statistics.fmean(values) * 200) / 200


def final(o: RunOutcome) -> float | None:
    return None if o.diverged_round is not None else o.accuracies[-1]


def client_seconds_to(o: RunOutcome, round_: int) -> float:
    """Sum of the slowest client's local training time over rounds 1..round_."""
    return sum(o.column("compute_seconds_max", r) or 0.0 for r in range(1, round_ + 1))


def quiet_seconds_per_round(outcomes: Sequence[RunOutcome], arm: str) -> float:
    """The timing run's slowest-client seconds per round, median over rounds 2.. (round 1
    also pays the clients' first data load and warm-up)."""
    o = find(outcomes, setting="timing", arm=arm)
    return statistics.median(
        o.column("compute_seconds_max", r) or 0.0 for r in range(2, TIMING_ROUNDS + 1)
    )


def client_time(
    outcomes: Sequence[RunOutcome], o: RunOutcome, round_: int, args: argparse.Namespace
) -> float:
    """Client time to round_: the virtual clock's when the runs keep one (--system), else
    quiet per-round seconds x rounds with a timing group, else the run's own clock."""
    if args.system is not None:
        return sum(o.column("virtual_seconds", r) or 0.0 for r in range(1, round_ + 1))
    if "timing" in args.groups:
        return round_ * quiet_seconds_per_round(outcomes, o.spec.arm)
    return client_seconds_to(o, round_)


def seconds_per_round(
    outcomes: Sequence[RunOutcome], rs: Sequence[RunOutcome], args: argparse.Namespace
) -> float:
    """One round's client time, as `client_time` counts it (mean over rounds and seeds)."""
    if "timing" in args.groups and args.system is None:
        return quiet_seconds_per_round(outcomes, rs[0].spec.arm)
    column = "virtual_seconds" if args.system is not None else "compute_seconds_max"
    return statistics.fmean(
        statistics.fmean(o.column(column, r) or 0.0 for r in range(1, len(o.rows) + 1)) for o in rs
    )


def rounds_cell(values: Sequence[int | None], rounds: int) -> str:
    reached = [v for v in values if v is not None]
    if len(reached) < len(values):
        return f"{rounds}+ ({len(values) - len(reached)}/{len(values)} seeds never)"
    mean, std = mean_std([float(v) for v in reached])
    return f"{mean:.0f} ± {std:.0f}"


def alpha_by_group(o: RunOutcome, seed: int) -> dict[str, float]:
    """Mean alpha over rounds >= 2 (round 1's echo is a zero update) and over the members of
    each group, the freeloaders apart."""
    history = partition_columns(o.rows[1:], "alpha_")
    free = set(freeloader_ids(seed))
    groups = LabelGroupsPartition().groups_of(NUM_CLIENTS, seed)
    members: dict[str, list[int]] = {"free": sorted(free)}
    for g, name in enumerate("ABC"):
        members[name] = [p for p in range(NUM_CLIENTS) if groups[p] == g and p not in free]
    return {
        name: statistics.fmean(statistics.fmean(history[p]) for p in pids if p in history)
        for name, pids in members.items()
    }


def detection(o: RunOutcome, seed: int, kappa: float, lam: int) -> tuple[int, int]:
    """(freeloaders, benign clients) with lam strikes at kappa in this run's alpha history."""
    strikes: dict[int, int] = {}
    flagged: set[int] = set()
    for r in range(1, len(o.rows) + 1):
        strikes, now = record_strikes(o.columns("alpha_", r), strikes, kappa=kappa, lam=lam)
        flagged.update(now)
    free = set(freeloader_ids(seed))
    return len(flagged & free), len(flagged - free)
