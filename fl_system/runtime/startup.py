"""Where a run's start-up goes: phases marked by fl-run, in seconds since the run began.

A run's clock starts with fl-run's own code: `fl_system/__init__` imports this module, and
fl-run's console script imports that package first (the interpreter's own ~30 ms before it are
left out; so is whatever the process did before it exec'd fl-run, such as a shell's earlier
commands or an install). Imports are counted: the user waits for them too. A later member of a
`-m` sweep counts from when that member starts. "in all" in fl-run's last line and every phase
in `logs/startup.csv` are measured from the same instant.
"""

from __future__ import annotations

import time
from pathlib import Path

_origin = time.monotonic()
_runs = 0
_marks: list[tuple[str, float]] = []


def begin() -> None:
    """A run starts: its clock. The first run of a process counts from fl-run's start; each
    later one (a member of a `-m` sweep) from now."""
    global _origin, _runs
    if _runs:
        _origin = time.monotonic()
    _runs += 1
    _marks[:] = [("fl-run started" if _runs == 1 else "run started", 0.0)]


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
    """The phases so far as CSV (phase, seconds since the run's clock started)."""
    lines = ["phase,seconds"] + [f"{name},{seconds:.3f}" for name, seconds in _marks]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
