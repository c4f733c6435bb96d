"""Where start-up goes: the default command, a simulation run and a `-m` sweep, timed by phase.

Runs one after the other, never overlapping, for this checkout and (with --before REV) a git
worktree of REV, so that before and after come from one invocation on one machine:

1. the README's default command (`fl-run`, runtime=local, 4 SuperNodes, 5 rounds): once with
   an empty cache (a new machine's first run), then --repeats times with the cache it left;
   each run's phases are read from its logs as they appear (`timeline.py`), and fl-run's last
   line gives "training" and "in all";
2. `runtime=simulation num_clients=10 num_rounds=5`: start-up = the end of round 1 (seconds
   since fl-run started) minus round 2's time;
3. `fl-run -m runtime=simulation seed=0,...,5` (6 members of 5 rounds): the sweep's wall time
   divided by the sum of its members' training time.

    python -m benchmarks.startup.run [--before REV [--before-python PY]] [--after REV]
        [--repeats 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.harness.fl_run import (
    Code,
    add_before_python,
    cpu_model,
    remove_worktree,
    run_fl,
    worktree,
)
from benchmarks.harness.paths import invocation, report_path
from benchmarks.startup.timeline import Timeline, timed_run
from fl_system.records.results import MetricsLog

SIMULATION = ["runtime=simulation", "num_clients=10", "num_rounds=5"]
SWEEP_SEEDS = 6
TIMEOUT = 600


def default_runs(code: Code, work: Path, repeats: int) -> tuple[Timeline, list[Timeline]]:
    """The default command: a cold first run, then `repeats` with a warm cache."""
    cache = work / f"cache-{code.label.split()[0]}"
    runs = []
    for i in range(repeats + 1):
        run_dir = work / f"default-{code.label.split()[0]}-{i}"
        runs.append(
            timed_run(
                [*code.command(), f"hydra.run.dir={run_dir}"],
                run_dir,
                code.env(cache),
                code.root or work,
                work / f"default-{code.label.split()[0]}-{i}.out",
                TIMEOUT,
            )
        )
    return runs[0], runs[1:]


def simulation_startup(code: Code, work: Path) -> dict[str, float]:
    """Seconds to the end of round 1 minus round 2's time, for a warm cache."""
    cache = work / f"cache-{code.label.split()[0]}"
    run_dir = work / f"sim-{code.label.split()[0]}"
    timeline = timed_run(
        [*code.command(), *SIMULATION, f"hydra.run.dir={run_dir}"],
        run_dir,
        code.env(cache),
        code.root or work,
        work / f"sim-{code.label.split()[0]}.out",
        TIMEOUT,
    )
    walls = [float(r["wall_seconds"]) for r in MetricsLog(run_dir / "metrics.csv").rows()]
    round_2 = walls[1] - walls[0]
    return {
        "round 1 done": timeline.phases["round 1 done"],
        "round 2": round_2,
        "start-up": timeline.phases["round 1 done"] - round_2,
        "in all": timeline.in_all,
        "training": timeline.training,
        "process exit": timeline.exited,
    }


def sweep_ratio(code: Code, work: Path) -> dict[str, float]:
    """A 6-member simulation sweep: wall time / the sum of its members' training time."""
    cache = work / f"cache-{code.label.split()[0]}"
    sweep_dir = work / f"sweep-{code.label.split()[0]}"
    seeds = ",".join(str(s) for s in range(SWEEP_SEEDS))
    command = [
        *code.command(), "-m", "runtime=simulation", f"seed={seeds}",
        f"hydra.sweep.dir={sweep_dir}",
    ]  # fmt: skip
    start = time.monotonic()
    run_fl(
        command,
        work / f"sweep-{code.label.split()[0]}.out",
        TIMEOUT * 2,
        code.env(cache),
        cwd=code.root or work,
    )
    wall = time.monotonic() - start
    summaries = sorted(sweep_dir.glob("*/summary.json"))
    training = sum(json.loads(p.read_text())["wall_seconds"] for p in summaries)
    return {"members": len(summaries), "wall": wall, "training": training, "ratio": wall / training}


def measure(code: Code, work: Path, repeats: int) -> dict:
    cold, warm = default_runs(code, work, repeats)
    return {
        "cold": _plain(cold),
        "warm": [_plain(t) for t in warm],
        "simulation": simulation_startup(code, work),
        "sweep": sweep_ratio(code, work),
    }


def _plain(t: Timeline) -> dict:
    return {"phases": t.table_row(), "training": t.training, "in_all": t.in_all, "ratio": t.ratio}


def render(results: dict[str, dict], repeats: int, command: str) -> str:
    labels = list(results)
    warm = {label: results[label]["warm"] for label in labels}
    phases: list[str] = []
    for runs in warm.values():
        for run in runs:
            phases += [p for p in run["phases"] if p not in phases]
    latest = warm[labels[-1]]
    phases.sort(key=lambda p: statistics.median(_phase(latest, p) or [1e9]))
    rows = [[p, *(_median(_phase(warm[label], p)) for label in labels)] for p in phases]
    for key, name in FIGURES:
        rows.append([f"**{name}**", *(_median([r[key] for r in warm[label]]) for label in labels)])
    every = "; ".join(
        f"{label}: " + ", ".join(f"{r['ratio']:.2f}" for r in warm[label]) for label in labels
    )
    cold = "; ".join(
        f"{label}: {c['in_all']:.1f} s in all, {c['training']:.1f} s training "
        f"(ratio {c['ratio']:.2f})"
        for label, c in ((label, results[label]["cold"]) for label in labels)
    )
    sim = [
        [key, *(f"{results[label]['simulation'][key]:.1f}" for label in labels)]
        for key in ("round 1 done", "round 2", "start-up", "training", "in all", "process exit")
    ]
    sweep = [
        [key, *(_num(results[label]["sweep"][key]) for label in labels)]
        for key in ("members", "wall", "training", "ratio")
    ]
    return (
        "\n".join(
            [
                "# Start-up: where the wait goes before training",
                "",
                f"Measured {dt.date.today()} on {cpu_model()} (`{command}`); every figure comes",
                "from this one invocation, runs one after the other. Seconds since fl-run's",
                f"process started; the default command: median of {repeats} runs with a warm",
                "cache (a cold first run below).",
                "",
                "## The default command (`fl-run`: runtime=local, 4 SuperNodes, 5 rounds)",
                "",
                *_table(["phase", *labels], rows),
                "",
                f"Every warm run's in all / training: {every}.",
                "",
                f"Cold first run (empty cache): {cold}.",
                "",
                "## runtime=simulation, 10 clients, 5 rounds",
                "",
                *_table(["seconds", *labels], sim),
                "",
                f"## A {SWEEP_SEEDS}-member sweep (`-m runtime=simulation seed=0..5`)",
                "",
                *_table(["", *labels], sweep),
            ]
        )
        + "\n"
    )


FIGURES = (
    ("training", "training (fl-run's line)"),
    ("in_all", "in all (fl-run's line)"),
    ("ratio", "in all / training"),
)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _phase(runs: list[dict], phase: str) -> list[float]:
    return [run["phases"][phase] for run in runs if phase in run["phases"]]


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


def _num(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=invocation("startup"), description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--before", help="also time this git revision (a worktree of it)")
    add_before_python(parser)
    parser.add_argument("--after", help="time this revision instead of the checkout")
    parser.add_argument("--repeats", type=int, default=3, help="warm runs of the default command")
    parser.add_argument("--out", type=Path, default=report_path("startup"))
    args = parser.parse_args(argv)
    codes = [Code(f"after ({args.after})", worktree(args.after)) if args.after else Code("after")]
    if args.before:
        codes.insert(0, Code(f"before ({args.before})", worktree(args.before), args.before_python))
    results: dict[str, dict] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
            for code in codes:
                results[code.label] = measure(code, Path(tmp), args.repeats)
                print(json.dumps({code.label: results[code.label]}, indent=1), flush=True)
    finally:
        for code in codes:
            if code.root is not None:
                remove_worktree(code.root)
    given = (("before", args.before), ("before-python", args.before_python), ("after", args.after))
    command = "python -m benchmarks.startup.run" + "".join(
        f" --{name} {value}" for name, value in given if value
    )
    args.out.write_text(render(results, args.repeats, command))
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    print(f"report: {args.out}")


if __name__ == "__main__":
    main()
