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
from pathlib import Path

from omegaconf import DictConfig

from fl_system.devices import THREADS_ENV
from fl_system.experiment import config_to_json
from fl_system.launch.client_state import discard_finished
from fl_system.launch.components import app_dir, components
from fl_system.launch.processes import ProcessGroup, tool_env
from fl_system.progress import follow_run, log_end, server_log
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
                since = log_end(paths)
                engine = procs.start("simulation", cmd, server_log(paths), env, plain=True)
                follow_run(cfg, paths, engine, procs, since=since, end_at_done=False)
                discard_finished(cfg)  # only a completed run gets here
            finally:
                procs.stop()


def _simulate(config_json: str, client_cpus: float, client_gpus: float) -> None:
    """The child process: one in-process ServerApp thread plus Ray client workers.

    Flower loads both apps by their component references, as `flwr run` does, and the
    ServerApp reads the experiment from its run config like in every other runtime.
    """
    from flwr.app import Context, RecordDict
    from flwr.supercore.telemetry import EventType

    from fl_system import flwr_hooks, protocol

    flwr_hooks.check()
    flwr_hooks.simulation_pickup_on_store()
    run_by_reference = flwr_hooks.simulation_by_reference()

    logging.getLogger("flwr").setLevel(logging.INFO)
    root = app_dir()
    server_ref, client_ref = components(root)
    context = Context(
        run_id=0,
        node_id=0,
        node_config={},
        state=RecordDict(),
        run_config={protocol.RUN_CONFIG: config_json},
    )
    run_by_reference(
        num_supernodes=int(json.loads(config_json)["num_clients"]),
        exit_event=EventType.PYTHON_API_RUN_SIMULATION_LEAVE,
        server_app_attr=server_ref,
        client_app_attr=client_ref,
        server_app_context=context,
        app_dir=str(root),
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
