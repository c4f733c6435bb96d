"""runtime=remote: submit to a SuperLink that already runs elsewhere."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from omegaconf import DictConfig

from fl_system.launch import LaunchError
from fl_system.launch.processes import ProcessGroup, tool_env
from fl_system.launch.submit import Connection, submit_and_follow
from fl_system.run_dir import RunPaths


class RemoteRuntime:
    """`flwr run` against an existing SuperLink's Control API (TLS unless told otherwise)."""

    def __init__(
        self, *, address: str, root_certificates: str | None = None, insecure: bool = False
    ) -> None:
        if root_certificates and not Path(root_certificates).is_file():
            raise LaunchError(f"runtime.root_certificates: no file at {root_certificates}")
        self.connection = Connection(address, insecure, root_certificates)

    def run(self, cfg: DictConfig, paths: RunPaths) -> None:
        procs = ProcessGroup()
        flwr_home = Path(tempfile.mkdtemp(prefix="fl-system-flwr-"))
        try:
            env = tool_env({"FLWR_HOME": str(flwr_home)})
            submit_and_follow(cfg, paths, self.connection, procs, env)
        finally:
            procs.stop()
            shutil.rmtree(flwr_home, ignore_errors=True)
