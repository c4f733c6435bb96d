"""Child processes that are always cleaned up: own process group, SIGINT first, then SIGKILL.

A process started with `restart=True` (a SuperNode: a federation outlives its members) that
exits is started again by `restart_exited`, with the same command and log. One killed by a
signal is always started again (machines die as often as they like); a restarted one that
exits by itself within RESTART_GRACE seconds is failing: it stays dead and `first_dead`
reports it. What a process leaves behind when it is killed (children in
sessions of their own) is remembered while it lives (`watch`) and ended with it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol


def tool_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for Flower's tools: this interpreter's bin/ first on PATH.

    The SuperLink and SuperNode start helpers (flower-superexec, flwr-serverapp,
    flwr-clientapp) by name, so they must resolve to this environment's copies.
    """
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    # SuperExec checks for work to start (a ServerApp, a ClientApp) every second by default;
    # a check is a cheap local call, and each round waits for one on every node.
    env.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", "0.2")
    env.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # no calls home from what we start
    env.update(extra or {})
    return env


RESTART_GRACE = 10.0  # seconds a restarted process must live for another restart
STOP_GRACE = 10.0  # seconds a stopped process gets after SIGINT before SIGKILL
ORPHAN_GRACE = 3.0  # seconds a helper in its own session gets to end by itself after that


class Spawner(Protocol):
    """Starts a command some other way than `subprocess.Popen` (a node forked from a warm
    process): returns what ProcessGroup uses of a Popen (pid, poll, wait); the process
    writes `log_path` itself and leads a process group of its own."""

    def __call__(self, cmd: Sequence[str], log_path: Path, env: dict[str, str]) -> Any: ...


@dataclass(frozen=True)
class _Launch:
    """How a restartable process was started, to start it again."""

    cmd: tuple[str, ...]
    log_path: Path
    env: dict[str, str]
    plain: bool
    started: float  # time.monotonic()
    restarts: int  # how many times this command was started again before
    spawner: Spawner | None = None


def _stays_dead(launch: _Launch, code: int) -> bool:
    """A restarted process that exited by itself (not by a signal) within RESTART_GRACE
    seconds is failing: it is not started again."""
    return bool(launch.restarts) and code >= 0 and time.monotonic() - launch.started < RESTART_GRACE


class ProcessGroup:
    """Starts commands in their own sessions and tears all of them down together."""

    def __init__(self) -> None:
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self._copiers: dict[int, threading.Thread] = {}  # pid -> its output's copier
        self._launches: dict[int, _Launch] = {}  # pid -> how to start it again
        self._seen: dict[int, dict[int, str]] = {}  # pid -> its descendants: pid -> start time

    def start(
        self,
        name: str,
        cmd: Sequence[str],
        log_path: Path,
        env: dict[str, str],
        *,
        plain: bool = False,
        restart: bool = False,
        pass_fds: tuple[int, ...] = (),
        spawner: Spawner | None = None,
    ) -> subprocess.Popen:
        """Start `cmd` with its output in `log_path`. `plain` (the run directory's logs)
        copies it line by line without the colour codes Flower's logger always writes;
        otherwise the process writes the file itself. `restart`: see `restart_exited`.
        `pass_fds`: descriptors the process inherits (a control socket). `spawner`: starts
        it instead of Popen (then `plain` and `pass_fds` do not apply), restarts included."""
        return self._start(
            name,
            cmd,
            log_path,
            env,
            plain=plain,
            restarts=0 if restart else None,
            pass_fds=pass_fds,
            spawner=spawner,
        )

    def _start(
        self,
        name: str,
        cmd: Sequence[str],
        log_path: Path,
        env: dict[str, str],
        *,
        plain: bool,
        restarts: int | None,
        pass_fds: tuple[int, ...] = (),
        spawner: Spawner | None = None,
    ) -> subprocess.Popen:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        if spawner is not None:
            log_path.touch()  # exists from now on, as for a process started here
            proc = spawner(cmd, log_path, env)
            self._remember(name, proc, cmd, log_path, env, plain, restarts, spawner)
            return proc
        log = open(log_path, "ab")  # noqa: SIM115 - exists from now on; closed below or by the copier
        proc = subprocess.Popen(
            list(cmd),
            stdout=subprocess.PIPE if plain else log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            pass_fds=pass_fds,
        )
        if plain:
            copier = threading.Thread(
                target=_copy_plain, args=(proc.stdout, log), name=f"log {name}", daemon=True
            )
            copier.start()
            self._copiers[proc.pid] = copier
        else:
            log.close()  # the child holds its own descriptor
        self._remember(name, proc, cmd, log_path, env, plain, restarts, None)
        return proc

    def _remember(
        self,
        name: str,
        proc: Any,
        cmd: Sequence[str],
        log_path: Path,
        env: dict[str, str],
        plain: bool,
        restarts: int | None,
        spawner: Spawner | None,
    ) -> None:
        self.procs.append((name, proc))
        if restarts is not None:
            self._launches[proc.pid] = _Launch(
                tuple(cmd), log_path, env, plain, time.monotonic(), restarts, spawner
            )

    def restart_exited(self) -> list[tuple[str, int]]:
        """Start again each restartable process that has exited, after ending what it left
        behind; (name, exit code) of each. A restarted process that exited by itself (not
        by a signal) within RESTART_GRACE seconds is left dead."""
        restarted = []
        for name, proc in list(self.procs):
            launch = self._launches.get(proc.pid)
            code = proc.poll()
            if launch is None or code is None or _stays_dead(launch, code):
                continue  # first_dead reports one that stays dead
            self.drain(proc, timeout=2.0)
            self._end_leftovers(proc.pid)
            self.procs.remove((name, proc))
            del self._launches[proc.pid]
            self._start(
                name,
                launch.cmd,
                launch.log_path,
                launch.env,
                plain=launch.plain,
                restarts=launch.restarts + 1,
                spawner=launch.spawner,
            )
            restarted.append((name, code))
        return restarted

    def watch(self) -> None:
        """Remember every process's descendants, to end them if their parent is killed (a
        SIGKILLed SuperNode's ClientApp, or a SIGKILLed SuperLink's ServerApp, lives on in a
        session of its own, no longer a descendant of anything here)."""
        parents = _parents()
        for _, proc in self.procs:
            pid = proc.pid
            seen = self._seen.setdefault(pid, {})
            for gone in [child for child in seen if child not in parents]:
                del seen[gone]  # ended (a ClientApp per message): no longer to remember
            for child in _descendants_in(parents, pid):
                started = _start_time(child)
                if started is not None:
                    seen[child] = started

    def _end_leftovers(self, pid: int) -> None:
        """SIGKILL the process group of `pid` and its remembered descendants still alive."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        for child, started in self._seen.pop(pid, {}).items():
            if _start_time(child) == started:  # the same process, not a reused pid
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(child, signal.SIGKILL)

    def drain(self, proc: subprocess.Popen, timeout: float = 10.0) -> None:
        """Wait until an exited process's output is all in its log (its last lines may still
        be in the pipe when it exits)."""
        copier = self._copiers.get(proc.pid)
        if copier is not None:
            copier.join(timeout)

    def first_dead(self, *, restartable: bool = True) -> tuple[str, subprocess.Popen, int] | None:
        """(name, process, exit code) of a process that has exited and stays dead, if any
        (of those not started with `restart=True` only, when `restartable` is False). A
        restartable one that `restart_exited` would start again is not dead: it may have died
        since that was last called."""
        for name, proc in self.procs:
            launch = self._launches.get(proc.pid)
            if launch is not None and not restartable:
                continue
            code = proc.poll()
            if code is None or (launch is not None and not _stays_dead(launch, code)):
                continue
            self.drain(proc, timeout=2.0)
            return name, proc, code
        return None

    def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGINT every group (Flower's SuperLink ignores SIGTERM), then SIGKILL those still
        there after `grace` seconds (at once with 0).

        Flower's helpers start their own sessions (flower-superexec, and under it
        flwr-serverapp), so the descendant tree is recorded first and every process group
        in it is killed at the end, not only the groups of the processes started here.
        """
        tree: set[int] = set()
        for _, proc in self.procs:
            tree |= descendants(proc.pid)
        signalled = {proc.pid for _, proc in self.procs}
        groups = signalled | {g for g in map(_pgid, tree) if g}
        for _, proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGINT)
        deadline = time.monotonic() + grace
        for _, proc in self.procs if grace > 0 else []:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        if grace > 0:
            _let_orphans_finish(tree - {p for p in tree if _pgid(p) in signalled})
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for pid in list(self._seen):
            self._end_leftovers(pid)
        for _, proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            self.drain(proc, timeout=2.0)
        self.procs.clear()
        self._copiers.clear()
        self._launches.clear()


def _let_orphans_finish(detached: set[int], wait: float = ORPHAN_GRACE) -> None:
    """Give helpers in sessions of their own, which no SIGINT reached, a moment to end by
    themselves once their parent is gone: W&B's service writes the run's last records then,
    and a SIGKILL would lose them."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and any(alive(pid) for pid in detached):
        time.sleep(0.02)


ANSI_CODES = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]")


def _copy_plain(stream: IO[bytes], log: IO[bytes]) -> None:
    """Each line of `stream` into the log, colour codes removed, flushed as it comes."""
    with stream, log:
        for line in iter(stream.readline, b""):
            log.write(ANSI_CODES.sub(b"", line))
            log.flush()


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, ...)."""
    after = _after_command(pid)
    return None if after is None else after.decode().split()


def _after_command(pid: int | str) -> bytes | None:
    """/proc/<pid>/stat after the command name (which may hold spaces and parentheses), or
    None once the process is gone."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    end = data.rfind(b")")
    return None if end < 0 else data[end + 1 :]


def _start_time(pid: int) -> str | None:
    """When `pid` started (clock ticks since boot), to tell it from a later process that
    got the same pid."""
    fields = _proc_stat(pid)
    return fields[19] if fields else None


def _pgid(pid: int) -> int | None:
    fields = _proc_stat(pid)
    return int(fields[2]) if fields else None


def write_into(log: Path) -> None:
    """Point this process's stdout and stderr at `log`."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def alive(pid: int) -> bool:
    """True for a running process; a zombie or a vanished pid counts as gone."""
    fields = _proc_stat(pid)
    return fields is not None and fields[0] != "Z"


def descendants(pid: int) -> set[int]:
    """Every process whose parent chain leads to `pid`, across sessions (read from /proc)."""
    return _descendants_in(_parents(), pid)


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process, from /proc (fl-run looks five times a second: read
    as bytes, this costs a third of what parsing each file as text did)."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (after := _after_command(name)) is not None:
            fields = after.split(b" ", 3)
            if len(fields) > 2:
                parent[int(name)] = int(fields[2])
    return parent


def _descendants_in(parent: dict[int, int], pid: int) -> set[int]:
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return found
