"""The arms of the compression study and the fl-run overrides of each (setting, arm, seed)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from benchmarks.harness.outcome import RunSpec

COMMON = (
    "runtime=simulation",
    "dataset=mnist5k",
    "model=cnn",
    "partition=label2",
    "num_clients=100",
    "clients_per_round=10",
    "train.local_steps=10",
    "train.batch_size=10",
    "train.lr=0.05",
    "train.momentum=0.0",
    "eval_every=5",
)
EVAL_EVERY = 5
FINAL_EVALS = 4  # "final accuracy": mean of the last 4 evaluations (the last 20 rounds)
GOAL_FACTOR, GOAL_LOSS = 50.0, 0.01


def both(codec: str, q: int, *extra: str) -> tuple[str, ...]:
    """The same codec, q = 1/`q` and `extra` settings for compression.up and .down."""
    out: list[str] = []
    for way in ("up", "down"):
        out += [f"compression.{way}={codec}", f"compression.{way}.q={1 / q!r}"]
        out += [f"compression.{way}.{x}" for x in extra]
    return tuple(out)


@dataclass(frozen=True)
class Arm:
    key: str
    label: str
    color: str
    dashed: bool = False

    def overrides(self, q: int) -> tuple[str, ...]:
        if self.key == "dense":
            return ("algorithm=fedavg",)
        if self.key == "topk":
            return ("algorithm=fedavg", *both("topk", q))
        if self.key in ("st_ef", "st"):
            extra = () if self.key == "st_ef" else ("error_feedback=false",)
            return ("algorithm=fedavg", *both("st", q, *extra))
        fisher = ("topk", f"{1 / q!r}") if self.key == "efl" else ("dense", "0.01")
        return (
            "algorithm=efl",
            *both("st", q),
            f"algorithm.fisher_comm={fisher[0]}",
            f"algorithm.fisher_q={fisher[1]}",
        )


ARMS = {
    a.key: a
    for a in (
        Arm("dense", "FedAvg dense", "black"),
        Arm("topk", "FedAvg + top-k", "tab:orange"),
        Arm("st_ef", "FedAvg + ST + EF", "tab:blue"),
        Arm("st", "FedAvg + ST, no EF", "tab:blue", dashed=True),
        Arm("efl", "EFL + ST, top-k u/v", "tab:green"),
        Arm("efl_dense", "EFL + ST, dense u/v", "tab:green", dashed=True),
    )
}
PER_Q = ("topk", "st_ef", "st", "efl", "efl_dense")


def settings(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(arm, q) pairs run; q = 0 for the dense baseline."""
    return [("dense", 0)] + [(a, q) for q in args.qs for a in args.arms]


def run_spec(arm: str, q: int, seed: int, rounds: int) -> RunSpec:
    overrides = (*COMMON, *ARMS[arm].overrides(q), f"seed={seed}", f"num_rounds={rounds}")
    return RunSpec(f"q=1/{q}" if q else "dense", arm, seed, overrides, rounds)


def specs(args: argparse.Namespace) -> list[RunSpec]:
    return [run_spec(arm, q, seed, args.rounds) for seed in args.seeds for arm, q in settings(args)]
