"""fl-run's start-up clock: phases in seconds since the run began, written as CSV."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from fl_system.runtime import startup


@pytest.fixture(autouse=True)
def fresh_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup, "_runs", 0)
    monkeypatch.setattr(startup, "_marks", [])


def test_the_first_run_counts_from_fl_run_s_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup, "_origin", time.monotonic() - 5.0)  # imports took 5 s
    startup.begin()
    assert startup.elapsed() >= 5.0
    assert startup.marks() == [("fl-run started", 0.0)]


def test_what_a_process_did_before_it_exec_d_fl_run_is_not_counted() -> None:
    """`( sleep 2; exec fl-run ... )` and an install chained before fl-run keep the process
    (its start time in /proc) that exec's fl-run: the clock starts with fl-run's own code."""
    clock = "import fl_system.runtime.startup as s; s.begin(); print(s.elapsed())"
    shell = f"sleep 2; exec {sys.executable} -c '{clock}'"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=True)
    assert 0 < float(done.stdout) < 1.0, done.stdout


def test_phases_are_recorded_once_in_order(tmp_path: Path) -> None:
    startup.begin()
    startup.mark("composed")
    time.sleep(0.02)
    startup.mark("checked")
    startup.mark("composed")  # a phase ends once
    names = [name for name, _ in startup.marks()]
    assert names == ["fl-run started", "composed", "checked"]
    seconds = [s for _, s in startup.marks()]
    assert seconds[2] - seconds[1] >= 0.02
    startup.write(tmp_path / "logs" / "startup.csv")
    lines = (tmp_path / "logs" / "startup.csv").read_text().splitlines()
    assert lines[0] == "phase,seconds"
    assert [line.split(",")[0] for line in lines[1:]] == names


def test_a_later_run_of_a_sweep_counts_from_its_own_start() -> None:
    startup.begin()
    startup.mark("composed")
    time.sleep(0.05)
    startup.begin()
    assert startup.elapsed() < 0.05
    assert startup.marks() == [("run started", 0.0)]


def test_fl_run_checks_its_config_without_importing_torch() -> None:
    """A bad value is refused before torch is imported (~2.5 s of CPU): fl-run imports torch
    only for the checks that build the model, while the local runtime's processes start."""
    script = "import sys, fl_system.cli; print(sorted(m for m in sys.modules if 'torch' in m))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"
