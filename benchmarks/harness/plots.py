"""Plots: test accuracy against round, mean ± std over seeds, one panel per setting."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.outcome import RunOutcome
from fl_system.seed_stats import seed_band


@dataclass(frozen=True)
class Curve:
    """One line of a panel: the mean over seeds of some runs, with a ± 1 std band."""

    label: str
    runs: list[RunOutcome]
    color: str
    dashed: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    curves: Sequence[Curve]
    target: float | None = None  # a dotted horizontal line (accuracy fraction)


PANELS_PER_ROW = 3


def write_curves(panels: Sequence[Panel], path: Path) -> None:
    """One panel each: test accuracy (%) against round, mean over seeds; 3 panels a row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(PANELS_PER_ROW, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.0 * cols, 4.2 * rows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    try:
        for ax, panel in zip(axes.flat, panels, strict=False):
            curves = panel.curves
            for curve in curves:
                # a seed that diverged (or stopped) drops out of the mean from then on
                x, mean, std = seed_band([(o.evaluated, o.accuracies) for o in curve.runs])
                mean, std = 100 * mean, 100 * std
                style = "--" if curve.dashed else "-"
                ax.plot(x, mean, color=curve.color, ls=style, label=curve.label)
                ax.fill_between(x, mean - std, mean + std, color=curve.color, alpha=0.08)
            if panel.target is not None:
                ax.axhline(100 * panel.target, color="grey", ls=":", lw=1)
            ax.set_title(panel.title, fontsize=9)
            ax.set_xlabel("round")
            ax.set_ylabel("test accuracy (%)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
