"""The secure-aggregation study's report: per runtime and n, seconds and bytes per round with
and without SecAgg+, the protocol's own exchanges, the ratio, and accuracy."""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness.outcome import RunOutcome
from benchmarks.harness.reproduce import Started
from benchmarks.harness.tables import machine_line, report_text

STAGES = ("secagg_setup", "secagg_keys", "secagg_unmask")
PLAIN = "FedAvg"  # the arm every secure one is set against


def _of(outcomes: Sequence[RunOutcome], runtime: str, arm: str, n: int) -> RunOutcome | None:
    for o in outcomes:
        if o.spec.setting == runtime and o.spec.arm == arm and dict(o.spec.extra)["clients"] == n:
            return o
    return None


def _per_round(o: RunOutcome, column: str) -> float:
    """The mean over rounds 2.. of a column (round 1 carries the warm-up and handshakes)."""
    return statistics.fmean(float(r.get(column) or 0) for r in o.rows[1:])


def _mb(o: RunOutcome) -> float:
    return (_per_round(o, "bytes_up") + _per_round(o, "bytes_down")) / 1e6


def runtime_section(
    outcomes: Sequence[RunOutcome], runtime: str, clients: list[int], arms: Sequence[str]
) -> list[str]:
    """One row per n and secure arm, each against plain FedAvg (`arms[0]`) at that n."""
    lines = [
        f"## runtime={runtime}",
        "",
        "| clients | arm | FedAvg s/round | SecAgg+ s/round | ratio | FedAvg MB/round | SecAgg+ "
        "MB/round | ratio | protocol MB/round (setup, keys, unmask) | protocol s/round | "
        "final acc FedAvg / SecAgg+ | error bound |",
        "|---" * 12 + "|",
    ]
    for n in clients:
        plain = _of(outcomes, runtime, arms[0], n)
        for arm in arms[1:]:
            secure = _of(outcomes, runtime, arm, n)
            if plain is None or secure is None:
                continue
            protocol_mb = (
                sum(
                    _per_round(secure, f"bytes_{way}_{s}") for s in STAGES for way in ("up", "down")
                )
                / 1e6
            )
            protocol_s = sum(_per_round(secure, f"seconds_{s}") for s in STAGES)
            bound = max(float(r["secagg_error_bound"]) for r in secure.rows)
            lines.append(
                f"| {n} | {arm} | {plain.seconds_per_round:.3f} | "
                f"{secure.seconds_per_round:.3f} | "
                f"{secure.seconds_per_round / plain.seconds_per_round:.2f}x | {_mb(plain):.2f} | "
                f"{_mb(secure):.2f} | {_mb(secure) / _mb(plain):.2f}x | {protocol_mb:.3f} | "
                f"{protocol_s:.3f} | {100 * plain.accuracies[-1]:.2f} / "
                f"{100 * secure.accuracies[-1]:.2f} | {bound:.1e} |"
            )
    return lines


def write_plot(
    args: argparse.Namespace, outcomes: Sequence[RunOutcome], arms: Sequence[str], path: Path
) -> None:
    """Seconds and MB per round against the number of clients, per runtime and arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    try:
        for runtime, style in zip(args.runtimes, ("-", "--"), strict=False):
            for arm, color in zip(arms, ("black", "tab:blue", "tab:orange"), strict=False):
                runs = [(n, _of(outcomes, runtime, arm, n)) for n in args.clients]
                runs = [(n, o) for n, o in runs if o is not None]
                label = f"{arm}, runtime={runtime}"
                xs = [n for n, _ in runs]
                axes[0].plot(
                    xs,
                    [o.seconds_per_round for _, o in runs],
                    style,
                    color=color,
                    label=label,
                    marker="o",
                )
                axes[1].plot(
                    xs, [_mb(o) for _, o in runs], style, color=color, label=label, marker="o"
                )
        for ax, what in zip(axes, ("seconds per round", "MB per round (up + down)"), strict=True):
            ax.set_xlabel("clients (all train every round)")
            ax.set_ylabel(what)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.grid(True, alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)


def render(args: argparse.Namespace, outcomes: list[RunOutcome], plot: Path, at: Started) -> str:
    header = [
        "# What secure aggregation costs a round",
        "",
        f"`python -m benchmarks.secagg.run {' '.join(sys.argv[1:])}`".replace(" `", "`")
        + (" (from the saved runs)" if args.render_only else "")
        + f", {at.at:%Y-%m-%d %H:%M %Z}, {len(outcomes)} runs.",
        "",
        "`fl-run dataset=digits model=mlp train.local_steps=5 partition=iid` with every client "
        f"every round, {args.rounds} rounds, seed {args.seeds[0]}; SecAgg+ with its defaults "
        "(`reconstruction_threshold=0.5`, clipping range 8, 2^22 levels), every client a "
        "neighbour of every other (`num_shares=1.0`) or 7 shares (`secagg.num_shares=7`: each "
        "client and 6 neighbours, SecAgg+'s sparse graph). "
        "Seconds and MB per round: means over rounds 2.. (round 1 carries the warm-up and the "
        "handshakes); seconds are this machine's wall time per round inside the run. "
        "Protocol: the setup, key-sharing and unmasking exchanges (the masked training "
        "upload is in the rest). Error bound: the largest secagg_error_bound of the run's "
        "rounds (each coordinate of a round's average within it of plain FedAvg's).",
        "",
        machine_line(at.load),
    ]
    arms = [PLAIN, *(a for a in dict.fromkeys(o.spec.arm for o in outcomes) if a != PLAIN)]
    write_plot(args, outcomes, arms, plot)
    sections = [header] + [runtime_section(outcomes, r, args.clients, arms) for r in args.runtimes]
    sections.append([f"![seconds and MB per round against clients]({plot.name})"])
    return report_text(sections, args.notes)
