"""`fl-compare --plot`: every configuration's mean test accuracy with its seed band, overlaid,
against rounds, bytes on the wire (up and down, cumulative), training seconds or virtual
seconds (runs with a system=... clock)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fl_system.records.compare.render import setting
from fl_system.records.compare.runs import Run
from fl_system.records.compare.table import Configuration
from fl_system.records.seed_stats import BAND, seed_band

X_AXES = {
    "rounds": "round (a server step under FedBuff and FedAsync)",
    "bytes": "MB on the wire (up + down, cumulative)",
    "seconds": "training seconds",
    "virtual": "virtual seconds (system=...: the devices' and networks' time)",
}


def curve(run: Run, x_axis: str) -> tuple[list[float], list[float]]:
    """(x, test accuracy) at the run's evaluated rounds."""
    xs: list[float] = []
    ys: list[float] = []
    sent = 0.0
    for row in run.rows:
        sent += float(row.get("bytes_up") or 0) + float(row.get("bytes_down") or 0)
        if not row.get("test_accuracy"):
            continue
        if x_axis == "rounds":
            xs.append(float(row["round"]))
        elif x_axis == "bytes":
            xs.append(sent / 1e6)
        elif x_axis == "virtual":
            if not row.get("virtual_clock"):  # a run without a clock has no virtual curve
                return [], []
            xs.append(float(row["virtual_clock"]))
        else:
            xs.append(float(row["wall_seconds"]))
        ys.append(float(row["test_accuracy"]))
    return xs, ys


def write_plot(
    configs: Sequence[Configuration], keys: Sequence[str], path: Path, x_axis: str = "rounds"
) -> None:
    """One line per configuration (mean over its seeds, ± 1 sample std band), labelled by the
    settings that tell configurations apart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    try:
        for config in configs:
            curves = [c for c in (curve(run, x_axis) for run in config.runs) if c[0]]
            if not curves:
                continue
            x, mean, std = seed_band(curves, interpolate=x_axis != "rounds")
            label = ", ".join(f"{k}={setting(config.settings.get(k))}" for k in keys) or "runs"
            line = ax.plot(x, 100 * mean, label=f"{label} ({len(curves)} seeds)")[0]
            ax.fill_between(
                x, 100 * (mean - std), 100 * (mean + std), color=line.get_color(), alpha=0.12
            )
        ax.set_xlabel(X_AXES[x_axis])
        if x_axis == "rounds":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # no round 2.5
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right", title=BAND, title_fontsize=8)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
