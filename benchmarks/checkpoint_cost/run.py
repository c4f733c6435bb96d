"""What a round pays for its checkpoint: the same run with `checkpoint.every` 1 and N.

Each repetition runs every setting once, alternating, with the same seed (the histories must
agree: the report says so), and reads the training seconds per round from metrics.csv's last
`wall_seconds` (training time from round 1, start-up excluded). Writes
`benchmarks/checkpoint_cost/report.md`.

    python -m benchmarks.checkpoint_cost.run                      # about 2 minutes
    python -m benchmarks.checkpoint_cost.run --every 1 5 50 --reps 5 --rounds 100
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from benchmarks.harness.fl_run import Code, cpu_model, run_fl
from benchmarks.harness.paths import invocation, report_path, write_report
from fl_system.records.results import read_rows

WORKLOAD = ("runtime=simulation", "dataset=digits", "model=mlp", "num_clients=4", "seed=0")


def one_run(every: int, rounds: int, code: Code) -> tuple[float, str]:
    """Training seconds per round and the final test accuracy of one run."""
    run_dir = Path(tempfile.mkdtemp(prefix="checkpoint-cost-"))
    try:
        command = [
            *code.command(),
            *WORKLOAD,
            f"num_rounds={rounds}",
            f"checkpoint.every={every}",
            f"hydra.run.dir={run_dir}",
        ]
        run_fl(command, run_dir / "fl-run.out", timeout=600, env=code.env(run_dir / "cache"))
        rows = read_rows(run_dir / "metrics.csv")
        return float(rows[-1]["wall_seconds"]) / len(rows), rows[-1]["test_accuracy"]
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        prog=invocation("checkpoint_cost"), description=__doc__.splitlines()[0]
    )
    parser.add_argument("--every", type=int, nargs="+", default=[1, 20])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=report_path("checkpoint_cost"))
    args = parser.parse_args()
    code = Code("this checkout")
    seconds: dict[int, list[float]] = {e: [] for e in args.every}
    finals: set[str] = set()
    loads = [os.getloadavg()[0]]
    for rep in range(args.reps):
        for every in args.every:
            per_round, accuracy = one_run(every, args.rounds, code)
            seconds[every].append(per_round)
            finals.add(accuracy)
            print(f"[checkpoint] rep {rep + 1} every={every}: {per_round * 1e3:.2f} ms/round")
        loads.append(os.getloadavg()[0])
    base = statistics.median(seconds[args.every[0]])
    lines = [
        "# What a round pays for its checkpoint",
        "",
        f"{dt.date.today().isoformat()}, {cpu_model()}, {os.cpu_count()} cores; "
        f"`{invocation('checkpoint_cost')}` with `{' '.join(WORKLOAD)} num_rounds={args.rounds}`, "
        f"{args.reps} repetitions alternating the settings; 1-minute load average "
        f"{min(loads):.2f}-{max(loads):.2f}. Training seconds per round: metrics.csv's last "
        "`wall_seconds` over the rounds.",
        "",
        f"| checkpoint.every | ms/round, median | each repetition | x every={args.every[0]} |",
        "|---|---|---|---|",
    ]
    for every, values in seconds.items():
        median = statistics.median(values)
        each = ", ".join(f"{v * 1e3:.2f}" for v in values)
        lines.append(f"| {every} | {median * 1e3:.2f} | {each} | {median / base:.3f} |")
    same = "the same" if len(finals) == 1 else f"NOT the same ({sorted(finals)})"
    lines += ["", f"Final test accuracy: {same} in every run ({min(finals)})."]
    write_report(args.out, lines)
    return 0 if len(finals) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
