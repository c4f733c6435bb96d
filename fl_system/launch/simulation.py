"""runtime=simulation: Flower's simulation engine (Ray), num_clients virtual SuperNodes."""

from __future__ import annotations

import logging
import os
import threading
import warnings

from omegaconf import DictConfig

from fl_system.devices import THREADS_ENV
from fl_system.experiment import config_to_json
from fl_system.launch.submit import LaunchError
from fl_system.progress import ProgressBar
from fl_system.run_dir import RunPaths


class SimulationRuntime:
    """Runs the same ServerApp and ClientApp in-process, clients in Ray workers."""

    def __init__(
        self, *, client_cpus: float = 1, client_gpus: float = 0.0, torch_threads: int = 1
    ) -> None:
        self.client_cpus = client_cpus
        self.client_gpus = client_gpus
        self.torch_threads = torch_threads

    def run(self, cfg: DictConfig, paths: RunPaths) -> None:
        from flwr.simulation import run_simulation

        from client_app.app import app as client_app
        from server_app.app import server_app_for

        os.environ[THREADS_ENV] = str(self.torch_threads)  # inherited by Ray workers
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        handler = _log_to_file(paths.logs / "simulation.log")
        bar = ProgressBar(cfg, paths)
        stop = threading.Event()
        watcher = threading.Thread(target=_poll_until, args=(bar, stop), daemon=True)
        watcher.start()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run_simulation(
                    server_app=server_app_for(config_to_json(cfg)),
                    client_app=client_app,
                    num_supernodes=int(cfg.num_clients),
                    backend_config={
                        "client_resources": {
                            "num_cpus": self.client_cpus,
                            "num_gpus": self.client_gpus,
                        },
                        "init_args": {"include_dashboard": False},
                    },
                )
        except Exception as err:  # the engine wraps the ServerApp's error
            raise LaunchError(f"simulation failed: {_root_cause(err)}") from err
        finally:
            stop.set()
            watcher.join()
            bar.close()
            logging.getLogger("flwr").removeHandler(handler)
        if not paths.summary.exists():
            raise LaunchError(f"simulation ended without a summary; see {paths.logs}")


def _poll_until(bar: ProgressBar, stop: threading.Event) -> None:
    while not stop.wait(0.5):
        bar.poll()


def _root_cause(err: BaseException) -> str:
    while err.__cause__ is not None:
        err = err.__cause__
    return f"{type(err).__name__}: {err}"


def _log_to_file(path) -> logging.Handler:
    """Flower's chatter goes to the run's log file, keeping the terminal for progress."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flwr_logger = logging.getLogger("flwr")
    for h in list(flwr_logger.handlers):
        if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
            flwr_logger.removeHandler(h)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    flwr_logger.addHandler(handler)
    return handler
