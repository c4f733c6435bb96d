"""One line per configuration: its runs pooled over seeds.

Runs whose settings differ only in `seed` (and in what every run has of its own: its id, its
directory, whether it was resumed) are one configuration; the settings that differ between
configurations become the table's first columns, each once: a class path (`_target_`)
follows from a name beside it, and of settings that always agree (`algorithm.mu` and the
`algorithm.local_rule.mu` it fills in) only the shortest name is shown.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fl_system.records.compare.render import setting
from fl_system.records.compare.runs import Run
from fl_system.records.results import summarize
from fl_system.records.seed_stats import mean_std

SEED = "seed"
OWN = ("run_id", "run_dir", "resume", "tracking.label")  # each run's own, not a setting


@dataclass(frozen=True)
class Configuration:
    settings: dict[str, Any]  # every setting but the seed
    runs: list[Run]


def configurations(runs: Sequence[Run]) -> list[Configuration]:
    """The runs grouped by their settings minus seed, in the order they were given."""
    groups: dict[str, Configuration] = {}
    for run in runs:
        shared = {k: v for k, v in run.settings.items() if k != SEED and k not in OWN}
        key = repr(sorted(shared.items()))
        groups.setdefault(key, Configuration(shared, [])).runs.append(run)
    return list(groups.values())


def differing(configs: Sequence[Configuration]) -> list[str]:
    """The settings whose values are not the same in every configuration, each once."""
    keys = sorted({k for c in configs for k in c.settings if not k.endswith("._target_")})
    shown: dict[tuple[str, ...], str] = {}  # the values across configurations -> one name
    for key in keys:
        values = tuple(repr(c.settings.get(key, _MISSING)) for c in configs)
        if len(set(values)) > 1:
            name = shown.get(values)
            if name is None or (key.count("."), len(key)) < (name.count("."), len(name)):
                shown[values] = key
    return sorted(shown.values())


_MISSING = object()


def figures(run: Run, target: float | None) -> dict[str, Any]:
    """A run's headline numbers: its summary.json (a finished run), else computed from its
    rows as fl-run would have; rounds to `target` always from the rows."""
    summary = run.summary if run.summary is not None else summarize(run.rows, target_accuracy=None)
    out = {k: summary.get(k) for k in ("final_accuracy", "best_accuracy", "bytes_up", "bytes_down")}
    out["seconds"] = summary.get("wall_seconds")
    out["virtual_seconds"] = summary.get("virtual_clock")  # system=...: the clock at the end
    if target is not None:
        reached = summarize(run.rows, target_accuracy=target)
        out["rounds_to_target"] = reached["rounds_to_target"]
        out["virtual_to_target"] = reached.get("virtual_seconds_to_target")
    return out


def table(runs: Sequence[Run], target: float | None = None) -> tuple[list[str], list[dict]]:
    """(the differing settings, one row per configuration with raw numbers)."""
    configs = configurations(runs)
    keys = differing(configs)
    rows = []
    for config in configs:
        each = [figures(run, target) for run in config.runs]
        row: dict[str, Any] = {k: config.settings.get(k) for k in keys}
        row["seeds"] = [run.settings.get(SEED) for run in config.runs]
        row["runs"] = len(config.runs)
        row["finished"] = sum(run.finished for run in config.runs)
        for name in ("final_accuracy", "best_accuracy", "bytes_up", "bytes_down", "seconds"):
            row[f"{name}_mean"], row[f"{name}_std"] = _spread([f[name] for f in each])
        row["virtual_seconds_mean"], row["virtual_seconds_std"] = _spread(
            [f["virtual_seconds"] for f in each]
        )
        if target is not None:
            reached = [f["rounds_to_target"] for f in each if f["rounds_to_target"] is not None]
            row["reached"] = len(reached)
            row["rounds_to_target_mean"], row["rounds_to_target_std"] = _spread(reached)
            row["virtual_to_target_mean"], row["virtual_to_target_std"] = _spread(
                [f["virtual_to_target"] for f in each]
            )
        rows.append(row)
    return keys, rows


def best_configuration(runs: Sequence[Run]) -> tuple[str, dict[str, float]] | None:
    """A sweep's summary: its best configuration by mean final accuracy over its seeds
    ("algorithm.name=fedprox"), and the figures: that mean and std, its seeds, the
    configurations and the finished runs. None before any run has an accuracy."""
    keys, rows = table(runs)
    scored = [row for row in rows if row["final_accuracy_mean"] is not None]
    if not scored:
        return None
    top = max(scored, key=lambda row: row["final_accuracy_mean"])
    name = " ".join(f"{k}={setting(top[k])}" for k in keys) or "every run alike"
    return name, {
        "best_final_accuracy_mean": top["final_accuracy_mean"],
        "best_final_accuracy_std": top["final_accuracy_std"],
        "best_seeds": float(len(top["seeds"])),
        "configurations": float(len(rows)),
        "runs_finished": float(sum(row["finished"] for row in rows)),
    }


def _spread(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """Mean and std of the values present (None where there is none)."""
    present = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    return mean_std(present) if present else (None, None)
