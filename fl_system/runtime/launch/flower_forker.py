"""One warm process that forks the SuperLink and the SuperNodes of a local federation.

Each of them, started by name, spends 1.1-1.3 s of CPU importing Flower's stacks (gRPC,
FastAPI, the link and node state, mostly the same modules); on a small machine, while the
ClientApp launcher imports torch and fl-run checks the data, that delays the run by seconds.
fl-run starts this forker first: it imports both stacks once, then forks one child per process
it is asked for, while it has no thread or connection of its own. Each child is `fl-superlink`
or `fl-supernode` with its arguments, environment and log, in a session of its own, exactly
as if started by name.

The forker waits for its children and reports each exit (a code, or minus the signal, as
`subprocess.Popen.returncode`); fl-run sees each through a `ForkedProcess`, which ProcessGroup
restarts and stops like any other process. The forker ignores Ctrl-C (fl-run stops the
processes itself); if fl-run dies without stopping them, the forker ends them and exits.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import setproctitle

from fl_system.runtime.launch.forks import PolledProcess, become, exit_with, fork_session
from fl_system.runtime.launch.processes import alive

# The commands it starts, and the module whose main() each one is (pyproject's scripts)
COMMANDS = {
    "fl-superlink": "fl_system.runtime.superlink",
    "fl-supernode": "fl_system.runtime.supernode.node",
}
REAP_SECONDS = 0.1  # how often the forker looks for children that ended
# What the SuperLink and the SuperNodes import only once they serve (their HTTP apps; found in
# their logs with PYTHONPROFILEIMPORTTIME=1): 0.4 s of CPU in the SuperLink, 0.35 s in each node
SERVING_IMPORTS = (
    "flwr.superlink.routers.control",
    "flwr.superlink.routers.fleet.router",
    "flwr.supercore.routers.runtime",
    "flwr.supercore.routers.health",
    "flwr.supercore.dependencies.runtime",
    "flwr.supernode.main",
    "fl_system.flower.returning_nodes",
    "fl_system.flower.scoped_middleware",
    "fl_system.flower.sql_state",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.protocols.websockets.websockets_impl",
    "uvloop",
    "httpcore",
    "anyio._core._sockets",
    "anyio._core._streams",
    "cryptography.hazmat.backends.openssl.backend",
    "netrc",
)


class ForkedProcess(PolledProcess):
    """A process the forker started: its exit comes from the forker."""

    def __init__(self, pid: int, forker: FlowerForker) -> None:
        super().__init__(pid)
        self._forker = forker

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._forker.exit_code(self.pid)
        return self.returncode


class FlowerForker:
    """fl-run's end of the forker: `spawn` is ProcessGroup's way to start a process by it."""

    def __init__(self, control: socket.socket, forker: subprocess.Popen | ForkedProcess) -> None:
        self.control = control
        self.forker = forker
        self._exits: dict[int, int] = {}
        self._started: list[int] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, name="flower forker", daemon=True).start()

    def spawn(self, cmd: Sequence[str], log_path: Path, env: dict[str, str]) -> ForkedProcess:
        """Start `fl-superlink|fl-supernode <args>` as a child of the forker (waits until it
        is forked: the first call, until the forker has imported Flower)."""
        if not cmd or cmd[0] not in COMMANDS:
            raise ValueError(f"the forker starts {' and '.join(COMMANDS)} only, not {list(cmd)}")
        request = {"command": cmd[0], "argv": list(cmd[1:]), "log": str(log_path), "env": env}
        with self._changed:
            self.control.sendall(json.dumps(request).encode() + b"\n")
            while not self._started:
                if self.forker.poll() is not None:
                    raise OSError(f"the Flower forker exited with code {self.forker.poll()}")
                self._changed.wait(0.5)
            return ForkedProcess(self._started.pop(0), self)

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            if pid in self._exits:
                return self._exits[pid]
        if self.forker.poll() is not None and not alive(pid):
            return -signal.SIGKILL  # gone while its forker could not tell how
        return None

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for line in self.control.makefile("r", encoding="utf-8"):
                event = json.loads(line)
                with self._changed:
                    if "started" in event:
                        self._started.append(int(event["started"]))
                    else:
                        self._exits[int(event["exited"])] = int(event["code"])
                    self._changed.notify_all()


# ----- the forker process ----------------------------------------------------------------------
def serve(control: socket.socket) -> None:
    """Fork a process per request until fl-run closes the socket; report every exit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    children: set[int] = set()
    pending = b""
    while True:
        readable, _, _ = select.select([control], [], [], REAP_SECONDS)
        if readable:
            data = control.recv(65536)
            if not data:  # fl-run ended without stopping them (it was killed): nobody else will
                _end(children)
                return
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                pid = _fork(json.loads(line), control)
                children.add(pid)
                control.sendall(json.dumps({"started": pid}).encode() + b"\n")
        report_exits(children, control)


def report_exits(children: set[int], control: socket.socket) -> None:
    """Reap the children that ended and send each exit (a code, or minus the signal, as
    `subprocess.Popen.returncode`) as a line of JSON."""
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.discard(pid)
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            control.sendall(json.dumps({"exited": pid, "code": code}).encode() + b"\n")


def _end(children: set[int], grace: float = 5.0) -> None:
    """SIGINT every child's process group (Flower's processes leave cleanly on it), SIGKILL
    those still there after `grace` seconds."""
    for pid in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGINT)
    deadline = time.monotonic() + grace
    while children and time.monotonic() < deadline:
        children -= {pid for pid in children if os.waitpid(pid, os.WNOHANG)[0]}
        time.sleep(0.05)
    for pid in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def _fork(request: dict, control: socket.socket) -> int:
    pid = fork_session()
    if pid == 0:
        _run(request, control)
    return pid


def _run(request: dict, control: socket.socket) -> NoReturn:
    """The child: `<command> <argv>` with the request's log and environment."""

    def command() -> int:
        control.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.argv = [request["command"], *request["argv"]]
        # ps shows what it is, not the forker
        become(" ".join(sys.argv), Path(request["log"]), request["env"])
        return importlib.import_module(COMMANDS[request["command"]]).main(request["argv"])

    exit_with(command)


def main() -> None:
    """`python -m fl_system.runtime.launch.flower_forker FD`:
    FD is fl-run's end of a socket pair."""
    control = socket.socket(fileno=int(sys.argv[1]))
    from flwr.supercore.logger import update_console_handler

    from fl_system.runtime import flwr_check

    flwr_check.check()  # what each of them checks first: it imports the link's and node's stacks
    for cli in ("flwr.superlink.cli.flower_superlink", "flwr.supernode.cli.flower_supernode"):
        importlib.import_module(cli)
    for module in (*COMMANDS.values(), *SERVING_IMPORTS):
        importlib.import_module(module)
    update_console_handler(colored=False)  # the children write their logs themselves
    setproctitle.getproctitle()  # sets the title machinery up while the environment is intact
    # What the children inherit stays out of their garbage collector's scans (and their
    # pages stay shared instead of being copied when a scan touches them).
    gc.freeze()
    serve(control)


if __name__ == "__main__":
    main()
