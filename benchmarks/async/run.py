"""Asynchronous against synchronous training on the virtual clock: virtual seconds and bytes
to a target accuracy for FedAvg (synchronous, and with a round deadline), FedBuff and
FedAsync, on phones that differ and go offline, and on equal devices (arms.py).

Every run is an fl-run with runtime=simulation on mnist5k; times and bytes come from the
run's own metrics.csv. (The folder is named `async`, a Python keyword: its modules import
each other relatively and run with -m.)

    python -m benchmarks.async.run [--seeds 0 1 2] [--settings phones equal]
        [--rounds 60] [--targets 0.8 0.85 0.9] [--notes NOTES.md]

--rounds are synchronous FedAvg's; every arm sends as many client tasks (20 a round).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness.execute import execute, execute_all
from benchmarks.harness.outcome import RunOutcome, RunSpec
from benchmarks.harness.reproduce import parsed, reproduce, reproduction_parser

from .arms import ROUNDS, SETTINGS, grid
from .report import render


def run_all(specs: Sequence[RunSpec], keep: Path) -> list[RunOutcome]:
    def run(spec: RunSpec) -> RunOutcome:
        every = int(dict(spec.extra)["eval_every"])
        return execute(spec, 900 + spec.rounds, prefix="async-", eval_every=every)

    return execute_all(specs, run, keep=keep)


def main(argv: list[str] | None = None) -> int:
    parser = reproduction_parser(__doc__, "async", ROUNDS, estimate=False)
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--targets", type=float, nargs="+", default=[0.8, 0.85, 0.9])
    args = parsed(parser, argv)
    return reproduce(args, "async", grid=grid, run_all=run_all, report=render)


if __name__ == "__main__":
    raise SystemExit(main())
