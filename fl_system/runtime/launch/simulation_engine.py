"""The simulation engine process: Flower's simulation engine, kept warm for the next run.

fl-run forks it as it starts (`engine_forks`: its imports of Flower, both apps and torch,
`prepare`, overlap fl-run's composing and checking of the config) or, for a later member of a
sweep, once the config is checked; with `runtime.backend=process` it forks its ClientApp
workers while fl-run checks the data, with `vectorized` it answers a round's train messages
itself, their clients' steps in lockstep (`lockstep_backend`). It then runs one simulation
per request on its control socket, each writing its own log, and answers when that run ended;
the members of a `-m` sweep are requests to the same engine.

A run carries nothing into the next but imported modules and idle workers: Flower builds a
new in-memory state, grid and node contexts for every run, the apps keep no state of their
own between messages (every random draw is seeded from the experiment seed, the round and
the partition), and the sweep's isolation test compares members with separate runs. An
engine whose run failed exits: it may have left a worker half-way through a message.

A stop (fl-run's Ctrl-C or SIGTERM reach the engine's process group as SIGINT) ends the
engine at once, as it ends a SuperNode's ServerApp: the ServerApp thread must not go on to
aggregate and checkpoint a round whose clients were being stopped, or a resumed run would
start from that partial round.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from fl_system.runtime.launch.processes import write_into
from fl_system.runtime.launch.worker_pool import PoolBackend, WorkerPool, pool_size

if TYPE_CHECKING:
    from flwr.clientapp import ClientApp


@dataclass(frozen=True)
class Prepared:
    """What an engine imports and loads before it knows its settings: the apps' code (the
    ClientApp is the one its workers run) and Flower's simulation engine."""

    root: Path
    server_ref: str
    client_ref: str
    client_app: ClientApp


def prepare() -> Prepared:
    """Import what every ClientApp would import on its own (before the workers are forked),
    the apps and Flower's engine; the early engine does it while fl-run composes."""
    from flwr.clientapp.client_app import LoadClientAppError
    from flwr.supercore.object_ref import load_app

    from fl_system.flower import flwr_engine
    from fl_system.runtime.launch.components import app_dir, components
    from fl_system.runtime.warm_imports import preload

    preload()
    root = app_dir()
    server_ref, client_ref = components(root)
    client_app = load_app(client_ref, LoadClientAppError, root)
    load_app(server_ref, RuntimeError, root)  # imported now, while fl-run checks the data
    flwr_engine.check()
    return Prepared(root, server_ref, client_ref, client_app)


def main(
    control_fd: int,
    client_cpus: float,
    client_gpus: float,
    backend: str,
    address: str,
    prepared: Prepared | None = None,
) -> int:
    from flwr.app import Context, RecordDict
    from flwr.supercore.logger import update_console_handler
    from flwr.supercore.telemetry import EventType

    from fl_system.flower import flwr_engine
    from fl_system.messages import protocol
    from fl_system.records import run_log
    from fl_system.runtime.launch import lockstep_backend, ray_cluster

    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a stop ends every thread at once
    prepared = prepared or prepare()
    root, server_ref, client_ref = prepared.root, prepared.server_ref, prepared.client_ref
    pool = chunking = None
    if backend == "process":
        size = pool_size(client_cpus, client_gpus, *_machine(client_gpus))
        gc.freeze()  # the workers' collector never scans (nor copies) what they inherit
        pool = WorkerPool(prepared.client_app, size)
    elif backend == "vectorized":
        chunking = lockstep_backend.Chunking()
        flwr_engine.simulation_worker(lockstep_backend.gathering_worker(chunking))
        app = prepared.client_app
        flwr_engine.simulation_backend(lambda: lockstep_backend.InProcessBackend(app))
    flwr_engine.simulation_pickup_on_store()
    flwr_engine.simulation_stops_at_once()
    if pool is not None:
        flwr_engine.simulation_backend(lambda: PoolBackend(pool))
    run_by_reference = flwr_engine.simulation_by_reference()
    logging.getLogger("flwr").setLevel(logging.INFO)
    update_console_handler(colored=False)  # the engine writes the run's log file itself
    # joined while fl-run checks the data; what is wrong is reported to the first run
    cluster_problem = _problem(partial(ray_cluster.join, address, client_gpus)) if address else None
    control = socket.socket(fileno=control_fd)
    try:
        for request in _requests(control):
            log = Path(request["log"])
            write_into(log)
            if pool is not None:
                pool.redirect_output(log)
            config_json = Path(request["config"]).read_text()
            if chunking is not None:
                chunking.size = int(json.loads(config_json)["runtime"]["vectorize_chunk"])
            if address and cluster_problem is None:
                cluster_problem = _problem(partial(ray_cluster.check_data, address, config_json))
            if cluster_problem is not None:  # the run's log says why, as a ServerApp would
                run_log.say(run_log.failed_line(cluster_problem))
                control.sendall(json.dumps({"ok": False}).encode() + b"\n")
                return 1
            context = Context(
                run_id=0,
                node_id=0,
                node_config={},
                state=RecordDict(),
                run_config={protocol.RUN_CONFIG: config_json},
            )
            ok = _simulate(
                run_by_reference,
                num_supernodes=int(json.loads(config_json)["num_clients"]),
                exit_event=EventType.PYTHON_API_RUN_SIMULATION_LEAVE,
                server_app_attr=server_ref,
                client_app_attr=client_ref,
                server_app_context=context,
                app_dir=str(root),
                backend_name=backend,  # Flower insists on Ray being installed for "ray" only
                backend_config=_ray_config(client_cpus, client_gpus),
            )
            if ok and address:  # each node kept the state of the clients it played
                ray_cluster.discard_finished(address, config_json)
            sys.stdout.flush()
            sys.stderr.flush()
            control.sendall(json.dumps({"ok": ok}).encode() + b"\n")
            if not ok:
                return 1
        return 0
    finally:
        if pool is not None:
            pool.close()


def _problem(check: Callable[[], None]) -> str | None:
    """What a Ray cluster check found wrong (the ClusterError's message), or None."""
    from fl_system.runtime.launch.ray_cluster import ClusterError

    try:
        check()
    except ClusterError as err:
        return str(err)
    return None


def _simulate(run_by_reference, **kwargs: object) -> bool:
    """One run; its failure is written into its log, as an uncaught one would be."""
    try:
        run_by_reference(**kwargs)
    except Exception:
        traceback.print_exc()
        return False
    return True


def _requests(control: socket.socket):
    """Each request (a JSON line) until fl-run closes the socket or exits."""
    for line in control.makefile("r", encoding="utf-8"):
        yield json.loads(line)


def _machine(client_gpus: float) -> tuple[int, int]:
    """(CPUs this process may use, CUDA GPUs): GPUs are counted only when clients ask for
    some, through NVML, which (unlike a CUDA call) leaves the workers free to use CUDA."""
    cpus = len(os.sched_getaffinity(0))
    if client_gpus <= 0:
        return cpus, 0
    import torch

    return cpus, torch.cuda.device_count()


# Ray passes a call's arguments and results up to this size inline, beyond it through its
# shared-memory object store, whose extra round trips cost ~4 ms per message for a 180 kB
# model (Ray's threshold is 100 kiB, below one small CNN). Above a few MiB the store's
# zero-copy pays off again.
INLINE_OBJECT_BYTES = 8 * 1024 * 1024


def _ray_config(client_cpus: float, client_gpus: float) -> dict:
    """Flower's backend config: client resources, and Ray's start-up (backend=ray only)."""
    return {
        "client_resources": {"num_cpus": client_cpus, "num_gpus": client_gpus},
        "init_args": {
            "include_dashboard": False,
            "_system_config": {"max_direct_call_object_size": INLINE_OBJECT_BYTES},
        },
    }


if __name__ == "__main__":
    code = main(int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), *sys.argv[4:6])
    # The last run directory is written; the interpreter's teardown (torch's and Ray's exit
    # hooks) would add ~2 s. fl-run ends this process group afterwards either way.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
