"""TACO reproduction on mnist5k: Table V's shape (accuracy at T, rounds to a target, client
time to the target), Table VI's ablation, Table II's alpha per group and Table VIII's
freeloader detection.

Every run is `fl-run runtime=simulation dataset=mnist5k model=cnn` with the paper's setting:
20 clients, all every round, K = 100 local steps of batch 64, SGD lr 0.01 without momentum,
the synthetic 3-group label skew (partition=label_groups: 7, 7 and 6 clients holding 1, 2 and
5 of the 10 labels), central evaluation every round, --rounds rounds, seeds --seeds. One seed
gives every arm the same partition, initial model and client sampling (checked below).

    arms        FedAvg, FedProx (mu = 0.1), FoolsGold, SCAFFOLD, STEM (a = 0.2), FedACG
                (lam 0.85, beta 0.001), FedDyn (alpha 0.01), TACO (delta_scale = K) and TACO
                read literally (delta_scale = 1)
    ablation    TACO without tailored correction and/or tailored aggregation (Table VI)
    timing      every main arm again, seed 0, 6 rounds, run alone on a quiet machine: its
                slowest client's seconds per round (median over rounds 2..) times each
                seed's rounds to the target is Table V's client time (the main runs' own
                clocks shared the CPU with other work)
    freeloaders TACO with 8 of the 20 clients echoing the last global update (3 of group A,
                3 of B, 2 of C, so 4 benign clients per group remain), once with expulsion
                off (Table II's alpha per group; Table VIII's TPR/FPR for each kappa at
                lam = T/5, counted from that run's alpha) and once with expulsion on at
                kappa = 0.6 (when each client was expelled)

The target is FedAvg's seed-mean accuracy at round --rounds/2, rounded down to half a point,
so FedAvg needs about half of T to reach it. Client time to the target: the sum over rounds
up to it of the slowest client's local training time (`compute_seconds_max`, TACO spec 5).

    python -m benchmarks.taco_reproduction.run [--seeds 0 1 2] [--rounds 50] [--groups main
        ablation freeloaders timing] [--out benchmarks/taco_reproduction/report.md]
    python -m benchmarks.taco_reproduction.run --estimate      # one short run per arm: cost
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness.estimates import project
from benchmarks.harness.execute import execute, execute_all
from benchmarks.harness.outcome import RunOutcome, RunSpec
from benchmarks.harness.reproduce import Started, parsed, reproduce, reproduction_parser
from benchmarks.taco_reproduction.analysis import target_for
from benchmarks.taco_reproduction.arms import ABLATION, ARMS, group_arms, run_spec, specs
from benchmarks.taco_reproduction.report import Context, render, write_plot


def run_all(specs_: Sequence[RunSpec], keep: Path | None = None) -> list[RunOutcome]:
    def run(spec: RunSpec) -> RunOutcome:
        return execute(spec, 1800 + 60 * spec.rounds, prefix="taco-repro-")

    return execute_all(specs_, run, keep=keep)


# ----- main -------------------------------------------------------------------------------
def estimate(args: argparse.Namespace) -> int:
    """One short run of each main arm at seed 0; project the whole grid."""
    rounds = 3
    per_arm = {}
    for arm in group_arms("main", args):
        (o,) = run_all([run_spec("main", arm, 0, rounds, dataset=args.dataset, system=args.system)])
        per_arm[arm] = project(o, args.rounds)
        print(
            f"[estimate] {arm}: {o.seconds_per_round:.1f} s/round, fixed {o.fixed_seconds:.0f} s"
            f" -> {per_arm[arm] / 60:.1f} min per run",
            flush=True,
        )
    taco = per_arm["TACO"]
    total = sum(per_arm.values()) * len(args.seeds) * ("main" in args.groups)
    total += (
        taco
        * len(args.seeds)
        * (len(ABLATION) * ("ablation" in args.groups) + 2 * ("freeloaders" in args.groups))
    )
    print(f"[estimate] projected total: {total / 3600:.1f} h", flush=True)
    return 0


def parse_args(
    argv: list[str] | None = None, study: str = "taco_reproduction", **defaults: object
) -> argparse.Namespace:
    """The command line; `defaults` are a study's own (the FMNIST study's dataset, arms...)."""
    parser = reproduction_parser(__doc__, study, 50)
    parser.add_argument("--dataset", choices=["mnist5k", "fmnist"], default="mnist5k")
    parser.add_argument(
        "--groups",
        nargs="+",
        default=["main", "ablation", "freeloaders"],
        choices=["main", "ablation", "freeloaders", "timing"],
    )
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument(
        "--target",
        type=float,
        help="accuracy (a fraction) for rounds and time to target; default: FedAvg's mean at "
        "round T/2, rounded down to half a point",
    )
    parser.add_argument(
        "--system",
        help="a virtual clock for every run (system=NAME); client time to the target is then "
        "the clock's (time: none, the clients' own seconds or the timing group's)",
    )
    parser.set_defaults(**defaults)
    args = parsed(parser, argv)
    args.study = study
    if args.rounds < 10:
        parser.error("--rounds must be at least 10")
    if {"ablation", "timing"} & set(args.groups) and "main" not in args.groups:
        parser.error("the ablation and the timing runs go with the main runs: keep 'main'")
    if args.target is not None and not 0 < args.target < 1:
        parser.error("--target is a fraction in (0, 1), e.g. 0.7")
    if args.system is not None and "timing" in args.groups:
        parser.error("--system gives client time on the virtual clock: drop the timing group")
    return args


def report(
    args: argparse.Namespace, outcomes: list[RunOutcome], plot: Path, started: Started
) -> str:
    total = sum(o.process_seconds for o in outcomes)
    target = args.target or (target_for(outcomes, args) if "main" in args.groups else None)
    ctx = Context(args, started.at, started.load, total, target)
    write_plot(ctx, outcomes, plot)
    return render(ctx, outcomes, plot)


def main(
    argv: list[str] | None = None, study: str = "taco_reproduction", **defaults: object
) -> int:
    return reproduce(
        parse_args(argv, study, **defaults),
        study,
        grid=specs,
        run_all=run_all,
        report=report,
        estimate=estimate,
    )


if __name__ == "__main__":
    sys.exit(main())
