"""Where a run's start-up goes: phases marked by fl-run, in seconds since the run began.

A run's clock starts when the operating system started fl-run's process (interpreter start-up
and imports included: the user waits for them too; a later member of a `-m` sweep: when that
member starts), so "in all" in fl-run's last line and every phase in `logs/startup.csv` are
measured from the same instant.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def _process_start() -> float:
    """time.monotonic() at which this process started (Linux /proc; else: now)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return time.monotonic()
    age = uptime - ticks / os.sysconf("SC_CLK_TCK")  # seconds since this process started
    return time.monotonic() - max(age, 0.0)


_origin = _process_start()
_runs = 0
_marks: list[tuple[str, float]] = []


def begin() -> None:
    """A run starts: its clock. The first run of a process counts from the process's start;
    each later one (a member of a `-m` sweep) from now."""
    global _origin, _runs
    if _runs:
        _origin = time.monotonic()
    _runs += 1
    _marks[:] = [("process started" if _runs == 1 else "run started", 0.0)]


def elapsed() -> float:
    """Seconds since this run's clock started."""
    return time.monotonic() - _origin


def mark(phase: str) -> None:
    """Record that `phase` ended now (the first time only: a phase ends once)."""
    if all(name != phase for name, _ in _marks):
        _marks.append((phase, elapsed()))


def marks() -> list[tuple[str, float]]:
    return list(_marks)


def write(path: Path) -> None:
    """The phases so far as CSV (phase, seconds since the process started)."""
    lines = ["phase,seconds"] + [f"{name},{seconds:.3f}" for name, seconds in _marks]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
