"""FedCat reproduction: Table 1's shape (FedAvg, FedProx, SCAFFOLD, FedCat over Dirichlet
label skew) and Table 3's ablation (grouping and count selection only, "w/ GC"; concatenation
only, "w/ DC"), with the participation spread the count table is meant to flatten.

Every run is `fl-run runtime=simulation` with the paper's client setting: 100 clients, 10 per
round (FedCat: k = 10 copies, so a cycle is 10 rounds), --epochs local epochs of SGD with lr
0.01, momentum 0.9 and batch 50, central evaluation
every 10 rounds (at FedCat's cycle ends), --rounds rounds, seeds --seeds. One seed gives every
arm the same partition and initial model (checked below); which clients train differs by
design (FedCat picks its own).

    datasets   mnist: mnist5k + cnn, partition=dirichlet with alpha in --alphas (the paper's
               MNIST column; its gains there are within noise). mnist5k has 4,000 training
               images, 40 per client: at alpha 0.1 no Dirichlet draw gives every client 10
               (the spec's min_size) or even 2 of them, so every alpha uses min_size 1
               (clients of 1 to about 160 images at alpha 0.1).
               synthetic: FedProx's Synthetic(1, 1), one silo per client (partition=natural),
               multinomial logistic regression: the harder setting, where each client's data
               comes from its own model and FedAvg is visibly hurt by the skew (--datasets)
    arms       FedAvg, FedProx (mu 0.1, the paper's MNIST value), SCAFFOLD, FedCat (eps 0.5,
               lam 1), FedCat w/ GC, FedCat w/ DC

Accuracy: the best evaluation and the mean of the last 5 (spec 4.4); gains are FedCat minus
FedAvg per seed.

    python -m benchmarks.fedcat_reproduction.run [--seeds 0 1 2] [--rounds 300] [--epochs 5]
        [--alphas 0.1 0.5 1.0] [--datasets mnist synthetic] [--notes NOTES.md]
    python -m benchmarks.fedcat_reproduction.run --estimate      # one short run per arm: cost
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.estimates import project
from benchmarks.harness.execute import execute, execute_all
from benchmarks.harness.outcome import RunOutcome, RunSpec, find
from benchmarks.harness.plots import Curve, Panel, write_curves
from benchmarks.harness.reproduce import Started, parsed, reproduce, reproduction_parser
from benchmarks.harness.same_start import compose_config, start_state
from benchmarks.harness.seeds import difference, pct, significance
from benchmarks.harness.tables import machine_line, report_text

EVAL_EVERY = 10
LAST_EVALS = 5
NUM_CLIENTS, K = 100, 10
COMMON = (
    "runtime=simulation",
    f"num_clients={NUM_CLIENTS}",
    "train.lr=0.01",
    "train.momentum=0.9",
    "train.batch_size=50",
    f"eval_every={EVAL_EVERY}",
)
DATASETS = {
    "mnist": ("dataset=mnist5k", "model=cnn", "partition=dirichlet", "partition.min_size=1"),
    "synthetic": ("dataset=synthetic", "model=mlp", "model.hidden=[]", "partition=natural"),
}
LABELS = {"mnist": "mnist5k + cnn", "synthetic": "Synthetic(1, 1) + logistic regression"}
SKEWED = {"mnist"}  # the datasets split by Dirichlet alpha (the others by their silos)
SAMPLED = (f"clients_per_round={K}",)
FEDCAT = ("algorithm=fedcat", f"algorithm.k={K}")
ARMS = {
    "FedAvg": ("algorithm=fedavg", *SAMPLED),
    "FedProx": ("algorithm=fedprox", "algorithm.mu=0.1", *SAMPLED),
    "SCAFFOLD": ("algorithm=scaffold", *SAMPLED),
    "FedCat": FEDCAT,
    "FedCat w/ GC": (*FEDCAT, "algorithm.concatenate=false"),
    "FedCat w/ DC": (*FEDCAT, "algorithm.count_selection=false"),
}
TABLE1 = ("FedAvg", "FedProx", "SCAFFOLD", "FedCat")
TABLE3 = ("FedAvg", "FedCat w/ GC", "FedCat w/ DC", "FedCat")
PAPER_MNIST = {  # Table 1, MNIST: alpha -> FedAvg, FedProx, SCAFFOLD, FedCat
    0.1: ("99.04", "99.02", "98.92", "99.21"),
    0.5: ("99.31", "99.27", "99.28", "99.42"),
    1.0: ("99.37", "99.30", "99.32", "99.40"),
}
PAPER_CIFAR10_ABLATION = {  # Table 3, CIFAR-10: FedAvg, w/ GC, w/ DC, FedCat
    0.1: ("51.01", "51.02", "55.06", "56.16"),
    0.5: ("54.32", "57.20", "57.51", "57.89"),
    1.0: ("55.69", "57.54", "59.12", "61.45"),
}


def settings(args: argparse.Namespace) -> list[tuple[str, float | None]]:
    """(dataset, alpha): one per alpha for a Dirichlet-split dataset, else (dataset, None)."""
    return [(d, a) for d in args.datasets for a in (args.alphas if d in SKEWED else [None])]


def setting_label(dataset: str, alpha: float | None) -> str:
    return LABELS[dataset] + (f", Dirichlet {alpha:g}" if alpha is not None else "")


def run_spec(dataset: str, alpha: float | None, arm: str, seed: int, args) -> RunSpec:
    overrides = (
        *COMMON,
        *DATASETS[dataset],
        *([f"partition.alpha={alpha}"] if alpha is not None else []),
        f"train.local_epochs={args.epochs}",
        *ARMS[arm],
        f"seed={seed}",
        f"num_rounds={args.rounds}",
    )
    return RunSpec(dataset, arm, seed, overrides, args.rounds, extra=(("alpha", alpha),))


def specs(args: argparse.Namespace) -> list[RunSpec]:
    return [
        run_spec(d, a, arm, s, args) for d, a in settings(args) for s in args.seeds for arm in ARMS
    ]


def run_all(grid: Sequence[RunSpec], keep: Path | None = None) -> list[RunOutcome]:
    def run(spec: RunSpec) -> RunOutcome:
        return execute(spec, 1800 + 10 * spec.rounds, prefix="fedcat-repro-", eval_every=EVAL_EVERY)

    return execute_all(grid, run, keep=keep)


# ----- analysis ---------------------------------------------------------------------------
def runs(outcomes, dataset: str, alpha: float | None, arm: str, seeds) -> list[RunOutcome]:
    return [find(outcomes, setting=dataset, alpha=alpha, arm=arm, seed=s) for s in seeds]


def last_mean(o: RunOutcome) -> float | None:
    """Mean of the last 5 evaluations (None for a diverged run)."""
    if o.diverged_round is not None:
        return None
    return statistics.fmean(o.accuracies[-LAST_EVALS:])


def picks(o: RunOutcome) -> list[int]:
    """Rounds each client trained in: FedCat's copy_<i> columns, the others' weight_<pid>."""
    count = [0] * NUM_CLIENTS
    for row in o.rows:
        chosen = [v for k, v in row.items() if k.startswith("copy_") and k[5:].isdigit() and v]
        if not chosen:
            chosen = [k[7:] for k, v in row.items() if k.startswith("weight_") and v]
        for pid in chosen:
            count[int(float(pid))] += 1
    return count


# ----- report -----------------------------------------------------------------------------
@dataclass
class Context:
    args: argparse.Namespace
    started: dt.datetime
    load_start: tuple[float, float, float]
    total_seconds: float


def header(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    args = ctx.args
    return [
        "# FedCat reproduction: Tables 1 and 3 in shape",
        "",
        f"Generated by `python -m benchmarks.fedcat_reproduction.run "
        f"{' '.join(shlex.quote(a) for a in sys.argv[1:])}` on "
        f"{ctx.started:%Y-%m-%d %H:%M %Z} ({len(outcomes)} runs, "
        f"{ctx.total_seconds / 3600:.1f} h of fl-run wall time, one at a time).",
        "",
        f"- Setting: {' '.join(COMMON)} train.local_epochs={args.epochs}, {args.rounds} rounds "
        f"({args.rounds // K} FedCat cycles), seeds {', '.join(map(str, args.seeds))}; "
        "baselines sample 10 clients a round, FedCat picks k = 10 (eps 0.5, lam 1).",
        f"- One run, e.g.: `{outcomes[0].command if outcomes else ''}`",
        f"- Accuracy: central test accuracy; 'last {LAST_EVALS}' is the mean of the last "
        f"{LAST_EVALS} evaluations (every {EVAL_EVERY} rounds, FedCat's cycle ends), 'best' "
        "the best evaluation.",
        machine_line(ctx.load_start),
    ]


def start_section(ctx: Context) -> list[str]:
    lines = ["## Same start", ""]
    for d, a in settings(ctx.args):
        for s in ctx.args.seeds:
            states = [
                start_state(compose_config(run_spec(d, a, arm, s, ctx.args).overrides))
                for arm in ARMS
            ]
            same = all(
                (x.partition_digest, x.model_digest)
                == (states[0].partition_digest, states[0].model_digest)
                for x in states
            )
            sizes = states[0].sizes
            lines.append(
                f"- {setting_label(d, a)}, seed {s}: {'same' if same else '**different**'} "
                f"partition and initial model in all {len(states)} arms; client sizes "
                f"{min(sizes)}..{max(sizes)} (median {int(statistics.median(sizes))})"
            )
    return lines


def accuracy_table(
    ctx: Context, outcomes, dataset: str, arms: Sequence[str], paper: dict, title: str
) -> list[str]:
    seeds = ctx.args.seeds
    alphas = [a for d, a in settings(ctx.args) if d == dataset]
    head = " | ".join(f"{arm} last {LAST_EVALS} | {arm} best" for arm in arms)
    lines = [
        f"## {title}: {LABELS[dataset]}",
        "",
        f"| split | {head} | paper ({', '.join(arms)}) |",
        "|---|" + "---|" * (2 * len(arms)) + "---|",
    ]
    for a in alphas:
        cells = []
        for arm in arms:
            rs = runs(outcomes, dataset, a, arm, seeds)
            cells += [pct([last_mean(o) for o in rs]), pct([o.best for o in rs])]
        ref = " / ".join(paper.get(a, ("—",) * len(arms))) if dataset in SKEWED else "—"
        split = f"Dirichlet {a:g}" if a is not None else "one silo each"
        lines.append(f"| {split} | {' | '.join(cells)} | {ref} |")
    lines += ["", "FedCat minus each arm, last-5 mean, per seed:", ""]
    for a in alphas:
        mine = runs(outcomes, dataset, a, "FedCat", seeds)
        for arm in arms:
            if arm == "FedCat":
                continue
            other = runs(outcomes, dataset, a, arm, seeds)
            gains = [
                difference(last_mean(x), last_mean(y)) for x, y in zip(mine, other, strict=True)
            ]
            lines.append(f"- {setting_label(dataset, a)}, FedCat - {arm}: {significance(gains)}")
    return lines


def participation(ctx: Context, outcomes) -> list[str]:
    lines = [
        "## Participation per client",
        "",
        "Rounds each client trained in over the run (min / max over the 100 clients, mean over "
        f"seeds); {ctx.args.rounds} rounds x 10 picks make {ctx.args.rounds // 10} per client "
        "on average.",
        "",
        "| setting | " + " | ".join(ARMS) + " |",
        "|---|" + "---|" * len(ARMS),
    ]
    for d, a in settings(ctx.args):
        cells = []
        for arm in ARMS:
            counts = [picks(o) for o in runs(outcomes, d, a, arm, ctx.args.seeds)]
            low = statistics.fmean(min(c) for c in counts)
            high = statistics.fmean(max(c) for c in counts)
            cells.append(f"{low:.1f} / {high:.1f}")
        lines.append(f"| {setting_label(d, a)} | " + " | ".join(cells) + " |")
    return lines


COLORS = {
    "FedAvg": "black",
    "FedProx": "tab:olive",
    "SCAFFOLD": "tab:purple",
    "FedCat": "tab:red",
    "FedCat w/ GC": "tab:blue",
    "FedCat w/ DC": "tab:orange",
}


def write_plot(ctx: Context, outcomes, path: Path) -> None:
    panels = [
        Panel(
            setting_label(d, a),
            [
                Curve(arm, runs(outcomes, d, a, arm, ctx.args.seeds), COLORS[arm], "w/" in arm)
                for arm in ARMS
            ],
        )
        for d, a in settings(ctx.args)
    ]
    write_curves(panels, path)


def render(ctx: Context, outcomes, plot: Path) -> str:
    sections = [header(ctx, outcomes), start_section(ctx)]
    for d in ctx.args.datasets:
        sections.append(
            accuracy_table(ctx, outcomes, d, TABLE1, PAPER_MNIST, "Table 1 shape (paper: MNIST)")
        )
        sections.append(
            accuracy_table(
                ctx, outcomes, d, TABLE3, PAPER_CIFAR10_ABLATION, "Table 3 shape (paper: CIFAR-10)"
            )
        )
    sections += [
        participation(ctx, outcomes),
        [
            "## Curves",
            "",
            f"![test accuracy against round]({plot.name})",
            "",
            "Central test accuracy, mean over seeds, ± 1 std shaded; ablations dashed.",
        ],
    ]
    return report_text(sections, ctx.args.notes)


# ----- main -------------------------------------------------------------------------------
def estimate(args: argparse.Namespace) -> int:
    """One 20-round run of each arm per dataset (its first setting, seed 0); project the grid."""
    total = 0.0
    short = argparse.Namespace(**{**vars(args), "rounds": 2 * K})
    for d in args.datasets:
        split = [a for dd, a in settings(args) if dd == d]
        for arm in ARMS:
            (o,) = run_all([run_spec(d, split[0], arm, 0, short)])
            seconds = project(o, args.rounds)
            total += seconds * len(split) * len(args.seeds)
            print(
                f"[estimate] {d} {arm}: {o.seconds_per_round:.2f} s/round, fixed "
                f"{o.fixed_seconds:.0f} s -> {seconds / 60:.1f} min per run",
                flush=True,
            )
    print(f"[estimate] projected total: {total / 3600:.1f} h", flush=True)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = reproduction_parser(__doc__, "fedcat_reproduction", 300)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.1, 0.5, 1.0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    args = parsed(parser, argv)
    if args.rounds < 2 * K or args.rounds % K:
        parser.error(f"--rounds must be a multiple of {K} and at least {2 * K}")
    return args


def report(
    args: argparse.Namespace, outcomes: list[RunOutcome], plot: Path, started: Started
) -> str:
    ctx = Context(args, started.at, started.load, sum(o.process_seconds for o in outcomes))
    write_plot(ctx, outcomes, plot)
    return render(ctx, outcomes, plot)


def main(argv: list[str] | None = None) -> int:
    return reproduce(
        parse_args(argv),
        "fedcat_reproduction",
        grid=specs,
        run_all=run_all,
        report=report,
        estimate=estimate,
    )


if __name__ == "__main__":
    sys.exit(main())
