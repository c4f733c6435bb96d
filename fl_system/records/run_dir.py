"""Where a run keeps its files; one place so server, CLI and tests agree on names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.csv"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def failure(self) -> Path:
        """Why the run stopped early, one line (absent while it runs or after success)."""
        return self.root / "failure.txt"

    @property
    def bad_input(self) -> Path:
        """Present beside failure.txt when a node's data stopped the run (fl-run exits 2)."""
        return self.root / "failure-bad-input"

    @property
    def system_profiles(self) -> Path:
        """Under system=...: each client's device and links as the virtual clock drew them."""
        return self.root / "system_profiles.csv"

    @property
    def curve(self) -> Path:
        return self.root / "curve.png"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint.npz"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def startup(self) -> Path:
        """fl-run's start-up phases (`fl_system.runtime.startup`), seconds since the run began."""
        return self.logs / "startup.csv"
