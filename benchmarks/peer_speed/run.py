"""The project's simulation against pfl-research and a plain PyTorch loop, alternating.

    python -m benchmarks.peer_speed.run [--reps 3] [--workloads mnist5k-cnn,synthetic-1k]

The project runs twice: its default backend (forked ClientApp workers) and
runtime.backend=vectorized (a round's clients in lockstep in one process, one thread).

Every workload is exported once (the project's partitions, initial model and sampled
clients), each arm is run once untimed (caches, page cache), then `--reps` repetitions run
the three arms one after another in a rotating order. The report gives each arm's median.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.harness.paths import report_path
from benchmarks.peer_speed.arms import (
    Measured,
    Runner,
    loop_arm,
    peer_venv,
    pfl_arm,
    project_arm,
    run_in_scratch,
)
from benchmarks.peer_speed.report import VECTORIZED, saved_when, write_report
from benchmarks.peer_speed.workload import WORKLOADS, export

STUDY = "peer_speed"


def arms(name: str, folder: Path, cache: Path, venv: Path) -> dict[str, Runner]:
    workload = WORKLOADS[name]
    exported = export(workload, folder / name)
    return {
        "plain loop": loop_arm(exported),
        "pfl-research": pfl_arm(exported, venv),
        "project (default)": project_arm(workload, cache, [], "project (default)"),
        VECTORIZED: project_arm(workload, cache, ["runtime.backend=vectorized"], VECTORIZED),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument(
        "--venv", type=Path, default=Path(tempfile.gettempdir()) / "fl-peer-speed-pfl",
        help="pfl-research's venv (made if missing)",
    )  # fmt: skip
    parser.add_argument("--notes", action="store_true", help="append notes.md to the report")
    parser.add_argument(
        "--render-only", action="store_true", help="write the report from runs.json again"
    )
    args = parser.parse_args()
    out = report_path(STUDY)
    notes = out.with_name("notes.md") if args.notes else None
    if args.render_only:
        saved = json.loads(out.with_name("runs.json").read_text())
        results = {name: [Measured(**m) for m in runs] for name, runs in saved.items()}
        write_report(out, results, saved_when(out), notes)
        return
    venv = peer_venv(args.venv)
    results: dict[str, list[Measured]] = {}
    with tempfile.TemporaryDirectory(prefix="peer-speed-") as tmp:
        folder, cache = Path(tmp), Path(tmp) / "cache"
        for name in args.workloads.split(","):
            runners = arms(name, folder, cache, venv)
            for arm, runner in runners.items():  # untimed: caches filled, code paged in
                print(f"[peer_speed] {name}: warm-up {arm}", flush=True)
                run_in_scratch(runner)
            order = list(runners)
            for rep in range(args.reps):
                for arm in order[rep % len(order) :] + order[: rep % len(order)]:
                    m = run_in_scratch(runners[arm])
                    print(
                        f"[peer_speed] {name} rep {rep + 1}: {arm}: {m.per_round:.3f} s/round, "
                        f"{m.cpu_per_round:.3f} CPU s/round, {m.launch_to_exit:.1f} s in all, "
                        f"accuracy {m.accuracies[-1]:.3f}, load {m.load[0]:.2f}",
                        flush=True,
                    )
                    results.setdefault(name, []).append(m)
    out.with_name("runs.json").write_text(
        json.dumps({k: [asdict(m) for m in v] for k, v in results.items()}, indent=1)
    )
    write_report(out, results, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), notes)
    print(f"[peer_speed] report: {out}")


if __name__ == "__main__":
    main()
