"""runtime=local: a SuperLink and N SuperNodes as real processes talking gRPC on loopback."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

from fl_system.data.cache_root import default_cache_root
from fl_system.flower.wakeups import NODE_WAKE_DIR_ENV
from fl_system.learning.devices import thread_env
from fl_system.records.run_dir import RunPaths
from fl_system.runtime import startup
from fl_system.runtime.launch import LaunchError
from fl_system.runtime.launch.client_state import discard_finished
from fl_system.runtime.launch.flower_forker import FlowerForker
from fl_system.runtime.launch.ports import free_port, port_open
from fl_system.runtime.launch.processes import STOP_GRACE, ProcessGroup, tool_env
from fl_system.runtime.launch.submit import Connection, submit_and_follow
from fl_system.runtime.supernode.launcher import SOCKET_ENV
from fl_system.runtime.supernode.node import HEARTBEAT_ENV

# A SuperNode promises a heartbeat every NODE_HEARTBEAT s; one killed is reported unavailable
# (its round goes on without it) 2 x NODE_HEARTBEAT s after its last (Flower's default: 60 s).
NODE_HEARTBEAT = 2.0


class LocalRuntime:
    """Starts the whole federation on this machine and always tears it down.

    fl-run calls `start` once the config is checked, so that the SuperLink and the ClientApp
    launcher (torch imported once for every node) come up while it loads and partitions the
    data; `run` waits for them (or starts them itself) and starts the SuperNodes.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        startup_timeout: float = 60,
        torch_threads: int = 1,
        node_data: Sequence[str] = (),
    ) -> None:
        self.node_data = [str(Path(p).expanduser().resolve()) for p in node_data]
        self.host = host
        self.startup_timeout = startup_timeout
        self.torch_threads = torch_threads
        self._federation: _Federation | None = None

    def start(self, cfg: DictConfig, paths: RunPaths) -> None:
        """Start the SuperLink and the ClientApp launcher in the background."""
        self._federation = _Federation(self, paths)

    def stop(self) -> None:
        """End what `start` started (the run is not going ahead: nothing ran, nothing to
        save, so no grace)."""
        if self._federation is not None:
            self._federation.close(grace=0.0)
            self._federation = None

    def run(self, cfg: DictConfig, paths: RunPaths) -> None:
        federation = self._federation or _Federation(self, paths)
        self._federation = None
        finished = False
        try:
            control = federation.ready()
            federation.start_nodes(cfg, paths)
            # Every node reads its partition from the shared cache instead of N nodes loading
            # and partitioning the dataset at once in round 1 (preflight has loaded it; torch
            # came with it, so importing this only now keeps it out of the federation's start).
            from fl_system.data.node_data import node_held
            from fl_system.data.partition_cache import prepare

            if not node_held(cfg):
                prepare(cfg, default_cache_root())
            conn = Connection(f"{self.host}:{control}", insecure=True)
            submit_and_follow(cfg, paths, conn, federation.procs, federation.env)
            discard_finished(cfg)  # only a completed run gets here
            finished = True
        finally:
            # A completed run has nothing left to save in any process: the federation goes
            # at once (a graceful SuperNode exit alone takes ~4 s). Otherwise each process
            # gets its grace to finish what it writes.
            federation.close(grace=0.0 if finished else STOP_GRACE)


class _Federation:
    """The processes of one run: the SuperLink and the ClientApp launcher, started by a
    background thread, then the SuperNodes."""

    def __init__(self, runtime: LocalRuntime, paths: RunPaths) -> None:
        self.runtime = runtime
        self.procs = ProcessGroup()
        self.flwr_home = Path(tempfile.mkdtemp(prefix="fl-system-flwr-"))
        self.env = tool_env(
            {
                "FLWR_HOME": str(self.flwr_home),
                **thread_env(runtime.torch_threads),
                HEARTBEAT_ENV: str(NODE_HEARTBEAT),
            }
        )
        self._port: int | None = None  # the SuperLink's one port (Fleet, Control, Runtime)
        self._forker: FlowerForker | None = None
        self._error: BaseException | None = None
        self._cancel = threading.Event()
        self._thread = threading.Thread(
            target=self._start, args=(paths,), name="federation start", daemon=True
        )
        self._thread.start()

    def ready(self) -> int:
        """The SuperLink's port (its Control API's too), once it listens."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._port is not None
        return self._port

    def close(self, grace: float) -> None:
        self._cancel.set()
        self._thread.join()
        self.procs.stop(grace=grace)
        shutil.rmtree(self.flwr_home, ignore_errors=True)

    def _start(self, paths: RunPaths) -> None:
        try:
            self._start_processes(paths)
        except BaseException as err:  # raised in the caller's thread by ready()
            self._error = err

    def _start_processes(self, paths: RunPaths) -> None:
        h, procs, env = self.runtime.host, self.procs, self.env
        port = free_port(h)
        # One launcher for every node's ClientApps and the run's ServerApp: torch is imported
        # once, not once per process
        env[SOCKET_ENV] = str(self.flwr_home / "launcher.sock")
        # the SuperLink wakes each node when a message for it is stored
        (wake_dir := self.flwr_home / "node-wakeups").mkdir()
        env[NODE_WAKE_DIR_ENV] = str(wake_dir)
        procs.start(
            "clientapp launcher",
            [
                sys.executable,
                "-m",
                "fl_system.runtime.supernode.launcher",
                "--socket",
                env[SOCKET_ENV],
                "--parent-pid",
                str(os.getpid()),
                "--serverapp-api-address",
                f"{h}:{port}",
            ],
            paths.logs / "launcher.log",
            env,
            plain=True,
        )
        # The SuperLink and the SuperNodes are forked from one process that imported Flower
        self._forker = forker = self._start_forker(paths)
        procs.start(
            "superlink",
            [
                "fl-superlink",
                "--insecure",
                "--host",
                h,
                "--port",
                str(port),
                "--disable-runtime-dependency-installation",
                "--isolation",
                "process",  # the launcher starts the ServerApp, not Flower's SuperExec
            ],
            paths.logs / "superlink.log",
            env,
            spawner=forker.spawn,
        )
        self._wait_ports([port], paths.logs / "superlink.log")
        startup.mark("SuperLink ready")
        self._port = port

    def _start_forker(self, paths: RunPaths) -> FlowerForker:
        """The process the SuperLink and the SuperNodes are forked from (Flower imported
        once, not once per process)."""
        ours, theirs = socket.socketpair()
        with theirs:
            forker = self.procs.start(
                "flower forker",
                [
                    sys.executable,
                    "-m",
                    "fl_system.runtime.launch.flower_forker",
                    str(theirs.fileno()),
                ],
                paths.logs / "flower-forker.log",
                self.env,
                plain=True,
                pass_fds=(theirs.fileno(),),
            )
        return FlowerForker(ours, forker)

    def start_nodes(self, cfg: DictConfig, paths: RunPaths) -> None:
        """The SuperNodes, once the data checks passed (a config error starts none; the
        SuperLink, the launcher and the node forker started early)."""
        h, procs, env = self.runtime.host, self.procs, self.env
        assert self._forker is not None
        paths_held = [
            str(Path(p).expanduser().resolve()) for p in cfg.runtime.get("node_data") or []
        ]
        for pid in range(cfg.num_clients):
            own = (
                f' data="{paths_held[pid]}" name="{Path(paths_held[pid]).name}"'
                if paths_held
                else ""
            )
            procs.start(
                f"supernode {pid}",
                [
                    "fl-supernode",
                    "--insecure",
                    "--superlink",
                    f"{h}:{self._port}",
                    "--node-config",
                    f"partition-id={pid} num-partitions={cfg.num_clients}{own}",
                    "--host",
                    h,
                    "--port",
                    str(free_port(h)),
                ],
                paths.logs / f"supernode-{pid}.log",
                env,
                restart=True,
                spawner=self._forker.spawn,
            )

    def _wait_ports(self, ports: list[int], log: Path) -> None:
        host, timeout = self.runtime.host, self.runtime.startup_timeout
        deadline = time.monotonic() + timeout
        while not all(port_open(host, p) for p in ports):
            dead = self.procs.first_dead()
            if dead:
                raise LaunchError(f"{dead[0]} exited with code {dead[2]}; see {log}")
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"SuperLink did not open ports {ports} within {timeout} s; see {log}"
                )
            if self._cancel.wait(0.1):
                raise LaunchError("stopped while the SuperLink was starting")
