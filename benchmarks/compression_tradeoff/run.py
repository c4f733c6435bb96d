"""Accuracy against bytes on the wire: compression under FedAvg and EFL (EFL spec 2.6, 2.9).

mnist5k + cnn, 100 clients with 2 classes each (partition=label2), 10 sampled per round,
10 local SGD steps of batch 10 at lr 0.05, central evaluation every 5 rounds, --rounds rounds,
`runtime=simulation`. Dense FedAvg once, then each arm of --arms at every q of --qs (the same
codec and q both ways):

    FedAvg dense          compression none (once, not per q)
    topk       FedAvg + top-k        compression.up=topk, down=topk (error feedback)
    st_ef      FedAvg + ST + EF      compression.up=st, down=st (error feedback)
    st         FedAvg + ST, no EF    st both ways, error_feedback=false both ways
    efl        EFL + ST, top-k u/v   algorithm=efl, st both ways, fisher_comm=topk at the same q
    efl_dense  EFL + ST, dense u/v   the paper's literal EFL (u, v and U, V dense)

Bytes are what `metrics.csv` measured: every serialized message (bytes_up, bytes_down), and
the model-update part alone (update_bytes_up); analytic bits of spec 2.9 beside them. Kept
positions travel Golomb-Rice coded (`fl_system.golomb`). A client that missed rounds gets the
broadcasts since the version it holds, or the whole model (first contact, or when the
broadcasts would outweigh it): that catch-up is most of the downstream traffic, and counted.
The report sets the measured upload beside the figures of the earlier report (positions at
ceil(log2 n) bits) and checks the goal: >= 50x fewer upstream bytes than dense FedAvg at
<= 1 point lower final accuracy.

    python -m benchmarks.compression_tradeoff.run [--seeds 0 1 2] [--rounds 200] [--qs 25 50]
        [--arms topk st_ef]
    python -m benchmarks.compression_tradeoff.run --render-only   # report from the saved runs
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import math
import os
import shlex
import statistics
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.compression_tradeoff.before import (
    BEFORE,
    BEFORE_COMMIT,
    BEFORE_DATE,
    BEFORE_DENSE_UP_MB,
)
from benchmarks.harness.execute import execute, execute_all
from benchmarks.harness.fl_run import BenchmarkError
from benchmarks.harness.outcome import RunOutcome, RunSpec, find
from benchmarks.harness.reproduce import parsed, reproduction_parser
from benchmarks.harness.saved_runs import saved_runs
from benchmarks.harness.seeds import mean_std, pct, significance
from benchmarks.harness.tables import machine_line, report_text

COMMON = (
    "runtime=simulation",
    "dataset=mnist5k",
    "model=cnn",
    "partition=label2",
    "num_clients=100",
    "clients_per_round=10",
    "train.local_steps=10",
    "train.batch_size=10",
    "train.lr=0.05",
    "train.momentum=0.0",
    "eval_every=5",
)
EVAL_EVERY = 5
FINAL_EVALS = 4  # "final accuracy": mean of the last 4 evaluations (the last 20 rounds)
GOAL_FACTOR, GOAL_LOSS = 50.0, 0.01


def both(codec: str, q: int, *extra: str) -> tuple[str, ...]:
    """The same codec, q = 1/`q` and `extra` settings for compression.up and .down."""
    out: list[str] = []
    for way in ("up", "down"):
        out += [f"compression.{way}={codec}", f"compression.{way}.q={1 / q!r}"]
        out += [f"compression.{way}.{x}" for x in extra]
    return tuple(out)


@dataclass(frozen=True)
class Arm:
    key: str
    label: str
    color: str
    dashed: bool = False

    def overrides(self, q: int) -> tuple[str, ...]:
        if self.key == "dense":
            return ("algorithm=fedavg",)
        if self.key == "topk":
            return ("algorithm=fedavg", *both("topk", q))
        if self.key in ("st_ef", "st"):
            extra = () if self.key == "st_ef" else ("error_feedback=false",)
            return ("algorithm=fedavg", *both("st", q, *extra))
        fisher = ("topk", f"{1 / q!r}") if self.key == "efl" else ("dense", "0.01")
        return (
            "algorithm=efl",
            *both("st", q),
            f"algorithm.fisher_comm={fisher[0]}",
            f"algorithm.fisher_q={fisher[1]}",
        )


ARMS = {
    a.key: a
    for a in (
        Arm("dense", "FedAvg dense", "black"),
        Arm("topk", "FedAvg + top-k", "tab:orange"),
        Arm("st_ef", "FedAvg + ST + EF", "tab:blue"),
        Arm("st", "FedAvg + ST, no EF", "tab:blue", dashed=True),
        Arm("efl", "EFL + ST, top-k u/v", "tab:green"),
        Arm("efl_dense", "EFL + ST, dense u/v", "tab:green", dashed=True),
    )
}
PER_Q = ("topk", "st_ef", "st", "efl", "efl_dense")


def settings(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(arm, q) pairs run; q = 0 for the dense baseline."""
    return [("dense", 0)] + [(a, q) for q in args.qs for a in args.arms]


def run_spec(arm: str, q: int, seed: int, rounds: int) -> RunSpec:
    overrides = (*COMMON, *ARMS[arm].overrides(q), f"seed={seed}", f"num_rounds={rounds}")
    return RunSpec(f"q=1/{q}" if q else "dense", arm, seed, overrides, rounds)


def specs(args: argparse.Namespace) -> list[RunSpec]:
    return [run_spec(arm, q, seed, args.rounds) for seed in args.seeds for arm, q in settings(args)]


# ----- reading runs -----------------------------------------------------------------------
def cumulative(o: RunOutcome, column: str) -> np.ndarray:
    """Bytes (or bits) summed over rounds 1..r, r = 1..rounds."""
    return np.cumsum([float(r.get(column) or 0) for r in o.rows])


def final(o: RunOutcome) -> float:
    return statistics.fmean(o.accuracies[-FINAL_EVALS:])


def total(o: RunOutcome, column: str) -> float:
    return float(cumulative(o, column)[-1])


def to_target(o: RunOutcome, target: float, column: str) -> float | None:
    """Cumulative `column` at the first evaluation at or above `target` (None: never)."""
    r = o.rounds_to(target)
    return None if r is None else float(cumulative(o, column)[r - 1])


def runs_of(outcomes: Sequence[RunOutcome], arm: str, q: int, seeds: Sequence[int]):
    setting = f"q=1/{q}" if q else "dense"
    return [find(outcomes, setting=setting, arm=arm, seed=s) for s in seeds]


def mb(values: Sequence[float | None]) -> str:
    if any(v is None for v in values):
        return f"not reached ({sum(v is None for v in values)}/{len(values)} seeds)"
    mean, std = mean_std([v / 1e6 for v in values if v is not None])
    return f"{mean:.2f} ± {std:.2f}"


def factor(dense: Sequence[float], other: Sequence[float]) -> float:
    """Dense bytes / these bytes, seed by seed, then the geometric mean."""
    ratios = [d / o for d, o in zip(dense, other, strict=True)]
    return math.exp(statistics.fmean(math.log(r) for r in ratios))


# ----- report -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Context:
    args: argparse.Namespace
    started: dt.datetime
    load_start: tuple[float, float, float]
    seconds: float
    target: float


def header(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    args = ctx.args
    example = find(outcomes, arm="st_ef", seed=args.seeds[0])
    return [
        "# Compression: accuracy against bytes on the wire",
        "",
        "Generated by `python -m benchmarks.compression_tradeoff.run` on "
        f"{ctx.started:%Y-%m-%d %H:%M %Z}"
        f" ({len(outcomes)} runs, {ctx.seconds / 60:.0f} min of fl-run wall time, one at a "
        "time)" + (", rendered again from the saved runs." if args.render_only else "."),
        "",
        f"- Setting: {' '.join(COMMON)}, {args.rounds} rounds, seeds "
        f"{', '.join(map(str, args.seeds))}; the arms of one seed share partition, initial "
        "model and client sampling.",
        f"- One run, e.g.: `{example.command.split(' hydra.run.dir')[0]}`",
        "- Codec q is used both ways (compression.up and compression.down); ST = top-k then "
        "one magnitude per tensor (spec 2.6); EF = error feedback (the residual is carried "
        "into the next message, on the client up and on the server down). Kept positions "
        "travel Golomb-Rice coded (spec 2.9's b* at each tensor's kept fraction).",
        f"- Final accuracy: mean central test accuracy of the last {FINAL_EVALS} evaluations "
        f"(rounds {args.rounds - EVAL_EVERY * (FINAL_EVALS - 1)}..{args.rounds}), mean ± std "
        "over seeds. Bytes: measured serialized message sizes summed over the run (all "
        "clients), MB = 1e6 bytes; factor = dense FedAvg's bytes / the arm's, per seed, "
        "geometric mean.",
        machine_line(ctx.load_start),
    ]


def main_table(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    seeds = ctx.args.seeds
    dense = runs_of(outcomes, "dense", 0, seeds)
    dense_final = [final(o) for o in dense]
    lines = [
        "## Final accuracy and bytes",
        "",
        "| q | arm | final acc. (%) | Δ vs dense (points) | up MB (all) | up factor | "
        "update-only up factor | Golomb-bit factor | down MB | down factor |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for arm, q in settings(ctx.args):
        runs = runs_of(outcomes, arm, q, seeds)
        delta = [final(o) - d for o, d in zip(runs, dense_final, strict=True)]
        up = [total(o, "bytes_up") for o in runs]
        down = [total(o, "bytes_down") for o in runs]
        dense_up = [total(o, "bytes_up") for o in dense]
        golomb = [total(o, "update_bits_golomb") / 8 for o in runs]
        cells = [
            f"1/{q}" if q else "—",
            ARMS[arm].label,
            pct([final(o) for o in runs]),
            "—" if arm == "dense" else pct(delta, signed=True),
            mb(up),
            f"{factor(dense_up, up):.1f}x",
            "—" if arm == "dense" else f"{update_factor(runs, 'update_bytes_up'):.0f}x",
            "—" if arm == "dense" else f"{factor(dense_updates(runs), golomb):.0f}x",
            mb(down),
            f"{factor([total(o, 'bytes_down') for o in dense], down):.1f}x",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        '"update-only" compares the encoded model updates (`update_bytes_up`) with 32 bits '
        'per parameter per reply; "Golomb-bit" does the same with spec 2.9\'s analytic '
        'Golomb count. "all" includes everything else a reply carries (metrics, EFL\'s u and '
        "v, message headers).",
    ]
    return lines


def goal_section(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    seeds = ctx.args.seeds
    dense = runs_of(outcomes, "dense", 0, seeds)
    lines = [
        f"## Goal: ≥ {GOAL_FACTOR:.0f}x fewer upstream bytes than dense FedAvg, ≤ "
        f"{100 * GOAL_LOSS:.0f} point lower final accuracy ({len(seeds)} seeds)",
        "",
        "All measured upstream bytes (updates, metrics, message framing), factor as above; "
        "accuracy: the mean over seeds of the arm's final accuracy less dense FedAvg's, same "
        "seed; the worst seed beside it.",
        "",
    ]
    for arm, q in settings(ctx.args)[1:]:
        runs = runs_of(outcomes, arm, q, seeds)
        up = factor([total(o, "bytes_up") for o in dense], [total(o, "bytes_up") for o in runs])
        losses = [final(d) - final(o) for d, o in zip(dense, runs, strict=True)]
        loss = statistics.fmean(losses)
        met = up >= GOAL_FACTOR and loss <= GOAL_LOSS
        lines.append(
            f"- q = 1/{q}, {ARMS[arm].label}: {up:.1f}x fewer bytes up, final accuracy "
            f"{-100 * loss:+.2f} points vs dense (worst seed {-100 * max(losses):+.2f}): "
            f"**{'met' if met else 'not met'}**."
        )
    return lines


def before_after_section(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    """This run's upload beside the earlier report's, where that report has the arm and q."""
    seeds = ctx.args.seeds
    dense_up = [total(o, "bytes_up") for o in runs_of(outcomes, "dense", 0, seeds)]
    rows = [(arm, q) for arm, q in settings(ctx.args)[1:] if (arm, q) in BEFORE]
    if not rows:
        return []
    lines = [
        "## Before and after: Golomb-coded positions, lean reply framing",
        "",
        f'"Before" is quoted from the earlier report of this study (generated {BEFORE_DATE}, '
        f"as it stands at commit {BEFORE_COMMIT}; same setting, seeds and rounds): positions "
        "packed at ⌈log₂ n⌉ bits, each reply's update a .npy array beside an empty record. "
        f'Its dense FedAvg moved {BEFORE_DENSE_UP_MB:.2f} MB up. "After" is this run.',
        "",
        "| q | arm | final acc. before (%) | after (%) | Δ vs dense before | after | "
        "up MB before | after | up factor before | after | update-only factor before | "
        "after |",
        "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    dense_final = [final(o) for o in runs_of(outcomes, "dense", 0, seeds)]
    for arm, q in rows:
        runs, b = runs_of(outcomes, arm, q, seeds), BEFORE[(arm, q)]
        up = [total(o, "bytes_up") for o in runs]
        delta = [final(o) - d for o, d in zip(runs, dense_final, strict=True)]
        cells = [
            f"1/{q}",
            ARMS[arm].label,
            b.accuracy,
            pct([final(o) for o in runs]),
            b.delta,
            pct(delta, signed=True),
            f"{b.up_mb:.2f}",
            mb(up),
            f"{b.up_factor:.1f}x",
            f"{factor(dense_up, up):.1f}x",
            f"{b.update_factor:.0f}x",
            f"{update_factor(runs, 'update_bytes_up'):.0f}x",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def feedback_section(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    if not {"st", "st_ef"} <= set(ctx.args.arms):
        return []
    seeds = ctx.args.seeds
    lines = [
        "## What error feedback is worth (FedAvg + ST)",
        "",
        "Final accuracy with error feedback minus without, same seed.",
        "",
    ]
    for q in ctx.args.qs:
        ef = runs_of(outcomes, "st_ef", q, seeds)
        plain = runs_of(outcomes, "st", q, seeds)
        gains = [final(a) - final(b) for a, b in zip(ef, plain, strict=True)]
        lines.append(f"- q = 1/{q}: {significance(gains)}")
    return lines


def target_section(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    seeds = ctx.args.seeds
    lines = [
        f"## Cost to reach {100 * ctx.target:.1f} % (dense FedAvg's final accuracy less 3 "
        "points, rounded down to half a point)",
        "",
        "| q | arm | rounds | MB up | MB down |",
        "|---|---|---|---:|---:|",
    ]
    for arm, q in settings(ctx.args):
        runs = runs_of(outcomes, arm, q, seeds)
        rounds = [o.rounds_to(ctx.target) for o in runs]
        reached = [r for r in rounds if r is not None]
        r_cell = (
            f"{statistics.fmean(reached):.0f}"
            if len(reached) == len(runs)
            else f"{len(runs) - len(reached)}/{len(runs)} seeds never"
        )
        lines.append(
            f"| {f'1/{q}' if q else '—'} | {ARMS[arm].label} | {r_cell} | "
            f"{mb([to_target(o, ctx.target, 'bytes_up') for o in runs])} | "
            f"{mb([to_target(o, ctx.target, 'bytes_down') for o in runs])} |"
        )
    return lines


def render(ctx: Context, outcomes: Sequence[RunOutcome], plot: Path) -> str:
    sections = [
        header(ctx, outcomes),
        main_table(ctx, outcomes),
        goal_section(ctx, outcomes),
        before_after_section(ctx, outcomes),
        feedback_section(ctx, outcomes),
        target_section(ctx, outcomes),
        [
            "## Curves",
            "",
            f"![accuracy against cumulative bytes]({plot.name})",
            "",
            "Mean over seeds of central test accuracy against the mean cumulative bytes "
            "(log scale), up and down separately, one row per q; dense FedAvg in every panel.",
        ],
    ]
    return report_text(sections, ctx.args.notes)


def write_plot(ctx: Context, outcomes: Sequence[RunOutcome], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds, qs = ctx.args.seeds, ctx.args.qs
    fig, axes = plt.subplots(len(qs), 2, figsize=(12, 4 * len(qs)), squeeze=False)
    try:
        for row, q in zip(axes, qs, strict=True):
            arms = [("dense", 0)] + [(a, q) for a in ctx.args.arms]
            for ax, column, way in zip(
                row, ("bytes_up", "bytes_down"), ("up", "down"), strict=True
            ):
                for arm, aq in arms:
                    runs = runs_of(outcomes, arm, aq, seeds)
                    evaluated = runs[0].evaluated
                    x = np.mean([cumulative(o, column)[np.array(evaluated) - 1] for o in runs], 0)
                    y = 100 * np.mean([o.accuracies for o in runs], 0)
                    spec = ARMS[arm]
                    ax.plot(
                        x / 1e6,
                        y,
                        color=spec.color,
                        ls="--" if spec.dashed else "-",
                        label=spec.label,
                    )
                ax.set_xscale("log")
                ax.set_xlabel(f"cumulative MB {way}")
                ax.set_ylabel("test accuracy (%)")
                ax.set_title(f"q = 1/{q}: accuracy vs bytes {way}", fontsize=9)
                ax.grid(alpha=0.3)
                ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)


# ----- model size ---------------------------------------------------------------------------
@functools.cache
def n_params() -> int:
    """Float parameters of the cnn on mnist5k (what a dense update carries)."""
    from benchmarks.harness.same_start import compose_config
    from fl_system.experiment import build_model

    model = build_model(compose_config(list(COMMON)))
    return sum(v.numel() for v in model.state_dict().values() if v.is_floating_point())


def dense_updates(runs: Sequence[RunOutcome]) -> list[float]:
    """Bytes the runs' replies would weigh as dense float32 updates (32 bits a parameter)."""
    return [32 * n_params() * sum(float(r["participants"]) for r in o.rows) / 8 for o in runs]


def update_factor(runs: Sequence[RunOutcome], column: str) -> float:
    """Dense float32 updates / the encoded updates (`update_bytes_up`), per seed, geometric."""
    return factor(dense_updates(runs), [total(o, column) for o in runs])


# ----- main -------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = reproduction_parser(__doc__, "compression_tradeoff", 200, estimate=False)
    parser.add_argument("--qs", type=int, nargs="+", default=[25, 50], help="q = 1 / each of these")
    parser.add_argument(
        "--arms", nargs="+", choices=PER_Q, default=["topk", "st_ef"], help="arms run at each q"
    )
    args = parsed(parser, argv)
    if args.rounds % EVAL_EVERY or args.rounds < EVAL_EVERY * FINAL_EVALS:
        parser.error(
            f"--rounds must be a multiple of {EVAL_EVERY}, at least {EVAL_EVERY * FINAL_EVALS}"
        )
    if any(q < 1 for q in args.qs):
        parser.error("--qs are denominators >= 1 (q = 1/25 is 25)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    started, load_start = dt.datetime.now().astimezone(), os.getloadavg()
    grid = specs(args)
    try:
        if args.render_only:
            outcomes = saved_runs(grid, args.runs)
        else:
            outcomes = execute_all(
                grid,
                lambda s: execute(s, timeout=3600, prefix="compress-", eval_every=EVAL_EVERY),
                keep=args.runs,
            )
    except BenchmarkError as err:
        print(f"compression_tradeoff: error: {err}", file=sys.stderr, flush=True)
        return 1
    dense = [final(o) for o in runs_of(outcomes, "dense", 0, args.seeds)]
    target = math.floor(200 * (statistics.fmean(dense) - 0.03)) / 200
    seconds = sum(o.process_seconds for o in outcomes)
    ctx = Context(args, started, load_start, seconds, target)
    plot = args.out.with_suffix(".png")
    write_plot(ctx, outcomes, plot)
    args.out.write_text(render(ctx, outcomes, plot))
    print(f"[bench] report written to {args.out}, plot to {plot}", flush=True)
    print(f"[bench] {shlex.join(sys.argv)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
