"""How the simulation engine process comes to be: forked from fl-run once the config is
checked, or forked as fl-run starts and told its settings later (the early engine).

An engine spends ~2 s importing Flower, torch and both apps before its first run, the
start-up's longest part; fl-run composes and checks the config first (~0.25 s) to learn the
engine's settings. When fl-run's arguments name `runtime=simulation`, its first step forks an
early engine instead: the child imports what every engine imports (its output in /dev/null
meanwhile, holding none of fl-run's descriptors), then waits for what the composed config
decides (its command, log, environment and settings) and becomes the engine a later fork
would have been; an import that failed is written into the run's log then. One that no run
takes (a refused argument, a composed runtime that is not the simulation) is ended when
fl-run exits. fl-run forks no earlier (before its own imports): the engine needs those too,
and would spend the time importing them itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import struct
import sys
import threading
import traceback
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from fl_system.runtime.launch import keep_warm
from fl_system.runtime.launch.forks import ForkedChild, become, exit_with, fork_session
from fl_system.runtime.launch.processes import tool_env

if TYPE_CHECKING:
    from fl_system.runtime.launch.simulation_engine import Prepared

EARLY_ARGUMENT = "runtime=simulation"
_LENGTH = struct.Struct("!I")  # the early engine's settings: a length, then JSON


@dataclass(frozen=True)
class EngineSettings:
    """What an engine is started with: runs that agree on all of it can share one."""

    client_cpus: float
    client_gpus: float
    torch_threads: int
    backend: str
    address: str | None  # a Ray cluster's head (HOST:PORT), or None: a Ray of our own


@dataclass(frozen=True)
class _EarlyEngine:
    pid: int
    control: socket.socket  # fl-run's end: the settings, then the engine's control socket
    child_fd: int  # the engine's end, as its command line names it


_early: list[_EarlyEngine] = []
_started: list[bool] = []  # an engine was forked from this process (early or not)


def start_early(argv: list[str]) -> None:
    """Fork the early engine when `argv` names the simulation runtime (fl-run's first step)."""
    if EARLY_ARGUMENT not in argv or not forkable():
        return
    ours, theirs = socket.socketpair()
    pid = fork_session()
    if pid == 0:
        ours.close()
        exit_with(partial(_early_engine, theirs))
    _early.append(_EarlyEngine(pid, ours, theirs.fileno()))
    theirs.close()
    keep_warm(end_early)


def take_early() -> _EarlyEngine | None:
    """The early engine, for the first engine the run starts (None if there is none)."""
    return _early.pop() if _early else None


def end_early() -> None:
    """End an early engine no run took (fl-run is exiting)."""
    while _early:
        early = _early.pop()
        early.control.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(early.pid, signal.SIGKILL)  # it leads its session
        os.waitpid(early.pid, 0)


def adopt(
    early: _EarlyEngine, settings: EngineSettings, cmd: list[str], log: Path, env: dict[str, str]
) -> ForkedChild:
    """ProcessGroup's spawner for an early engine: tell it what the run decided."""
    body = json.dumps({"cmd": cmd, "log": str(log), "env": env, "settings": asdict(settings)})
    early.control.sendall(_LENGTH.pack(len(body)) + body.encode())
    return ForkedChild(early.pid)


def forkable() -> bool:
    """fl-run may fork the engine: it is fl-run's first, forked before fl-run ran any torch
    operation (whose OpenMP pool a child cannot use), and fl-run runs no other thread, whose
    locks a child would inherit held. A later engine (a sweep member with other engine
    settings) is started by name."""
    first = not _started
    _started.append(True)
    return first and threading.active_count() == 1


def fork_engine(
    control_fd: int, settings: EngineSettings, cmd: list[str], log: Path, env: dict[str, str]
) -> ForkedChild:
    """ProcessGroup's spawner for the engine: a fork of fl-run, which skips a fresh
    interpreter's start and whatever fl-run imported already (its config stack; torch and
    Flower when fl-run runs in a Python process that imported them). The child is what `cmd`
    would start: its own session, `env`, output into `log`, no descriptor of fl-run's but
    `control_fd`, and thread pools sized again (those loaded before the fork kept fl-run's)."""
    pid = fork_session()
    if pid:
        return ForkedChild(pid)
    exit_with(partial(_become_engine, control_fd, settings, cmd, log, env))


def _early_engine(control: socket.socket) -> int:
    """The early engine: import, wait for the run's decision, become its engine (one whose
    imports failed says why in the run's log, as an engine forked later would)."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # fl-run's streams (a caller's pipes) stay fl-run's alone
        os.dup2(devnull, fd)
    os.close(devnull)
    _close_all_but(control.fileno())
    os.environ.update(tool_env())  # what Flower reads once, at its import (its telemetry)
    prepared, failure = None, None
    try:
        from fl_system.runtime.launch import simulation_engine

        prepared = simulation_engine.prepare()
    except Exception:
        failure = traceback.format_exc()
    head = _receive(control, _LENGTH.size)
    body = _receive(control, _LENGTH.unpack(head)[0]) if head else None
    if body is None:  # fl-run went on without it, or exited
        return 0
    decided = json.loads(body)
    cmd, log, env = decided["cmd"], Path(decided["log"]), decided["env"]
    if failure is not None:
        become(" ".join(cmd), log, env)
        sys.stderr.write(failure)
        return 1
    settings = EngineSettings(**decided["settings"])
    return _become_engine(control.detach(), settings, cmd, log, env, prepared)


def _become_engine(
    control_fd: int,
    settings: EngineSettings,
    cmd: list[str],
    log: Path,
    env: dict[str, str],
    prepared: Prepared | None = None,
) -> int:
    become(" ".join(cmd), log, env)
    sys.stdout.reconfigure(line_buffering=True)  # as PYTHONUNBUFFERED has it by name
    _close_all_but(control_fd)
    _fresh_logging()
    from threadpoolctl import threadpool_limits

    threadpool_limits(settings.torch_threads)
    from fl_system.runtime.launch import simulation_engine

    return simulation_engine.main(
        control_fd,
        settings.client_cpus,
        settings.client_gpus,
        settings.backend,
        settings.address or "",
        prepared,
    )


def _receive(control: socket.socket, size: int) -> bytes | None:
    """Exactly `size` bytes, or None if fl-run closed its end first."""
    data = control.recv(size, socket.MSG_WAITALL)
    return data if len(data) == size else None


def _close_all_but(keep: int) -> None:
    os.closerange(3, keep)
    os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))


def _fresh_logging() -> None:
    """Logging as a new interpreter has it: fl-run's Hydra config (root at ERROR, no handler,
    every logger that existed then disabled) would silence the ServerApp's warnings."""
    logging.root.handlers.clear()
    logging.root.setLevel(logging.WARNING)
    for logger in logging.Logger.manager.loggerDict.values():
        if isinstance(logger, logging.Logger):
            logger.disabled = False
