"""Saved runs: every run's spec and rows as JSON, to re-render a report without rerunning."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness.fl_run import BenchmarkError
from benchmarks.harness.outcome import RunOutcome, RunSpec


def save_outcomes(outcomes: Sequence[RunOutcome], path: Path) -> None:
    """Every run's spec and rows as JSON, so a report can be rendered again without the runs."""
    runs = [
        {
            "spec": {**vars(o.spec), "extra": [list(kv) for kv in o.spec.extra]},
            "command": o.command,
            "rows": o.rows,
            "process_seconds": o.process_seconds,
            "diverged_round": o.diverged_round,
        }
        for o in outcomes
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(runs))
    tmp.replace(path)  # a crash while writing never leaves half a file


def load_outcomes(path: Path) -> list[RunOutcome]:
    """The outcomes `save_outcomes` wrote."""
    out = []
    for run in json.loads(path.read_text()):
        spec = run["spec"]
        spec = RunSpec(
            **{
                **spec,
                "overrides": tuple(spec["overrides"]),
                "extra": tuple((k, v) for k, v in spec["extra"]),
            }
        )
        out.append(
            RunOutcome(
                spec, run["command"], run["rows"], run["process_seconds"], run["diverged_round"]
            )
        )
    return out


def saved_runs(specs: Sequence[RunSpec], path: Path) -> list[RunOutcome]:
    """The runs of `specs` that `execute_all(..., keep=path)` saved, in the order of `specs`."""
    saved = {o.spec: o for o in load_outcomes(path)} if path.exists() else {}
    missing = [spec.name for spec in specs if spec not in saved]
    if missing:
        raise BenchmarkError(
            f"{path} lacks {len(missing)} of the {len(specs)} runs asked for (first: "
            f"{missing[0]}); run them, or ask for the grid that was run"
        )
    return [saved[spec] for spec in specs]
