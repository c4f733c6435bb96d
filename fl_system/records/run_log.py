"""The ServerApp's log lines that the launching process reads: progress, summary, failure.

The ServerApp may run on another machine (runtime=remote): what reaches `fl-run` for sure
is its log, streamed by `flwr run --stream` into the local `logs/serverapp.log`. So the
round driver writes these lines and `runtime.launch.progress` reads them, whatever the runtime.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from omegaconf import DictConfig

PREFIX = "[fl_system] "
_ROUND = re.compile(
    r"\[fl_system\] (?:round|step) (\d+)/(\d+) \| acc ([0-9.]+|-) \|(?:.*\|)? ([0-9.]+) s this "
    r"(?:round|step) \| "
    r"([0-9.]+) s training"
)
_SUMMARY = "summary "
_FAILED = "failed: "
_DONE = "done: "  # the ServerApp's last line: its run directory is complete
_WARNING = "warning: "  # something the user should know that does not stop the run


def say(text: str) -> None:
    print(PREFIX + text, flush=True)


def round_unit(cfg: DictConfig) -> str:
    """What num_rounds counts: server steps for FedBuff and FedAsync (`asynchronous: true` in
    their YAML), rounds for the rest."""
    return "step" if cfg.algorithm.get("asynchronous") else "round"


def how_many(count: int, unit: str) -> str:
    return f"{count} {unit}{'' if count == 1 else 's'}"


def round_line(
    rnd: int,
    total: int,
    accuracy: float | None,
    train_loss: float | None,
    seconds: float,
    training: float,
    unit: str = "round",
) -> str:
    """`seconds` this round (or server step, `unit`) took; `training` the run's training time
    so far (from round 1's start, the federation up; metrics.csv's wall_seconds); no train
    loss where a DP run withholds it."""
    acc = "-" if accuracy is None else f"{accuracy:.4f}"
    loss = "" if train_loss is None else f"train loss {train_loss:.4f} | "
    return (
        f"{unit} {rnd}/{total} | acc {acc} | {loss}"
        f"{seconds:.1f} s this {unit} | {training:.1f} s training | "
        f"ETA {seconds * (total - rnd):.0f} s"
    )


def summary_line(summary: dict) -> str:
    return _SUMMARY + json.dumps(summary, sort_keys=True, default=str)


def done_line(summary: dict, run_dir: object) -> str:
    return (
        f"{_DONE}final accuracy {summary['final_accuracy']}, best {summary['best_accuracy']}, "
        f"{how_many(summary['rounds'], summary.get('round_unit', 'round'))}, "
        f"run directory {run_dir}"
    )


def failed_line(reason: str) -> str:
    return _FAILED + reason


def warning_line(text: str) -> str:
    return _WARNING + text


@dataclass
class RunLog:
    """What the lines read so far say."""

    round: int = 0
    accuracy: float | None = None
    round_seconds: float | None = None  # the latest round's
    training_seconds: float | None = None  # the run's so far
    summary: dict | None = None
    failure: str | None = None
    warnings: list[str] = field(default_factory=list)
    done: bool = False
    _partial: str = field(default="", repr=False)

    def feed(self, text: str) -> None:
        """Take more of the log (any chunk; a line cut in half waits for its end)."""
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._line(line.rstrip("\r"))

    def _line(self, line: str) -> None:
        at = line.find(PREFIX)
        if at < 0:
            return
        line = line[at:]
        body = line[len(PREFIX) :]
        if (found := _ROUND.match(line)) is not None:
            self.round = int(found.group(1))
            if found.group(3) != "-":
                self.accuracy = float(found.group(3))
            self.round_seconds = float(found.group(4))
            self.training_seconds = float(found.group(5))
        elif body.startswith(_SUMMARY):
            self.summary = json.loads(body[len(_SUMMARY) :])
        elif body.startswith(_FAILED):
            self.failure = body[len(_FAILED) :]
        elif body.startswith(_WARNING):
            self.warnings.append(body[len(_WARNING) :])
        elif body.startswith(_DONE):
            self.done = True
