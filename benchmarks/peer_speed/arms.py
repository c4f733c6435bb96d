"""The three arms as processes, timed from outside the same way.

Each arm writes one line per finished round to a CSV (fl-run: metrics.csv; the loop and pfl:
their rounds.csv); a watcher thread looks at it every 20 ms and, at each new row, notes the
time since launch and the CPU seconds of the arm's whole process tree (reaped children
included). Wall and CPU per round are taken over rounds 2..N, so start-up is not in them.
"""

from __future__ import annotations

import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.harness.fl_run import ROOT, BenchmarkError, output_tail, tool_env
from benchmarks.harness.process_tree import PeakMemory, cpu_seconds, rows_written, tree
from benchmarks.peer_speed.workload import Workload

PFL = "pfl==0.6.0"
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
POLL = 0.02


@dataclass
class Measured:
    """One run of one arm."""

    arm: str
    launch_to_exit: float
    row_times: list[float]  # seconds since launch when each round's row appeared
    row_cpu: list[float]  # CPU seconds of the process tree at those moments
    accuracies: list[float]
    load: tuple[float, float]  # 1-minute load average before and after
    peak_pss: int = 0
    later: list[float] = field(default_factory=list)  # each of rounds 2..N, seconds

    def __post_init__(self) -> None:
        self.later = [b - a for a, b in zip(self.row_times, self.row_times[1:], strict=False)]

    @property
    def per_round(self) -> float:
        return (self.row_times[-1] - self.row_times[0]) / (len(self.row_times) - 1)

    @property
    def cpu_per_round(self) -> float:
        return (self.row_cpu[-1] - self.row_cpu[0]) / (len(self.row_cpu) - 1)

    @property
    def startup(self) -> float:
        """Launch to the first round's start: round 1's row less one typical round."""
        return self.row_times[0] - statistics.median(self.later)


class RowWatch:
    """Notes time and tree CPU whenever the rows file grows."""

    def __init__(self, pid: int, rows: Path, started: float) -> None:
        self.pid, self.rows, self.started = pid, rows, started
        self.times: list[float] = []
        self.cpu: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            new = rows_written(self.rows) - len(self.times)
            if new > 0:
                now, spent = time.monotonic() - self.started, cpu_seconds(tree(self.pid))
                self.times += [now] * new
                self.cpu += [spent] * new
            self._stop.wait(POLL)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    """No thread settings of the caller's shell: every arm runs what it does by default."""
    env = {k: v for k, v in tool_env(extra).items() if k not in THREAD_VARS}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def measure(arm: str, command: list[str], rows: Path, env: dict[str, str], log: Path,
            *, memory: bool = False, timeout: float = 1800) -> Measured:  # fmt: skip
    """Run one arm to completion and time it; BenchmarkError (with its output) on failure."""
    before = os.getloadavg()[0]
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        watch = RowWatch(proc.pid, rows, started)
        peak = PeakMemory(proc.pid, interval=0.5) if memory else None
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = -9
        finally:
            watch.stop()
            peak_pss = peak.stop() if peak else 0
    ended = time.monotonic() - started
    if code != 0:
        raise BenchmarkError(f"{arm} exited with {code}:\n{output_tail(log)}")
    with rows.open(newline="") as handle:
        # rounds that evaluate nothing (eval_every > 1) have no accuracy
        accuracies = [float(r["test_accuracy"] or "nan") for r in csv.DictReader(handle)]
    if len(watch.times) != len(accuracies) or len(accuracies) < 3:
        raise BenchmarkError(f"{arm}: {len(accuracies)} rows, {len(watch.times)} seen")
    return Measured(arm, ended, watch.times, watch.cpu, accuracies,
                    (before, os.getloadavg()[0]), peak_pss)  # fmt: skip


# ----- the arms -------------------------------------------------------------------------------
Runner = Callable[[Path], Measured]  # scratch folder -> measured run


def loop_arm(exported: Path) -> Runner:
    def run(scratch: Path) -> Measured:
        rows = scratch / "rounds.csv"
        command = [sys.executable, "-m", "benchmarks.peer_speed.plain_loop", str(exported),
                   str(rows)]  # fmt: skip
        return measure("plain loop", command, rows, clean_env({}), scratch / "out.log")

    return run


def pfl_arm(exported: Path, venv: Path) -> Runner:
    def run(scratch: Path) -> Measured:
        rows = scratch / "rounds.csv"
        command = [str(venv / "bin" / "python"), "-m", "benchmarks.peer_speed.pfl_arm",
                   str(exported), str(rows)]  # fmt: skip
        env = clean_env({"PYTHONPATH": str(ROOT)})
        return measure("pfl-research", command, rows, env, scratch / "out.log")

    return run


def project_arm(workload: Workload, cache: Path, extra: list[str], name: str) -> Runner:
    def run(scratch: Path) -> Measured:
        run_dir = scratch / "run"
        command = ["fl-run", "runtime=simulation", *workload.overrides(), *extra,
                   f"hydra.run.dir={run_dir}"]  # fmt: skip
        env = clean_env({"FL_CACHE_DIR": str(cache)})
        return measure(name, command, run_dir / "metrics.csv", env, scratch / "out.log",
                       memory=True)  # fmt: skip

    return run


def run_in_scratch(runner: Runner) -> Measured:
    """One run in a scratch folder of its own, removed after a success and kept (and
    named) after a failure."""
    scratch = Path(tempfile.mkdtemp(prefix="peer-speed-"))
    try:
        measured = runner(scratch)
    except BenchmarkError as err:
        raise BenchmarkError(f"{err}\n(scratch folder kept: {scratch})") from None
    shutil.rmtree(scratch, ignore_errors=True)
    return measured


def peer_venv(path: Path) -> Path:
    """pfl-research's own venv (made once): pfl and its pure-Python dependencies installed
    there, torch and numpy read from this project's environment, so both use one build."""
    python = path / "bin" / "python"
    has_pfl = [python, "-c", "import pfl"]
    if python.exists() and subprocess.run(has_pfl, capture_output=True).returncode == 0:
        return path
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(path)], check=True)
    purelib = subprocess.run(
        [sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    Path(site, "project_env.pth").write_text(purelib + "\n")
    subprocess.run([python, "-m", "pip", "install", "-q", PFL], check=True)
    return path
