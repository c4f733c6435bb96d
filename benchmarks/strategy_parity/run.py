"""Same seed, same result: every algorithm through fl_system's driver before and after a change.

Runs each case (every `conf/algorithm/*.yaml`, plus the add-ons and layers that ride on a
strategy: Disco weighting, GSNR steps, compression both ways, stragglers, client evaluation,
robust aggregation) for a few rounds with `runtime=simulation`, once with this checkout's code
and once with a worktree of `--before REV`, and compares `metrics.csv` round by round: every
column but timings and bytes on the wire (framing carries the config and Flower's random ids),
the set of columns included. Algorithms the worktree lacks are listed as new, not run.
Writes `benchmarks/strategy_parity/report.md`; exits 1 if any case differs.

    python -m benchmarks.strategy_parity.run --before <rev>            # about 15 minutes
    python -m benchmarks.strategy_parity.run --before <rev> --only fedavg scaffold --out /tmp/p.md
    python -m benchmarks.strategy_parity.run --before <rev> --before-python OLD_VENV/bin/python

The last form runs the code before in an environment of its own: a change of Flower or torch
version compared against the code that ran on the old ones.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import math
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.fl_run import (
    ROOT,
    BenchmarkError,
    Code,
    add_before_python,
    cpu_model,
    remove_worktree,
    run_fl,
    worktree,
)
from benchmarks.harness.paths import invocation, report_path

SHOWN = ("test_accuracy", "test_loss", "train_loss", "participants")


def compared(column: str) -> bool:
    """Every column but timings and bytes on the wire."""
    return not ("seconds" in column or column.startswith("wall_") or "bytes" in column)


BASE = ("runtime=simulation", "num_clients=4", "seed=0")
# Both sides compute on one thread: a BLAS dot product sums in an order set by its thread
# count, so a change of thread sizing alone moves float64 norms in their last bits.
THREADS = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
STEPS = "train.local_steps=30"  # for the rules that count local steps, not epochs


@dataclass(frozen=True)
class Case:
    name: str
    overrides: tuple[str, ...]


def algorithms(root: Path) -> list[str]:
    return sorted(p.stem for p in (root / "conf" / "algorithm").glob("*.yaml"))


def cases(rounds: int, algorithms: list[str]) -> list[Case]:
    """Every algorithm given, then the layers around a strategy."""
    # TACO's default lam (T/5 = 1 strike at 3 rounds) would expel every client after round 1
    # FedBuff and FedAsync order updates by when clients finish: on a virtual clock
    clocked = ("system=profiles", "async.concurrency=2")
    extra = {
        "taco": (STEPS, "algorithm.lam=6"),
        "fedgsnr": (STEPS,),
        "fedbuff": (*clocked, "async.buffer_size=2"),
        "fedasync": clocked,
    }
    out = [Case(a, (f"algorithm={a}", *extra.get(a, ()))) for a in algorithms]
    out += [
        Case("scaffold + disco", ("algorithm=scaffold", "algorithm.disco.enabled=true")),
        Case("fedprox + gsnr", ("algorithm=fedprox", "algorithm.gsnr.enabled=true", STEPS)),
        Case(
            "fedavg + compression up topk, down st",
            ("compression.up=topk", "compression.down=st", "compression.down.q=0.1"),
        ),
        Case(
            "scaffold + stragglers",
            ("algorithm=scaffold", "stragglers.incomplete=0.5", "stragglers.inactive=0.2", STEPS),
        ),
        Case("fedavg + client_eval", ("client_eval.enabled=true",)),
        Case("fedavg + median", ("aggregation.robust=median",)),
        Case("fedavg, 2 of 4 a round", ("clients_per_round=2",)),
    ]
    return [Case(c.name, (*BASE, f"num_rounds={rounds}", *c.overrides)) for c in out]


def run_case(case: Case, code: Code, rounds: int) -> list[dict[str, str]]:
    """One fl-run; its metrics.csv rows."""
    run_dir = Path(tempfile.mkdtemp(prefix="strategy-parity-"))
    command = [*code.command(), *case.overrides, f"hydra.run.dir={run_dir}"]
    print(f"[parity] {code.label}: {case.name}: {shlex.join(command)}", flush=True)
    try:
        run_fl(
            command,
            run_dir / "fl-run.out",
            timeout=600,
            env=code.env(run_dir / "cache") | THREADS,
            cwd=code.root or ROOT,
        )
        with (run_dir / "metrics.csv").open(newline="") as handle:
            rows = list(csv.DictReader(handle))
    except BenchmarkError as err:
        raise BenchmarkError(f"{case.name} ({code.label}) failed: kept {run_dir}\n{err}") from None
    if len(rows) != rounds:
        raise BenchmarkError(f"{case.name} ({code.label}): {len(rows)} rows, expected {rounds}")
    shutil.rmtree(run_dir, ignore_errors=True)
    return rows


def differences(before: list[dict[str, str]], after: list[dict[str, str]]) -> dict[str, float]:
    """The largest absolute difference of every compared column over the rounds (inf where
    a value is missing on one side or is not a number)."""
    columns = sorted({c for row in (*before, *after) for c in row if compared(c)})
    out = {}
    for column in columns:
        worst = 0.0
        for b, a in zip(before, after, strict=True):
            x, y = b.get(column), a.get(column)
            if x == y:
                continue
            try:
                worst = max(worst, abs(float(x) - float(y)))  # type: ignore[arg-type]
            except (TypeError, ValueError):
                worst = math.inf
        out[column] = worst
    return out


def accuracies(rows: list[dict[str, str]]) -> str:
    return " / ".join(f"{float(r['test_accuracy']):.4f}" for r in rows if r.get("test_accuracy"))


def report(
    args: argparse.Namespace,
    results: list[tuple[Case, list, list, dict]],
    commit: str,
    new: list[str],
) -> str:
    lines = [
        "# Same seed, same result: the driver before and after",
        "",
        f"{dt.date.today().isoformat()}, {cpu_model()}; `python -m benchmarks.strategy_parity.run "
        f"--before {args.before}` at {commit}: each case run with this checkout and with a "
        f"worktree of `{args.before}`"
        + (f" in the environment of `{args.before_python}`" if args.before_python else "")
        + f", {args.rounds} rounds, runtime=simulation, "
        f"`{' '.join(BASE)}` (mnist5k, cnn, iid, 1 local epoch; `{STEPS}` where a rule "
        "counts steps); " + ", ".join(f"{k}={v}" for k, v in THREADS.items()) + " on both "
        "sides (a dot product's order of summation follows its thread count).",
        "",
        "Compared per round: every column of `metrics.csv` but timings (`*seconds*`, `wall_*`) "
        "and bytes on the wire (`*bytes*`: framing carries the config and Flower's random ids), "
        "a column on one side only counting as a difference. The last column gives the largest "
        "absolute difference of " + ", ".join(f"`{c}`" for c in SHOWN) + ", then the columns "
        "that differ at all.",
        "",
        "| case | columns compared | test accuracy per round, before | after | max abs diff "
        "(acc, test loss, train loss, participants); columns differing |",
        "|---|---|---|---|---|",
    ]
    for case, before, after, diff in results:
        cells = ", ".join(f"{diff.get(c, 0.0):.2g}" for c in SHOWN)
        differing = ", ".join(c for c, v in diff.items() if v != 0) or "none"
        lines.append(
            f"| {case.name} | {len(diff)} | {accuracies(before)} | {accuracies(after)} | "
            f"{cells}; {differing} |"
        )
    same = sum(all(v == 0 for v in d.values()) for *_, d in results)
    lines += ["", f"{same} of {len(results)} cases identical in every compared column."]
    if new:
        lines.append(f"New since `{args.before}`, not compared: {', '.join(new)}.")
    return "\n".join([*lines, ""])


def main() -> int:
    parser = argparse.ArgumentParser(
        prog=invocation("strategy_parity"), description=__doc__.splitlines()[0]
    )
    parser.add_argument("--before", required=True, help="git revision of the code before")
    add_before_python(parser)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="*", help="case names (or their first word) to run")
    parser.add_argument("--out", type=Path, default=report_path("strategy_parity"))
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    tree = worktree(args.before, prefix="strategy-parity-before-")
    try:
        both = [a for a in algorithms(ROOT) if a in algorithms(tree)]
        new = [a for a in algorithms(ROOT) if a not in both]
        selected = [
            c
            for c in cases(args.rounds, both)
            if not args.only or c.name in args.only or c.name.split()[0] in args.only
        ]
        before_code = Code(f"before {args.before}", tree, args.before_python)
        after_code = Code("after")
        results = []
        for case in selected:
            before = run_case(case, before_code, args.rounds)
            after = run_case(case, after_code, args.rounds)
            results.append((case, before, after, differences(before, after)))
            print(f"[parity] {case.name}: {results[-1][3]}", flush=True)
    finally:
        remove_worktree(tree)
    args.out.write_text(report(args, results, commit, new))
    print(f"[parity] report: {args.out}")
    return 0 if all(all(v == 0 for v in d.values()) for *_, d in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
