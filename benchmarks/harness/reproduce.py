"""What every paper reproduction needs: arms x seeds of fl-run, same start checked, statistics.

A reproduction file declares its settings (partitions, presets), its arms (methods compared)
and the paper's numbers, builds one `RunSpec` per (setting, arm, seed), and uses this module
to run them one after the other (`execute_all`), to check that the arms of one seed start from
the same partition, initial model and client sampling (`start_state`), to read the runs
(`RunOutcome`: best, last-10 and all-rounds accuracy, rounds to a target), to format
mean ± std tables and per-seed gains, to plot mean curves (`write_curves`) and to project the
CPU time of the whole grid from one short run (`project`).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import hashlib
import json
import math
import os
import platform
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from fl_runs import ROOT, BenchmarkError, cpu_model, run_fl, tool_env
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from fl_system.experiment import build_model, load_dataset, partition_indices
from fl_system.results import summarize

CONF_DIR = ROOT / "conf"


@dataclass(frozen=True)
class RunSpec:
    """One fl-run of a reproduction: which setting, which arm, which seed, its overrides."""

    setting: str
    arm: str
    seed: int
    overrides: tuple[str, ...]
    rounds: int  # num_rounds (a run stopped by target_accuracy may have fewer)
    extra: tuple[tuple[str, object], ...] = ()  # anything else the report groups by

    def command(self, run_dir: Path) -> list[str]:
        return ["fl-run", *self.overrides, f"hydra.run.dir={run_dir}"]

    @property
    def name(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in self.extra)
        return f"{self.setting} {self.arm}{extra} seed {self.seed}"


@dataclass
class RunOutcome:
    """One fl-run's metrics. A diverged run (every client's model NaN/inf: fl-run stops with
    that reason) keeps the rounds before it; it has a best accuracy but no last-10 or
    all-rounds mean, which the tables show as 'diverged'."""

    spec: RunSpec
    command: str
    rows: list[dict[str, str]]
    process_seconds: float  # fl-run from start to exit, as seen from here
    diverged_round: int | None = None  # the round whose local models were all NaN/inf
    accuracies: list[float] = field(init=False)  # the evaluated rounds' test accuracy
    evaluated: list[int] = field(init=False)  # their round numbers
    best: float = field(init=False)
    best_round: int = field(init=False)
    last10: float | None = field(init=False)
    all_rounds: float | None = field(init=False)  # mean over every evaluated round

    def __post_init__(self) -> None:
        summary = summarize(self.rows, target_accuracy=None)
        done = [r for r in self.rows if r.get("test_accuracy")]
        self.accuracies = [float(r["test_accuracy"]) for r in done]
        self.evaluated = [int(r["round"]) for r in done]
        self.best, self.best_round = summary["best_accuracy"] or 0.0, summary["best_round"] or 0
        finished = self.diverged_round is None
        self.last10 = summary["mean_last10_accuracy"] if finished else None
        self.all_rounds = statistics.fmean(self.accuracies) if finished else None

    def column(self, name: str, round_: int = 1) -> float | None:
        if round_ > len(self.rows):
            return None
        cell = self.rows[round_ - 1].get(name, "")
        return float(cell) if cell else None

    def columns(self, prefix: str, round_: int = 1) -> dict[int, float]:
        """{partition: value} of the `<prefix><pid>` columns of one round."""
        if round_ > len(self.rows):
            return {}
        row = self.rows[round_ - 1]
        n = len(prefix)
        return {
            int(k[n:]): float(v)
            for k, v in row.items()
            if k.startswith(prefix) and k[n:].isdigit() and v
        }

    def rounds_to(self, target: float) -> int | None:
        """The first evaluated round at or above `target` (None: never reached)."""
        reached = zip(self.evaluated, self.accuracies, strict=True)
        return next((r for r, a in reached if a >= target), None)

    @property
    def seconds_per_round(self) -> float:
        """In-run wall time per round after round 1 (which carries the warm-up)."""
        ends = [float(r["wall_seconds"]) for r in self.rows] or [0.0]
        return (ends[-1] - ends[0]) / max(1, len(ends) - 1)

    @property
    def fixed_seconds(self) -> float:
        """Process wall time not explained by rounds x seconds_per_round (start-up, teardown)."""
        return self.process_seconds - len(self.rows) * self.seconds_per_round


# ----- command line -----------------------------------------------------------------------
def reproduction_parser(
    doc: str, report: str, rounds: int, *, estimate: bool = True
) -> argparse.ArgumentParser:
    """The options every reproduction takes: --seeds, --rounds, --notes, --out (the report,
    `benchmarks/<report>` by default), --runs, --render-only and (`estimate`) --estimate.
    `parsed` fills in --runs."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--notes", type=Path, help="a Markdown file appended as 'Notes'")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / report)
    if estimate:
        parser.add_argument("--estimate", action="store_true", help="time one short run per arm")
    parser.add_argument(
        "--runs",
        type=Path,
        help="where every run is saved as it ends (default: next to --out, .runs.json); runs "
        "already there are reused",
    )
    parser.add_argument("--render-only", action="store_true", help="report from --runs")
    return parser


def parsed(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    args = parser.parse_args(argv)
    args.runs = args.runs or args.out.with_suffix(".runs.json")
    return args


@dataclass(frozen=True)
class Started:
    """When a reproduction started, and the machine's load average then."""

    at: dt.datetime
    load: tuple[float, float, float]


def reproduce(
    args: argparse.Namespace,
    name: str,
    *,
    grid: Callable[[argparse.Namespace], list[RunSpec]],
    run_all: Callable[[Sequence[RunSpec], Path], list[RunOutcome]],
    report: Callable[[argparse.Namespace, list[RunOutcome], Path, Started], str],
    estimate: Callable[[argparse.Namespace], int] | None = None,
) -> int:
    """A reproduction's main: --estimate, or the grid's runs (run, or reloaded with
    --render-only) and the report written to --out, `report` drawing the plot it is given."""
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    started = Started(dt.datetime.now().astimezone(), os.getloadavg())
    try:
        if estimate is not None and args.estimate:
            return estimate(args)
        specs = grid(args)
        outcomes = saved_runs(specs, args.runs) if args.render_only else run_all(specs, args.runs)
    except BenchmarkError as err:
        print(f"{name}: error: {err}", file=sys.stderr, flush=True)
        return 1
    plot = args.out.with_suffix(".png")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(args, outcomes, plot, started))
    print(f"[bench] report written to {args.out}, plot to {plot}", flush=True)
    return 0


# ----- fl-run subprocesses ----------------------------------------------------------------
def read_metrics(
    path: Path, rounds: int, *, exact: bool = True, eval_every: int = 1, finished: bool = True
) -> list[dict[str, str]]:
    """The run's rows: `rounds` of them (`exact`), or at most that many (a target stop);
    every `eval_every`-th round carries a test accuracy, and so does the last of a run that
    finished (a diverged run's last saved round is only evaluated if it was due)."""
    if not path.exists():
        if rounds == 0:
            return []
        raise BenchmarkError(f"{path} was not written")
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    if (len(rows) != rounds) if exact else not 1 <= len(rows) <= rounds:
        raise BenchmarkError(f"{path} has {len(rows)} rounds, expected {rounds}")
    due = [r for i, r in enumerate(rows, 1) if i % eval_every == 0 or (finished and i == len(rows))]
    if any(not r.get("test_accuracy") for r in due):
        raise BenchmarkError(
            f"{path} lacks a test accuracy in some round (eval_every={eval_every})"
        )
    return rows


def diverged_round(failure: Path) -> int | None:
    """The round fl-run stopped at because every local model was NaN/inf, if that is why."""
    text = failure.read_text() if failure.exists() else ""
    found = re.match(r"round (\d+): 0 usable replies", text)
    return int(found.group(1)) if found and "local model has NaN or inf" in text else None


def execute(
    spec: RunSpec,
    timeout: float,
    *,
    prefix: str = "repro-",
    exact_rounds: bool = True,
    eval_every: int = 1,
) -> RunOutcome:
    """One fl-run into a temporary run directory (kept, and named, if the run fails).

    Client state lives inside the run directory. `exact_rounds=False` accepts a run that
    stopped early at its target accuracy.
    """
    run_dir = Path(tempfile.mkdtemp(prefix=prefix))
    command = spec.command(run_dir)
    started = time.perf_counter()
    diverged = None
    env = tool_env({"FL_STATE_DIR": str(run_dir / "client-state")})
    try:
        try:
            run_fl(command, run_dir / "fl-run.out", timeout, env)
        except BenchmarkError:
            diverged = diverged_round(run_dir / "failure.txt")
            if diverged is None:
                raise
        rows = read_metrics(
            run_dir / "metrics.csv",
            spec.rounds if diverged is None else diverged - 1,
            exact=exact_rounds or diverged is not None,
            eval_every=eval_every,
            finished=diverged is None,
        )
    except BenchmarkError as err:
        raise BenchmarkError(f"{spec.name} failed (run directory kept: {run_dir})\n{err}") from None
    outcome = RunOutcome(spec, shlex.join(command), rows, time.perf_counter() - started, diverged)
    shutil.rmtree(run_dir, ignore_errors=True)
    return outcome


def execute_all(
    specs: Sequence[RunSpec],
    run: Callable[[RunSpec], RunOutcome],
    *,
    say: Callable[[RunOutcome], str] | None = None,
    keep: Path | None = None,
) -> list[RunOutcome]:
    """Run every spec in order with `run`, printing progress and a running ETA.

    With `keep`, every finished run is saved there at once and runs already saved (same spec)
    are reused, so an interrupted grid goes on where it stopped instead of starting over."""
    saved = {o.spec: o for o in load_outcomes(keep)} if keep and keep.exists() else {}
    done = dict(saved)  # what `keep` holds: earlier runs, even of other grids, and new ones
    outcomes: list[RunOutcome] = []
    started, fresh = time.perf_counter(), 0
    todo = sum(spec not in saved for spec in specs)
    for i, spec in enumerate(specs, 1):
        if spec in saved:
            outcomes.append(saved[spec])
            print(f"[bench] {i}/{len(specs)} {spec.name}: reused from {keep}", flush=True)
            continue
        print(f"[bench] {i}/{len(specs)} {spec.name}", flush=True)
        outcome = run(spec)
        outcomes.append(outcome)
        fresh += 1
        done[spec] = outcome
        if keep:
            save_outcomes(list(done.values()), keep)
        elapsed = time.perf_counter() - started
        eta = elapsed / fresh * (todo - fresh)
        detail = say(outcome) if say else f"best {pct1(outcome.best)} (round {outcome.best_round})"
        print(
            f"[bench]   {detail}; {outcome.process_seconds:.0f} s; elapsed "
            f"{elapsed / 60:.1f} min, ETA {eta / 60:.1f} min",
            flush=True,
        )
    return outcomes


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


def find(outcomes: Sequence[RunOutcome], **match: object) -> RunOutcome:
    """The outcome whose spec has these field values (`extra` keys count as fields)."""
    for o in outcomes:
        fields = {**vars(o.spec), **dict(o.spec.extra)}
        if all(fields.get(k) == v for k, v in match.items()):
            return o
    raise KeyError(match)


def project(short: RunOutcome, rounds: int) -> float:
    """Wall seconds of a `rounds`-round run, projected from a short run of the same setting."""
    return short.fixed_seconds + rounds * short.seconds_per_round


# ----- round-0 conditions -----------------------------------------------------------------
def compose_config(overrides: Sequence[str]) -> DictConfig:
    """The config fl-run composes for these overrides (without the run directory)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=list(overrides))


def digest(arrays: Sequence[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:12]


@dataclass(frozen=True)
class StartState:
    """What a run starts from: its partition, its initial global model, its client sampling."""

    sizes: list[int]
    label_counts: list[np.ndarray]
    partition_digest: str
    model_digest: str
    sampling_digest: str  # the participants of every round


def start_state(cfg: DictConfig) -> StartState:
    """Derived in-process exactly as the server and the clients derive it (same functions)."""
    from server_app.federation import sample_partitions

    data = load_dataset(cfg)
    parts = partition_indices(cfg, int(cfg.num_clients))
    counts = [np.bincount(data.y_train[p], minlength=int(cfg.dataset.num_classes)) for p in parts]
    model = build_model(cfg)
    weights = [v.detach().cpu().numpy() for v in model.state_dict().values()]
    everyone = list(range(int(cfg.num_clients)))
    sampled = [
        np.array(sample_partitions(int(cfg.seed), cfg.clients_per_round, r, everyone))
        for r in range(1, int(cfg.num_rounds) + 1)
    ]
    return StartState(
        sizes=[len(p) for p in parts],
        label_counts=counts,
        partition_digest=digest(parts),
        model_digest=digest(weights),
        sampling_digest=digest(sampled),
    )


def same_start(states: Sequence[StartState]) -> bool:
    first = states[0]
    return all(
        (s.partition_digest, s.model_digest, s.sampling_digest, s.sizes)
        == (first.partition_digest, first.model_digest, first.sampling_digest, first.sizes)
        for s in states
    )


# ----- statistics and formatting ----------------------------------------------------------
def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    mean = statistics.fmean(values)
    return mean, statistics.stdev(values) if len(values) > 1 else 0.0


def pct(values: Sequence[float | None], signed: bool = False) -> str:
    """Accuracies (fractions) as 'mean ± std' in percentage points; None = a diverged run."""
    lost = sum(v is None for v in values)
    if lost:
        return f"diverged ({lost}/{len(values)} seeds)"
    mean, std = mean_std([100 * v for v in values if v is not None])
    return f"{mean:+.2f} ± {std:.2f}" if signed else f"{mean:.2f} ± {std:.2f}"


def pct1(value: float | None) -> str:
    return "diverged" if value is None else f"{100 * value:.2f}"


def signed_list(values: Sequence[float | None]) -> str:
    return ", ".join("diverged" if v is None else f"{100 * v:+.2f}" for v in values)


def difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def significance(gains: Sequence[float | None]) -> str:
    """'+0.23 points (higher in 3/3 seeds, more than 2 standard errors from zero)'."""
    if any(v is None for v in gains):
        return f"n/a ({pct(gains)})"
    mean, std = mean_std([100 * v for v in gains if v is not None])
    se = std / len(gains) ** 0.5 if len(gains) > 1 else float("inf")
    side = "more" if abs(mean) > 2 * se else "less"
    up = sum(v is not None and v > 0 for v in gains)
    return f"{mean:+.2f} points (higher in {up}/{len(gains)} seeds; {side} than 2 SE from zero)"


def machine_line(load_start: Sequence[float]) -> str:
    import torch

    return (
        f"- Machine: nproc {os.cpu_count()}, CPU {cpu_model()}; Python "
        f"{platform.python_version()}, torch {torch.__version__}; load average (1/5/15 min) at "
        "start "
        + " / ".join(f"{v:.2f}" for v in load_start)
        + ", at the end "
        + " / ".join(f"{v:.2f}" for v in os.getloadavg())
    )


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def report_text(sections: Sequence[Sequence[str]], notes: Path | None = None) -> str:
    """The report: non-empty sections (lists of lines) separated by a blank line, and the
    Markdown file `notes` (if given) appended as the last section."""
    parts = [list(s) for s in sections if s]
    if notes:
        parts.append(notes.read_text().splitlines())
    return "\n\n".join("\n".join(s) for s in parts) + "\n"


# ----- plots ------------------------------------------------------------------------------
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


PANELS_PER_ROW = 3


def write_curves(panels: Sequence[Panel], path: Path) -> None:
    """One panel each: test accuracy (%) against round, mean over seeds; 3 panels a row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(PANELS_PER_ROW, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.0 * cols, 4.2 * rows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    try:
        for ax, panel in zip(axes.flat, panels, strict=False):
            curves = panel.curves
            for curve in curves:
                rounds = sorted({r for o in curve.runs for r in o.evaluated})
                grid = np.full((len(curve.runs), len(rounds)), np.nan)
                for i, o in enumerate(curve.runs):
                    for r, a in zip(o.evaluated, o.accuracies, strict=True):
                        grid[i, rounds.index(r)] = a
                # a seed that diverged (or stopped) drops out of the mean from then on
                with np.errstate(invalid="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # all seeds gone
                    mean = 100 * np.nanmean(grid, axis=0)
                    std = 100 * np.nanstd(grid, axis=0)
                x = np.array(rounds)
                style = "--" if curve.dashed else "-"
                ax.plot(x, mean, color=curve.color, ls=style, label=curve.label)
                ax.fill_between(x, mean - std, mean + std, color=curve.color, alpha=0.08)
            if panel.target is not None:
                ax.axhline(100 * panel.target, color="grey", ls=":", lw=1)
            ax.set_title(panel.title, fontsize=9)
            ax.set_xlabel("round")
            ax.set_ylabel("test accuracy (%)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
