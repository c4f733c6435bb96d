"""FedGSNR reproduction on mnist5k: Table 1's shape (rounds to a target, speedups) and the attack.

For each partition of the paper's Table 1 (Dirichlet 0.5, Dirichlet 0.1, Label-2, NonBalance,
Pareto), each base algorithm (FedAvg; FedProx and SCAFFOLD with --bases) and each seed, two
`fl-run runtime=simulation dataset=mnist5k model=cnn` runs, one after the other:

    algorithm=<base>                             every client E_const local steps
    algorithm=<base> algorithm.gsnr.enabled=true E_k steps from gradient statistics

with the paper's setting: 30 clients, all every round, B = 64, E_const = 20 steps, SGD lr 0.01
without momentum, central evaluation every 5 rounds, --rounds rounds. One seed gives both arms
the same partition, initial model and client sampling (checked below). Target accuracy per
partition, fixed before looking at the FedGSNR arm: FedAvg's seed-mean test accuracy at round
--target-round, rounded down to half a point; so FedAvg needs about that many rounds there.

Attack study (--attack-seeds): FedGSNR + FedAvg on Dirichlet 0.5 with client 0's labels
shifted l -> (l + 3) mod 10, and with its inputs replaced by U(-1, 1) noise: client 0's median
GSNR against its clean run and against the other clients.

    python -m benchmarks.fedgsnr_reproduction.run [--seeds 0 1 2] [--rounds 150]
        [--target-round 100] [--bases fedavg] [--partitions dir0.5 dir0.1 label2 nonbalance pareto]
        [--attack-seeds 0] [--out benchmarks/fedgsnr_reproduction/report.md]
    python -m benchmarks.fedgsnr_reproduction.run --estimate    # one short run per arm: cost
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.fedgsnr_reproduction.analysis import target_for
from benchmarks.fedgsnr_reproduction.arms import BASES, EVAL_EVERY, PARTITIONS, arm, run_spec, specs
from benchmarks.fedgsnr_reproduction.report import Context, render, start_states, write_plot
from benchmarks.harness.estimates import project
from benchmarks.harness.execute import execute, execute_all
from benchmarks.harness.outcome import RunOutcome, RunSpec
from benchmarks.harness.reproduce import Started, parsed, reproduce, reproduction_parser


def run_all(specs: Sequence[RunSpec], keep: Path | None = None) -> list[RunOutcome]:
    def run(spec: RunSpec) -> RunOutcome:
        return execute(spec, 900 + 20 * spec.rounds, prefix="fedgsnr-repro-", eval_every=EVAL_EVERY)

    return execute_all(specs, run, keep=keep)


def estimate(args: argparse.Namespace) -> int:
    """One short run per arm on the first partition; project the whole grid."""
    rounds = 6
    per_arm = {}
    for base in args.bases:
        for gsnr in (False, True):
            (o,) = run_all([run_spec(PARTITIONS[args.partitions[0]], base, gsnr, 0, rounds)])
            per_arm[arm(base, gsnr)] = project(o, args.rounds)
            print(
                f"[estimate] {arm(base, gsnr)}: {o.seconds_per_round:.2f} s/round, fixed "
                f"{o.fixed_seconds:.0f} s -> {per_arm[arm(base, gsnr)]:.0f} s per run",
                flush=True,
            )
    total = sum(per_arm.values()) * len(args.partitions) * len(args.seeds)
    total += 2 * len(args.attack_seeds) * per_arm[arm("fedavg", True)]
    print(f"[estimate] projected total: {total / 3600:.1f} h", flush=True)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = reproduction_parser(__doc__, "fedgsnr_reproduction", 80)
    parser.add_argument("--target-round", type=int, default=50)
    parser.add_argument("--bases", nargs="+", default=["fedavg"], choices=list(BASES))
    parser.add_argument(
        "--partitions", nargs="+", default=list(PARTITIONS), choices=list(PARTITIONS)
    )
    parser.add_argument("--attack-seeds", type=int, nargs="*", default=[0])
    args = parsed(parser, argv)
    if args.target_round % EVAL_EVERY or not EVAL_EVERY <= args.target_round <= args.rounds:
        parser.error(f"--target-round must be a multiple of {EVAL_EVERY} within --rounds")
    if "fedavg" not in args.bases:
        parser.error("--bases must include fedavg (the targets come from its runs)")
    if args.attack_seeds and "dir0.5" not in args.partitions:
        parser.error("the attack study compares with the clean dir0.5 runs: keep dir0.5")
    if not set(args.attack_seeds) <= set(args.seeds):
        parser.error("--attack-seeds must be among --seeds (clean runs are reused)")
    return args


def report(
    args: argparse.Namespace, outcomes: list[RunOutcome], plot: Path, started: Started
) -> str:
    total = sum(o.process_seconds for o in outcomes)  # as measured, reused runs included
    targets = {k: target_for(outcomes, k, args.seeds, args.target_round) for k in args.partitions}
    ctx = Context(args, started.at, started.load, total, targets, start_states(args))
    write_plot(ctx, outcomes, plot)
    return render(ctx, outcomes, plot)


def main(argv: list[str] | None = None) -> int:
    return reproduce(
        parse_args(argv),
        "fedgsnr_reproduction",
        grid=specs,
        run_all=run_all,
        report=report,
        estimate=estimate,
    )


if __name__ == "__main__":
    sys.exit(main())
