"""Processes forked from this one instead of started by name: they skip a fresh interpreter's
start and inherit what this process imported (the simulation engine forked from fl-run; the
SuperLink and SuperNodes forked from the Flower forker).

`fork_session` forks into a session of its own, `become` makes the child what the command
would have started (its log, its environment, its title in ps), `exit_with` runs its main and
never returns into the parent's code; ProcessGroup sees the child as a `PolledProcess`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import setproctitle

from fl_system.runtime.launch.processes import write_into


def fork_session() -> int:
    """`os.fork`, the child leading a session of its own before the parent goes on, so that
    a ProcessGroup's `killpg` reaches it from the start (a stop right after the fork would
    otherwise miss it); 0 in the child, the child's pid in the parent. The child starts with
    SIGINT and SIGTERM at their default actions (the parent's handlers are not its own: a
    Ctrl-C meant for fl-run must not run fl-run's handling in its engine); one that came
    during the fork is held until then."""
    stops = {signal.SIGINT, signal.SIGTERM}
    held = signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.setsid()
        for sig in stops:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        os.close(write_end)  # the parent's read returns
        return 0
    try:
        os.close(write_end)
        os.read(read_end, 1)  # end of file once the child leads its session (or died)
    finally:
        os.close(read_end)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    return pid


class PolledProcess:
    """A process not started by `subprocess.Popen`, with what ProcessGroup uses of one (pid,
    returncode, poll, wait); subclasses say in `poll` whether and how it ended."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        raise NotImplementedError

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode


class ForkedChild(PolledProcess):
    """A child this process forked (`os.fork`): its exit comes from `os.waitpid`."""

    def poll(self) -> int | None:
        if self.returncode is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def become(title: str, log: Path, env: dict[str, str]) -> None:
    """In a forked child: output into `log`, no input, `title` in ps and `env` as its whole
    environment, as for a process started by name with them."""
    write_into(log)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    setproctitle.setproctitle(title)  # while the parent's environment is intact
    os.environ.clear()
    os.environ.update(env)


def exit_with(main: Callable[[], int]) -> NoReturn:
    """In a forked child: run `main` and exit with its code (1 and the traceback in the log
    if it raises); the child never returns into the parent's code."""
    code = 1
    try:
        code = main()
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
