"""Accuracy against bytes on the wire: compression under FedAvg and EFL (EFL spec 2.6, 2.9).

mnist5k + cnn, 100 clients with 2 classes each (partition=label2), 10 sampled per round,
10 local SGD steps of batch 10 at lr 0.05, central evaluation every 5 rounds, --rounds rounds,
`runtime=simulation`. Dense FedAvg once, then each arm of --arms at every q of --qs (the same
codec and q both ways):

    FedAvg dense          compression none (once, not per q)
    topk       FedAvg + top-k        compression.up=topk, down=topk (error feedback)
    st_ef      FedAvg + ST + EF      compression.up=st, down=st (error feedback)
    st         FedAvg + ST, no EF    st both ways, error_feedback=false both ways
    efl        EFL + ST, top-k u/v   algorithm=efl, st both ways, fisher_comm=topk at the same q
    efl_dense  EFL + ST, dense u/v   the paper's literal EFL (u, v and U, V dense)

Bytes are what `metrics.csv` measured: every serialized message (bytes_up, bytes_down), and
the model-update part alone (update_bytes_up); analytic bits of spec 2.9 beside them. Kept
positions travel Golomb-Rice coded (`learning.golomb`). A client that missed rounds gets the
broadcasts since the version it holds, or the whole model (first contact, or when the
broadcasts would outweigh it): that catch-up is most of the downstream traffic, and counted.
The report sets the measured upload beside the figures of the earlier report (positions at
ceil(log2 n) bits) and checks the goal: >= 50x fewer upstream bytes than dense FedAvg at
<= 1 point lower final accuracy.

    python -m benchmarks.compression_tradeoff.run [--seeds 0 1 2] [--rounds 200] [--qs 25 50]
        [--arms topk st_ef]
    python -m benchmarks.compression_tradeoff.run --render-only   # report from the saved runs
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.compression_tradeoff.arms import EVAL_EVERY, FINAL_EVALS, PER_Q, specs
from benchmarks.compression_tradeoff.report import Context, final, render, runs_of, write_plot
from benchmarks.harness.execute import execute, execute_all
from benchmarks.harness.outcome import RunOutcome, RunSpec
from benchmarks.harness.reproduce import Started, parsed, reproduce, reproduction_parser


# ----- main -------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = reproduction_parser(__doc__, "compression_tradeoff", 200, estimate=False)
    parser.add_argument("--qs", type=int, nargs="+", default=[25, 50], help="q = 1 / each of these")
    parser.add_argument(
        "--arms", nargs="+", choices=PER_Q, default=["topk", "st_ef"], help="arms run at each q"
    )
    args = parsed(parser, argv)
    if args.rounds % EVAL_EVERY or args.rounds < EVAL_EVERY * FINAL_EVALS:
        parser.error(
            f"--rounds must be a multiple of {EVAL_EVERY}, at least {EVAL_EVERY * FINAL_EVALS}"
        )
    if any(q < 1 for q in args.qs):
        parser.error("--qs are denominators >= 1 (q = 1/25 is 25)")
    return args


def run_all(grid: Sequence[RunSpec], keep: Path) -> list[RunOutcome]:
    return execute_all(
        grid,
        lambda s: execute(s, timeout=3600, prefix="compress-", eval_every=EVAL_EVERY),
        keep=keep,
    )


def report(
    args: argparse.Namespace, outcomes: list[RunOutcome], plot: Path, started: Started
) -> str:
    """Dense FedAvg's final accuracy less 3 points, down to half a point, is the target."""
    dense = [final(o) for o in runs_of(outcomes, "dense", 0, args.seeds)]
    target = math.floor(200 * (statistics.fmean(dense) - 0.03)) / 200
    seconds = sum(o.process_seconds for o in outcomes)
    ctx = Context(args, started.at, started.load, seconds, target)
    write_plot(ctx, outcomes, plot)
    return render(ctx, outcomes, plot)


def main(argv: list[str] | None = None) -> int:
    return reproduce(
        parse_args(argv), "compression_tradeoff", grid=specs, run_all=run_all, report=report
    )


if __name__ == "__main__":
    sys.exit(main())
