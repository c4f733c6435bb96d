"""The virtual clock (system=...): time to a target accuracy on devices and networks that
differ.

    networks  FedAvg dense vs FedAvg + ST + EF at q = 1/25 and 1/100 vs EFL, under fast
              broadband, phones over 4G and a slow uplink: virtual time to each target and
              where compression starts to pay
    deadline  FedAvg, FedProx, FedNova and EFL under system.round_deadline on phones whose
              compute varies widely (drop vs partial work), and FedAvg without a deadline
    taco      TACO's Table V methods in TACO's setting: virtual seconds per round beside the
              client-time estimate of taco_reproduction

Every run is an fl-run with runtime=simulation on mnist5k (arms.py has the settings); virtual
times come from the run's own metrics.csv.

    python -m benchmarks.virtual_clock.run [--seeds 0 1 2] [--rounds 40] [--groups networks
        deadline taco] [--targets 0.8 0.85 0.9] [--deadline 1.2] [--notes NOTES.md]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness.execute import execute, execute_all
from benchmarks.harness.outcome import RunOutcome, RunSpec
from benchmarks.harness.reproduce import parsed, reproduce, reproduction_parser
from benchmarks.virtual_clock.arms import GROUPS
from benchmarks.virtual_clock.report import render


def grid(args: argparse.Namespace) -> list[RunSpec]:
    return [spec for group in args.groups for spec in GROUPS[group](args)]


def run_all(specs: Sequence[RunSpec], keep: Path) -> list[RunOutcome]:
    def run(spec: RunSpec) -> RunOutcome:
        return execute(spec, 600 + 60 * spec.rounds, prefix="virtual-clock-", eval_every=2)

    return execute_all(specs, run, keep=keep)


def main(argv: list[str] | None = None) -> int:
    parser = reproduction_parser(__doc__, "virtual_clock", 40, estimate=False)
    parser.add_argument("--groups", nargs="+", choices=list(GROUPS), default=list(GROUPS))
    parser.add_argument("--targets", type=float, nargs="+", default=[0.8, 0.85, 0.9])
    parser.add_argument(
        "--deadline", type=float, default=1.2, help="system.round_deadline (virtual s)"
    )
    args = parsed(parser, argv)
    return reproduce(args, "virtual_clock", grid=grid, run_all=run_all, report=render)


if __name__ == "__main__":
    raise SystemExit(main())
