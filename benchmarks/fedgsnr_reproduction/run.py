"""FedGSNR reproduction on mnist5k: Table 1's shape (rounds to a target, speedups) and the attack.

For each partition of the paper's Table 1 (Dirichlet 0.5, Dirichlet 0.1, Label-2, NonBalance,
Pareto), each base algorithm (FedAvg; FedProx and SCAFFOLD with --bases) and each seed, two
`fl-run runtime=simulation dataset=mnist5k model=cnn` runs, one after the other:

    algorithm=<base>                             every client E_const local steps
    algorithm=<base> algorithm.gsnr.enabled=true E_k steps from gradient statistics

with the paper's setting: 30 clients, all every round, B = 64, E_const = 20 steps, SGD lr 0.01
without momentum, central evaluation every 5 rounds, --rounds rounds. One seed gives both arms
the same partition, initial model and client sampling (checked below). Target accuracy per
partition, fixed before looking at the FedGSNR arm: FedAvg's seed-mean test accuracy at round
--target-round, rounded down to half a point; so FedAvg needs about that many rounds there.

Attack study (--attack-seeds): FedGSNR + FedAvg on Dirichlet 0.5 with client 0's labels
shifted l -> (l + 3) mod 10, and with its inputs replaced by U(-1, 1) noise: client 0's median
GSNR against its clean run and against the other clients.

    python -m benchmarks.fedgsnr_reproduction.run [--seeds 0 1 2] [--rounds 150]
        [--target-round 100] [--bases fedavg] [--partitions dir0.5 dir0.1 label2 nonbalance pareto]
        [--attack-seeds 0] [--out benchmarks/fedgsnr_reproduction/report.md]
    python -m benchmarks.fedgsnr_reproduction.run --estimate    # one short run per arm: cost
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import shlex
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scipy.stats import spearmanr

from benchmarks.harness.estimates import project
from benchmarks.harness.execute import execute, execute_all
from benchmarks.harness.outcome import RunOutcome, RunSpec, find
from benchmarks.harness.plots import Curve, Panel, write_curves
from benchmarks.harness.reproduce import Started, parsed, reproduce, reproduction_parser
from benchmarks.harness.same_start import StartState, compose_config, same_start, start_state
from benchmarks.harness.seeds import mean_std, pct
from benchmarks.harness.tables import machine_line, report_text
from fl_system.results import partition_columns

COMMON = (
    "runtime=simulation",
    "dataset=mnist5k",
    "model=cnn",
    "num_clients=30",
    "train.batch_size=64",
    "train.local_steps=20",
    "train.lr=0.01",
    "train.momentum=0.0",
    "eval_every=5",
)
EVAL_EVERY = 5


@dataclass(frozen=True)
class Partition:
    key: str  # command-line name
    label: str  # the paper's column
    overrides: tuple[str, ...]


PARTITIONS = {
    p.key: p
    for p in (
        Partition("dir0.5", "alpha = 0.5", ("partition=dirichlet", "partition.alpha=0.5")),
        Partition("dir0.1", "alpha = 0.1", ("partition=dirichlet", "partition.alpha=0.1")),
        Partition("label2", "Label 2", ("partition=label2",)),
        Partition("nonbalance", "NonBalance", ("partition=nonbalance",)),
        Partition("pareto", "Pareto", ("partition=pareto",)),
    )
}
BASES = {"fedavg": "FedAvg", "fedprox": "FedProx", "scaffold": "Scaffold"}
ATTACKS = {
    "label shift k=3": ("clients.corrupt.ids=[0]", "clients.corrupt.kind=label_shift"),
    "noise inputs": ("clients.corrupt.ids=[0]", "clients.corrupt.kind=noise"),
}

# Paper Table 1 (CIFAR-10, LeNet): rounds to 0.5 accuracy, baseline and FedGSNR; None: > 1000.
PAPER_ROUNDS: dict[str, dict[str, tuple[int | None, int | None]]] = {
    "fedavg": {
        "dir0.5": (170, 115),
        "dir0.1": (355, 285),
        "label2": (470, 340),
        "nonbalance": (210, 155),
        "pareto": (550, 170),
    },
    "fedprox": {
        "dir0.5": (185, 140),
        "dir0.1": (430, 300),
        "label2": (500, 405),
        "nonbalance": (220, 180),
        "pareto": (385, 210),
    },
    "scaffold": {
        "dir0.5": (385, 140),
        "dir0.1": (770, 425),
        "label2": (870, 770),
        "nonbalance": (390, 170),
        "pareto": (None, None),
    },
}
# Paper Table 3: best test accuracy (%), baseline and FedGSNR.
PAPER_BEST: dict[str, dict[str, tuple[float, float]]] = {
    "fedavg": {
        "dir0.5": (67.06, 66.23),
        "dir0.1": (57.44, 61.41),
        "label2": (58.25, 57.69),
        "nonbalance": (65.48, 66.42),
        "pareto": (57.23, 63.38),
    },
    "fedprox": {
        "dir0.5": (63.14, 63.5),
        "dir0.1": (57.80, 59.39),
        "label2": (58.84, 58.39),
        "nonbalance": (63.87, 68.17),
        "pareto": (56.96, 63.39),
    },
    "scaffold": {
        "dir0.5": (62.05, 63.53),
        "dir0.1": (53.98, 58.95),
        "label2": (50.38, 55.48),
        "nonbalance": (62.79, 64.96),
        "pareto": (40.73, 39.83),
    },
}
PAPER_MEAN_SPEEDUP = 1.69


def arm(base: str, gsnr: bool) -> str:
    return f"FedGSNR + {BASES[base]}" if gsnr else BASES[base]


def run_spec(
    partition: Partition, base: str, gsnr: bool, seed: int, rounds: int, attack: str | None = None
) -> RunSpec:
    overrides = (
        *COMMON,
        *partition.overrides,
        f"algorithm={base}",
        *(["algorithm.gsnr.enabled=true"] if gsnr else []),
        *(ATTACKS[attack] if attack else ()),
        f"num_rounds={rounds}",
        f"seed={seed}",
    )
    extra = (("attack", attack),) if attack else ()
    return RunSpec(partition.key, arm(base, gsnr), seed, overrides, rounds, extra)


def run_all(specs: Sequence[RunSpec], keep: Path | None = None) -> list[RunOutcome]:
    def run(spec: RunSpec) -> RunOutcome:
        return execute(spec, 900 + 20 * spec.rounds, prefix="fedgsnr-repro-", eval_every=EVAL_EVERY)

    return execute_all(specs, run, keep=keep)


# ----- analysis ---------------------------------------------------------------------------
def target_for(
    outcomes: Sequence[RunOutcome], partition: str, seeds: Sequence[int], at: int
) -> float:
    """FedAvg's seed-mean accuracy at round `at`, rounded down to half a point."""
    runs = [find(outcomes, setting=partition, arm="FedAvg", seed=s, extra=()) for s in seeds]
    values = [o.accuracies[o.evaluated.index(at)] for o in runs]
    return math.floor(statistics.fmean(values) * 200) / 200


def rounds_to(
    outcomes: Sequence[RunOutcome], partition: str, arm: str, seeds: Sequence[int], target: float
) -> list[int | None]:
    """Per seed, the first evaluated round of this arm's clean run at or above `target`."""
    return [
        find(outcomes, setting=partition, arm=arm, seed=s, extra=()).rounds_to(target)
        for s in seeds
    ]


def rounds_cell(values: Sequence[int | None], rounds: int) -> str:
    reached = [v for v in values if v is not None]
    if len(reached) < len(values):
        return f"> {rounds} ({len(values) - len(reached)}/{len(values)} seeds)"
    mean, std = mean_std([float(v) for v in reached])
    return f"{mean:.0f} ± {std:.0f}"


def speedups(base: Sequence[int | None], gsnr: Sequence[int | None]) -> list[float | None]:
    return [
        b / g if b is not None and g is not None else None for b, g in zip(base, gsnr, strict=True)
    ]


def speedup_cell(values: Sequence[float | None]) -> str:
    finite = [v for v in values if v is not None]
    if not finite:
        return "n/a"
    mean, std = mean_std(finite)
    return f"{mean:.2f}x ± {std:.2f}" + (
        "" if len(finite) == len(values) else f" ({len(finite)} seeds)"
    )


def gsnr_medians(run: RunOutcome) -> dict[int, float]:
    """Median GSNR per partition over the rounds it was sampled (from metrics.csv)."""
    history = partition_columns(run.rows, "gsnr_")
    return {pid: statistics.median(v) for pid, v in sorted(history.items())}


def allocation(run: RunOutcome, sizes: Sequence[int]) -> tuple[float, float, int, float]:
    """Mean entropy, mean max E_k, rounds with a client left out (E_k = 0), and the mean over
    rounds of the rank correlation between E_k and the client's data size n_k."""
    rows = range(1, len(run.rows) + 1)
    entropy = statistics.fmean(run.column("gsnr_entropy", r) for r in rows)
    max_steps = statistics.fmean(run.column("gsnr_max_steps", r) for r in rows)
    idle = sum(1 for r in rows if min(run.columns("steps_", r).values()) == 0)
    rho = []
    for r in rows:
        steps = run.columns("steps_", r)
        if len(set(steps.values())) > 1:  # a uniform allocation has no rank order
            rho.append(spearmanr(list(steps.values()), [sizes[p] for p in steps]).statistic)
    return entropy, max_steps, idle, statistics.fmean(rho) if rho else float("nan")


# ----- report -----------------------------------------------------------------------------
@dataclass
class Context:
    args: argparse.Namespace
    started: dt.datetime
    load_start: tuple[float, float, float]
    total_seconds: float
    targets: dict[str, float]
    starts: dict[tuple[str, int], list[StartState]]  # (partition, seed): one per arm


def header(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    args = ctx.args
    argv = " ".join(shlex.quote(a) for a in sys.argv[1:])
    return [
        "# FedGSNR reproduction on mnist5k: rounds to a target accuracy, Table 1's shape",
        "",
        f"Generated by `python -m benchmarks.fedgsnr_reproduction.run {argv}`; every number below "
        f"comes from the runs of this grid, saved as each ended in `{ctx.args.runs.name}` "
        "(an interrupted invocation's runs are reused when it is started again).",
        "",
        f"- Date: {ctx.started.isoformat(timespec='seconds')}",
        machine_line(ctx.load_start),
        f"- Total wall time: {ctx.total_seconds / 60:.1f} min for {len(outcomes)} fl-runs "
        "(one at a time; the sum of each run's own wall time)",
        f"- Setting (the paper's Table 1 but mnist5k + CNN instead of CIFAR-10 + LeNet): 30 "
        f"clients, all every round, B = 64, E_const = 20 local steps, SGD lr 0.01 without "
        f"momentum, {args.rounds} rounds, test accuracy every {EVAL_EVERY} rounds; seeds "
        f"{' '.join(map(str, args.seeds))}; GSNR with s = 64 samples, `matched` allocation "
        "(sum of E_k = 30 x 20 every round), no cap",
        "- **mnist5k is not a dataset of the paper**: 4,000 training images over 30 clients "
        "(about 133 each, fewer than E_const x B = 1,280 samples a round), so clients make "
        "several passes over their data every round",
        "",
        "```",
        f"fl-run {' '.join(COMMON)} \\",
        "    <partition> algorithm=<base> [algorithm.gsnr.enabled=true] "
        f"num_rounds={args.rounds} seed=S hydra.run.dir=<tmp>",
        "```",
        "",
        f"for example `{outcomes[0].command}`.",
    ]


def start_section(ctx: Context) -> list[str]:
    lines = [
        "## Same start in both arms",
        "",
        "Partition, initial model and client sampling recomputed in-process from each arm's "
        "composed config with the functions the server and clients call, fingerprinted.",
        "",
        "| partition | seed | client sizes (min / median / max) | partition | model | identical |",
        "|---|---:|---|---|---|---|",
    ]
    for (key, seed), states in ctx.starts.items():
        s = states[0]
        sizes = sorted(s.sizes)
        lines.append(
            f"| {PARTITIONS[key].label} | {seed} | {sizes[0]} / {sizes[len(sizes) // 2]} / "
            f"{sizes[-1]} | `{s.partition_digest}` | `{s.model_digest}` | "
            f"{'yes' if same_start(states) else '**NO**'} |"
        )
    return lines


def start_states(args: argparse.Namespace) -> dict[tuple[str, int], list[StartState]]:
    """Every arm's start per (partition, seed), recomputed from its composed config."""
    return {
        (key, seed): [
            start_state(compose_config(run_spec(PARTITIONS[key], b, g, seed, 1).overrides))
            for b in args.bases
            for g in (False, True)
        ]
        for key in args.partitions
        for seed in args.seeds
    }


def table1(ctx: Context, outcomes: Sequence[RunOutcome]) -> tuple[list[str], list[float]]:
    args = ctx.args
    keys = args.partitions
    lines = [
        "## Rounds to the target accuracy (Table 1's shape)",
        "",
        "Target per partition: FedAvg's seed-mean accuracy at round "
        f"{args.target_round}, rounded down to half a point (so FedAvg needs about "
        f"{args.target_round} rounds). First evaluated round at or above it, mean ± std over "
        "seeds; speedup = baseline rounds / FedGSNR rounds per seed, then mean ± std. Paper: "
        "rounds to 0.5 on CIFAR-10 (its speedup).",
        "",
        "| | " + " | ".join(f"{PARTITIONS[k].label}" for k in keys) + " |",
        "|---|" + "---|" * len(keys),
        "| target | " + " | ".join(f"{100 * ctx.targets[k]:.1f} %" for k in keys) + " |",
    ]
    all_speedups: list[float] = []
    for base in args.bases:
        cells = {False: [], True: [], "speedup": [], "paper": []}
        for k in keys:
            per_arm = {}
            for gsnr in (False, True):
                per_arm[gsnr] = rounds_to(outcomes, k, arm(base, gsnr), args.seeds, ctx.targets[k])
                cells[gsnr].append(rounds_cell(per_arm[gsnr], args.rounds))
            sp = speedups(per_arm[False], per_arm[True])
            all_speedups += [v for v in sp if v is not None]
            cells["speedup"].append(speedup_cell(sp))
            pb, pg = PAPER_ROUNDS[base][k]
            paper = "> 1K / > 1K" if pb is None else f"{pb} → {pg} ({pb / pg:.2f}x)"
            cells["paper"].append(paper)
        lines += [
            f"| {arm(base, False)} | " + " | ".join(cells[False]) + " |",
            f"| {arm(base, True)} | " + " | ".join(cells[True]) + " |",
            "| speedup | " + " | ".join(cells["speedup"]) + " |",
            f"| paper ({BASES[base]}) | " + " | ".join(cells["paper"]) + " |",
        ]
    return lines, all_speedups


def by_target(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    """Speedups for earlier targets too: does FedGSNR's gain depend on how far along training is?"""
    args = ctx.args
    ats = [a for a in (10, 20, 30, 40, 50, 60) if a <= args.target_round] or [args.target_round]
    lines = [
        "## Speedup by target",
        "",
        "The same runs, with the target set at FedAvg's seed-mean accuracy at other rounds "
        "(rounded down to half a point): speedup mean ± std over seeds, and the target.",
        "",
        "| arm | partition | " + " | ".join(f"target @ {a}" for a in ats) + " |",
        "|---|---|" + "---|" * len(ats),
    ]
    for base in args.bases:
        for k in args.partitions:
            cells = []
            for at in ats:
                target = target_for(outcomes, k, args.seeds, at)
                base_rounds, gsnr_rounds = (
                    rounds_to(outcomes, k, arm(base, g), args.seeds, target) for g in (False, True)
                )
                sp = speedup_cell(speedups(base_rounds, gsnr_rounds))
                cells.append(f"{sp} ({100 * target:.1f} %)")
            row = [arm(base, True), PARTITIONS[k].label, *cells]
            lines.append("| " + " | ".join(row) + " |")
    return lines


def table3(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    args = ctx.args
    keys = args.partitions
    lines = [
        "## Best test accuracy (Table 3's shape)",
        "",
        "Best evaluated accuracy over the run, %, mean ± std over seeds; paper: CIFAR-10.",
        "",
        "| | " + " | ".join(PARTITIONS[k].label for k in keys) + " |",
        "|---|" + "---|" * len(keys),
    ]
    for base in args.bases:
        for gsnr in (False, True):
            cells = []
            for k in keys:
                runs = [
                    find(outcomes, setting=k, arm=arm(base, gsnr), seed=s, extra=())
                    for s in args.seeds
                ]
                cells.append(
                    f"{pct([o.best for o in runs])} (paper {PAPER_BEST[base][k][int(gsnr)]:.2f})"
                )
            lines.append(f"| {arm(base, gsnr)} | " + " | ".join(cells) + " |")
    return lines


def allocation_section(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    lines = [
        "## What FedGSNR allocated",
        "",
        f"Per run: mean over rounds of the allocation entropy (uniform: ln 30 = "
        f"{math.log(30):.3f}), of max E_k (E_const = 20), the rounds in which some client "
        "got E_k = 0, and the Spearman correlation between E_k and the client's data size "
        "n_k (1: steps follow data size); mean over seeds.",
        "",
        "| arm | partition | entropy | max E_k | rounds with an idle client | corr(E_k, n_k) | "
        "s/round, baseline → FedGSNR |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for base in ctx.args.bases:
        for k in ctx.args.partitions:
            runs = [
                find(outcomes, setting=k, arm=arm(base, True), seed=s, extra=())
                for s in ctx.args.seeds
            ]
            plain = [
                find(outcomes, setting=k, arm=arm(base, False), seed=s, extra=())
                for s in ctx.args.seeds
            ]
            stats = [allocation(o, ctx.starts[k, o.spec.seed][0].sizes) for o in runs]
            lines.append(
                f"| {arm(base, True)} | {PARTITIONS[k].label} | "
                + " | ".join(
                    f"{statistics.fmean(s[i] for s in stats):{f}}"
                    for i, f in enumerate((".3f", ".1f", ".1f", ".2f"))
                )
                + f" | {statistics.fmean(o.seconds_per_round for o in plain):.2f} → "
                f"{statistics.fmean(o.seconds_per_round for o in runs):.2f} |"
            )
    return lines


def attack_section(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    if not ctx.args.attack_seeds:
        return []
    lines = [
        "## Attack study: client 0 corrupted (FedGSNR + FedAvg, alpha = 0.5)",
        "",
        "Median GSNR over rounds (spec 1.8): client 0 in the clean run and in the attacked "
        "run, and the median of the other 29 clients' medians in the attacked run; "
        "`low_contribution` flags clients below 0.5x the cross-client median.",
        "",
        "| seed | attack | client 0, clean | client 0, attacked | others (attacked) | "
        "client 0 flagged | best acc. clean → attacked |",
        "|---:|---|---:|---:|---:|---|---|",
    ]
    for seed in ctx.args.attack_seeds:
        clean = find(outcomes, setting="dir0.5", arm=arm("fedavg", True), seed=seed, extra=())
        clean0 = gsnr_medians(clean).get(0, float("nan"))
        for attack in ATTACKS:
            hit = find(outcomes, setting="dir0.5", seed=seed, attack=attack)
            medians = gsnr_medians(hit)
            others = statistics.median(v for p, v in medians.items() if p != 0)
            flagged = medians.get(0, math.inf) < 0.5 * statistics.median(medians.values())
            lines.append(
                f"| {seed} | {attack} | {clean0:.3f} | {medians.get(0, float('nan')):.3f} | "
                f"{others:.3f} | {'yes' if flagged else 'no'} | "
                f"{100 * clean.best:.2f} → {100 * hit.best:.2f} |"
            )
    return lines


def render(ctx: Context, outcomes: Sequence[RunOutcome], plot: Path) -> str:
    t1, all_speedups = table1(ctx, outcomes)
    mean = statistics.fmean(all_speedups) if all_speedups else float("nan")
    sections = [
        header(ctx, outcomes),
        start_section(ctx),
        t1,
        [
            f"Mean speedup over the {len(all_speedups)} finite per-seed speedups: {mean:.2f}x "
            f"(paper: {PAPER_MEAN_SPEEDUP}x over its 14 finite cells)."
        ],
        by_target(ctx, outcomes),
        table3(ctx, outcomes),
        allocation_section(ctx, outcomes),
        attack_section(ctx, outcomes),
        [
            "## Learning curves",
            "",
            f"![test accuracy vs round]({plot.name})",
            "",
            f"Mean over seeds {', '.join(map(str, ctx.args.seeds))}; shaded: ± 1 std; dotted "
            "line: the target.",
        ],
    ]
    return report_text(sections, ctx.args.notes)


def write_plot(ctx: Context, outcomes: Sequence[RunOutcome], path: Path) -> None:
    colors = {"fedavg": "tab:blue", "fedprox": "tab:orange", "scaffold": "tab:green"}
    panels = []
    for k in ctx.args.partitions:
        curves = [
            Curve(
                arm(base, gsnr),
                [
                    find(outcomes, setting=k, arm=arm(base, gsnr), seed=s, extra=())
                    for s in ctx.args.seeds
                ],
                colors[base],
                dashed=gsnr,
            )
            for base in ctx.args.bases
            for gsnr in (False, True)
        ]
        title = f"mnist5k {PARTITIONS[k].label}, target {100 * ctx.targets[k]:.1f} %"
        panels.append(Panel(title, curves, ctx.targets[k]))
    write_curves(panels, path)


# ----- main -------------------------------------------------------------------------------
def specs(args: argparse.Namespace) -> list[RunSpec]:
    main = [
        run_spec(PARTITIONS[k], base, gsnr, seed, args.rounds)
        for k in args.partitions
        for seed in args.seeds
        for base in args.bases
        for gsnr in (False, True)
    ]
    attacks = [
        run_spec(PARTITIONS["dir0.5"], "fedavg", True, seed, args.rounds, attack)
        for seed in args.attack_seeds
        for attack in ATTACKS
    ]
    return main + attacks


def estimate(args: argparse.Namespace) -> int:
    """One short run per arm on the first partition; project the whole grid."""
    rounds = 6
    per_arm = {}
    for base in args.bases:
        for gsnr in (False, True):
            (o,) = run_all([run_spec(PARTITIONS[args.partitions[0]], base, gsnr, 0, rounds)])
            per_arm[arm(base, gsnr)] = project(o, args.rounds)
            print(
                f"[estimate] {arm(base, gsnr)}: {o.seconds_per_round:.2f} s/round, fixed "
                f"{o.fixed_seconds:.0f} s -> {per_arm[arm(base, gsnr)]:.0f} s per run",
                flush=True,
            )
    total = sum(per_arm.values()) * len(args.partitions) * len(args.seeds)
    total += 2 * len(args.attack_seeds) * per_arm[arm("fedavg", True)]
    print(f"[estimate] projected total: {total / 3600:.1f} h", flush=True)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = reproduction_parser(__doc__, "fedgsnr_reproduction", 80)
    parser.add_argument("--target-round", type=int, default=50)
    parser.add_argument("--bases", nargs="+", default=["fedavg"], choices=list(BASES))
    parser.add_argument(
        "--partitions", nargs="+", default=list(PARTITIONS), choices=list(PARTITIONS)
    )
    parser.add_argument("--attack-seeds", type=int, nargs="*", default=[0])
    args = parsed(parser, argv)
    if args.target_round % EVAL_EVERY or not EVAL_EVERY <= args.target_round <= args.rounds:
        parser.error(f"--target-round must be a multiple of {EVAL_EVERY} within --rounds")
    if "fedavg" not in args.bases:
        parser.error("--bases must include fedavg (the targets come from its runs)")
    if args.attack_seeds and "dir0.5" not in args.partitions:
        parser.error("the attack study compares with the clean dir0.5 runs: keep dir0.5")
    if not set(args.attack_seeds) <= set(args.seeds):
        parser.error("--attack-seeds must be among --seeds (clean runs are reused)")
    return args


def report(
    args: argparse.Namespace, outcomes: list[RunOutcome], plot: Path, started: Started
) -> str:
    total = sum(o.process_seconds for o in outcomes)  # as measured, reused runs included
    targets = {k: target_for(outcomes, k, args.seeds, args.target_round) for k in args.partitions}
    ctx = Context(args, started.at, started.load, total, targets, start_states(args))
    write_plot(ctx, outcomes, plot)
    return render(ctx, outcomes, plot)


def main(argv: list[str] | None = None) -> int:
    return reproduce(
        parse_args(argv),
        "fedgsnr_reproduction",
        grid=specs,
        run_all=run_all,
        report=report,
        estimate=estimate,
    )


if __name__ == "__main__":
    sys.exit(main())
