"""Plots: test accuracy against round, mean ± std over seeds, one panel per setting."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.outcome import RunOutcome
from fl_system.records.seed_stats import BAND, seed_band


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
    # the x axis: the round, or a metrics.csv column (e.g. virtual_clock) divided by x_scale,
    # each seed's curve interpolated onto a shared grid
    x_column: str | None = None
    x_label: str = "round"
    x_scale: float = 1.0

    def points(self, o: RunOutcome) -> tuple[list[float], list[float]]:
        """(x, test accuracy) of one run at its evaluated rounds."""
        if self.x_column is None:
            return o.evaluated, o.accuracies
        rows = [r for r in o.rows if r.get("test_accuracy")]
        return [float(r[self.x_column]) / self.x_scale for r in rows], o.accuracies


PANELS_PER_ROW = 3


def write_curves(panels: Sequence[Panel], path: Path) -> None:
    """One panel each: test accuracy (%) against round (or the panel's x column), mean over
    seeds; 3 panels a row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

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
                points = [panel.points(o) for o in curve.runs]
                x, mean, std = seed_band(points, interpolate=panel.x_column is not None)
                mean, std = 100 * mean, 100 * std
                style = "--" if curve.dashed else "-"
                ax.plot(x, mean, color=curve.color, ls=style, label=curve.label)
                ax.fill_between(x, mean - std, mean + std, color=curve.color, alpha=0.08)
            if panel.target is not None:
                ax.axhline(100 * panel.target, color="grey", ls=":", lw=1)
            ax.set_title(panel.title, fontsize=9)
            ax.set_xlabel(panel.x_label)
            if panel.x_column is None:  # rounds
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel("test accuracy (%)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="lower right", title=BAND, title_fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
