"""The asynchrony study's report: per setting, each arm's virtual seconds, bytes and client
updates to each target accuracy, its speed against synchronous FedAvg, the papers' own
claims beside ours, and accuracy against virtual time."""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness.outcome import RunOutcome
from benchmarks.harness.plots import Curve, Panel, write_curves
from benchmarks.harness.reproduce import Started
from benchmarks.harness.seeds import pct, reached_cell
from benchmarks.harness.tables import machine_line, report_text

from .arms import ARMS, COMMON, DEADLINE, EVAL_UPDATES, PER_ROUND, SETTINGS

COLORS = ("black", "tab:orange", "tab:blue", "tab:green")
SYNC = "FedAvg (sync)"
CLAIMS = [
    "## The papers' claims beside ours",
    "",
    "- FedBuff (Nguyen et al., AISTATS 2022, abstract): 3.3x more efficient than synchronous "
    "FL and up to 2.5x more efficient than asynchronous FL (FedAsync); its arXiv abstract: up "
    "to 3.8x faster than synchronous FedAvgM, up to 2.5x faster than FedAsync. Its point is "
    "scale: synchronous FL stops scaling beyond a few hundred clients training in parallel; "
    "here 20 of 100 train at once.",
    "- FedAsync (Xie, Koyejo and Gupta 2019, abstract): near-linear convergence to a global "
    "optimum, and empirically fast convergence that tolerates staleness; no speed-up figure "
    "against synchronous training to set beside ours.",
    "- FedScale (Lai et al., ICML 2022) runs asynchronous aggregation in its own engine (its "
    "repository's examples/async_fl buffers updates as FedBuff does); we found no published "
    "FedBuff-against-synchronous figure of theirs to quote.",
    "- For scale, PAPAYA (Huba et al., MLSys 2022, abstract), the production system FedBuff "
    "runs in: across nearly a hundred million devices, in high-concurrency settings, "
    "asynchronous FL converged 5x faster than synchronous FL with nearly 8x less "
    "communication; our 100 simulated phones show the direction, not that scale.",
]


def _of(outcomes: Sequence[RunOutcome], setting: str, arm: str) -> list[RunOutcome]:
    return [o for o in outcomes if o.spec.setting == setting and o.spec.arm == arm]


def _reached(o: RunOutcome, target: float) -> tuple[float, float, int] | None:
    """(virtual s, MB up and down, client updates applied) when `o` first evaluated at or
    above `target` (None: never)."""
    megabytes, applied = 0.0, 0
    for row in o.rows:
        megabytes += (float(row["bytes_up"]) + float(row["bytes_down"])) / 1e6
        applied += int(row["participants"])
        accuracy = row.get("test_accuracy")
        if accuracy and float(accuracy) >= target:
            return float(row["virtual_clock"]), megabytes, applied
    return None


def _mean_time(runs: Sequence[RunOutcome], target: float) -> float | None:
    """Mean virtual seconds to `target`; None unless every seed reached it."""
    times = [_reached(o, target) for o in runs]
    if not runs or any(t is None for t in times):
        return None
    return statistics.fmean(t[0] for t in times if t is not None)


def setting_section(
    args: argparse.Namespace, outcomes: Sequence[RunOutcome], setting: str
) -> list[str]:
    title, overrides = SETTINGS[setting]
    middle = args.targets[len(args.targets) // 2]
    to = " | ".join(f"to {100 * t:g} % (virtual s)" for t in args.targets)
    head = f"| arm | final (%) | {to}"
    head += f" | MB to {100 * middle:g} % | updates applied to {100 * middle:g} % | vs sync |"
    lines = [
        f"## {title}",
        "",
        f"`{' '.join(overrides)}`",
        "",
        head,
        "|---" * (5 + len(args.targets)) + "|",
    ]
    sync_time = _mean_time(_of(outcomes, setting, SYNC), middle)
    for arm in ARMS:
        runs = _of(outcomes, setting, arm)
        if not runs:
            continue
        reached = [_reached(o, middle) for o in runs]
        times = " | ".join(
            reached_cell([(r[0] if r else None) for r in (_reached(o, t) for o in runs)], ",.1f")
            for t in args.targets
        )
        final = pct([statistics.fmean(o.accuracies[-3:]) for o in runs])
        time = _mean_time(runs, middle)
        speed = f"{sync_time / time:.2f}x" if sync_time and time else "n/a"
        megabytes = reached_cell([r[1] if r else None for r in reached], ",.1f")
        applied = reached_cell([r[2] if r else None for r in reached], ",.0f")
        lines.append(f"| {arm} | {final} | {times} | {megabytes} | {applied} | {speed} |")
    return lines


def write_plot(args: argparse.Namespace, outcomes: Sequence[RunOutcome], path: Path) -> None:
    panels = [
        Panel(
            SETTINGS[setting][0].split(" (")[0],
            [
                Curve(arm, _of(outcomes, setting, arm), color)
                for color, arm in zip(COLORS, ARMS, strict=True)
                if _of(outcomes, setting, arm)
            ],
            target=args.targets[len(args.targets) // 2],
            x_column="virtual_clock",
            x_label="virtual seconds",
        )
        for setting in args.settings
    ]
    write_curves(panels, path)


def render(args: argparse.Namespace, outcomes: list[RunOutcome], plot: Path, at: Started) -> str:
    header = [
        "# Asynchronous against synchronous training on the virtual clock",
        "",
        f"`python -m benchmarks.async.run {' '.join(sys.argv[1:])}`".replace(" `", "`")
        + (" (from the saved runs)" if args.render_only else "")
        + f", {at.at:%Y-%m-%d %H:%M %Z}, {len(outcomes)} runs, seeds "
        f"{', '.join(map(str, args.seeds))}.",
        "",
        f"`fl-run {' '.join(COMMON)}` + the setting + the arm. Every arm sends "
        f"{args.rounds * PER_ROUND} client tasks (FedAvg: {PER_ROUND} a round, {args.rounds} "
        "rounds; FedBuff: 20 in flight, a step every 10 updates; FedAsync: 20 in flight, a "
        "step per update; the deadline arm: "
        f"`system.round_deadline={DEADLINE}`) and is evaluated every {EVAL_UPDATES} tasks. "
        "Virtual seconds are the clock's (each client's drawn device and link, the "
        "messages' bytes, its sessions), the same on any machine; a cell is the mean ± std "
        "over the seeds that reached the target. MB: bytes up and down until then; updates "
        "applied: replies that went into the model (a deadline's drops, tasks lost offline "
        "and updates too stale are not); vs sync: synchronous FedAvg's mean virtual time to "
        "the middle target over the arm's.",
        "",
        machine_line(at.load),
    ]
    write_plot(args, outcomes, plot)
    sections = [header]
    sections += [setting_section(args, outcomes, s) for s in args.settings]
    sections.append(CLAIMS)
    sections.append([f"![accuracy against virtual time]({plot.name})"])
    return report_text(sections, args.notes)
