"""What the resume tests compare: a run's metrics.csv rows and where two runs ended."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fl_system.records.checkpoint import load_checkpoint
from fl_system.records.results import MetricsLog, read_rows


def accuracy_history(run_dir: Path) -> list[str]:
    return [r["test_accuracy"] for r in MetricsLog(run_dir / "metrics.csv").rows()]


def metrics_rows(run_dir: Path) -> list[dict[str, str]]:
    """metrics.csv's rows, read only (MetricsLog would also trim a line the run is writing)."""
    return read_rows(run_dir / "metrics.csv")


def history(run_dir: Path) -> list[dict[str, str]]:
    """metrics.csv without this machine's timings and the bytes on the wire (Flower's random
    ids are varints): what two runs of one seed agree on."""
    return [
        {k: v for k, v in row.items() if "seconds" not in k and "bytes" not in k}
        for row in metrics_rows(run_dir)
    ]


def assert_same_end(straight: Path, resumed: Path, rounds: int) -> None:
    """The resumed run ended where the uninterrupted one did: model and accuracy history."""
    a = load_checkpoint(straight / "checkpoint.npz")
    b = load_checkpoint(resumed / "checkpoint.npz")
    assert a.round == b.round == rounds
    for key in a.model:
        np.testing.assert_array_equal(a.model[key], b.model[key])
    assert accuracy_history(straight) == accuracy_history(resumed)
    clock = ("virtual_", "vtime_", "online", "went_offline")  # system=...: the clock's columns
    timed = [
        [{k: v for k, v in row.items() if k.startswith(clock)} for row in metrics_rows(run)]
        for run in (straight, resumed)
    ]
    assert timed[0] == timed[1]
