"""The ClientApp launcher: a long-lived process that forks a child per task.

Flower starts a fresh `flwr-clientapp` interpreter for every message, which imports torch and
Flower again (seconds of CPU each, ten at once on a small machine). This process imports them
once, waits for a SuperNode to say a message arrived, claims the task through that node's
Runtime API and forks a child that runs Flower's own ClientApp runtime with the task's token.
The parent never runs a torch op or touches CUDA, so a child may use the GPU.

It serves either one SuperNode, which starts it and wakes it with a byte on a pipe, or every
SuperNode of a local federation (fl-run starts it once, so torch is imported once per machine,
not once per node): each node wakes it with a datagram naming its pid and Runtime API on a
UNIX socket, and a child writes to its node's log. Either way a child's Flower runtime watches
its node's pid, and a child killed by a signal gets its node's error reply at once
(`TaskClaimer.report_killed`) instead of after the task's token expires (~60 s).

    python -m fl_system.runtime.supernode.launcher \
        --runtime-api-address HOST:PORT --wake-fd FD --node-pid P
    python -m fl_system.runtime.supernode.launcher \
        --socket PATH --parent-pid P [--serverapp-api-address A [--root-certificates CA]
        [--superexec-auth-secret-file F]]

A shared launcher given the SuperLink's Runtime API (`--serverapp-api-address`, with the
SuperLink in `--isolation process`) also forks the run's ServerApp, instead of Flower's
SuperExec starting a fresh `flwr-serverapp` interpreter that imports torch again.

It imports this installation's apps too; a ClientApp whose FAB carries the same code runs them
instead of importing the FAB's copy (`app_code`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import setproctitle

from fl_system.flower.wakeups import FALLBACK_POLL_SECONDS, RUN_CREATED
from fl_system.runtime.launch import LaunchError
from fl_system.runtime.launch.components import app_dir, components
from fl_system.runtime.launch.forks import exit_with
from fl_system.runtime.launch.processes import alive
from fl_system.runtime.supernode import app_code
from fl_system.runtime.warm_imports import PRELOAD, preload

if TYPE_CHECKING:
    from fl_system.flower.flwr_tasks import ClaimedTask, TaskClaimer

# the SuperLink says when a run is created (`wakeups`), where Flower's SuperExec polls 5/s; the
# launcher looks for tasks every FALLBACK_POLL_SECONDS besides (a wake-up dropped or early)
SOCKET_ENV = "FL_LAUNCHER_SOCKET"  # set for fl-supernode: wake this shared launcher
CLOSE_SECONDS = 5.0  # for closing the nodes' clients when the launcher stops


def say(text: str, out: int = 2) -> None:
    with contextlib.suppress(OSError):
        os.write(out, f"[launcher {os.getpid()}] {text}\n".encode())


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fl_system.runtime.supernode.launcher")
    parser.add_argument("--runtime-api-address", help="the one node's Runtime API")
    parser.add_argument("--wake-fd", type=int, help="readable end of the node's pipe")
    parser.add_argument("--node-pid", type=int, help="the one node: exit when it is gone")
    parser.add_argument("--socket", help="serve every node that wakes this UNIX socket")
    parser.add_argument("--parent-pid", type=int, help="with --socket: exit when it is gone")
    parser.add_argument(
        "--serverapp-api-address", help="with --socket: also launch this SuperLink's ServerApps"
    )
    for flag, what in (
        ("--root-certificates", "the SuperLink's CA, when it serves HTTPS"),
        ("--superexec-auth-secret-file", "the secret the SuperLink hands ServerApps out for"),
    ):
        parser.add_argument(flag, type=lambda path: Path(path).read_bytes(), help=what)
    args = parser.parse_args(argv)
    one = (args.runtime_api_address, args.wake_fd, args.node_pid)
    if args.socket is None and (None in one or args.serverapp_api_address):
        parser.error("give --runtime-api-address, --wake-fd and --node-pid, or --socket")
    if args.socket is not None and (args.parent_pid is None or any(v is not None for v in one)):
        parser.error("--socket takes --parent-pid (and --serverapp-api-address) only")
    server_only = (args.root_certificates, args.superexec_auth_secret_file)
    if args.serverapp_api_address is None and any(v is not None for v in server_only):
        parser.error(
            "--root-certificates and --superexec-auth-secret-file go with --serverapp-api-address"
        )
    return args


@dataclass
class _Node:
    """A SuperNode served (or the SuperLink, for ServerApps): where to claim its tasks, and
    where its children write."""

    address: str
    pid: int
    claimer: TaskClaimer
    out: int = 2  # the node's own stderr when shared (its log), else the launcher's
    serverapp: bool = False  # the SuperLink's ServerApp tasks, not a SuperNode's


class Launcher:
    """Claims tasks and forks children; reaps them and reports those that died abnormally."""

    def __init__(
        self, wake_fd: int, watched_pid: int, *, shared: bool, app_digest: str | None = None
    ) -> None:
        from fl_system.flower import flwr_tasks

        self.hooks = flwr_tasks
        self.app_digest = app_digest  # the fingerprint of the apps imported here (app_code)
        self.wake_fd = wake_fd  # the node's pipe, or the shared socket
        self.watched_pid = watched_pid  # exit once it is gone (the node, or fl-run)
        self.shared = shared
        self.nodes: dict[str, _Node] = {}
        self.server: _Node | None = None  # woken by the SuperLink per new run (wakeups)
        self.children: dict[int, tuple[_Node, ClaimedTask, float]] = {}
        self.nodes_polled = time.monotonic()
        self.signal_r, signal_w = os.pipe()
        os.set_blocking(signal_w, False)
        signal.set_wakeup_fd(signal_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select through the fd
        # SIGTERM/SIGINT end the serving loop at its next look, not with an exception raised
        # wherever the loop is (inside an HTTP call, a lock held, its cleanup would hang)
        self.stopping = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop_soon)

    def _stop_soon(self, *_: object) -> None:
        self.stopping = True

    def add_node(self, address: str, pid: int) -> _Node:
        """Serve this node (a node restarted on the same address replaces its old entry)."""
        old = self.nodes.pop(address, None)
        if old is not None:
            self._forget(old)
        node = _Node(address, pid, self.hooks.TaskClaimer(address))
        if self.shared:
            with contextlib.suppress(OSError):  # its log; else the launcher's own
                node.out = os.open(f"/proc/{pid}/fd/2", os.O_WRONLY | os.O_APPEND)
        self.nodes[address] = node
        return node

    def add_server(
        self, address: str, root_certificates: bytes | None, auth_secret: bytes | None
    ) -> None:
        """Also launch the ServerApps of the SuperLink whose Runtime API is `address` (its
        children watch this launcher's watched pid: fl-run)."""
        claimer = self.hooks.TaskClaimer(
            address, serverapp=True, root_certificates=root_certificates, auth_secret=auth_secret
        )
        self.server = _Node(address, self.watched_pid, claimer, serverapp=True)

    def serve(self) -> None:
        try:
            while (woken := self._wait_for_news()) is not None:
                self._reap()
                for node in woken:
                    self._claim(node)
        finally:
            self._end_children()
            # closing the clients of nodes that are gone must not keep this process alive
            deadline = threading.Timer(CLOSE_SECONDS, os._exit, args=(0,))
            deadline.daemon = True
            deadline.start()
            for node in [*self.nodes.values(), *([self.server] if self.server else [])]:
                self._forget(node)

    def _claim(self, node: _Node) -> None:
        """Fork a child for each task pending at `node`. A node whose Runtime API stopped
        answering (it died mid-call) is dropped at the next look; one still alive is told."""
        try:
            for spec in node.claimer.claim_pending():
                self._fork(node, spec)
        except Exception as err:  # whatever its HTTP client raised when it gave up
            if alive(node.pid):
                say(f"ERROR: claiming tasks from {node.address} failed: {err}", node.out)

    def _end_children(self) -> None:
        """The nodes are gone or going, so no reply of a child still running can arrive:
        end them (one stuck, e.g. in a lock a fork copied held, would outlive us forever)."""
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self.children.clear()

    def _wait_for_news(self) -> list[_Node] | None:
        """Block until a wake-up, a child's exit or the fallback poll; the nodes to claim
        from (all of them after the fallback wait), or None once it is time to stop."""
        ready, _, _ = select.select([self.wake_fd, self.signal_r], [], [], FALLBACK_POLL_SECONDS)
        now = time.monotonic()
        fallback = now - self.nodes_polled >= FALLBACK_POLL_SECONDS
        named: set[str] | None = None if fallback else set()
        if self.signal_r in ready:
            os.read(self.signal_r, 4096)
        if self.stopping:
            return None
        if self.wake_fd in ready:
            if self.shared:
                said = self._read_datagrams()  # registers new nodes in any case
                named = None if named is None else said
            elif not os.read(self.wake_fd, 4096):
                return None  # the SuperNode closed its end: it is gone
            else:
                named = None
        if not alive(self.watched_pid):
            return None
        for node in [n for n in self.nodes.values() if not alive(n.pid)]:
            del self.nodes[node.address]
            self._forget(node)
        if named is None:
            self.nodes_polled = now
        served = [*self.nodes.values(), *([self.server] if self.server else [])]
        return [n for n in served if named is None or n.address in named]

    def _read_datagrams(self) -> set[str]:
        """Nodes that said "<pid> <address>" since the last look (new ones are added), and
        the SuperLink's Runtime API if it said a run was created."""
        named: set[str] = set()
        while True:
            try:
                data = os.read(self.wake_fd, 1024)
            except BlockingIOError:
                return named
            if data == RUN_CREATED:
                if self.server is not None:
                    named.add(self.server.address)
                continue
            pid_text, _, address = data.decode(errors="replace").partition(" ")
            if not pid_text.isdigit() or not address:
                continue
            node = self.nodes.get(address)
            if node is None or node.pid != int(pid_text):
                node = self.add_node(address, int(pid_text))
            named.add(address)

    def _forget(self, node: _Node) -> None:
        node.claimer.close()
        if node.out != 2:
            with contextlib.suppress(OSError):
                os.close(node.out)

    def _fork(self, node: _Node, spec: ClaimedTask) -> None:
        pid = os.fork()
        if pid == 0:  # the child never returns
            _run_child(self, node, spec)
        self.children[pid] = (node, spec, time.monotonic())

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            if pid not in self.children:
                continue
            node, spec, start = self.children.pop(pid)
            ended = _describe(status)
            took = (
                f"ClientApp task {spec.task_id} (pid {pid}) ended after "
                f"{time.monotonic() - start:.2f} s"
            )
            if os.WIFSIGNALED(status) and node.serverapp:
                say(f"ERROR: ServerApp task {spec.task_id} (pid {pid}) ended with {ended}")
            elif os.WIFSIGNALED(status):
                reported = self.hooks.report_killed(spec, ended)
                then = (
                    "its node sends the server an error reply now"
                    if reported
                    else "its node sends the server an error reply once the task's token "
                    "expires (about 60 s)"
                )
                say(f"ERROR: {took} with {ended}: it sent no reply; {then}", node.out)
            elif os.WEXITSTATUS(status) != 0:
                say(f"ERROR: {took} with {ended} (its error reply went to the server)", node.out)
            else:
                say(took, node.out)


def _run_child(launcher: Launcher, node: _Node, spec: ClaimedTask) -> NoReturn:
    """In the forked child: Flower's ClientApp runtime for this task, then exit."""

    def task() -> int:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        if node.out != 2:  # this task's output belongs in its node's log
            os.dup2(node.out, 1)
            os.dup2(node.out, 2)
        for fd in {launcher.wake_fd, launcher.signal_r} | {
            n.out for n in launcher.nodes.values() if n.out != 2
        }:
            os.close(fd)
        if node.serverapp or launcher.app_digest is None:
            app_code.drop_app_modules()  # the ServerApp from its FAB, as flwr-serverapp would
        else:  # the ClientApp: what the launcher imported, if the FAB carries the same code
            launcher.hooks.on_fab_installed(partial(_same_code_or_drop, launcher.app_digest))
        # Flower's runtime exits when this pid is gone: the node (fl-run for a ServerApp)
        task_spec = dataclasses.replace(spec, parent_pid=node.pid)
        kind = "serverapp" if node.serverapp else "clientapp"
        setproctitle.setproctitle(f"fl_system {kind} task {spec.task_id} (for pid {node.pid})")
        run = launcher.hooks.run_serverapp if node.serverapp else launcher.hooks.run_clientapp
        try:
            run(task_spec)
        except SystemExit as done:  # Flower's runtime ends with flwr_exit
            return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        return 0

    exit_with(task)


def _same_code_or_drop(app_digest: str, fab_dir: Path) -> None:
    if app_code.fab_digest(fab_dir) != app_digest:
        app_code.drop_app_modules()


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit code {os.WEXITSTATUS(status)}"


def bind_socket(path: str) -> int:
    """The shared launcher's wake-up socket (bound before the slow imports, so that nodes
    that start meanwhile find it; their datagrams wait in it)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.setblocking(False)
    return sock.detach()


def _project() -> tuple[Path | None, tuple[str, ...]]:
    """This installation's project root and its ClientApp component; (None, ()) when it was
    not installed from its source tree (its tasks then always run the FAB's copy)."""
    try:
        root = app_dir()
    except LaunchError:
        return None, ()
    return root, components(root)[1:]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)  # telemetry is off in the environment fl-supernode passes on
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    try:
        wake_fd = bind_socket(args.socket) if args.socket else args.wake_fd
        seconds = preload(plotting=args.serverapp_api_address is not None)
        from fl_system.flower import flwr_tasks, object_pulls, telemetry_off
        from fl_system.runtime import flwr_check

        flwr_check.check()
        telemetry_off.install()  # every task's run_clientapp fires an event
        flwr_tasks.install_fab_cache()
        object_pulls.retry_sooner("clientapp")  # the forked ClientApps inherit it
        digest = app_code.warm_apps(*_project())
        if args.socket:
            launcher = Launcher(wake_fd, args.parent_pid, shared=True, app_digest=digest)
            if args.serverapp_api_address:
                launcher.add_server(
                    args.serverapp_api_address,
                    args.root_certificates,
                    args.superexec_auth_secret_file,
                )
        else:
            launcher = Launcher(wake_fd, args.node_pid, shared=False, app_digest=digest)
            launcher.add_node(args.runtime_api_address, args.node_pid)
    except Exception as err:  # one line for the node's log, then exit
        say(f"ERROR: cannot start: {err}")
        return 1
    say(f"ready: preloaded {len(PRELOAD)} modules in {seconds:.1f} s")
    gc.freeze()  # the children's collector never scans (nor copies) what they inherit
    launcher.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
