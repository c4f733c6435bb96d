"""Weights & Biases: offline by default (no account, no network; `wandb sync` uploads later),
online after `wandb login` with `tracking.wandb.mode=online`.

The W&B run id is fl-run's run id, so a resumed run continues the same W&B run; a -m sweep's
members form one group, named after the sweep's folder.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import wandb

from fl_system.records.tracking.base import FINISHED, KILLED, RunInfo, Tracker

_EXIT = {FINISHED: 0, KILLED: 130}  # anything else: 1
_FLUSH_SECONDS = 0.1


class WandbTracker(Tracker):
    def __init__(
        self, mode: str = "offline", project: str = "fl_system", entity: str | None = None
    ) -> None:
        self.mode = mode
        self.project = project
        self.entity = entity
        self.run: Any = None

    def start(self, run: RunInfo, previous: str | None, at: float) -> str:
        self.run = self._init(run, previous)
        return self.run.id

    def log_round(self, step: int, metrics: Mapping[str, float], at: float) -> None:
        # committed now: W&B otherwise holds a step's row until the next step arrives; the
        # round's own time, as W&B keeps a `_timestamp` given (its TensorBoard import's way)
        self.run.log({**metrics, "_timestamp": at}, step=step, commit=True)

    def log_summary(self, summary: Mapping[str, Any], step: int, at: float) -> None:
        self.run.summary.update({f"summary/{k}": v for k, v in summary.items()})

    def log_files(self, files: list[Path]) -> None:
        for path in files:
            self.run.save(str(path), base_path=str(path.parent), policy="now")

    def end(self, status: str, error: str | None, at: float) -> None:
        _close(self.run, status, error)
        self.run = None

    def mark_ended(
        self, run: RunInfo, run_id: str, status: str, error: str | None, at: float
    ) -> None:
        _close(self._init(run, run_id), status, error)

    def _init(self, run: RunInfo, previous: str | None) -> Any:
        os.environ.setdefault("WANDB_SILENT", "true")
        return wandb.init(
            project=self.project,
            entity=self.entity,
            id=previous or run.run_id,
            name=run.name,
            group=run.sweep_label,
            tags=[f"{k}:{v}"[:64] for k, v in run.tags.items()],
            config=run.params,
            dir=str(run.run_dir),
            mode=self.mode,
            resume="allow",
            reinit="create_new",  # a sweep's members in one process: one run each
            settings=wandb.Settings(
                console="off",
                x_disable_stats=True,
                silent=True,
                # offline, the run file is written every 15 s by default: a run stopped hard
                # (Ctrl-C, a crash) would lose up to 15 s of rounds in it
                x_transaction_log_flush_interval=_FLUSH_SECONDS,
            ),
        )


def _close(run: Any, status: str, error: str | None) -> None:
    run.summary["status"] = status
    if error:
        run.summary["error"] = error
    run.finish(exit_code=_EXIT.get(status, 1))  # W&B's service stays for the next run
