"""What a process tree costs: CPU seconds and memory (PSS), read from /proc.

PSS (proportional set size) splits each shared page among the processes that map it, so the
sum over a tree counts forked children's shared torch pages once, unlike RSS.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from fl_system.runtime.launch.processes import descendants

TICKS = os.sysconf("SC_CLK_TCK")


def rows_written(path: Path) -> int:
    """The data rows of a CSV a run is writing (0 before it exists): rounds finished."""
    try:
        return max(len(path.read_text().splitlines()) - 1, 0)
    except OSError:
        return 0


def tree(root: int) -> set[int]:
    return {root} | descendants(root)


def cpu_seconds(pids: set[int]) -> float:
    """User + system CPU of `pids`, including their children that have been reaped."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    return total / TICKS


def pss_bytes(pids: set[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
        except OSError:
            continue
    return total


class PeakMemory:
    """Samples the summed PSS of a process tree in the background; keeps the peak."""

    def __init__(self, root: int, interval: float = 1.0) -> None:
        self.root = root
        self.interval = interval
        self.peak = 0
        self.processes_at_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            pids = tree(self.root)
            pss = pss_bytes(pids)
            if pss > self.peak:
                self.peak, self.processes_at_peak = pss, len(pids)
            self._stop.wait(self.interval)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


ROLES = (  # (role, text in its command line), first match wins
    ("ClientApp launcher + forked ClientApps", "fl_system.runtime.supernode.launcher"),
    ("ClientApp processes (flwr-clientapp)", "flwr-clientapp"),
    ("SuperNodes", "supernode"),
    ("SuperExec helpers", "flower-superexec"),
    ("ServerApp", "flwr-serverapp"),
    ("SuperLink", "-superlink"),  # flower-superlink, fl-superlink
)


def _role(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "other"
    return next((role for role, text in ROLES if text in cmd), "other (fl-run, flwr run)")


def _cpu_by_pid(pids: set[int]) -> dict[int, tuple[str, float]]:
    return {pid: (_role(pid), cpu_seconds({pid})) for pid in pids}


class RoundCpu:
    """CPU seconds per role between the end of round 1 and the end of the last round.

    Watches metrics.csv (one row per finished round) and snapshots every process's CPU
    (reaped children included) when round 1 ends and whenever another round ends.
    """

    def __init__(self, root: int, metrics: Path, interval: float = 0.05) -> None:
        self.root, self.metrics, self.interval = root, metrics, interval
        self.first: dict[int, tuple[str, float]] = {}
        self.last: dict[int, tuple[str, float]] = {}
        self.rounds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        seen = 0
        while not self._stop.is_set():
            rows = rows_written(self.metrics)
            if rows > seen:
                snap = _cpu_by_pid(tree(self.root))
                if seen == 0:
                    self.first = snap
                else:
                    self.last, self.rounds = snap, rows - 1
                seen = rows
            self._stop.wait(self.interval)

    def stop(self) -> dict[str, float]:
        """CPU seconds per round by role over rounds 2..N."""
        self._stop.set()
        self._thread.join()
        if not self.rounds:
            return {}
        per_role: dict[str, float] = {}
        for pid, (role, seconds) in self.last.items():
            spent = seconds - self.first.get(pid, (role, 0.0))[1]
            per_role[role] = per_role.get(role, 0.0) + spent / self.rounds
        return dict(sorted(per_role.items(), key=lambda kv: -kv[1]))
