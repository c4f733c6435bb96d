"""Running `fl-run` from a benchmark script: one subprocess, its output in a log, clear errors."""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TAIL_LINES = 40  # lines of a failed fl-run's output to show


class BenchmarkError(RuntimeError):
    """An fl-run failed or left no usable metrics."""


def tool_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This interpreter's bin/ first on PATH: fl-run and Flower's tools come from there."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class Code:
    """Which code runs: this checkout's `fl-run`, or a worktree of an earlier commit."""

    label: str
    root: Path | None = None  # a worktree; None = this checkout
    # the interpreter of another environment (a worktree whose Flower is not this one's):
    # its bin/ comes first on PATH, so Flower's tools are that environment's too
    python: Path | None = None

    @property
    def interpreter(self) -> str:
        return str(self.python or sys.executable)

    def command(self) -> list[str]:
        if self.root is None and self.python is None:
            return ["fl-run"]
        return [self.interpreter, "-m", "fl_system.cli"]

    def env(self, cache: Path) -> dict[str, str]:
        extra = {"FL_CACHE_DIR": str(cache)}
        if self.root is not None:
            extra["PYTHONPATH"] = str(self.root)  # ahead of the editable install of ROOT
            # and of the working folder, which `python -m` and `-c` put first on sys.path: a
            # run started in ROOT would otherwise import this checkout, not the worktree
            extra["PYTHONSAFEPATH"] = "1"
        env = tool_env(extra)
        if self.python is not None:
            env["PATH"] = f"{self.python.parent}{os.pathsep}{env['PATH']}"
        return env


def interpreter(path: str) -> Path:
    """An argparse type: an executable file (another environment's python)."""
    if not os.access(path, os.X_OK) or not Path(path).is_file():
        raise argparse.ArgumentTypeError(f"no interpreter at {path}")
    return Path(path)


def add_before_python(parser: argparse.ArgumentParser) -> None:
    """`--before-python`: the code before runs in an environment of its own (`Code.python`)."""
    parser.add_argument(
        "--before-python",
        type=interpreter,
        help="the interpreter of an environment for the code before (its own Flower and "
        "torch; default: this one)",
    )


def worktree(rev: str, prefix: str = "bench-before-") -> Path:
    """A detached worktree of `rev` (removed by `remove_worktree`)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev],
        check=True,
        capture_output=True,
    )
    return path


def remove_worktree(path: Path) -> None:
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
        check=False,
        capture_output=True,
    )


def output_tail(log: Path, lines: int = TAIL_LINES) -> str:
    """Last lines of a captured output, progress-bar carriage returns collapsed."""
    text = log.read_text(errors="replace") if log.exists() else ""
    kept = [line.split("\r")[-1] for line in text.splitlines()]
    return "\n".join(kept[-lines:])


def run_fl(
    command: list[str],
    log: Path,
    timeout: float,
    env: dict[str, str],
    *,
    cwd: Path = ROOT,
    on_start: Callable[[int], object] | None = None,
) -> None:
    """Run fl-run to completion; raise BenchmarkError with its output's tail if it fails.

    `on_start` gets the process id as soon as it runs (e.g. to sample its process tree).
    """
    with log.open("w") as out:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        if on_start is not None:
            on_start(proc.pid)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)  # lets fl-run tear its processes down
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise BenchmarkError(
                f"{shlex.join(command)}\ntimed out after {timeout:.0f} s; "
                f"last output:\n{output_tail(log)}"
            ) from None
    if code != 0:
        raise BenchmarkError(
            f"{shlex.join(command)}\nexited with status {code}; last output:\n{output_tail(log)}"
        )


def cpu_model() -> str:
    """The CPU's model name, for report headers."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
