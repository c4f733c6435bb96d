"""The virtual-clock study's three groups and the fl-run overrides of each run.

networks  FedAvg dense, FedAvg + ST + EF at q = 1/25 and 1/100 (both ways) and EFL (ST both
          ways at q = 1/25, top-k u/v), each under system=profiles (fast broadband),
          system=mobile (phones over 4G), system=slow_uplink, and phones on broadband
deadline  FedAvg without a deadline, then FedAvg, FedProx, FedNova and EFL under one
          system.round_deadline on phones whose compute varies widely (system=mobile,
          compute sigma 1.0): FedAvg drops who cannot do all E steps, the others use the
          steps that fit
taco      TACO's Table V arms in TACO's own setting (taco_reproduction), seed 0, its timing
          group's 6 rounds on system=mobile: each method's virtual seconds per round (every
          client every round, so the same every round)
"""

from __future__ import annotations

import argparse

from benchmarks.compression_tradeoff.arms import ARMS as COMPRESSION_ARMS
from benchmarks.harness.outcome import RunSpec
from benchmarks.taco_reproduction.arms import ARMS as TACO_ARMS
from benchmarks.taco_reproduction.arms import COMMON as TACO_COMMON
from benchmarks.taco_reproduction.arms import TIMING_ROUNDS as TACO_TIMING_ROUNDS

NETWORK_COMMON = (
    "runtime=simulation",
    "dataset=mnist5k",
    "model=cnn",
    "partition=label2",  # two labels a client: compression visibly costs accuracy here
    "num_clients=20",
    "clients_per_round=10",
    "train.local_steps=20",
    "train.batch_size=10",
    "train.lr=0.05",
    "train.momentum=0.0",
    "eval_every=2",
)
NETWORKS = {  # name: (title, overrides)
    "profiles": ("fast broadband (system=profiles)", ("system=profiles",)),
    "mobile": ("phones over 4G (system=mobile)", ("system=mobile",)),
    "slow_uplink": ("slow uplink (system=slow_uplink)", ("system=slow_uplink",)),
    # the same broadband, devices as slow as system=mobile's: compute, not bytes, sets the pace
    "phones_broadband": (
        "phones on fast broadband (system=profiles, mobile compute)",
        ("system=profiles", "system.compute.median=3.0", "system.compute.sigma=0.8"),
    ),
}
# (key, q, label): q = 0 for dense
NETWORK_ARMS = (
    ("dense", 0, "FedAvg dense"),
    ("st_ef", 25, "FedAvg + ST + EF, q = 1/25"),
    ("st_ef", 100, "FedAvg + ST + EF, q = 1/100"),
    ("efl", 25, "EFL + ST, q = 1/25"),
)

DEADLINE_COMMON = (
    "runtime=simulation",
    "dataset=mnist5k",
    "model=cnn",
    "partition=dirichlet",
    "partition.alpha=0.3",
    "num_clients=20",
    "clients_per_round=10",
    "train.local_steps=50",
    "train.batch_size=10",
    "train.lr=0.05",
    "train.momentum=0.0",
    "eval_every=2",
    "system=mobile",
    "system.compute.sigma=1.0",
)
DEADLINE_ARMS = (  # (label, algorithm overrides, whether the deadline applies)
    ("FedAvg, no deadline", ("algorithm=fedavg",), False),
    ("FedAvg, deadline (drops)", ("algorithm=fedavg",), True),
    ("FedProx, deadline (partial work)", ("algorithm=fedprox", "algorithm.mu=0.01"), True),
    ("FedNova, deadline (partial work)", ("algorithm=fednova",), True),
    ("EFL, deadline (partial work)", ("algorithm=efl",), True),
    # the spec's stability knob: E/s capped at theta (EFL spec 3, "theta in {5, 10}")
    ("EFL, theta = 5, deadline (partial work)", ("algorithm=efl", "algorithm.theta=5"), True),
)
TACO_TABLE_V = ("FedAvg", "FedProx", "FoolsGold", "SCAFFOLD", "STEM", "FedACG", "FedDyn", "TACO")


def network_specs(args: argparse.Namespace) -> list[RunSpec]:
    out = []
    for network, (_, system) in NETWORKS.items():
        for key, q, label in NETWORK_ARMS:
            for seed in args.seeds:
                overrides = (
                    *NETWORK_COMMON,
                    *COMPRESSION_ARMS[key].overrides(q),
                    *system,
                    f"seed={seed}",
                    f"num_rounds={args.rounds}",
                )
                out.append(RunSpec(f"networks {network}", label, seed, overrides, args.rounds))
    return out


def deadline_specs(args: argparse.Namespace) -> list[RunSpec]:
    deadline = f"system.round_deadline={args.deadline}"
    return [
        RunSpec(
            "deadline",
            label,
            seed,
            (
                *DEADLINE_COMMON,
                *algorithm,
                *((deadline,) if timed else ()),
                f"seed={seed}",
                f"num_rounds={args.rounds}",
            ),
            args.rounds,
        )
        for label, algorithm, timed in DEADLINE_ARMS
        for seed in args.seeds
    ]


def taco_specs(args: argparse.Namespace) -> list[RunSpec]:
    rounds = TACO_TIMING_ROUNDS
    clock = ("system=mobile", "seed=0", f"num_rounds={rounds}")
    # TACO with the main runs' lambda (T/5 = 10 of 50 rounds): a short run's own T/5 would
    # expel after one strike
    lam = {"TACO": ("algorithm.lam=10",)}
    return [
        RunSpec("taco", arm, 0, (*TACO_COMMON, *TACO_ARMS[arm], *lam.get(arm, ()), *clock), rounds)
        for arm in TACO_TABLE_V
    ]


GROUPS = {"networks": network_specs, "deadline": deadline_specs, "taco": taco_specs}
