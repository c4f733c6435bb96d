"""peer_speed's report: each arm's medians, its ratios to the loop and to pfl, the goals."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.harness.tables import report_text
from benchmarks.peer_speed.arms import Measured
from benchmarks.peer_speed.workload import WORKLOADS

LOOP, PFL, PROJECT = "plain loop", "pfl-research", "project (default)"
VECTORIZED = "project (vectorized)"
CPU_GOAL = 1.2  # project CPU s/round at most this x the loop's and x pfl's
WALL_GOAL = 1.3  # project wall s/round (default settings) at most this x the loop's
STARTUP_GOAL = 3.0  # seconds from launch to the first round
# backend=vectorized's wall s/round at most this x the loop's, by clients a round (the
# smallest cohort given that reaches it; below 50 it only has to keep up with the loop)
VECTORIZED_GOALS = {100: 0.45, 50: 1.0, 10: 1.0}
SYNTHETIC_GOAL = 0.5  # on 1,000 Synthetic clients, 100 a round


def _median(runs: Sequence[Measured], value: Callable[[Measured], float]) -> float:
    return statistics.median(value(m) for m in runs)


def _reps(runs: list[Measured]) -> int:
    """The repetitions of one workload: its plain loop's runs."""
    return sum(m.arm == LOOP for m in runs)


def _workload_section(name: str, runs: list[Measured]) -> list[str]:
    by_arm: dict[str, list[Measured]] = {}
    for m in runs:
        by_arm.setdefault(m.arm, []).append(m)
    loop_wall = _median(by_arm[LOOP], lambda m: m.per_round)
    loop_cpu = _median(by_arm[LOOP], lambda m: m.cpu_per_round)
    pfl_cpu = _median(by_arm[PFL], lambda m: m.cpu_per_round)
    w = WORKLOADS[name]
    lines = [
        f"## {name}: {w.dataset}, {w.model}, {w.partition}, {w.num_clients} clients, "
        f"{w.clients_per_round} a round, {w.num_rounds} rounds",
        "",
        f"FedAvg, {w.local_epochs} local epoch of batch {w.batch_size}, SGD lr {w.lr}, central "
        f"evaluation every round, seed {w.seed}. Median of {_reps(runs)} repetitions per arm.",
        "",
        "| arm | s/round | x loop | CPU s/round | x loop | x pfl | launch to exit s | "
        "start-up s | final accuracy | peak PSS GiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, ms in by_arm.items():
        wall = _median(ms, lambda m: m.per_round)
        cpu = _median(ms, lambda m: m.cpu_per_round)
        pss = _median(ms, lambda m: m.peak_pss) / 2**30
        lines.append(
            f"| {arm} | {wall:.3f} | {wall / loop_wall:.2f} | {cpu:.3f} | {cpu / loop_cpu:.2f} "
            f"| {cpu / pfl_cpu:.2f} | {_median(ms, lambda m: m.launch_to_exit):.1f} "
            f"| {_median(ms, lambda m: m.startup):.2f} "
            f"| {', '.join(f'{m.accuracies[-1]:.3f}' for m in ms)} "
            f"| {f'{pss:.2f}' if pss else '-'} |"
        )
    lines += ["", "Every run (s/round, CPU s/round, 1-minute load before and after):", ""]
    lines += [
        f"- {m.arm}: {m.per_round:.3f}, {m.cpu_per_round:.3f}, load {m.load[0]:.2f} -> "
        f"{m.load[1]:.2f}"
        for m in runs
    ]
    project = by_arm[PROJECT]
    cpu = _median(project, lambda m: m.cpu_per_round)
    wall = _median(project, lambda m: m.per_round)
    startup = _median(project, lambda m: m.startup)
    lines += [
        "",
        "Goals:",
        "",
        _goal(f"CPU s/round <= {CPU_GOAL}x the loop", cpu / loop_cpu, CPU_GOAL),
        _goal(f"CPU s/round <= {CPU_GOAL}x pfl-research", cpu / pfl_cpu, CPU_GOAL),
        _goal(f"wall s/round (default) <= {WALL_GOAL}x the loop", wall / loop_wall, WALL_GOAL),
        _goal(f"start-up to the first round <= {STARTUP_GOAL} s", startup, STARTUP_GOAL, "s"),
    ]
    if VECTORIZED in by_arm:
        vectorized = _median(by_arm[VECTORIZED], lambda m: m.per_round) / loop_wall
        goal = _vectorized_goal(w.dataset, w.clients_per_round)
        lines.append(_goal(f"vectorized wall s/round <= {goal}x the loop", vectorized, goal))
    return lines


def _vectorized_goal(dataset: str, per_round: int) -> float:
    if dataset == "synthetic":
        return SYNTHETIC_GOAL
    return next(g for size, g in VECTORIZED_GOALS.items() if per_round >= size)


def _goal(what: str, value: float, goal: float, unit: str = "x") -> str:
    return f"- {what}: {value:.2f}{unit} ({'met' if value <= goal else 'not met'})"


def saved_when(out: Path) -> str:
    """The time the report at `out` gives for its invocation (kept when it is rendered again)."""
    head = out.read_text().split("\n")[2]
    return head.split("`, ", 1)[1].split(";", 1)[0]


def write_report(
    out: Path, results: dict[str, list[Measured]], when: str, notes: Path | None
) -> None:
    reps = _reps(next(iter(results.values())))
    head = [
        "# Simulated rounds against pfl-research and a plain PyTorch loop",
        "",
        f"`python -m benchmarks.peer_speed.run --reps {reps}`, {when}; every figure from this "
        "one invocation, the arms alternating. s/round and CPU s/round: rounds 2..N (the "
        "CPU of the arm's whole process tree); start-up: launch to round 1's row less one "
        "median round. The loop and pfl-research run one thread; the project runs with no "
        "thread settings (its defaults).",
    ]
    sections = [head, *(_workload_section(n, r) for n, r in results.items())]
    out.write_text(report_text(sections, notes))
