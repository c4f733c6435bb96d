"""What the virtual clock costs a run: seconds per round before it existed, with it off
(system=none, the default) and with it on (system=profiles).

Each setting runs --repeats times per arm, the arms in a rotating order (so that a drift of
the machine's speed falls on all of them); one invocation, one machine. "before" is a
worktree of --before (the commit before the clock), run with that commit's code. A round's
seconds are the differences of metrics.csv's `wall_seconds` from round 2 on; a run's figure is
their median, an arm's the mean over its repeats.

    python -m benchmarks.clock_overhead.run [--repeats 4] [--before REV] [--out PATH]
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import tempfile
from pathlib import Path

from benchmarks.harness.fl_run import Code, cpu_model, remove_worktree, run_fl, worktree
from benchmarks.harness.paths import invocation, report_path, write_report
from benchmarks.harness.round_costs import SETTINGS, TIMEOUT, round_seconds

STUDY = "clock_overhead"


def median_round(run_dir: Path) -> float:
    return statistics.median(round_seconds(run_dir))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=invocation(STUDY), description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--before", default="ff7ee02", help="the commit before the clock")
    parser.add_argument("--out", type=Path, default=report_path(STUDY))
    args = parser.parse_args(argv)
    started = dt.datetime.now().astimezone()
    before = worktree(args.before)
    arms = {
        f"before ({args.before})": (Code("before", before), []),
        "system=none (default)": (Code("after"), []),
        "system=profiles": (Code("after"), ["system=profiles"]),
    }
    work = Path(tempfile.mkdtemp(prefix="clock-overhead-"))
    seconds: dict[tuple[str, str], list[float]] = {}
    try:
        for setting, overrides in SETTINGS.items():
            names = list(arms)
            for repeat in range(args.repeats):
                for name in names[repeat % 3 :] + names[: repeat % 3]:
                    code, extra = arms[name]
                    label = f"{len(seconds)}-{repeat}"
                    run_dir = work / label
                    command = [*code.command(), *overrides, *extra, f"hydra.run.dir={run_dir}"]
                    run_fl(command, work / f"{label}.out", TIMEOUT, code.env(work / "cache"))
                    seconds.setdefault((setting, name), []).append(median_round(run_dir))
                    shutil.rmtree(run_dir, ignore_errors=True)
                    print(f"[bench] {setting} | {name}: {seconds[setting, name][-1]:.3f} s")
    finally:
        remove_worktree(before)
        shutil.rmtree(work, ignore_errors=True)
    lines = [
        "# The virtual clock's cost per round",
        "",
        f"`python -m benchmarks.clock_overhead.run --repeats {args.repeats} --before "
        f"{args.before}`, {started:%Y-%m-%d %H:%M %Z}; nproc 2, CPU {cpu_model()}. A run's "
        "figure: the median of its rounds' seconds (round 2 on); mean ± std over repeats; "
        "ratio = the arm's mean / before's.",
    ]
    for setting in SETTINGS:
        base = statistics.fmean(seconds[setting, next(iter(arms))])
        lines += [
            "",
            f"## {setting}",
            "",
            "| arm | s per round | ratio | runs |",
            "|---|---|---|---|",
        ]
        for name in arms:
            values = seconds[setting, name]
            mean = statistics.fmean(values)
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            runs = ", ".join(f"{v:.3f}" for v in values)
            lines.append(f"| {name} | {mean:.3f} ± {std:.3f} | {mean / base:.3f} | {runs} |")
    write_report(args.out, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
