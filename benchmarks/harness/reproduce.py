"""A study's main: its command line, the grid run (or reloaded from saved runs), the report."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.fl_run import BenchmarkError
from benchmarks.harness.outcome import RunOutcome, RunSpec
from benchmarks.harness.paths import invocation, plot_path, report_path, runs_path
from benchmarks.harness.saved_runs import saved_runs


# ----- command line -----------------------------------------------------------------------
def reproduction_parser(
    doc: str, study: str, rounds: int, *, estimate: bool = True
) -> argparse.ArgumentParser:
    """The options every reproduction takes: --seeds, --rounds, --notes, --out (the report,
    `benchmarks/<study>/report.md` by default), --runs, --render-only and (`estimate`)
    --estimate. `parsed` fills in --runs."""
    parser = argparse.ArgumentParser(prog=invocation(study), description=doc.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--notes", type=Path, help="a Markdown file appended as 'Notes'")
    parser.add_argument("--out", type=Path, default=report_path(study))
    if estimate:
        parser.add_argument("--estimate", action="store_true", help="time one short run per arm")
    parser.add_argument(
        "--runs",
        type=Path,
        help="where every run is saved as it ends (default: next to --out, runs.json beside a "
        "report.md, else .runs.json); runs already there are reused",
    )
    parser.add_argument("--render-only", action="store_true", help="report from --runs")
    return parser


def parsed(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    args = parser.parse_args(argv)
    args.runs = args.runs or runs_path(args.out)
    return args


@dataclass(frozen=True)
class Started:
    """When a reproduction started, and the machine's load average then."""

    at: dt.datetime
    load: tuple[float, float, float]


def reproduce(
    args: argparse.Namespace,
    name: str,
    *,
    grid: Callable[[argparse.Namespace], list[RunSpec]],
    run_all: Callable[[Sequence[RunSpec], Path], list[RunOutcome]],
    report: Callable[[argparse.Namespace, list[RunOutcome], Path, Started], str],
    estimate: Callable[[argparse.Namespace], int] | None = None,
    then: Callable[[argparse.Namespace, list[RunOutcome]], list[RunSpec]] | None = None,
) -> int:
    """A reproduction's main: --estimate, or the grid's runs (run, or reloaded with
    --render-only) and the report written to --out, `report` drawing the plot it is given.
    `then` is a second phase: its grid depends on the first phase's outcomes."""
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    started = Started(dt.datetime.now().astimezone(), os.getloadavg())

    def fetch(specs: list[RunSpec]) -> list[RunOutcome]:
        return saved_runs(specs, args.runs) if args.render_only else run_all(specs, args.runs)

    try:
        if estimate is not None and args.estimate:
            return estimate(args)
        outcomes = fetch(grid(args))
        if then is not None:
            outcomes += fetch(then(args, outcomes))
    except BenchmarkError as err:
        print(f"{name}: error: {err}", file=sys.stderr, flush=True)
        return 1
    plot = plot_path(args.out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(args, outcomes, plot, started))
    print(f"[bench] report written to {args.out}, plot to {plot}", flush=True)
    return 0
