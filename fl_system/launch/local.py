"""runtime=local: a SuperLink and N SuperNodes as real processes talking gRPC on loopback."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from omegaconf import DictConfig

from fl_system.data.partition_cache import default_cache_root, prepare
from fl_system.devices import THREADS_ENV
from fl_system.launch import LaunchError
from fl_system.launch.client_state import discard_finished
from fl_system.launch.processes import ProcessGroup, free_port, port_open, tool_env
from fl_system.launch.submit import Connection, submit_and_follow
from fl_system.run_dir import RunPaths
from fl_system.supernode.node import HEARTBEAT_ENV

# A SuperNode promises a heartbeat every NODE_HEARTBEAT s; one killed is reported unavailable
# (its round goes on without it) 2 x NODE_HEARTBEAT s after its last (Flower's default: 60 s).
NODE_HEARTBEAT = 2.0


class LocalRuntime:
    """Starts the whole federation on this machine and always tears it down."""

    def __init__(
        self, *, host: str = "127.0.0.1", startup_timeout: float = 60, torch_threads: int = 1
    ) -> None:
        self.host = host
        self.startup_timeout = startup_timeout
        self.torch_threads = torch_threads

    def run(self, cfg: DictConfig, paths: RunPaths) -> None:
        procs = ProcessGroup()
        flwr_home = Path(tempfile.mkdtemp(prefix="fl-system-flwr-"))
        env = tool_env(
            {
                "FLWR_HOME": str(flwr_home),
                THREADS_ENV: str(self.torch_threads),
                HEARTBEAT_ENV: str(NODE_HEARTBEAT),
            }
        )
        try:
            control = self._start(procs, cfg, paths, env)
            conn = Connection(f"{self.host}:{control}", insecure=True)
            submit_and_follow(cfg, paths, conn, procs, env)
            discard_finished(cfg)  # only a completed run gets here
        finally:
            procs.stop()
            shutil.rmtree(flwr_home, ignore_errors=True)

    def _start(
        self, procs: ProcessGroup, cfg: DictConfig, paths: RunPaths, env: dict[str, str]
    ) -> int:
        h = self.host
        fleet, control, appio = free_port(h), free_port(h), free_port(h)
        procs.start(
            "superlink",
            [
                "fl-superlink",
                "--insecure",
                "--fleet-api-address",
                f"{h}:{fleet}",
                "--control-api-address",
                f"{h}:{control}",
                "--host",
                h,
                "--port",
                str(appio),
                "--disable-runtime-dependency-installation",
            ],
            paths.logs / "superlink.log",
            env,
            plain=True,
        )
        # Every node reads its partition from the shared cache instead of N nodes loading and
        # partitioning the dataset at once in round 1 (preflight has loaded it already).
        prepare(cfg, default_cache_root())
        self._wait_ports(procs, [fleet, control], paths.logs / "superlink.log")
        for pid in range(cfg.num_clients):
            procs.start(
                f"supernode {pid}",
                [
                    "fl-supernode",
                    "--insecure",
                    "--superlink",
                    f"{h}:{fleet}",
                    "--node-config",
                    f"partition-id={pid} num-partitions={cfg.num_clients}",
                    "--host",
                    h,
                    "--port",
                    str(free_port(h)),
                ],
                paths.logs / f"supernode-{pid}.log",
                env,
                plain=True,
                restart=True,
            )
        return control

    def _wait_ports(self, procs: ProcessGroup, ports: list[int], log: Path) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while not all(port_open(self.host, p) for p in ports):
            dead = procs.first_dead()
            if dead:
                raise LaunchError(f"{dead[0]} exited with code {dead[2]}; see {log}")
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"SuperLink did not open ports {ports} within {self.startup_timeout} s; "
                    f"see {log}"
                )
            time.sleep(0.2)
