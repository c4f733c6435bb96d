"""FedGSNR's partitions, arms and attacks, and the grid of fl-runs."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from benchmarks.harness.outcome import RunSpec

COMMON = (
    "runtime=simulation",
    "dataset=mnist5k",
    "model=cnn",
    "num_clients=30",
    "train.batch_size=64",
    "train.local_steps=20",
    "train.lr=0.01",
    "train.momentum=0.0",
    "eval_every=5",
)
EVAL_EVERY = 5


@dataclass(frozen=True)
class Partition:
    key: str  # command-line name
    label: str  # the paper's column
    overrides: tuple[str, ...]


PARTITIONS = {
    p.key: p
    for p in (
        Partition("dir0.5", "alpha = 0.5", ("partition=dirichlet", "partition.alpha=0.5")),
        Partition("dir0.1", "alpha = 0.1", ("partition=dirichlet", "partition.alpha=0.1")),
        Partition("label2", "Label 2", ("partition=label2",)),
        Partition("nonbalance", "NonBalance", ("partition=nonbalance",)),
        Partition("pareto", "Pareto", ("partition=pareto",)),
    )
}
BASES = {"fedavg": "FedAvg", "fedprox": "FedProx", "scaffold": "Scaffold"}
ATTACKS = {
    "label shift k=3": ("clients.corrupt.ids=[0]", "clients.corrupt.kind=label_shift"),
    "noise inputs": ("clients.corrupt.ids=[0]", "clients.corrupt.kind=noise"),
}

# Paper Table 1 (CIFAR-10, LeNet): rounds to 0.5 accuracy, baseline and FedGSNR; None: > 1000.
PAPER_ROUNDS: dict[str, dict[str, tuple[int | None, int | None]]] = {
    "fedavg": {
        "dir0.5": (170, 115),
        "dir0.1": (355, 285),
        "label2": (470, 340),
        "nonbalance": (210, 155),
        "pareto": (550, 170),
    },
    "fedprox": {
        "dir0.5": (185, 140),
        "dir0.1": (430, 300),
        "label2": (500, 405),
        "nonbalance": (220, 180),
        "pareto": (385, 210),
    },
    "scaffold": {
        "dir0.5": (385, 140),
        "dir0.1": (770, 425),
        "label2": (870, 770),
        "nonbalance": (390, 170),
        "pareto": (None, None),
    },
}
# Paper Table 3: best test accuracy (%), baseline and FedGSNR.
PAPER_BEST: dict[str, dict[str, tuple[float, float]]] = {
    "fedavg": {
        "dir0.5": (67.06, 66.23),
        "dir0.1": (57.44, 61.41),
        "label2": (58.25, 57.69),
        "nonbalance": (65.48, 66.42),
        "pareto": (57.23, 63.38),
    },
    "fedprox": {
        "dir0.5": (63.14, 63.5),
        "dir0.1": (57.80, 59.39),
        "label2": (58.84, 58.39),
        "nonbalance": (63.87, 68.17),
        "pareto": (56.96, 63.39),
    },
    "scaffold": {
        "dir0.5": (62.05, 63.53),
        "dir0.1": (53.98, 58.95),
        "label2": (50.38, 55.48),
        "nonbalance": (62.79, 64.96),
        "pareto": (40.73, 39.83),
    },
}
PAPER_MEAN_SPEEDUP = 1.69


def arm(base: str, gsnr: bool) -> str:
    return f"FedGSNR + {BASES[base]}" if gsnr else BASES[base]


def run_spec(
    partition: Partition, base: str, gsnr: bool, seed: int, rounds: int, attack: str | None = None
) -> RunSpec:
    overrides = (
        *COMMON,
        *partition.overrides,
        f"algorithm={base}",
        *(["algorithm.gsnr.enabled=true"] if gsnr else []),
        *(ATTACKS[attack] if attack else ()),
        f"num_rounds={rounds}",
        f"seed={seed}",
    )
    extra = (("attack", attack),) if attack else ()
    return RunSpec(partition.key, arm(base, gsnr), seed, overrides, rounds, extra)


# ----- main -------------------------------------------------------------------------------
def specs(args: argparse.Namespace) -> list[RunSpec]:
    main = [
        run_spec(PARTITIONS[k], base, gsnr, seed, args.rounds)
        for k in args.partitions
        for seed in args.seeds
        for base in args.bases
        for gsnr in (False, True)
    ]
    attacks = [
        run_spec(PARTITIONS["dir0.5"], "fedavg", True, seed, args.rounds, attack)
        for seed in args.attack_seeds
        for attack in ATTACKS
    ]
    return main + attacks
