"""The virtual-clock study's report: time to target accuracy per network and under a deadline,
TACO's per-round time on the clock, and accuracy against virtual time."""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness.outcome import RunOutcome
from benchmarks.harness.plots import Curve, Panel, write_curves
from benchmarks.harness.reproduce import Started
from benchmarks.harness.seeds import mean_std, pct, reached_cell
from benchmarks.harness.tables import machine_line, report_text
from benchmarks.virtual_clock.arms import (
    DEADLINE_ARMS,
    DEADLINE_COMMON,
    NETWORK_ARMS,
    NETWORK_COMMON,
    NETWORKS,
    TACO_TABLE_V,
    TACO_TIMING_ROUNDS,
)
from fl_system.records.results import virtual_summary

COLORS = ("black", "tab:blue", "tab:purple", "tab:green", "tab:orange", "tab:red")


def _of(outcomes: Sequence[RunOutcome], setting: str, arm: str) -> list[RunOutcome]:
    return [o for o in outcomes if o.spec.setting == setting and o.spec.arm == arm]


def time_to(o: RunOutcome, target: float) -> float | None:
    """The virtual clock when the run first reached `target` (None: never)."""
    return virtual_summary(o.rows, target)["virtual_seconds_to_target"]


def per_round(o: RunOutcome) -> float:
    return statistics.fmean(float(r["virtual_seconds"]) for r in o.rows)


def final(o: RunOutcome) -> float:
    """Mean of the last three evaluations."""
    return statistics.fmean(o.accuracies[-3:])


def _column_mean(o: RunOutcome, column: str) -> float:
    return statistics.fmean(float(r.get(column) or 0) for r in o.rows)


def _seconds(values: Sequence[float | None]) -> str:
    """Mean ± std over the seeds that reached it, and how many did."""
    return reached_cell(values, ",.0f")


def _mean_time(runs: Sequence[RunOutcome], target: float) -> float | None:
    """Mean virtual time to target over seeds; None unless every seed reached it."""
    times = [time_to(o, target) for o in runs]
    return None if any(t is None for t in times) else statistics.fmean(times)  # type: ignore[arg-type]


def network_section(args: argparse.Namespace, outcomes: Sequence[RunOutcome]) -> list[str]:
    targets = args.targets
    lines = [
        "## (a) Compression against time to accuracy, three networks",
        "",
        f"`fl-run {' '.join(NETWORK_COMMON)}` + the arm + the network's settings, {args.rounds} "
        f"rounds, seeds {', '.join(map(str, args.seeds))}. Codec q both ways (the compression "
        "study's arms). Virtual time to a target: the virtual clock at the first evaluation at "
        "or above it (s, mean ± std over seeds). Final: mean of the last 3 evaluations.",
    ]
    for network, (title, _) in NETWORKS.items():
        setting = f"networks {network}"
        head = "| arm | final (%) | virtual s per round | "
        head += " | ".join(f"to {100 * t:g} % (s)" for t in targets) + " |"
        lines += ["", f"### {title}", "", head, "|---" * (3 + len(targets)) + "|"]
        for _, _, label in NETWORK_ARMS:
            runs = _of(outcomes, setting, label)
            times = " | ".join(_seconds([time_to(o, t) for o in runs]) for t in targets)
            rate = mean_std([per_round(o) for o in runs])
            lines.append(f"| {label} | {pct([final(o) for o in runs])} | {rate[0]:.2f} | {times} |")
    lines += ["", "### Fastest to each target, and the crossover", ""]
    lines += crossover_lines(args, outcomes)
    return lines


def crossover_lines(args: argparse.Namespace, outcomes: Sequence[RunOutcome]) -> list[str]:
    """Per target and network: which arm gets there first; per compressed arm, its time
    against dense FedAvg's (> 1: faster than dense) and the rounds it needs against dense."""
    out = []
    dense = NETWORK_ARMS[0][2]
    for target in args.targets:
        for network in NETWORKS:
            setting = f"networks {network}"
            times = {
                label: _mean_time(_of(outcomes, setting, label), target)
                for *_, label in NETWORK_ARMS
            }
            reached = {k: v for k, v in times.items() if v is not None}
            if not reached:
                out.append(f"- {100 * target:g} %, {network}: no arm reached it in every seed")
                continue
            best = min(reached, key=lambda k: reached[k])
            against = []
            for *_, label in NETWORK_ARMS[1:]:
                if times[label] is None or times[dense] is None:
                    against.append(f"{label}: n/a")
                    continue
                rounds = _rounds_ratio(outcomes, setting, label, dense, target)
                against.append(
                    f"{label}: {times[dense] / times[label]:.2f}x dense's speed "
                    f"({rounds:.2f}x its rounds)"
                )
            out.append(f"- {100 * target:g} %, {network}: fastest {best}; " + "; ".join(against))
    return out


def _rounds_ratio(
    outcomes: Sequence[RunOutcome], setting: str, arm: str, dense: str, target: float
) -> float:
    a = statistics.fmean(o.rounds_to(target) or 0 for o in _of(outcomes, setting, arm))
    d = statistics.fmean(o.rounds_to(target) or 0 for o in _of(outcomes, setting, dense))
    return a / d


def deadline_section(args: argparse.Namespace, outcomes: Sequence[RunOutcome]) -> list[str]:
    targets = args.targets
    head = "| arm | final (%) | replies used per round | sent nothing | ran part of E | "
    head += "virtual s per round | " + " | ".join(f"to {100 * t:g} % (s)" for t in targets) + " |"
    lines = [
        "## (b) A round deadline on phones that differ",
        "",
        f"`fl-run {' '.join(DEADLINE_COMMON)}` + the algorithm, deadline "
        f"`system.round_deadline={args.deadline}` (virtual s) where the arm says so, "
        f"{args.rounds} rounds, seeds {', '.join(map(str, args.seeds))}, E = 50 steps. Per "
        "round, means: replies aggregated, clients sent nothing (not even one step fits), "
        "clients that ran only the steps that fit.",
        "",
        head,
        "|---" * (6 + len(targets)) + "|",
    ]
    for label, _, _ in DEADLINE_ARMS:
        runs = _of(outcomes, "deadline", label)
        used = statistics.fmean(_column_mean(o, "participants") for o in runs)
        dropped = statistics.fmean(_column_mean(o, "deadline_dropped") for o in runs)
        partial = statistics.fmean(_column_mean(o, "deadline_partial") for o in runs)
        times = " | ".join(_seconds([time_to(o, t) for o in runs]) for t in targets)
        rate = statistics.fmean(per_round(o) for o in runs)
        lines.append(
            f"| {label} | {pct([final(o) for o in runs])} | {used:.1f} | {dropped:.1f} | "
            f"{partial:.1f} | {rate:.2f} | {times} |"
        )
    return lines


def taco_section(outcomes: Sequence[RunOutcome]) -> list[str]:
    lines = [
        "## (c) TACO's Table V time column on the virtual clock",
        "",
        "TACO's setting (benchmarks/taco_reproduction: 20 clients, all every round, K = 100 "
        f"steps of batch 64), seed 0, {TACO_TIMING_ROUNDS} rounds, `system=mobile`. Every "
        "client trains every round with the same steps and bytes, so a method's virtual "
        "seconds per round are the same each round. Beside them: this machine's slowest "
        "client's local training seconds per round (`compute_seconds_max`, median of rounds "
        "2.., what TACO's report multiplies by rounds to the target), and the bytes a round "
        "moves.",
        "",
        "| method | virtual s per round | vs FedAvg | slowest client's s per round here | vs "
        "FedAvg | MB per round (up + down) |",
        "|---|---|---|---|---|---|",
    ]
    base = _of(outcomes, "taco", "FedAvg")
    if not base:
        return []
    v0, c0 = per_round(base[0]), _compute(base[0])
    for arm in TACO_TABLE_V:
        runs = _of(outcomes, "taco", arm)
        if not runs:
            continue
        o = runs[0]
        mb = statistics.fmean(
            (float(r["bytes_up"]) + float(r["bytes_down"])) / 1e6 for r in o.rows[1:]
        )
        lines.append(
            f"| {arm} | {per_round(o):.1f} | {per_round(o) / v0 - 1:+.1%} | {_compute(o):.2f} | "
            f"{_compute(o) / c0 - 1:+.1%} | {mb:.2f} |"
        )
    return lines


def _compute(o: RunOutcome) -> float:
    return statistics.median(float(r["compute_seconds_max"]) for r in o.rows[1:])


def write_plot(outcomes: Sequence[RunOutcome], path: Path) -> None:
    """Accuracy against virtual time: one panel per network, one for the deadline."""
    groups = [(f"networks {n}", t, [a[2] for a in NETWORK_ARMS]) for n, (t, _) in NETWORKS.items()]
    groups.append(("deadline", "deadline on phones", [a[0] for a in DEADLINE_ARMS]))
    panels = [
        Panel(
            title,
            [
                Curve(arm, _of(outcomes, setting, arm), color)
                for color, arm in zip(COLORS, arms, strict=False)
            ],
            x_column="virtual_clock",
            x_label="virtual minutes",
            x_scale=60.0,
        )
        for setting, title, arms in groups
        if any(o.spec.setting == setting for o in outcomes)
    ]
    write_curves(panels, path)


def render(args: argparse.Namespace, outcomes: list[RunOutcome], plot: Path, at: Started) -> str:
    header = [
        "# The virtual clock: time to accuracy on devices and networks that differ",
        "",
        f"`python -m benchmarks.virtual_clock.run {' '.join(sys.argv[1:])}`".replace(" `", "`")
        + (" (from the saved runs)" if args.render_only else "")
        + f", {at.at:%Y-%m-%d %H:%M %Z}, {len(outcomes)} runs. Virtual times are the "
        "clock's (deterministic: bytes, steps and each client's drawn profile), not this "
        "machine's.",
        "",
        machine_line(at.load),
    ]
    write_plot(outcomes, plot)
    sections = [header]
    if "networks" in args.groups:
        sections.append(network_section(args, outcomes))
    if "deadline" in args.groups:
        sections.append(deadline_section(args, outcomes))
    if "taco" in args.groups:
        sections.append(taco_section(outcomes))
    sections.append([f"![accuracy against virtual time]({plot.name})"])
    return report_text(sections, args.notes)
