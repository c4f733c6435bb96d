"""TACO's arms (main, ablation, freeloaders), the paper's figures and the grid of fl-runs."""

from __future__ import annotations

import argparse

from benchmarks.harness.outcome import RunSpec
from fl_system.data.partitions import LabelGroupsPartition

COMMON = (
    "runtime=simulation",
    "model=cnn",
    "num_clients=20",
    "partition=label_groups",
    "train.local_steps=100",
    "train.batch_size=64",
    "train.lr=0.01",
    "train.momentum=0.0",
    "eval_every=1",
)
NUM_CLIENTS = 20
ARMS = {  # label: overrides
    "FedAvg": ("algorithm=fedavg",),
    "FedProx": ("algorithm=fedprox", "algorithm.mu=0.1"),
    "FoolsGold": ("algorithm=foolsgold",),
    "SCAFFOLD": ("algorithm=scaffold",),
    "STEM": ("algorithm=stem",),
    "FedACG": ("algorithm=fedacg",),
    "FedDyn": ("algorithm=feddyn",),
    "TACO": ("algorithm=taco",),
    "TACO literal": ("algorithm=taco", "algorithm.delta_scale=1"),
}
ABLATION = {  # (tailored correction, tailored aggregation): arm; both = "TACO"
    (False, False): "TACO, neither",
    (False, True): "TACO, aggregation only",
    (True, False): "TACO, correction only",
}
FREELOADER_ARMS = {"TACO, 8 echo freeloaders": False, "TACO, 8 echo freeloaders, expel": True}
GROUP_NAMES = ("A (10 %)", "B (20 %)", "C (50 %)")
PAPER_FMNIST = {  # Table V: (Acc@100R, R->70 %), None = never
    "FedAvg": ("71.36±0.06", "85"),
    "FedProx": ("67.14±0.11", "100+"),
    "FoolsGold": ("73.09±0.16", "80"),
    "SCAFFOLD": ("68.84±0.14", "100+"),
    "STEM": ("72.97±0.03", "69"),
    "FedACG": ("70.91±0.27", "92"),
    "TACO": ("73.28±0.16", "59"),
}
PAPER_TABLE2 = {  # dataset compared with -> Table II's mean alpha per group
    "MNIST": {"A": "0.23±0.02", "B": "0.27±0.03", "C": "0.41±0.02", "free": "0.88±0.01"},
    "FMNIST": {"A": "0.18±0.09", "B": "0.27±0.03", "C": "0.37±0.01", "free": "0.75±0.01"},
}
# Table VIII (FMNIST): kappa -> TPR / FPR at lambda = T/10, T/5, T/2
PAPER_TABLE8 = {
    0.4: ("100 % / 25 %", "100 % / 12.5 %", "100 % / 0 %"),
    0.5: ("100 % / 6.25 %", "100 % / 0 %", "100 % / 0 %"),
    0.6: ("100 % / 0 %", "100 % / 0 %", "100 % / 0 %"),
    0.8: ("100 % / 0 %", "100 % / 0 %", "100 % / 0 %"),
    0.9: ("100 % / 0 %", "100 % / 0 %", "0 % / 0 %"),
    1.0: ("0 % / 0 %", "0 % / 0 %", "0 % / 0 %"),
}
KAPPAS = tuple(PAPER_TABLE8)
LAMBDA_FRACTIONS = (10, 5, 2)  # lambda = T/10, T/5, T/2
TIMING_ROUNDS = 6


def freeloader_ids(seed: int) -> list[int]:
    """3 clients of group A, 3 of B, 2 of C: 4 benign clients per group remain."""
    groups = LabelGroupsPartition().groups_of(NUM_CLIENTS, seed)
    ids = []
    for g, count in enumerate((3, 3, 2)):
        ids += sorted(int(p) for p, h in enumerate(groups) if h == g)[:count]
    return sorted(ids)


def ablation_overrides(correction: bool, aggregation: bool) -> tuple[str, ...]:
    return (
        "algorithm=taco",
        f"algorithm.tailored_correction={str(correction).lower()}",
        f"algorithm.tailored_aggregation={str(aggregation).lower()}",
    )


def freeloader_overrides(seed: int, expel: bool) -> tuple[str, ...]:
    ids = ",".join(map(str, freeloader_ids(seed)))
    return (
        "algorithm=taco",
        f"algorithm.expel={str(expel).lower()}",
        f"clients.freeloaders.ids=[{ids}]",
        "clients.freeloaders.kind=echo",
    )


def run_spec(
    group: str, arm: str, seed: int, rounds: int, *, dataset: str, system: str | None
) -> RunSpec:
    """One fl-run of the grid; `system` names a virtual clock (None: none)."""
    if group == "timing":
        seed, rounds = 0, TIMING_ROUNDS
    if group in ("main", "timing"):
        own = ARMS[arm]
    elif group == "ablation":
        own = ablation_overrides(*next(k for k, v in ABLATION.items() if v == arm))
    else:
        own = freeloader_overrides(seed, FREELOADER_ARMS[arm])
    clock = () if system is None else (f"system={system}",)
    overrides = (
        *COMMON,
        f"dataset={dataset}",
        *clock,
        *own,
        f"num_rounds={rounds}",
        f"seed={seed}",
    )
    return RunSpec(group, arm, seed, overrides, rounds)


def spec_of(args: argparse.Namespace, group: str, arm: str, seed: int) -> RunSpec:
    """The grid's run of `arm` in `group` at `seed`, as the command line sets it up."""
    return run_spec(group, arm, seed, args.rounds, dataset=args.dataset, system=args.system)


def group_arms(group: str, args: argparse.Namespace) -> list[str]:
    """The arms of `group` this invocation runs (--arms picks the main and timing ones)."""
    if group in ("main", "timing"):
        return [a for a in ARMS if a in args.arms]
    return list(ABLATION.values() if group == "ablation" else FREELOADER_ARMS)


def specs(args: argparse.Namespace) -> list[RunSpec]:
    return [
        spec_of(args, group, arm, seed)
        for group in args.groups
        for seed in (args.seeds if group != "timing" else [0])
        for arm in group_arms(group, args)
    ]
