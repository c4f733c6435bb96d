"""Running fl-run under faults: its run directory, its processes by role, their state."""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.harness.fl_run import ROOT, tool_env
from benchmarks.harness.process_tree import tree
from fl_system.runtime.launch.processes import alive

FL_RUN = str(Path(sys.executable).parent / "fl-run")
FL_CERTS = str(Path(sys.executable).parent / "fl-certs")
MNIST = ["dataset=mnist5k", "model=cnn", "train.batch_size=32"]
DIGITS = ["dataset=digits", "model=mlp", "train.batch_size=64"]
RUN_TIMEOUT = 1800


# ----- running fl-run and watching its processes ------------------------------------------------
@dataclass
class Run:
    """One fl-run: its process, output file, and every descendant seen while it ran."""

    run_dir: Path
    args: list[str]
    env: dict[str, str]
    proc: subprocess.Popen = field(init=False)
    seen: set[int] = field(default_factory=set)
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.run_dir.parent.mkdir(parents=True, exist_ok=True)
        self.output = self.run_dir.parent / f"{self.run_dir.name}.out"
        with self.output.open("a") as out:
            self.proc = subprocess.Popen(
                [FL_RUN, *self.args, f"hydra.run.dir={self.run_dir}"],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def look(self) -> set[int]:
        """Remember (and return) the processes under fl-run now."""
        now = tree(self.proc.pid) if self.proc.poll() is None else set()
        self.seen |= now
        return now

    def wait(self, timeout: float = RUN_TIMEOUT) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            self.look()
            if time.monotonic() > deadline:
                self.proc.send_signal(signal.SIGINT)
                self.proc.wait(timeout=120)
                break
            time.sleep(0.5)
        return self.proc.returncode

    def rows(self) -> list[dict[str, str]]:
        return metrics_rows(self.run_dir)

    def leftovers(self) -> list[int]:
        """Processes this run started that are still alive (after a grace to exit)."""
        deadline = time.monotonic() + 15
        while (left := [p for p in self.seen if alive(p)]) and time.monotonic() < deadline:
            time.sleep(0.5)
        return left

    def error_line(self) -> str:
        """fl-run's last 'fl-run: error' line."""
        text = self.output.read_text(errors="replace").splitlines()
        return next((x.split("\r")[-1] for x in reversed(text) if "fl-run: error" in x), "")

    def tail(self, lines: int = 3) -> str:
        text = self.output.read_text(errors="replace").splitlines()
        return " / ".join(line.split("\r")[-1].strip() for line in text[-lines:])


def metrics_rows(run_dir: Path) -> list[dict[str, str]]:
    """metrics.csv's whole rows (a line being written is left out)."""
    try:
        text = (run_dir / "metrics.csv").read_text()
    except OSError:
        return []
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    return list(csv.DictReader(text.splitlines()))


def round_seconds(rows: Sequence[dict[str, str]]) -> list[float]:
    """Each round's wall time (metrics.csv's wall_seconds counts from round 1's start)."""
    walls = [float(r["wall_seconds"]) for r in rows]
    return [b - a for a, b in zip([0.0, *walls], walls, strict=False)]


def kill_all(pids: set[int]) -> None:
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def supernodes(pids: set[int]) -> dict[int, int]:
    """partition id -> pid of its fl-supernode among `pids`."""
    found = {}
    for pid in pids:
        argv = cmdline(pid)
        if any(a.endswith("fl-supernode") for a in argv[:2]):
            for a in argv:
                if a.startswith("partition-id="):
                    found[int(a.split()[0].split("=")[1])] = pid
    return found


def role_of(pid: int) -> str | None:
    """SuperLink, ServerApp, 'SuperNode i', 'launcher of i' or None."""
    argv = cmdline(pid)
    text = " ".join(argv)
    if any(a.endswith("fl-superlink") for a in argv[:2]):
        return "SuperLink"
    if "flwr-serverapp" in text:
        return "ServerApp"
    if any(a.endswith("fl-supernode") for a in argv[:2]):
        part = next((a for a in argv if a.startswith("partition-id=")), "partition-id=?")
        return f"SuperNode {part.split()[0].split('=')[1]}"
    if "fl_system.runtime.supernode.launcher" in text:
        return "launcher"
    return None


def status_of(pid: int) -> dict[str, int] | None:
    """RSS (bytes), open file descriptors and threads of a live process."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    rss, threads = re.search(r"VmRSS:\s+(\d+)", status), re.search(r"Threads:\s+(\d+)", status)
    if rss is None or threads is None:  # a zombie
        return None
    return {"rss": int(rss.group(1)) * 1024, "fds": fds, "threads": int(threads.group(1))}


def node_log(run_dir: Path, partition: int) -> str:
    try:
        return (run_dir / "logs" / f"supernode-{partition}.log").read_text(errors="replace")
    except OSError:
        return ""


def env_for(work: Path, name: str) -> dict[str, str]:
    return tool_env({"FL_STATE_DIR": str(work / f"state-{name}"), "PYTHONUNBUFFERED": "1"})


def say(text: str) -> None:
    print(f"[reliability] {text}", flush=True)
