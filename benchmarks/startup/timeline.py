"""One fl-run, timed from outside: when each start-up phase shows in the run's logs.

The timeline is read from the logs every process writes anyway (so the code before a change
can be timed the same way): a phase's time is when its first line appeared, in seconds since
fl-run's process was started. fl-run's last line gives its own "training" and "in all".
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.harness.fl_run import BenchmarkError, output_tail

POLL = 0.02  # seconds between looks at the logs
# phase -> (log file pattern, text whose first appearance ends the phase)
PHASES: dict[str, tuple[str, str]] = {
    "SuperLink started": ("superlink.log", "Starting Flower SuperLink"),
    "run submitted": ("superlink.log", "ControlServicer.StartRun"),
    "ServerApp started": ("serverapp.log", "Start `flwr-serverapp` process"),
    "first handshake": ("supernode-*.log", "Receiving: query.handshake"),
    "round 1 done": ("serverapp.log", "[fl_system] round 1/"),
    "run done": ("serverapp.log", "[fl_system] done:"),
}
LAUNCHER_READY = "ready: preloaded"  # every ClientApp launcher says it once
LAST_LINE = re.compile(r"after (\d+) rounds: ([\d.]+) s training, ([\d.]+) s in all")


@dataclass
class Timeline:
    phases: dict[str, float] = field(default_factory=dict)
    launchers_ready: list[float] = field(default_factory=list)
    training: float = 0.0  # fl-run's last line
    in_all: float = 0.0  # fl-run's last line
    exited: float = 0.0  # the process's end, seen from outside

    @property
    def ratio(self) -> float:
        return self.in_all / self.training

    def table_row(self) -> dict[str, float]:
        """Every phase with a time, launchers ready (the last one) included."""
        row = dict(self.phases)
        if self.launchers_ready:
            row["ClientApp launchers ready"] = max(self.launchers_ready)
        row["fl-run's last line"] = self.in_all
        row["process exit"] = self.exited
        return dict(sorted(row.items(), key=lambda item: item[1]))


def timed_run(
    command: list[str], run_dir: Path, env: dict[str, str], cwd: Path, out: Path, timeout: float
) -> Timeline:
    """Run fl-run (its output to `out`) and time it; raise BenchmarkError if it fails."""
    found = Timeline()
    offsets: dict[Path, int] = {}
    with out.open("w") as sink:
        start = time.monotonic()
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            _look(run_dir / "logs", offsets, found, time.monotonic() - start)
            if time.monotonic() - start > timeout:
                proc.kill()
                raise BenchmarkError(f"timed out after {timeout} s:\n{output_tail(out)}")
            time.sleep(POLL)
        found.exited = time.monotonic() - start
    if proc.returncode != 0:
        raise BenchmarkError(f"exited with {proc.returncode}:\n{output_tail(out)}")
    last = LAST_LINE.search(out.read_text(errors="replace"))
    if last is None:
        raise BenchmarkError(f"no final line:\n{output_tail(out)}")
    found.training, found.in_all = float(last.group(2)), float(last.group(3))
    return found


def _look(logs: Path, offsets: dict[Path, int], found: Timeline, now: float) -> None:
    for path in sorted(logs.glob("*.log")) if logs.is_dir() else []:
        with path.open("rb") as f:
            f.seek(offsets.get(path, 0))
            chunk = f.read()
        # only whole lines: a half-written one is read again next time
        chunk = chunk[: chunk.rfind(b"\n") + 1]
        offsets[path] = offsets.get(path, 0) + len(chunk)
        text = chunk.decode(errors="replace")
        for phase, (pattern, marker) in PHASES.items():
            if phase not in found.phases and path.match(pattern) and marker in text:
                found.phases[phase] = now
        found.launchers_ready += [now] * text.count(LAUNCHER_READY)
