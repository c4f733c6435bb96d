"""Round overhead of fl_system's runtimes against a plain PyTorch FedAvg loop, and wire bytes.

Runs, one after the other and never overlapping:

1. `fl-run runtime=simulation` (Flower's Ray engine) as a subprocess;
2. a plain single-process PyTorch loop doing the same FedAvg rounds (same partitions, local
   rule, train settings, seeds, weighted average and central evaluation), without Flower;
3. `fl-run runtime=local` (a real SuperLink and SuperNodes over gRPC) with --clients nodes,
   the default command (`fl-run` with no overrides: 4 nodes), and --scale-clients nodes with
   the peak memory (PSS summed over the process tree) sampled every second;
4. with `--before REV`: the same local runs from a git worktree of REV (the code before a
   change), so before and after come from one invocation.

What an idle federation costs is `benchmarks/idle_cost`'s study.

Every fl-run gets an empty partition cache, as a new user's first run would. Seconds per round
after warm-up are (wall time at the end of the last round - at the end of round 1) /
(rounds - 1); round 1 is reported apart.

    python -m benchmarks.round_overhead.run [--rounds-sim 8] [--rounds-local 5] [--clients 10]
        [--scale-clients 20] [--before REV [--before-python PY]]
        [--out benchmarks/round_overhead/report.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import warnings
from pathlib import Path

import torch

from benchmarks.harness.fl_run import (
    BenchmarkError,
    Code,
    add_before_python,
    remove_worktree,
    worktree,
)
from benchmarks.harness.paths import invocation, report_path
from benchmarks.harness.same_start import compose_config
from benchmarks.round_overhead.measurements import (
    experiment_overrides,
    measure_fl_run,
    plain_fedavg,
    raw_model_bytes,
)
from benchmarks.round_overhead.report import Measured, render_report


# ----- main ---------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=invocation("round_overhead"), description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rounds-sim", type=int, default=8, help="rounds for simulation")
    parser.add_argument("--rounds-local", type=int, default=5, help="rounds for runtime=local")
    parser.add_argument("--clients", type=int, default=10, help="clients (all train each round)")
    parser.add_argument("--scale-clients", type=int, default=20, help="nodes for the scale run")
    parser.add_argument("--before", help="git revision to measure as 'before' (a worktree)")
    add_before_python(parser)
    parser.add_argument(
        "--notes", type=Path, help="a Markdown file whose text becomes 'Where the time goes'"
    )
    parser.add_argument("--out", type=Path, default=report_path("round_overhead"))
    args = parser.parse_args(argv)
    if args.rounds_sim < 2 or args.rounds_local < 2:
        parser.error("--rounds-sim and --rounds-local must be at least 2 (round 1 is warm-up)")
    if args.clients < 1 or args.scale_clients < 1:
        parser.error("--clients and --scale-clients must be at least 1")
    if args.notes is not None and not args.notes.is_file():
        parser.error(f"--notes: no file at {args.notes}")
    return args


def measure(args: argparse.Namespace) -> Measured:
    now, load = dt.datetime.now().astimezone(), os.getloadavg()
    after = Code("after")
    bench = experiment_overrides(args.clients, args.rounds_local)
    sim_cfg = compose_config(
        ["runtime=simulation", *experiment_overrides(args.clients, args.rounds_sim)]
    )
    sim = measure_fl_run(
        "simulation",
        ["runtime=simulation", *experiment_overrides(args.clients, args.rounds_sim)],
        args.rounds_sim,
        after,
    )
    plain = plain_fedavg(sim_cfg, args.rounds_sim)
    local = measure_fl_run(f"local, {args.clients} nodes", bench, args.rounds_local, after)
    default = measure_fl_run("local, default command", [], 5, after)
    scale = measure_fl_run(
        f"local, {args.scale_clients} nodes",
        experiment_overrides(args.scale_clients, 3),
        3,
        after,
        memory=True,
    )
    before_local = before_default = None
    if args.before:
        tree = worktree(args.before, prefix="round-overhead-before-")
        try:
            old = Code(f"before ({args.before})", tree, args.before_python)
            before_local = measure_fl_run(
                f"before: local, {args.clients} nodes",
                experiment_overrides(args.clients, 3),
                3,
                old,
            )
            before_default = measure_fl_run("before: local, default command", [], 5, old)
        finally:
            remove_worktree(tree)
    return Measured(
        started=now,
        load_start=load,
        args=args,
        sim_cfg=sim_cfg,
        plain_threads=torch.get_num_threads(),
        raw_model=raw_model_bytes(sim_cfg),
        sim=sim,
        plain=plain,
        local=local,
        default=default,
        scale=scale,
        before_local=before_local,
        before_default=before_default,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    try:
        measured = measure(args)
    except (BenchmarkError, RuntimeError) as err:
        print(f"round_overhead: error: {err}", file=sys.stderr, flush=True)
        return 1
    notes = args.notes.read_text().strip() if args.notes else ""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render_report(measured, notes))
    print(f"[bench] report written to {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
