"""How runtime=simulation scales with the clients a federation holds: 100, 1,000 and 10,000
clients of FedProx's Synthetic(1, 1) (one natural silo each), 100 sampled a round.

Per run: the wall time from start to exit, fl-run's start-up phases (logs/startup.csv), the
seconds of a round (the median of round 2 on, from metrics.csv; central evaluation only after
the last), the peak memory of its whole process
tree (summed PSS: forked workers' shared pages count once) and the partition files its
clients cached. "before" is a worktree of --before (the commit before the engine's one-pass
pickup), run with that commit's code on the same data. Each code runs each size twice: on a
fresh cache (it generates the dataset and cuts the partitions it samples) and then warm (the
same run again on what the first one cached).

    python -m benchmarks.scale.run [--clients 100,1000,10000] [--before REV] [--out PATH]
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.harness.fl_run import Code, cpu_model, remove_worktree, run_fl, worktree
from benchmarks.harness.paths import invocation, report_path, write_report
from benchmarks.harness.process_tree import PeakMemory
from benchmarks.harness.round_costs import round_seconds
from fl_system.records.results import read_rows

STUDY = "scale"
ROUNDS = 6
PER_ROUND = 100
# Central evaluation only after the last round: Synthetic's test split holds a fifth of every
# user's samples, so evaluating it grows with the users held (~0.8 s a round more at 10,000).
SETTING = [
    "runtime=simulation",
    "dataset=synthetic",
    "partition=natural",
    "model=mlp",
    f"clients_per_round={PER_ROUND}",
    "eval_every=1000",
]
TIMEOUT = 1800  # seconds for one run
CACHE_STATES = ("fresh", "warm")
RATIO_GOAL = 1.5  # the largest federation's s/round and peak memory against the next size's


def _ratios(
    results: dict[tuple[int, str, str], dict[str, float]], sizes: list[int], label: str
) -> list[str]:
    """The goal lines: each size's s/round and peak memory against the size before it."""
    lines = ["", f"Goals (this code; at most {RATIO_GOAL}x the next smaller federation's):", ""]
    for small, large in itertools.pairwise(sizes):
        for state in CACHE_STATES:
            a, b = results[small, label, state], results[large, label, state]
            for name, key in (("s per round", "round"), ("peak memory", "peak GiB")):
                ratio = b[key] / a[key]
                verdict = "met" if ratio <= RATIO_GOAL else "not met"
                what = f"{large:,} against {small:,}, {state}, {name}"
                lines.append(f"- {what}: {ratio:.2f}x ({verdict})")
    return lines


def measure(code: Code, clients: int, work: Path, label: str, cache: Path) -> dict[str, float]:
    """One run of `code` with `clients` clients on `cache`: its figures."""
    run_dir = work / label
    command = [
        *code.command(),
        *SETTING,
        f"num_clients={clients}",
        f"num_rounds={ROUNDS}",
        f"hydra.run.dir={run_dir}",
    ]
    samplers: list[PeakMemory] = []
    started = time.monotonic()
    run_fl(
        command,
        work / f"{label}.out",
        TIMEOUT,
        code.env(cache),
        on_start=lambda pid: samplers.append(PeakMemory(pid, 0.25)),
    )
    wall = time.monotonic() - started
    phases = {r["phase"]: float(r["seconds"]) for r in read_rows(run_dir / "logs" / "startup.csv")}
    figures = {
        "wall": wall,
        "data checked": phases["data checked"],
        "first round done": phases["first round done"],
        "round": statistics.median(round_seconds(run_dir)),
        "peak GiB": samplers[0].stop() / 2**30,
        "files": len(list(cache.glob("partition-*.npz"))),
    }
    shutil.rmtree(run_dir, ignore_errors=True)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=invocation(STUDY), description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="100,1000,10000")
    parser.add_argument("--before", default="cf2ea19", help="the commit before the pickup")
    parser.add_argument("--out", type=Path, default=report_path(STUDY))
    args = parser.parse_args(argv)
    started = dt.datetime.now().astimezone()
    sizes = [int(c) for c in args.clients.split(",")]
    before = worktree(args.before)
    arms = [Code(f"before ({args.before})", before), Code("after")]
    work = Path(tempfile.mkdtemp(prefix="scale-"))
    results: dict[tuple[int, str, str], dict[str, float]] = {}
    try:
        for clients in sizes:
            for code in arms:
                cache = work / f"cache-{clients}-{code.label.split()[0]}"
                for state in CACHE_STATES:  # the first run fills the cache the second reads
                    label = f"{clients}-{code.label.split()[0]}-{state}"
                    figures = measure(code, clients, work, label, cache)
                    results[clients, code.label, state] = figures
                    print(f"[bench] {clients} clients | {code.label} | {state}: {figures}")
    finally:
        remove_worktree(before)
        shutil.rmtree(work, ignore_errors=True)
    lines = [
        "# Simulation at scale: 100 to 10,000 clients",
        "",
        f"`{invocation(STUDY)} --clients {args.clients} --before {args.before}`, "
        f"{started:%Y-%m-%d %H:%M %Z}; nproc 2, CPU {cpu_model()}. "
        f"`fl-run {' '.join(SETTING)} num_clients=N num_rounds={ROUNDS}`, one run per cell. "
        "wall: start to exit; start-up: fl-run's phases (data checked, first round done); "
        "s per round: the median of rounds 2 on (the last one also evaluates); "
        "peak memory: summed PSS of the run's process tree; "
        "files: the partitions its clients cached (one per client sampled). cache: fresh (empty: "
        "the run generates the dataset) or warm (what the fresh run left).",
        "",
        "| clients | code | cache | wall s | data checked s | first round done s | s per round | "
        "peak memory GiB | partition files |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (clients, label, state), f in results.items():
        lines.append(
            f"| {clients:,} | {label} | {state} | {f['wall']:.1f} | {f['data checked']:.1f} | "
            f"{f['first round done']:.1f} | {f['round']:.2f} | {f['peak GiB']:.2f} | "
            f"{f['files']:.0f} |"
        )
    write_report(args.out, lines + _ratios(results, sizes, arms[1].label))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
