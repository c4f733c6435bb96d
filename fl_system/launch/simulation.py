"""runtime=simulation: Flower's simulation engine (Ray), num_clients virtual SuperNodes.

The engine runs in a child process of its own session, so Ray's many helper processes form
one process group that is torn down as a whole on success, failure, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import warnings
from pathlib import Path

from omegaconf import DictConfig

from fl_system.devices import THREADS_ENV
from fl_system.experiment import config_to_json
from fl_system.launch.client_state import discard_finished
from fl_system.launch.processes import ProcessGroup, tool_env
from fl_system.progress import follow_run
from fl_system.run_dir import RunPaths

# Ray passes a call's arguments and results up to this size inline, beyond it through its
# shared-memory object store, whose extra round trips cost ~4 ms per message for a 180 kB
# model (Ray's threshold is 100 kiB, below one small CNN). Above a few MiB the store's
# zero-copy pays off again.
INLINE_OBJECT_BYTES = 8 * 1024 * 1024


class SimulationRuntime:
    """Runs the same ServerApp and ClientApp in one process tree, clients in Ray workers."""

    def __init__(
        self, *, client_cpus: float = 1, client_gpus: float = 0.0, torch_threads: int = 1
    ) -> None:
        self.client_cpus = client_cpus
        self.client_gpus = client_gpus
        self.torch_threads = torch_threads

    def run(self, cfg: DictConfig, paths: RunPaths) -> None:
        procs = ProcessGroup()
        with tempfile.TemporaryDirectory(prefix="fl-system-sim-") as tmp:
            config_file = Path(tmp) / "config.json"
            config_file.write_text(config_to_json(cfg))
            cmd = [
                sys.executable,
                "-m",
                __name__,
                str(config_file),
                str(self.client_cpus),
                str(self.client_gpus),
            ]
            env = tool_env({THREADS_ENV: str(self.torch_threads), "RAY_DEDUP_LOGS": "0"})
            try:
                engine = procs.start(
                    "simulation", cmd, paths.logs / "serverapp.log", env, plain=True
                )
                follow_run(cfg, paths, engine, procs)
                discard_finished(cfg)  # only a completed run gets here
            finally:
                procs.stop()


def _simulate(config_json: str, client_cpus: float, client_gpus: float) -> None:
    """The child process: one in-process ServerApp thread plus Ray client workers."""
    from flwr.simulation import run_simulation

    from client_app.app import app as client_app
    from fl_system import flwr_hooks
    from server_app.app import server_app_for

    flwr_hooks.check()
    flwr_hooks.simulation_pickup_on_store()

    logging.getLogger("flwr").setLevel(logging.INFO)
    num_clients = int(json.loads(config_json)["num_clients"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # run_simulation's deprecation notice
        run_simulation(
            server_app=server_app_for(config_json),
            client_app=client_app,
            num_supernodes=num_clients,
            backend_config={
                "client_resources": {"num_cpus": client_cpus, "num_gpus": client_gpus},
                "init_args": {
                    "include_dashboard": False,
                    "_system_config": {"max_direct_call_object_size": INLINE_OBJECT_BYTES},
                },
            },
        )


if __name__ == "__main__":
    _simulate(Path(sys.argv[1]).read_text(), float(sys.argv[2]), float(sys.argv[3]))
    # The run directory is written and Flower has shut Ray down; the interpreter's own
    # teardown (Ray's and torch's exit hooks) would add ~2 s to every run. The runtime stops
    # this process group afterwards either way.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
