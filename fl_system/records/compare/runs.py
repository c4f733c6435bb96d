"""Reading run directories as fl-run leaves them: config.yaml, metrics.csv, summary.json.

A run directory is any directory holding `config.yaml` and `metrics.csv`; a sweep directory
(Hydra's `multirun/...`) is searched for them. A run without `summary.json` did not finish
(stopped, killed or still going): it is kept and marked, never dropped silently.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from fl_system.records.results import read_rows

CONFIG, METRICS, SUMMARY = "config.yaml", "metrics.csv", "summary.json"


class NotARun(ValueError):
    """A directory given to fl-compare that is not a run and holds none; one line."""


@dataclass(frozen=True)
class Run:
    path: Path
    settings: dict[str, Any]  # the resolved config, flattened to dotted keys
    rows: list[dict[str, str]]  # metrics.csv
    summary: dict[str, Any] | None  # None: the run did not finish

    @property
    def finished(self) -> bool:
        return self.summary is not None


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}, 'c': [1, 2]} -> {'a.b': 1, 'c': [1, 2]} (lists stay whole)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def is_run(path: Path) -> bool:
    return (path / CONFIG).is_file() and (path / METRICS).is_file()


def load_run(path: Path) -> Run:
    try:
        config = OmegaConf.to_container(OmegaConf.load(path / CONFIG), resolve=True)
    except Exception as err:  # a YAML or interpolation error: the file, in one line
        first = str(err).splitlines()[0] if str(err) else ""
        raise NotARun(f"{path / CONFIG}: unreadable ({type(err).__name__}: {first})") from None
    if not isinstance(config, dict):
        raise NotARun(f"{path / CONFIG}: not a run's config (no mapping at its top)")
    rows = read_rows(path / METRICS)
    summary = None
    if (path / SUMMARY).is_file():
        try:
            summary = json.loads((path / SUMMARY).read_text())
        except ValueError as err:
            raise NotARun(f"{path / SUMMARY}: not JSON ({err})") from None
    return Run(path, flatten(config), rows, summary)


def find_runs(paths: Sequence[Path]) -> tuple[list[Run], list[str]]:
    """Every run under `paths` (a run directory, or one searched for runs), and one error line
    for each path that is neither."""
    runs: list[Run] = []
    errors: list[str] = []
    for path in paths:
        if not path.is_dir():
            errors.append(f"{path}: no such directory")
            continue
        found = [path] if is_run(path) else list(_runs_below(path))
        if not found:
            errors.append(
                f"{path}: not a run directory and holds none (a run directory has "
                f"{CONFIG} and {METRICS})"
            )
        for run_dir in found:
            try:
                runs.append(load_run(run_dir))
            except NotARun as err:
                errors.append(str(err))
    return runs, errors


def _runs_below(root: Path) -> Iterable[Path]:
    """Run directories under `root`, not searched further: what a run holds (W&B's offline
    files keep copies of config.yaml and metrics.csv) is not another run."""
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        if is_run(folder):
            yield folder
        else:
            yield from _runs_below(folder)
