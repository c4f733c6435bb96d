"""What every tracker is given and must do, and the names metrics.csv's columns get in them.

A tracker is built from its config node (`conf/tracking/<name>.yaml`, `_target_`) in the
process that runs the ServerApp, and logs one run: `start` (or continue) it, one `log_round`
per round, the summary and the run's files at the end, and its status. `mark_ended` ends a run
from another process: fl-run, once every process of an interrupted or crashed run is gone.
Each call carries `at`, when it happened in the run (seconds since the epoch): trackers log in
a process of their own that may start seconds after the run (its imports, a new store), so
their own clock would stamp a run's rounds all at its end.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fl_system.records.compare.runs import flatten
from fl_system.records.results import number

FINISHED, FAILED, KILLED, RUNNING = "finished", "failed", "killed", "running"

_PER_CLIENT = re.compile(r"^(.+)_(\d+)$")  # weight_3, alpha_3: partition 3's column
CLIENT_PREFIX = "client/"


@dataclass(frozen=True)
class RunInfo:
    """One run as the trackers name, tag and group it."""

    run_id: str  # fl-run's id of the run, kept by its resumptions
    name: str  # the run directory's name
    run_dir: Path
    dataset: str
    params: dict[str, Any]  # the resolved config, flattened to dotted keys
    config_yaml: str
    tags: dict[str, str] = field(default_factory=dict)
    sweep: str | None = None  # the -m sweep's directory, for its members

    @property
    def sweep_label(self) -> str | None:
        """The sweep as trackers name its group: `<date>/<time>` of multirun/<date>/<time>."""
        if self.sweep is None:
            return None
        return f"{Path(self.sweep).parent.name}/{Path(self.sweep).name}"


class Tracker(ABC):
    """One tracking backend; any exception it raises drops it from the run with one warning."""

    keeps_models = False  # True: it is given the final model at the end (`log_model`)

    def log_model(self, model: Any, at: float) -> None:
        """The run's final model (a `final_model.FinalModel`), given to trackers that keep
        models (`keeps_models`) only."""
        raise NotImplementedError(f"{type(self).__name__} keeps no models")

    @abstractmethod
    def start(self, run: RunInfo, previous: str | None, at: float) -> str:
        """Open the run started `at`, or continue `previous` (its id from an earlier start);
        its id."""

    @abstractmethod
    def log_round(self, step: int, metrics: Mapping[str, float], at: float) -> None:
        """One round's metrics at step = round; the round ended `at`."""

    @abstractmethod
    def log_summary(self, summary: Mapping[str, Any], step: int, at: float) -> None:
        """summary.json's values, once at the end."""

    @abstractmethod
    def log_files(self, files: list[Path]) -> None:
        """The run's files (curve.png, metrics.csv, summary.json, config.yaml)."""

    @abstractmethod
    def end(self, status: str, error: str | None, at: float) -> None:
        """Close the run, ended `at`, with FINISHED or FAILED (and the error line)."""

    @abstractmethod
    def mark_ended(
        self, run: RunInfo, run_id: str, status: str, error: str | None, at: float
    ) -> None:
        """Close run `run_id`, left open by a process that is gone, with `status`."""


def round_metrics(row: Mapping[str, Any]) -> dict[str, float]:
    """A metrics.csv row (numbers, or the strings read back from the file) as tracker
    metrics: every number but the round itself, per-client columns (`alpha_3`) under
    `client/`."""
    out = {}
    for key, value in row.items():
        number = _number(value)
        if key != "round" and number is not None:
            out[f"{CLIENT_PREFIX}{key}" if _PER_CLIENT.match(key) else key] = number
    return out


def _number(value: Any) -> float | None:
    """A metrics.csv cell or a number; None for blanks, text, booleans and containers."""
    return None if isinstance(value, bool) else number(value)


def summary_scalars(summary: Mapping[str, Any]) -> dict[str, float]:
    """summary.json's finite numbers, nested ones with dotted names; None, text and lists
    left out."""
    return {
        key: number
        for key, value in flatten(summary).items()
        if (number := _number(value)) is not None and math.isfinite(number)
    }
