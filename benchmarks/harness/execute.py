"""Running a grid of `RunSpec`s: one fl-run at a time, progress and ETA, every run kept."""

from __future__ import annotations

import csv
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.harness.fl_run import BenchmarkError, run_fl, tool_env
from benchmarks.harness.outcome import RunOutcome, RunSpec
from benchmarks.harness.saved_runs import load_outcomes, save_outcomes
from benchmarks.harness.tables import pct1


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
