"""TACO's defaults against the paper's rule: who is expelled in short runs, IID and not.

The paper strikes every client whose alpha_i >= kappa and expels at lam = T / 5 strikes. In a
short IID run every honest client agrees with the others (alpha near (1 - 1/N) cos, above
kappa = 0.6 for 4 clients), so with T = 5 (lam = 1) all four were expelled in round 1. Our
defaults: a round that flags every client gives no strikes (`algorithm.strike_all=false`) and
lam is at least 3; always, a round whose strikes would expel every client left gives none.
Each setting runs with the defaults and with the paper's strikes and lam
(`algorithm.strike_all=true algorithm.lam=<T/5>`, the guard still on), at each seed;
TPR = freeloaders expelled / freeloaders, FPR = honest clients expelled / honest clients, at
the end of the run.

    python -m benchmarks.taco_defaults.run     # about 15 minutes alone
"""

from __future__ import annotations

import argparse
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

from benchmarks.harness.fl_run import Code, run_fl
from benchmarks.harness.paths import invocation, report_path, write_report
from benchmarks.harness.tables import machine_line

COMMON = ("runtime=simulation", "algorithm=taco", "dataset=mnist5k")
ECHO = ("clients.freeloaders.ids=[0,7]", "clients.freeloaders.kind=echo")


@dataclass(frozen=True)
class Setting:
    name: str
    rounds: int
    clients: int
    overrides: tuple[str, ...]
    freeloaders: frozenset[int] = frozenset()

    def arms(self) -> dict[str, tuple[str, ...]]:
        paper = ("algorithm.strike_all=true", f"algorithm.lam={math.ceil(self.rounds / 5)}")
        return {"defaults": (), "paper's strikes and λ": paper}


SETTINGS = (
    Setting("4 IID clients, 5 rounds, K = 20", 5, 4, ("partition=iid", "train.local_steps=20")),
    Setting("4 IID clients, 5 rounds, K = 100", 5, 4, ("partition=iid", "train.local_steps=100")),
    Setting(
        "8 clients, Dirichlet 0.5, 12 rounds, K = 20, echo freeloaders 0 and 7",
        12,
        8,
        ("partition=dirichlet", "partition.alpha=0.5", "train.local_steps=20", *ECHO),
        frozenset({0, 7}),
    ),
    Setting(
        "20 clients, 3 label groups, 12 rounds, K = 20, echo freeloaders 0 and 7",
        12,
        20,
        ("partition=label_groups", "train.local_steps=20", *ECHO),
        frozenset({0, 7}),
    ),
)


@dataclass(frozen=True)
class Outcome:
    expelled: dict[int, int]  # partition -> round
    accuracy: float


def run(setting: Setting, arm: Sequence[str], seed: int, scratch: Path) -> Outcome:
    run_dir = Path(tempfile.mkdtemp(prefix="taco-defaults-", dir=scratch))
    overrides = [
        *COMMON,
        f"num_rounds={setting.rounds}",
        f"num_clients={setting.clients}",
        *setting.overrides,
        *arm,
        f"seed={seed}",
    ]
    print(f"[bench] fl-run {shlex.join(overrides)}", flush=True)
    code = Code("this checkout")
    env = code.env(scratch / "cache") | {"FL_STATE_DIR": str(run_dir / "client-state")}
    run_fl([*code.command(), *overrides, f"hydra.run.dir={run_dir}"], run_dir / "out", 1800, env)
    summary = json.loads((run_dir / "summary.json").read_text())
    expelled = {int(e["partition"]): int(e["round"]) for e in summary.get("expelled", [])}
    return Outcome(expelled, float(summary["final_accuracy"]))


def row(setting: Setting, arm: str, outcomes: list[Outcome]) -> str:
    """TPR / FPR over the seeds, with each seed's expelled partitions (round)."""
    free = setting.freeloaders
    honest = setting.clients - len(free)
    caught = [len(free & set(o.expelled)) for o in outcomes]
    wrong = [len(set(o.expelled) - free) for o in outcomes]
    tpr = f"{100 * statistics.fmean(c / len(free) for c in caught):.0f} %" if free else "-"
    fpr = f"{100 * statistics.fmean(w / honest for w in wrong):.1f} %"
    each = "; ".join(
        ", ".join(f"{p} ({r})" for p, r in sorted(o.expelled.items())) or "none" for o in outcomes
    )
    accuracy = statistics.fmean(o.accuracy for o in outcomes)
    return f"| {setting.name} | {arm} | {tpr} | {fpr} | {each} | {100 * accuracy:.1f} % |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=invocation("taco_defaults"), description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=report_path("taco_defaults"))
    args = parser.parse_args(argv)
    started, load = dt.datetime.now(dt.UTC), os.getloadavg()
    lines = []
    with tempfile.TemporaryDirectory(prefix="taco-defaults-") as scratch:
        for setting in SETTINGS:
            for arm, overrides in setting.arms().items():
                outcomes = [run(setting, overrides, s, Path(scratch)) for s in args.seeds]
                lines.append(row(setting, arm, outcomes))
    seeds = " ".join(map(str, args.seeds))
    report = [
        "# TACO's defaults against the paper's rule in short runs",
        "",
        f"Generated by `{invocation('taco_defaults')}` on {started:%Y-%m-%d %H:%M} UTC; every "
        "number below comes from this one invocation.",
        "",
        machine_line(load),
        f"- Runs: `fl-run {' '.join(COMMON)} num_rounds=T num_clients=N <setting> <arm> "
        f"seed=S`, S in {seeds}; κ = 0.6 in every run.",
        "- defaults: no strikes in a round that flags every client, λ = max(⌈T/5⌉, 3); the "
        "paper's strikes and λ: `algorithm.strike_all=true algorithm.lam=⌈T/5⌉`. In both, a "
        "round whose strikes would expel every client left gives none (without it, the "
        "paper's rule expelled all 4 IID clients in round 1 at T = 5).",
        "- TPR: freeloaders expelled / freeloaders; FPR: honest clients expelled / honest "
        "clients, at the end of the run, mean over seeds; then each seed's expelled partitions "
        "(round).",
        "",
        "| setting | rule | TPR | FPR | expelled, per seed | final acc. |",
        "|---|---|---|---|---|---|",
        *lines,
    ]
    notes = args.out.with_name("notes.md")
    if notes.exists():
        report += ["", notes.read_text().rstrip()]
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
