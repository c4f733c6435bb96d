"""What `tracking=mlflow` costs a run: seconds per round with and without it, on the README's
default command and on a 100-client simulation, and the tracking calls' own time per round.

Each setting runs --repeats times per arm, the arms alternating (untracked, tracked, tracked,
untracked, ...) so that a drift of the machine's speed falls on both; one invocation, one
machine. A round's seconds are the differences of metrics.csv's `wall_seconds` from round 2
on (a round's tracking happens after its row, so it counts in the next round's time; round
1 also holds the first messages' set-up). The end-to-end ratio is as noisy as the machine;
the replay measures the tracking calls alone: the tracked run's own rows logged again
through `TrackedRun` (what the round driver calls: MLflow's log_batch and tracking.json)
into a fresh store, timed per round with the wait for its answer (in a run the tracking
process does this beside the driver, which only hands each round over: it is CPU the rounds
share on a busy machine, not a wait).

    python -m benchmarks.tracking.run [--repeats 4] [--out PATH]
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from omegaconf import OmegaConf, open_dict

from benchmarks.harness.fl_run import cpu_model, run_fl
from benchmarks.harness.paths import invocation, report_path
from benchmarks.harness.round_costs import SETTINGS, TIMEOUT, round_seconds
from fl_system.records.results import read_rows
from fl_system.records.tracking.session import TrackedRun
from fl_system.runtime.launch.processes import tool_env

STUDY = "tracking"


def one_run(overrides: list[str], tracked: bool, work: Path, label: str) -> dict:
    run_dir = work / label
    args = [*overrides, f"hydra.run.dir={run_dir}"]
    if tracked:
        args += ["tracking=mlflow", f"tracking.uri=sqlite:///{work / 'mlflow.db'}"]
    began = time.monotonic()
    run_fl(["fl-run", *args], work / f"{label}.out", TIMEOUT, tool_env(), cwd=work)
    return {
        "in_all": time.monotonic() - began,
        "rounds": round_seconds(run_dir),
        "run_dir": str(run_dir),
    }


def replay(run_dir: Path, work: Path) -> list[float]:
    """The tracked run's rows, logged again through TrackedRun into a fresh store: seconds
    per round of the calls alone."""
    cfg = OmegaConf.load(run_dir / "config.yaml")
    target = work / "replay"
    target.mkdir()
    with open_dict(cfg):
        cfg.tracking.uri = f"sqlite:///{work / 'replay.db'}"
        cfg.run_dir, cfg.resume = str(target), False
    tracked = TrackedRun(cfg, target, say=print)
    spent = []
    for row in read_rows(run_dir / "metrics.csv"):
        began = time.perf_counter()
        tracked.log_round(int(row["round"]), row)
        tracked.flush()  # the calls run in the tracking process: wait for them
        spent.append(time.perf_counter() - began)
    tracked.fail("killed", "replay only")
    return spent


def measure(overrides: list[str], repeats: int, work: Path) -> dict:
    arms: dict[str, list[dict]] = {"untracked": [], "tracked": []}
    for i in range(repeats):
        order = ("untracked", "tracked") if i % 2 == 0 else ("tracked", "untracked")
        for arm in order:
            print(f"  {arm} #{i + 1}", flush=True)
            arms[arm].append(one_run(overrides, arm == "tracked", work, f"{arm}-{i}"))
    calls = replay(Path(arms["tracked"][0]["run_dir"]), work)
    return {"arms": arms, "replay": calls}


def _per_run(runs: list[dict]) -> list[float]:
    """Each run's mean seconds per round (rounds 2..N): rounds of one run share its luck
    (the machine's load, where the SuperNodes' polls fall), so runs are the samples."""
    return [statistics.fmean(run["rounds"]) for run in runs]


def _listed(values: list[float]) -> str:
    return ", ".join(f"{v:.3f}" for v in values)


def render(results: dict[str, dict], repeats: int) -> str:
    lines = [
        "# What tracking=mlflow costs a run",
        "",
        f"`{invocation(STUDY)} --repeats {repeats}`, {dt.date.today()}, {cpu_model()}; "
        "all numbers from this one invocation, arms alternating.",
        "",
        "| setting | s/round untracked | s/round tracked | ratio | in all untracked | "
        "in all tracked | tracking calls per round | share of a round |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, result in results.items():
        plain, tracked = result["arms"]["untracked"], result["arms"]["tracked"]
        runs_plain, runs_tracked = _per_run(plain), _per_run(tracked)
        base, with_tracking = statistics.fmean(runs_plain), statistics.fmean(runs_tracked)
        calls = statistics.median(result["replay"][1:])  # the first holds the first insert
        lines.append(
            f"| {name} | {base:.3f} ± {statistics.stdev(runs_plain):.3f} "
            f"({_listed(runs_plain)}) | {with_tracking:.3f} ± "
            f"{statistics.stdev(runs_tracked):.3f} ({_listed(runs_tracked)}) | "
            f"{with_tracking / base:.3f} | "
            f"{statistics.median(r['in_all'] for r in plain):.1f} s | "
            f"{statistics.median(r['in_all'] for r in tracked):.1f} s | "
            f"{calls * 1000:.1f} ms | {100 * calls / base:.2f} % |"
        )
    lines += [
        "",
        "s/round: each run's mean of metrics.csv's wall_seconds differences over rounds "
        "2..N (in brackets, in the order run), their mean ± std over the runs of an arm; "
        "ratio: tracked over untracked. Tracking calls: the "
        "median over rounds 2..N of `TrackedRun.log_round` and its flush "
        "(MLflow's log_batch into a SQLite store, then tracking.json) replaying the tracked "
        "run's rows; share of a round: that over the untracked s/round, the CPU time the "
        "calls take in the tracking process, beside the round driver. In all: fl-run's "
        "process from start to exit, start-up included (the tracking process starts beside "
        "the driver's own start; the run's end waits for its last calls).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog=invocation(STUDY), description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--out", type=Path, default=report_path(STUDY))
    args = parser.parse_args()
    results = {}
    tmp = Path(tempfile.mkdtemp(prefix="bench-tracking-"))  # kept if a run fails: its logs
    for i, (name, overrides) in enumerate(SETTINGS.items()):
        print(name, flush=True)
        work = tmp / f"setting-{i}"
        work.mkdir()
        results[name] = measure(overrides, args.repeats, work)
    shutil.rmtree(tmp)
    args.out.write_text(render(results, args.repeats))
    print(f"report: {args.out}")


if __name__ == "__main__":
    main()
