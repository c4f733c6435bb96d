"""What secure aggregation costs a round: plain FedAvg against secagg=secaggplus for 5, 10, 20
and 50 clients (every client every round), in simulation and on real SuperNodes
(runtime=local), on one workload (digits, the MLP, 5 local steps); SecAgg+ with every client
a neighbour of every other (`num_shares=1.0`, the default) and on its sparse graph (7 shares:
each client and 6 neighbours).

Per run: seconds per round (after round 1, which carries the warm-up), bytes per round up
and down, the protocol's share of them, and accuracy; the report sets each SecAgg+ figure
against plain FedAvg's at the same n, and says how the cost grows with n.

    python -m benchmarks.secagg.run [--clients 5 10 20 50] [--runtimes simulation local]
        [--rounds 4] [--notes NOTES.md]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness.execute import execute, execute_all
from benchmarks.harness.outcome import RunOutcome, RunSpec
from benchmarks.harness.reproduce import parsed, reproduce, reproduction_parser
from benchmarks.secagg.report import PLAIN, render

WORKLOAD = ("dataset=digits", "model=mlp", "train.local_steps=5", "partition=iid")
SHARES = 7  # the sparse arm: each client's secrets split among itself and 6 neighbours
ARMS = {
    PLAIN: (),
    "SecAgg+, every client a neighbour": ("secagg=secaggplus",),
    f"SecAgg+, {SHARES} shares": ("secagg=secaggplus", f"secagg.num_shares={SHARES}"),
}


def grid(args: argparse.Namespace) -> list[RunSpec]:
    return [
        RunSpec(
            runtime,
            arm,
            seed,
            (
                *WORKLOAD,
                f"runtime={runtime}",
                f"num_clients={n}",
                f"num_rounds={args.rounds}",
                f"seed={seed}",
                "round_timeout=600",
                *overrides,
            ),
            args.rounds,
            (("clients", n),),
        )
        for runtime in args.runtimes
        for n in args.clients
        for seed in args.seeds
        for arm, overrides in ARMS.items()
    ]


def run_all(specs: Sequence[RunSpec], keep: Path) -> list[RunOutcome]:
    def run(spec: RunSpec) -> RunOutcome:
        return execute(spec, 1800, prefix="secagg-")

    return execute_all(specs, run, keep=keep)


def main(argv: list[str] | None = None) -> int:
    parser = reproduction_parser(__doc__, "secagg", 4, estimate=False)
    parser.add_argument("--clients", type=int, nargs="+", default=[5, 10, 20, 50])
    parser.add_argument(
        "--runtimes", nargs="+", choices=["simulation", "local"], default=["simulation", "local"]
    )
    parser.set_defaults(seeds=[0])
    args = parsed(parser, argv)
    return reproduce(args, "secagg", grid=grid, run_all=run_all, report=render)


if __name__ == "__main__":
    raise SystemExit(main())
