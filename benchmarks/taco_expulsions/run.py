"""TACO's false expulsions: who is expelled, and when, with the code before and after alpha
is measured on the uploads as the paper's literal correction would have left them; which
part of TACO lifts honest clients' alpha; Table II and VIII rows at the reproduction setting.

Short runs (runtime=simulation, mnist5k, 12 rounds, K = 20, lam = 3, echo freeloaders 0 and
7, seed 2): two settings, each with `--before REV`'s code (a worktree) and this checkout's;
with the earlier code also the first setting with the correction read literally and with no
correction at all; with this checkout's also the second with no strikes in rounds 1-4.
Long runs: `taco_reproduction.py`'s freeloader setting (20 clients, 8 echo
freeloaders, K = 100, 50 rounds, expulsion off) with this checkout's code, one per seed.

    python -m benchmarks.taco_expulsions.run --before <rev>     # about 40 minutes alone
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import math
import os
import shlex
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.fl_run import ROOT, Code, cpu_model, remove_worktree, run_fl, worktree
from benchmarks.harness.paths import invocation, report_path
from benchmarks.harness.seeds import mean_std
from benchmarks.taco_reproduction.analysis import alpha_by_group, detection
from benchmarks.taco_reproduction.arms import KAPPAS, PAPER_TABLE2, PAPER_TABLE8, run_spec
from benchmarks.taco_reproduction.run import run_all

SHORT = (
    "runtime=simulation",
    "algorithm=taco",
    "num_rounds=12",
    "train.local_steps=20",
    "algorithm.lam=3",
    "clients.freeloaders.ids=[0,7]",
    "clients.freeloaders.kind=echo",
    "seed=2",
)
FREE = frozenset({0, 7})
SETTINGS = {
    "20 clients, 3 label groups": ("partition=label_groups", "num_clients=20"),
    "8 clients, Dirichlet 0.5": ("partition=dirichlet", "partition.alpha=0.5", "num_clients=8"),
}
DIAGNOSES = {  # with the earlier code, on the first setting
    "correction read literally (delta_scale 1)": ("algorithm.delta_scale=1",),
    "no correction (tailored_correction false)": ("algorithm.tailored_correction=false",),
}
WARM_UP = ("8 clients, Dirichlet 0.5", "algorithm.warmup_rounds=4")  # with the new code
BEFORE_REPORT = "taco_reproduction.md of 2026-11-25 (commit 1d50c89)"
BEFORE_TABLE2 = {"A": "0.42 ± 0.02", "B": "0.37 ± 0.02", "C": "0.41 ± 0.02", "free": "0.88 ± 0.05"}
BEFORE_TABLE8 = {0.4: "100 % / 97.2 %", 0.5: "100 % / 55.6 %", 0.6: "100 % / 2.8 %"}
BEFORE_TABLE8.update({0.8: "100 % / 0.0 %", 0.9: "100 % / 0.0 %"})


@dataclass(frozen=True)
class Short:
    """One short run: expelled partition -> round, final accuracy, mean alpha (rounds >= 2)."""

    command: str
    expelled: dict[int, int]
    accuracy: float
    honest_alpha: float
    free_alpha: float


def short_run(code: Code, overrides: Sequence[str], scratch: Path) -> Short:
    run_dir = Path(tempfile.mkdtemp(prefix="taco-expel-", dir=scratch))
    command = [*code.command(), *overrides, f"hydra.run.dir={run_dir}"]
    env = code.env(scratch / "cache") | {"FL_STATE_DIR": str(run_dir / "client-state")}
    print(f"[bench] {code.label}: {shlex.join(overrides)}", flush=True)
    run_fl(command, run_dir / "fl-run.out", 3600, env, cwd=code.root or ROOT)
    summary = json.loads((run_dir / "summary.json").read_text())
    with (run_dir / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    honest, free = [], []
    for row in rows[1:]:  # round 1's echo is a zero update
        for key, value in row.items():
            if key.startswith("alpha_") and key[6:].isdigit() and value:
                (free if int(key[6:]) in FREE else honest).append(float(value))
    return Short(
        command=shlex.join(["fl-run", *overrides]),
        expelled={e["partition"]: e["round"] for e in summary["expelled"]},
        accuracy=float(summary["final_accuracy"]),
        honest_alpha=statistics.fmean(honest),
        free_alpha=statistics.fmean(free),
    )


def who(expelled: dict[int, int]) -> tuple[str, str]:
    """('0, 7 (round 4)', '1, 3 (round 5); 8 (round 6)'): freeloaders and honest clients."""

    def cell(pids: list[int]) -> str:
        by_round: dict[int, list[int]] = {}
        for p in pids:
            by_round.setdefault(expelled[p], []).append(p)
        parts = [
            f"{', '.join(map(str, sorted(v)))} (round {r})" for r, v in sorted(by_round.items())
        ]
        return "; ".join(parts) or "none"

    return cell([p for p in expelled if p in FREE]), cell([p for p in expelled if p not in FREE])


def short_table(results: dict[tuple[str, str], Short]) -> list[str]:
    lines = [
        "| setting | code | freeloaders expelled | honest clients expelled | mean alpha, honest "
        "/ freeloaders | final acc. |",
        "|---|---|---|---|---|---|",
    ]
    for (setting, label), r in results.items():
        free, honest = who(r.expelled)
        lines.append(
            f"| {setting} | {label} | {free} | {honest} | {r.honest_alpha:.2f} / "
            f"{r.free_alpha:.2f} | {100 * r.accuracy:.1f} % |"
        )
    return lines


def long_tables(outcomes: list, seeds: Sequence[int], rounds: int) -> list[str]:
    groups = [alpha_by_group(o, s) for o, s in zip(outcomes, seeds, strict=True)]
    lines = [
        "## Table II shape: mean alpha per group, 8 of 20 clients echo freeloaders",
        "",
        f"Before: {BEFORE_REPORT}. After: this invocation, {len(seeds)} seeds.",
        "",
        "| group | before | after | paper MNIST |",
        "|---|---|---|---|",
    ]
    for key, name in (
        ("A", "A (10 %)"),
        ("B", "B (20 %)"),
        ("C", "C (50 %)"),
        ("free", "freeloaders"),
    ):
        mean, std = mean_std([g[key] for g in groups])
        after = f"{mean:.2f} ± {std:.2f}"
        lines.append(f"| {name} | {BEFORE_TABLE2[key]} | {after} | {PAPER_TABLE2['MNIST'][key]} |")
    lam = math.ceil(rounds / 5)
    lines += [
        "",
        f"## Table VIII shape: detection at λ = T/5 = {lam}",
        "",
        "A client is detected once it has λ strikes (alpha ≥ κ) in the expulsion-off runs' alpha "
        "history. TPR / FPR: detected freeloaders / 8, benign clients / 12, mean over seeds "
        "(per seed in brackets).",
        "",
        "| κ | before | after | paper FMNIST |",
        "|---|---|---|---|",
    ]
    for kappa in KAPPAS:
        found = [detection(o, s, kappa, lam) for o, s in zip(outcomes, seeds, strict=True)]
        tpr = statistics.fmean(f / 8 for f, _ in found)
        fpr = statistics.fmean(b / 12 for _, b in found)
        each = "; ".join(f"{f}/8 and {b}/12" for f, b in found)
        after = f"{100 * tpr:.0f} % / {100 * fpr:.1f} % ({each})"
        lines.append(f"| {kappa} | {BEFORE_TABLE8[kappa]} | {after} | {PAPER_TABLE8[kappa][1]} |")
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=invocation("taco_expulsions"), description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--before", required=True, help="the commit before the change")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=50, help="of the long runs")
    parser.add_argument("--out", type=Path, default=report_path("taco_expulsions"))
    parser.add_argument(
        "--notes", type=Path, default=report_path("taco_expulsions").with_name("notes.md")
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started, load = dt.datetime.now(dt.UTC), os.getloadavg()
    tree = worktree(args.before, prefix="taco-expel-before-")
    before, after = Code(f"before ({args.before[:7]})", tree), Code("after")
    short: dict[tuple[str, str], Short] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="taco-expel-") as scratch:
            for setting, own in SETTINGS.items():
                for code in (before, after):
                    short[setting, code.label] = short_run(code, (*SHORT, *own), Path(scratch))
            setting, extra = WARM_UP
            short[setting, f"after, {extra}"] = short_run(
                after, (*SHORT, *SETTINGS[setting], extra), Path(scratch)
            )
            first = next(iter(SETTINGS))
            for label, extra in DIAGNOSES.items():
                overrides = (*SHORT, *SETTINGS[first], *extra)
                short[first, f"{before.label}, {label}"] = short_run(
                    before, overrides, Path(scratch)
                )
    finally:
        remove_worktree(tree)
    specs = [
        run_spec("freeloaders", "TACO, 8 echo freeloaders", s, args.rounds) for s in args.seeds
    ]
    outcomes = run_all(specs)
    lines = [
        "# TACO's false expulsions, before and after",
        "",
        f"Generated by `python -m benchmarks.taco_expulsions.run --before {args.before}` on "
        f"{started:%Y-%m-%d %H:%M} UTC; every number below comes from this one invocation "
        "except the 'before' columns of Tables II and VIII, quoted from "
        f"{BEFORE_REPORT}.",
        "",
        f"- Machine: nproc {os.cpu_count()}, {cpu_model()}; Python {sys.version.split()[0]}; "
        f"load average at start {' / '.join(f'{v:.2f}' for v in load)}",
        f"- Short runs: `fl-run {' '.join(SHORT)} <setting>`; freeloaders 0 and 7 echo the last "
        "global update; κ = 0.6.",
        f"- Long runs: `{specs[0].command(Path('<dir>'))[0]} {' '.join(specs[0].overrides)}` "
        "and the same at the other seeds (taco_reproduction.py's freeloader arm, expulsion off).",
        "",
        "## Who is expelled, and when (κ = 0.6, λ = 3)",
        "",
        *short_table(short),
        "",
        *long_tables(outcomes, args.seeds, args.rounds),
    ]
    if args.notes.exists():
        lines += ["", args.notes.read_text().rstrip()]
    args.out.write_text("\n".join(lines) + "\n")
    print(f"[bench] wrote {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
