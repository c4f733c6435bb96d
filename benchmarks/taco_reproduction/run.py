"""TACO reproduction on mnist5k: Table V's shape (accuracy at T, rounds to a target, client
time to the target), Table VI's ablation, Table II's alpha per group and Table VIII's
freeloader detection.

Every run is `fl-run runtime=simulation dataset=mnist5k model=cnn` with the paper's setting:
20 clients, all every round, K = 100 local steps of batch 64, SGD lr 0.01 without momentum,
the synthetic 3-group label skew (partition=label_groups: 7, 7 and 6 clients holding 1, 2 and
5 of the 10 labels), central evaluation every round, --rounds rounds, seeds --seeds. One seed
gives every arm the same partition, initial model and client sampling (checked below).

    arms        FedAvg, FedProx (mu = 0.1), FoolsGold, SCAFFOLD, STEM (a = 0.2), FedACG
                (lam 0.85, beta 0.001), FedDyn (alpha 0.01), TACO (delta_scale = K) and TACO
                read literally (delta_scale = 1)
    ablation    TACO without tailored correction and/or tailored aggregation (Table VI)
    timing      every main arm again, seed 0, 6 rounds, run alone on a quiet machine: its
                slowest client's seconds per round (median over rounds 2..) times each
                seed's rounds to the target is Table V's client time (the main runs' own
                clocks shared the CPU with other work)
    freeloaders TACO with 8 of the 20 clients echoing the last global update (3 of group A,
                3 of B, 2 of C, so 4 benign clients per group remain), once with expulsion
                off (Table II's alpha per group; Table VIII's TPR/FPR for each kappa at
                lam = T/5, counted from that run's alpha) and once with expulsion on at
                kappa = 0.6 (when each client was expelled)

The target is FedAvg's seed-mean accuracy at round --rounds/2, rounded down to half a point,
so FedAvg needs about half of T to reach it. Client time to the target: the sum over rounds
up to it of the slowest client's local training time (`compute_seconds_max`, TACO spec 5).

    python -m benchmarks.taco_reproduction.run [--seeds 0 1 2] [--rounds 50] [--groups main
        ablation freeloaders timing] [--out benchmarks/taco_reproduction/report.md]
    python -m benchmarks.taco_reproduction.run --estimate      # one short run per arm: cost
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

from benchmarks.harness.estimates import project
from benchmarks.harness.execute import execute, execute_all
from benchmarks.harness.outcome import RunOutcome, RunSpec, find
from benchmarks.harness.plots import Curve, Panel, write_curves
from benchmarks.harness.reproduce import Started, parsed, reproduce, reproduction_parser
from benchmarks.harness.same_start import compose_config, same_start, start_state
from benchmarks.harness.seeds import mean_std, pct
from benchmarks.harness.tables import machine_line, report_text
from fl_system.data.partitions import LabelGroupsPartition
from fl_system.results import partition_columns
from fl_system.taco import record_strikes

COMMON = (
    "runtime=simulation",
    "dataset=mnist5k",
    "model=cnn",
    "num_clients=20",
    "partition=label_groups",
    "train.local_steps=100",
    "train.batch_size=64",
    "train.lr=0.01",
    "train.momentum=0.0",
    "eval_every=1",
)
NUM_CLIENTS = 20
ARMS = {  # label: overrides
    "FedAvg": ("algorithm=fedavg",),
    "FedProx": ("algorithm=fedprox", "algorithm.mu=0.1"),
    "FoolsGold": ("algorithm=foolsgold",),
    "SCAFFOLD": ("algorithm=scaffold",),
    "STEM": ("algorithm=stem",),
    "FedACG": ("algorithm=fedacg",),
    "FedDyn": ("algorithm=feddyn",),
    "TACO": ("algorithm=taco",),
    "TACO literal": ("algorithm=taco", "algorithm.delta_scale=1"),
}
ABLATION = {  # (tailored correction, tailored aggregation): arm; both = "TACO"
    (False, False): "TACO, neither",
    (False, True): "TACO, aggregation only",
    (True, False): "TACO, correction only",
}
FREELOADER_ARMS = {"TACO, 8 echo freeloaders": False, "TACO, 8 echo freeloaders, expel": True}
GROUP_NAMES = ("A (10 %)", "B (20 %)", "C (50 %)")
PAPER_FMNIST = {  # Table V: (Acc@100R, R->70 %), None = never
    "FedAvg": ("71.36±0.06", "85"),
    "FedProx": ("67.14±0.11", "100+"),
    "FoolsGold": ("73.09±0.16", "80"),
    "SCAFFOLD": ("68.84±0.14", "100+"),
    "STEM": ("72.97±0.03", "69"),
    "FedACG": ("70.91±0.27", "92"),
    "TACO": ("73.28±0.16", "59"),
}
PAPER_TABLE2_MNIST = {"A": "0.23±0.02", "B": "0.27±0.03", "C": "0.41±0.02", "free": "0.88±0.01"}
PAPER_TABLE8_T5 = {
    0.4: "100 % / 12.5 %",
    0.5: "100 % / 0 %",
    0.6: "100 % / 0 %",
    0.8: "100 % / 0 %",
    0.9: "100 % / 0 %",
}
KAPPAS = (0.4, 0.5, 0.6, 0.8, 0.9)
TIMING_ROUNDS = 6


def freeloader_ids(seed: int) -> list[int]:
    """3 clients of group A, 3 of B, 2 of C: 4 benign clients per group remain."""
    groups = LabelGroupsPartition().groups_of(NUM_CLIENTS, seed)
    ids = []
    for g, count in enumerate((3, 3, 2)):
        ids += sorted(int(p) for p, h in enumerate(groups) if h == g)[:count]
    return sorted(ids)


def ablation_overrides(correction: bool, aggregation: bool) -> tuple[str, ...]:
    return (
        "algorithm=taco",
        f"algorithm.tailored_correction={str(correction).lower()}",
        f"algorithm.tailored_aggregation={str(aggregation).lower()}",
    )


def freeloader_overrides(seed: int, expel: bool) -> tuple[str, ...]:
    ids = ",".join(map(str, freeloader_ids(seed)))
    return (
        "algorithm=taco",
        f"algorithm.expel={str(expel).lower()}",
        f"clients.freeloaders.ids=[{ids}]",
        "clients.freeloaders.kind=echo",
    )


def run_spec(group: str, arm: str, seed: int, rounds: int) -> RunSpec:
    if group == "timing":
        seed, rounds = 0, TIMING_ROUNDS
    if group in ("main", "timing"):
        own = ARMS[arm]
    elif group == "ablation":
        own = ablation_overrides(*next(k for k, v in ABLATION.items() if v == arm))
    else:
        own = freeloader_overrides(seed, FREELOADER_ARMS[arm])
    overrides = (*COMMON, *own, f"num_rounds={rounds}", f"seed={seed}")
    return RunSpec(group, arm, seed, overrides, rounds)


def group_arms(group: str) -> list[str]:
    arms = {
        "main": ARMS,
        "timing": ARMS,
        "ablation": ABLATION.values(),
        "freeloaders": FREELOADER_ARMS,
    }
    return list(arms[group])


def specs(args: argparse.Namespace) -> list[RunSpec]:
    return [
        run_spec(group, arm, seed, args.rounds)
        for group in args.groups
        for seed in (args.seeds if group != "timing" else [0])
        for arm in group_arms(group)
    ]


def run_all(specs_: Sequence[RunSpec], keep: Path | None = None) -> list[RunOutcome]:
    def run(spec: RunSpec) -> RunOutcome:
        return execute(spec, 1800 + 60 * spec.rounds, prefix="taco-repro-")

    return execute_all(specs_, run, keep=keep)


# ----- analysis ---------------------------------------------------------------------------
def runs(outcomes: Sequence[RunOutcome], group: str, arm: str, seeds: Sequence[int]):
    return [find(outcomes, setting=group, arm=arm, seed=s) for s in seeds]


def target_for(outcomes: Sequence[RunOutcome], args: argparse.Namespace) -> float:
    """FedAvg's seed-mean accuracy at round T/2, rounded down to half a point."""
    at = args.rounds // 2
    values = [
        o.accuracies[o.evaluated.index(at)] for o in runs(outcomes, "main", "FedAvg", args.seeds)
    ]
    return math.floor(statistics.fmean(values) * 200) / 200


def final(o: RunOutcome) -> float | None:
    return None if o.diverged_round is not None else o.accuracies[-1]


def client_seconds_to(o: RunOutcome, round_: int) -> float:
    """Sum of the slowest client's local training time over rounds 1..round_."""
    return sum(o.column("compute_seconds_max", r) or 0.0 for r in range(1, round_ + 1))


def quiet_seconds_per_round(outcomes: Sequence[RunOutcome], arm: str) -> float:
    """The timing run's slowest-client seconds per round, median over rounds 2.. (round 1
    also pays the clients' first data load and warm-up)."""
    o = find(outcomes, setting="timing", arm=arm)
    return statistics.median(
        o.column("compute_seconds_max", r) or 0.0 for r in range(2, TIMING_ROUNDS + 1)
    )


def client_time(outcomes: Sequence[RunOutcome], o: RunOutcome, round_: int, timed: bool) -> float:
    """Client time to round_: quiet per-round seconds x rounds with a timing group, else the
    run's own clock."""
    if timed:
        return round_ * quiet_seconds_per_round(outcomes, o.spec.arm)
    return client_seconds_to(o, round_)


def rounds_cell(values: Sequence[int | None], rounds: int) -> str:
    reached = [v for v in values if v is not None]
    if len(reached) < len(values):
        return f"{rounds}+ ({len(values) - len(reached)}/{len(values)} seeds never)"
    mean, std = mean_std([float(v) for v in reached])
    return f"{mean:.0f} ± {std:.0f}"


def alpha_by_group(o: RunOutcome, seed: int) -> dict[str, float]:
    """Mean alpha over rounds >= 2 (round 1's echo is a zero update) and over the members of
    each group, the freeloaders apart."""
    history = partition_columns(o.rows[1:], "alpha_")
    free = set(freeloader_ids(seed))
    groups = LabelGroupsPartition().groups_of(NUM_CLIENTS, seed)
    members: dict[str, list[int]] = {"free": sorted(free)}
    for g, name in enumerate("ABC"):
        members[name] = [p for p in range(NUM_CLIENTS) if groups[p] == g and p not in free]
    return {
        name: statistics.fmean(statistics.fmean(history[p]) for p in pids if p in history)
        for name, pids in members.items()
    }


def detection(o: RunOutcome, seed: int, kappa: float, lam: int) -> tuple[int, int]:
    """(freeloaders, benign clients) with lam strikes at kappa in this run's alpha history."""
    strikes: dict[int, int] = {}
    flagged: set[int] = set()
    for r in range(1, len(o.rows) + 1):
        strikes, now = record_strikes(o.columns("alpha_", r), strikes, kappa=kappa, lam=lam)
        flagged.update(now)
    free = set(freeloader_ids(seed))
    return len(flagged & free), len(flagged - free)


# ----- report -----------------------------------------------------------------------------
@dataclass
class Context:
    args: argparse.Namespace
    started: dt.datetime
    load_start: tuple[float, float, float]
    total_seconds: float
    target: float | None


def header(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    args = ctx.args
    argv = " ".join(shlex.quote(a) for a in sys.argv[1:])
    example = outcomes[0].command if outcomes else ""
    return [
        "# TACO reproduction on mnist5k: Tables V, VI, II and VIII in shape",
        "",
        f"Generated by `python -m benchmarks.taco_reproduction.run {argv}` on "
        f"{ctx.started:%Y-%m-%d %H:%M %Z} ({len(outcomes)} runs, "
        f"{ctx.total_seconds / 3600:.1f} h of fl-run wall time, one at a time).",
        "",
        f"- Setting: {' '.join(COMMON)}, {args.rounds} rounds, seeds "
        f"{', '.join(map(str, args.seeds))}.",
        f"- One run, e.g.: `{example.replace('fl-run ', 'fl-run ', 1)}`",
        "- Accuracy: central test accuracy of the global model w after the last round (the "
        "paper's 'Acc'); rounds to target: the first round at or above it. Client time: the "
        "slowest client's local training seconds per round over the rounds to the target "
        "(how each is measured: Table V).",
        machine_line(ctx.load_start),
    ]


def start_section(ctx: Context) -> list[str]:
    args = ctx.args
    rows = []
    for seed in args.seeds:
        states = [
            start_state(compose_config(run_spec("main", arm, seed, args.rounds).overrides))
            for arm in ARMS
        ]
        rows.append(
            f"- seed {seed}: {'same' if same_start(states) else '**different**'} partition, "
            f"initial model and sampling in all {len(states)} arms; client sizes "
            f"{states[0].sizes}"
        )
    return ["## Same start", "", *rows]


def table5(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    args, target = ctx.args, ctx.target
    assert target is not None
    timed = "timing" in args.groups
    base = runs(outcomes, "main", "FedAvg", args.seeds)
    base_time = [
        client_time(outcomes, o, r, timed) if (r := o.rounds_to(target)) else None for o in base
    ]
    how = (
        f"rounds to target x the method's slowest-client seconds per round measured alone "
        f"(timing group: seed 0, {TIMING_ROUNDS} rounds, median of rounds 2-{TIMING_ROUNDS})"
        if timed
        else "the runs' own clocks (shared CPU: indicative only)"
    )
    lines = [
        f"## Table V shape: accuracy at {args.rounds} rounds, rounds and client time to "
        f"{100 * target:.1f} %",
        "",
        f"Target: FedAvg's mean accuracy at round {args.rounds // 2}, rounded down to half a "
        f"point. Client time: {how}; relative to FedAvg per seed (negative: less).",
        "",
        f"| method | Acc@{args.rounds}R (%) | best (%) | R→{100 * target:.1f} % | client s "
        "per round | client s to target | vs FedAvg | paper FMNIST Acc@100R | paper R→70 % |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in ARMS:
        rs = runs(outcomes, "main", arm, args.seeds)
        reached = [o.rounds_to(target) for o in rs]
        seconds = [
            client_time(outcomes, o, r, timed) if r else None
            for o, r in zip(rs, reached, strict=True)
        ]
        per_round = (
            quiet_seconds_per_round(outcomes, arm)
            if timed
            else statistics.fmean(
                statistics.fmean(
                    o.column("compute_seconds_max", r) or 0.0 for r in range(1, len(o.rows) + 1)
                )
                for o in rs
            )
        )
        rel = [100 * (s / b - 1) for s, b in zip(seconds, base_time, strict=True) if s and b]
        paper = PAPER_FMNIST.get(arm, ("—", "—"))
        lines.append(
            f"| {arm} | {pct([final(o) for o in rs])} | {pct([o.best for o in rs])} | "
            f"{rounds_cell(reached, args.rounds)} | {per_round:.2f} | "
            + (f"{statistics.fmean(s for s in seconds if s):.0f}" if any(seconds) else "—")
            + " | "
            + (f"{statistics.fmean(rel):+.1f} %" if rel else "—")
            + f" | {paper[0]} | {paper[1]} |"
        )
    return lines


def table6(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    seeds = ctx.args.seeds
    lines = [
        "## Table VI shape: ablation, final accuracy (%)",
        "",
        "| tailored correction | tailored aggregation | ours | paper FEMNIST Dir(0.2) | "
        "paper adult Dir(0.5) |",
        "|---|---|---|---|---|",
    ]
    paper = {
        (False, False): ("89.98", "78.88"),
        (False, True): ("91.30", "83.34"),
        (True, False): ("95.16", "83.69"),
        (True, True): ("95.22", "83.80"),
    }
    for key, (femnist, adult) in paper.items():
        group, arm = ("main", "TACO") if key == (True, True) else ("ablation", ABLATION[key])
        rs = runs(outcomes, group, arm, seeds)
        marks = ["yes" if k else "no" for k in key]
        lines.append(
            f"| {marks[0]} | {marks[1]} | {pct([final(o) for o in rs])} | {femnist} | {adult} |"
        )
    return lines


def table2(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    seeds = ctx.args.seeds
    rs = runs(outcomes, "freeloaders", "TACO, 8 echo freeloaders", seeds)
    by_seed = [alpha_by_group(o, s) for o, s in zip(rs, seeds, strict=True)]
    lines = [
        "## Table II shape: mean alpha per group, 8 of 20 clients echo freeloaders (expulsion off)",
        "",
        "| group | ours | paper MNIST |",
        "|---|---|---|",
    ]
    for key, name in (*zip("ABC", GROUP_NAMES, strict=True), ("free", "freeloaders")):
        mean, std = mean_std([a[key] for a in by_seed])
        lines.append(f"| {name} | {mean:.2f} ± {std:.2f} | {PAPER_TABLE2_MNIST[key]} |")
    return lines


def table8(ctx: Context, outcomes: Sequence[RunOutcome]) -> list[str]:
    args = ctx.args
    lam = math.ceil(args.rounds / 5)
    rs = runs(outcomes, "freeloaders", "TACO, 8 echo freeloaders", args.seeds)
    lines = [
        f"## Table VIII shape: detection at λ = T/5 = {lam}",
        "",
        "Counted from the expulsion-off runs' alpha: a client is detected once it has λ strikes "
        "(alpha ≥ κ). TPR = detected freeloaders / 8, FPR = detected benign clients / 12, mean "
        "over seeds (freeloaders and benign clients detected, per seed, in brackets).",
        "",
        "| κ | ours TPR / FPR | paper FMNIST, λ = T/5 |",
        "|---|---|---|",
    ]
    for kappa in KAPPAS:
        counts = [detection(o, s, kappa, lam) for o, s in zip(rs, args.seeds, strict=True)]
        tpr = statistics.fmean(100 * c[0] / 8 for c in counts)
        fpr = statistics.fmean(100 * c[1] / 12 for c in counts)
        raw = "; ".join(f"{t}/8 and {f}/12" for t, f in counts)
        lines.append(
            f"| {kappa:g} | {tpr:.0f} % / {fpr:.1f} % ({raw}) | {PAPER_TABLE8_T5[kappa]} |"
        )
    expel = runs(outcomes, "freeloaders", "TACO, 8 echo freeloaders, expel", args.seeds)
    lines += ["", "With expulsion on (κ = 0.6): partitions expelled and when, per seed:", ""]
    for o, seed in zip(expel, args.seeds, strict=True):
        free = set(freeloader_ids(seed))
        when = {
            p: int(o.rows[r - 1]["round"])
            for r in range(1, len(o.rows) + 1)
            for p in map(int, (o.rows[r - 1].get("expelled_now") or "").split())
        }
        lines.append(
            f"- seed {seed}: freeloaders {sorted(free)}; expelled "
            + (
                ", ".join(
                    f"{p} (round {r}{'' if p in free else ', benign'})"
                    for p, r in sorted(when.items())
                )
                or "none"
            )
            + f"; final accuracy {100 * (final(o) or 0):.2f} %"
        )
    return lines


def render(ctx: Context, outcomes: Sequence[RunOutcome], plot: Path) -> str:
    groups = ctx.args.groups
    sections = [
        header(ctx, outcomes),
        start_section(ctx) if "main" in groups else [],
        table5(ctx, outcomes) if "main" in groups else [],
        table6(ctx, outcomes) if {"main", "ablation"} <= set(groups) else [],
        table2(ctx, outcomes) if "freeloaders" in groups else [],
        table8(ctx, outcomes) if "freeloaders" in groups else [],
        [
            "## Curves",
            "",
            f"![test accuracy against round]({plot.name})",
            "",
            "Central test accuracy, mean over seeds, ± 1 std shaded.",
        ],
    ]
    return report_text(sections, ctx.args.notes)


COLORS = (
    "black",
    "tab:blue",
    "tab:olive",
    "tab:purple",
    "tab:brown",
    "tab:cyan",
    "tab:pink",
    "tab:red",
    "tab:orange",
)


def write_plot(ctx: Context, outcomes: Sequence[RunOutcome], path: Path) -> None:
    seeds = ctx.args.seeds
    panels = []
    for group in (g for g in ctx.args.groups if g != "timing"):
        arms = group_arms(group) + (
            ["TACO"] if group != "main" and "main" in ctx.args.groups else []
        )
        curves = [
            Curve(
                arm,
                runs(outcomes, "main" if arm in ARMS else group, arm, seeds),
                COLORS[i % len(COLORS)],
                dashed=arm == "TACO literal",
            )
            for i, arm in enumerate(arms)
        ]
        panels.append(Panel(f"mnist5k, 3-group label skew: {group}", curves, ctx.target))
    write_curves(panels, path)


# ----- main -------------------------------------------------------------------------------
def estimate(args: argparse.Namespace) -> int:
    """One short run of each main arm at seed 0; project the whole grid."""
    rounds = 3
    per_arm = {}
    for arm in ARMS:
        (o,) = run_all([run_spec("main", arm, 0, rounds)])
        per_arm[arm] = project(o, args.rounds)
        print(
            f"[estimate] {arm}: {o.seconds_per_round:.1f} s/round, fixed {o.fixed_seconds:.0f} s"
            f" -> {per_arm[arm] / 60:.1f} min per run",
            flush=True,
        )
    taco = per_arm["TACO"]
    total = sum(per_arm.values()) * len(args.seeds) * ("main" in args.groups)
    total += (
        taco
        * len(args.seeds)
        * (len(ABLATION) * ("ablation" in args.groups) + 2 * ("freeloaders" in args.groups))
    )
    print(f"[estimate] projected total: {total / 3600:.1f} h", flush=True)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = reproduction_parser(__doc__, "taco_reproduction", 50)
    parser.add_argument(
        "--groups",
        nargs="+",
        default=["main", "ablation", "freeloaders"],
        choices=["main", "ablation", "freeloaders", "timing"],
    )
    args = parsed(parser, argv)
    if args.rounds < 10:
        parser.error("--rounds must be at least 10")
    if {"ablation", "timing"} & set(args.groups) and "main" not in args.groups:
        parser.error("the ablation and the timing runs go with the main runs: keep 'main'")
    return args


def report(
    args: argparse.Namespace, outcomes: list[RunOutcome], plot: Path, started: Started
) -> str:
    total = sum(o.process_seconds for o in outcomes)
    target = target_for(outcomes, args) if "main" in args.groups else None
    ctx = Context(args, started.at, started.load, total, target)
    write_plot(ctx, outcomes, plot)
    return render(ctx, outcomes, plot)


def main(argv: list[str] | None = None) -> int:
    return reproduce(
        parse_args(argv),
        "taco_reproduction",
        grid=specs,
        run_all=run_all,
        report=report,
        estimate=estimate,
    )


if __name__ == "__main__":
    sys.exit(main())
