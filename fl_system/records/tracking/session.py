"""One run's trackers as the round driver (`TrackedRun`) and fl-run (`end_left_open`) use them.

The round driver hands each round to a tracking process (`receiver`) and goes on: the
trackers' Python work then never waits for, nor holds up, the interpreter routing the round's
messages. `finish` and `fail` wait until the process has done everything handed over. One
process serves every run of its driver's process (a warm engine's sweep members), started
with the first. A round handed over but not yet logged when the run is killed is not in
tracking.json, so a resumed run sends it.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from fl_system.records import run_log
from fl_system.records.tracking import chosen, record
from fl_system.records.tracking.base import RUNNING, round_metrics
from fl_system.records.tracking.receiver import error_line, run_info
from fl_system.settings.config_nodes import build

Say = Callable[[str], None]
ANSWER_SECONDS = 300  # for the calls before a flush to be done (a server's retries included)


class _Receiver:
    """The tracking process and our end of its socket."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "fl_system.records.tracking.receiver", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # its own session: a stopped run's group is signalled and killed at once, while
            # a process of its own gets a moment to close its tracked runs (processes.py)
            start_new_session=True,
        )
        theirs.close()
        self.conn = Connection(ours.detach())


_warm: _Receiver | None = None  # this process's tracking process, kept between runs


class TrackedRun:
    """The driver's side of one tracked run."""

    def __init__(self, cfg: DictConfig, run_dir: Path, say: Say = run_log.say) -> None:
        global _warm
        self.say = say
        if _warm is None or _warm.process.poll() is not None:
            _warm = _Receiver()
        self._receiver: _Receiver | None = _warm
        self._answered = False  # a "done" read while sending, before its wait reads
        config = OmegaConf.to_container(cfg, resolve=True)
        self._send("open", config, str(run_dir), time.time())  # the run starts now

    def catch_up(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """The saved rounds a tracker has not received (a run resumed after a stop between
        its checkpoint and its tracking, or a tracker added on resume)."""
        for row in rows:
            self.log_round(int(float(row["round"])), row)

    def log_round(self, rnd: int, row: Mapping[str, Any]) -> None:
        self._send("round", rnd, round_metrics(row), time.time())  # the round ended now

    def finish(self, summary: Mapping[str, Any], files: Sequence[Path]) -> None:
        """The summary, the run's files and FINISHED; returns once they are logged."""
        self._send("finish", dict(summary), [str(f) for f in files if f.exists()], time.time())
        self._wait("end")

    def fail(self, status: str, error: str) -> None:
        """FAILED (or KILLED) with the error line; returns once it is logged."""
        self._send("fail", status, error, time.time())
        self._wait("end")

    def flush(self) -> None:
        """Wait until everything handed over so far is logged."""
        self._wait("flush")

    def _send(self, *message: Any) -> None:
        if self._receiver is None:
            return
        try:
            self._receiver.conn.send(message)
            self._read(timeout=0)  # what the trackers said so far
        except OSError:
            self._lost("it ended")

    def _wait(self, kind: str) -> None:
        self._answered = False
        self._send(kind)  # a quick process's "done" may be read here already
        if self._receiver is not None and not (
            self._answered or self._read(timeout=ANSWER_SECONDS)
        ):
            self._lost(f"no answer in {ANSWER_SECONDS} s")
        self._answered = False

    def _read(self, timeout: float) -> bool:
        """Say what the process said; True once it answered "done" (within `timeout`)."""
        assert self._receiver is not None
        conn = self._receiver.conn
        while conn.poll(timeout):
            try:
                kind, *args = conn.recv()
            except EOFError:
                self._lost("it ended")
                return True
            if kind == "done":
                self._answered = True
                return True
            self.say(args[0])
        return False

    def _lost(self, why: str) -> None:
        """The tracking process is gone (or stuck): one warning; the run goes on untracked."""
        global _warm
        receiver, self._receiver = self._receiver, None
        if receiver is None:
            return
        if receiver.process.poll() is None:
            receiver.process.kill()
        code = receiver.process.wait()
        if _warm is receiver:
            _warm = None
        self.say(
            run_log.warning_line(
                f"tracking stopped ({why}, exit code {code}); the run goes on without it, its "
                "files in the run directory are complete"
            )
        )


def end_left_open(cfg: DictConfig, run_dir: Path, status: str, error: str, say: Say) -> None:
    """fl-run's last word on a run whose ServerApp stopped without closing its tracked runs
    (interrupted: KILLED; crashed: FAILED), saying what it does: importing a tracker's
    package and reaching its store takes seconds."""
    nodes = chosen(cfg)
    entries = record.load(run_dir)
    left = {n: e for n, e in entries.items() if e.status == RUNNING and n in nodes}
    if not left:
        return
    say(f"marking the run {status} in {', '.join(left)} (its processes are gone)")
    run = run_info(cfg, run_dir)
    for name, entry in left.items():
        try:
            tracker = build(nodes[name], label=f"tracking={name}")
            tracker.mark_ended(run, entry.id, status, error, time.time())
            entry.status = status
        except Exception as err:  # the tracker is unreachable now: say so, keep the exit
            say(f"warning: tracking={name}: cannot mark the run {status} ({error_line(err)})")
    record.save(run_dir, entries)
