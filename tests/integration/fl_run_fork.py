"""`fl-run` for the tests, forked from a warm interpreter instead of started by name.

Every `fl-run` process spends ~3.5 s of CPU importing itself, Hydra and torch before it reads
its first argument; the suite starts ~170 of them on two cores. Each test worker keeps one
*zygote* (this file run as a script) that imported them once; each run is a fresh process
forked from it that runs `fl_system.cli.main` with the run's arguments, environment, working
directory and standard streams, exactly what the console script runs. The tests see it as they
see `subprocess.Popen`: a pid to signal, an exit code, pipes or files for its output.

The child's clock starts at the fork (fl-run's clock counts from its own process's start), and
its argv[0] is the console script's path, as Hydra sees it when started by name. Whatever fl-run
starts (SuperLink, SuperNodes, launchers) is started by name as always; fl-run forks its simulation
engine, which so starts with what the zygote imported.
`FL_RUN_BY_NAME=1` starts every run by name instead, to compare.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from fl_system.runtime.launch.flower_forker import ForkedProcess, report_exits

FL_RUN = str(Path(sys.executable).parent / "fl-run")
BY_NAME_ENV = "FL_RUN_BY_NAME"
_REPORT = 0.05  # how often the zygote looks for runs that ended


class ForkedRun(ForkedProcess):
    """A run forked by the zygote: what the tests use of `subprocess.Popen` (its exit code
    comes from the zygote, as a `ForkedProcess`'s from the Flower forker)."""

    def __init__(self, pid: int, zygote: _Zygote, pipes: dict[str, IO[Any]], text: bool) -> None:
        super().__init__(pid, zygote)  # type: ignore[arg-type]
        self.stdout = pipes.get("stdout")
        self.stderr = pipes.get("stderr")
        self._text = text

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Read the pipes to their end, then wait for the exit (as `Popen.communicate`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        files = [f if f is not None and not f.closed else None for f in (self.stdout, self.stderr)]
        wanted = [None if f is None else f.fileno() for f in files]
        streams = {f.fileno(): f for f in files if f is not None}
        read: dict[int, bytes] = {fd: b"" for fd in streams}
        while streams:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(FL_RUN, timeout or 0.0)
            ready, _, _ = select.select(list(streams), [], [], left)
            for fd in ready:
                chunk = os.read(fd, 65536)
                if chunk:
                    read[fd] += chunk
                else:
                    streams.pop(fd).close()
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 0.0))
        out, err = (None if fd is None else self._decoded(read[fd]) for fd in wanted)
        return out, err

    def _decoded(self, data: bytes) -> Any:
        if not self._text:
            return data
        return data.decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")


class _Zygote:
    """The test process's end of its zygote."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        with theirs:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        self.sock = ours
        self._exits: dict[int, int] = {}
        self._pending = b""

    def fork(self, argv: Sequence[str], env: dict[str, str], cwd: str, fds: list[int]) -> int:
        request = {"argv": list(argv), "env": env, "cwd": cwd}
        socket.send_fds(self.sock, [json.dumps(request).encode() + b"\n"], fds)
        while True:
            for event in self._events(block=True):
                return int(event["started"])

    def exit_code(self, pid: int) -> int | None:
        self._events(block=False)
        return self._exits.get(pid)

    def _events(self, block: bool) -> list[dict]:
        """Exits are recorded as they are read; the others (a fork's pid) are returned."""
        if not block and not select.select([self.sock], [], [], 0)[0]:
            return []
        data = self.sock.recv(65536)
        if not data:
            raise OSError(f"the fl-run zygote exited with code {self.proc.wait()}")
        self._pending += data
        events = []
        while b"\n" in self._pending:
            line, self._pending = self._pending.split(b"\n", 1)
            event = json.loads(line)
            if "exited" in event:
                self._exits[int(event["exited"])] = int(event["code"])
            else:
                events.append(event)
        return events

    def close(self) -> None:
        self.sock.close()  # the zygote ends the runs still going and exits
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)


_zygote: _Zygote | None = None


def _the_zygote() -> _Zygote:
    global _zygote
    if _zygote is None or _zygote.proc.poll() is not None:
        _zygote = _Zygote()
        atexit.register(_zygote.close)
    return _zygote


def start_fl_run(
    args: Sequence[str],
    env: dict[str, str],
    *,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
    cwd: str | Path | None = None,
    text: bool = True,
) -> ForkedRun | subprocess.Popen:
    """`fl-run <args>` in the background, its streams as `subprocess.Popen` takes them (PIPE,
    STDOUT, DEVNULL, an open file, or None for the test's own); stdin is /dev/null."""
    if env.get(BY_NAME_ENV) == "1":
        return subprocess.Popen(
            [FL_RUN, *args], env=env, stdout=stdout, stderr=stderr, cwd=cwd, text=text,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    opened: list[int] = []  # what this process closes once the child has its copies
    pipes: dict[str, IO[Any]] = {}

    def stream(name: str, how: int | IO[Any] | None, default: int, out: int | None) -> int:
        if how is None:
            return default
        if how == subprocess.DEVNULL:
            fd = os.open(os.devnull, os.O_RDWR)
        elif how == subprocess.STDOUT:
            assert out is not None
            return out
        elif how == subprocess.PIPE:
            reader, fd = os.pipe()
            pipes[name] = os.fdopen(
                reader, "r" if text else "rb", errors="replace" if text else None
            )
        else:
            return how.fileno()  # type: ignore[union-attr]
        opened.append(fd)
        return fd

    stdin = stream("stdin", subprocess.DEVNULL, 0, None)
    out = stream("stdout", stdout, 1, None)
    err = stream("stderr", stderr, 2, out)
    zygote = _the_zygote()
    try:
        pid = zygote.fork(args, env, str(cwd or Path.cwd()), [stdin, out, err])
    finally:
        for fd in opened:
            os.close(fd)
    return ForkedRun(pid, zygote, pipes, text)


# ----- the zygote process ----------------------------------------------------------------------
def _serve(control: socket.socket) -> None:
    """Fork a run per request until the test process closes the socket; report each exit."""
    children: set[int] = set()
    pending = b""
    while True:
        if select.select([control], [], [], _REPORT)[0]:
            data, fds, _, _ = socket.recv_fds(control, 1 << 20, 3)
            if not data:
                _end(children)
                return
            pending += data
            if b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                pid = os.fork()
                if pid == 0:
                    _child(json.loads(line), fds, control)
                for fd in fds:
                    os.close(fd)
                children.add(pid)
                control.sendall(json.dumps({"started": pid}).encode() + b"\n")
        report_exits(children, control)


def _end(children: set[int]) -> None:
    """The test process is gone: the runs it left get SIGTERM (fl-run tears its processes
    down on it), then SIGKILL after 20 s."""
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while children and time.monotonic() < deadline:
        children -= {pid for pid in children if os.waitpid(pid, os.WNOHANG)[0]}
        time.sleep(0.05)
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _child(request: dict, fds: list[int], control: socket.socket) -> None:
    """The forked run: fl-run's console script, with the request's streams and environment."""
    code = 1
    try:
        control.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from fl_system import cli
        from fl_system.runtime import startup

        startup._origin = time.monotonic()  # fl-run's clock: from its process's start
        sys.argv = [FL_RUN, *request["argv"]]
        import setproctitle

        setproctitle.setproctitle(" ".join(sys.argv))
        try:
            cli.main()
            code = 0
        except SystemExit as done:  # as the interpreter ends on it
            if done.code is None or isinstance(done.code, int):
                code = done.code or 0
            else:
                print(done.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(int(code))


def _warm() -> None:
    """What every fl-run imports: itself, Hydra's plugins, the checks that build models
    (torch), the runtimes and the run records; and what the simulation engine, which fl-run
    forks, imports before its first run (Flower, torch's optimisers)."""
    import gc
    import importlib

    from fl_system.runtime.warm_imports import preload

    preload()
    for module in (
        "fl_system.cli",
        "fl_system.config.preflight",
        "fl_system.runtime.launch.local",
        "fl_system.runtime.launch.simulation",
        "fl_system.runtime.launch.simulation_engine",
        "fl_system.flower.flwr_engine",
        "flwr.simulation",
        "fl_system.runtime.launch.remote",
        "fl_system.data.partition_cache",
        "fl_system.data.node_data",
        "fl_system.records.results",
        "hydra._internal.core_plugins.basic_launcher",
        "hydra._internal.core_plugins.basic_sweeper",
        "setproctitle",
    ):
        importlib.import_module(module)
    gc.freeze()  # the children's collector leaves the warm modules alone (pages stay shared)


if __name__ == "__main__":
    _warm()
    _serve(socket.socket(fileno=int(sys.argv[1])))
