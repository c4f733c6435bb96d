"""runtime=simulation: Flower's simulation engine, num_clients virtual SuperNodes.

The engine (`simulation_engine`) runs in a child process of its own session (fl-run forks
it, `engine_forks`; a sweep's later engine is started by name), so everything it starts
(forked ClientApp workers, or a private Ray's helpers) forms one process group that is torn
down as a whole on failure, Ctrl-C or SIGTERM. With `runtime.address` it joins a Ray cluster
that runs already (`ray_cluster`) and starts nothing there: tearing its group down ends only
its Ray job. It starts while fl-run composes and checks the config, and after a completed
run it stays warm for the next member of a `-m` sweep with the same engine settings; fl-run
ends it when it exits (`fl_system.runtime.launch.release_warm`).
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

from omegaconf import DictConfig

from fl_system.learning.devices import thread_env
from fl_system.records.run_dir import RunPaths
from fl_system.runtime.launch import LaunchError, keep_warm, ray_cluster
from fl_system.runtime.launch.client_state import discard_finished
from fl_system.runtime.launch.engine_forks import (
    EngineSettings,
    adopt,
    fork_engine,
    forkable,
    take_early,
)
from fl_system.runtime.launch.processes import ProcessGroup, tool_env
from fl_system.runtime.launch.progress import follow_run, log_end, log_tail, server_log
from fl_system.settings.config_nodes import config_to_json

# forked workers (worker_pool), Flower's RayBackend, or the engine's own process with a
# round's clients in lockstep (lockstep_backend)
BACKENDS = ("process", "ray", "vectorized")
ENGINE_EXIT_SECONDS = 5.0  # an idle engine told to end gets this long before SIGKILL


class SimulationRuntime:
    """Runs the ServerApp and the ClientApps in one engine process tree."""

    def __init__(
        self,
        *,
        client_cpus: float = 1,
        client_gpus: float = 0.0,
        torch_threads: int = 1,
        backend: str = "process",
        address: str | None = None,
        node_data: Sequence[str] = (),
        vectorize_chunk: int = 100,
    ) -> None:
        # node_data: the paths virtual clients read when the nodes hold the data (each reads
        # runtime.node_data[its partition] from the run's config; nothing to do here)
        # vectorize_chunk: the engine reads it from each run's config
        del node_data
        if backend not in BACKENDS:
            raise ValueError(
                f"runtime.backend must be one of {', '.join(BACKENDS)}, got {backend!r}"
            )
        if int(vectorize_chunk) < 1:
            raise ValueError(f"runtime.vectorize_chunk must be >= 1, got {vectorize_chunk}")
        if address is not None:  # the clients run on the cluster, placed by Ray
            if backend == "vectorized":
                raise ValueError(
                    "runtime.backend=vectorized trains in fl-run's own engine process; "
                    "runtime.address runs the clients on a Ray cluster (backend=ray)"
                )
            address, backend = ray_cluster.find(str(address)), "ray"
        if client_cpus <= 0:
            raise ValueError(f"runtime.client_cpus must be > 0, got {client_cpus}")
        if client_gpus > 0 and address is None and _cuda_gpus() == 0:
            raise ValueError(f"runtime.client_gpus={client_gpus} but this machine has no CUDA GPU")
        self.settings = EngineSettings(
            float(client_cpus), float(client_gpus), torch_threads, backend, address
        )
        self._engine: _Engine | None = None
        self._since = 0

    def start(self, cfg: DictConfig, paths: RunPaths) -> None:
        """Take the warm engine of an earlier run, or start one (its imports overlap the data
        checks)."""
        self._settle(cfg)
        self._since = log_end(paths)
        self._engine = _take_warm(self.settings) or _Engine(self.settings, server_log(paths))

    def _settle(self, cfg: DictConfig) -> None:
        """The backend the checks left in the config: a vectorised run whose clients cannot
        take their steps in lockstep (`preflight`) trains on backend=process; an engine
        started early with the other backend is ended."""
        backend = str(cfg.runtime.get("backend", self.settings.backend))
        if backend != self.settings.backend:
            self.settings = replace(self.settings, backend=backend)
            if self._engine is not None:
                self._engine.stop()
                self._engine = None

    def stop(self) -> None:
        if self._engine is not None:
            self._engine.stop()
            self._engine = None

    def run(self, cfg: DictConfig, paths: RunPaths) -> None:
        self._settle(cfg)
        if self._engine is None:
            self.start(cfg, paths)
        engine, self._engine = self._engine, None
        assert engine is not None
        completed = False
        run = None
        try:
            with tempfile.TemporaryDirectory(prefix="fl-system-sim-") as tmp:
                config_file = Path(tmp) / "config.json"
                config_file.write_text(config_to_json(cfg))
                run = engine.submit(config_file, server_log(paths))
                follow_run(cfg, paths, run, engine.procs, since=self._since, end_at_done=False)
            completed = run.poll() == 0
            discard_finished(cfg)  # only a completed run gets here
        finally:
            if completed:
                _put_warm(engine)
            else:  # an engine whose run failed exits by itself; one still running is stopped
                engine.stop(wait=ENGINE_EXIT_SECONDS if run and run.poll() is not None else 0.0)


class _Engine:
    """One engine process, its process group and its control socket."""

    def __init__(self, settings: EngineSettings, log: Path) -> None:
        self.settings = settings
        self.procs = ProcessGroup()
        env = tool_env({**thread_env(settings.torch_threads), "RAY_DEDUP_LOGS": "0"})
        early = take_early()
        if early is not None:  # forked at fl-run's start, its imports done or under way
            adopted = partial(adopt, early, settings)
            cmd = _command(settings, early.child_fd)
            self.process = self.procs.start("simulation", cmd, log, env, spawner=adopted)
            self.control = early.control
        else:
            ours, theirs = socket.socketpair()
            cmd = _command(settings, theirs.fileno())
            with theirs:
                if forkable():
                    fork = partial(fork_engine, theirs.fileno(), settings)
                    self.process = self.procs.start("simulation", cmd, log, env, spawner=fork)
                else:
                    self.process = self.procs.start(
                        "simulation", cmd, log, env, pass_fds=(theirs.fileno(),)
                    )
            self.control = ours
        self.log = log  # where it writes now
        self._received = b""

    def alive(self) -> bool:
        return self.process.poll() is None

    def submit(self, config_file: Path, log: Path) -> _EngineRun:
        log.parent.mkdir(parents=True, exist_ok=True)
        request = {"config": str(config_file), "log": str(log)}
        try:
            self.control.sendall(json.dumps(request).encode() + b"\n")
        except OSError:  # it died starting up: its log says why
            code = self.process.wait()
            raise LaunchError(
                f"the simulation engine exited with code {code} before the run started; last "
                f"lines of {self.log}:\n{log_tail(self.log)}"
            ) from None
        self.log = log
        return _EngineRun(self)

    def reply(self) -> dict | None:
        """The engine's answer to the run in progress, if it has come."""
        while b"\n" not in self._received and select.select([self.control], [], [], 0)[0]:
            try:
                data = self.control.recv(4096)
            except ConnectionResetError:  # it exited with the request unread
                data = b""
            if not data:
                break  # the engine exited: its exit code says how
            self._received += data
        if b"\n" not in self._received:
            return None
        line, self._received = self._received.split(b"\n", 1)
        return json.loads(line)

    def stop(self, wait: float = 0.0) -> None:
        """Close the control socket (an idle engine then exits by itself), give it `wait`
        seconds, then end its process group (SIGINT first: Ray shuts down cleanly on it)."""
        self.control.close()
        if wait:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=wait)
            self.procs.stop(grace=0)
        else:
            self.procs.stop()


class _EngineRun:
    """One run on an engine: `poll()` is None while it goes on, then 0 (completed) or 1, or
    the engine's exit code if the engine died."""

    def __init__(self, engine: _Engine) -> None:
        self.engine = engine
        self.code: int | None = None

    def poll(self) -> int | None:
        if self.code is None:
            reply = self.engine.reply()
            if reply is not None:
                self.code = 0 if reply["ok"] else 1
            elif (exited := self.engine.process.poll()) is not None:
                self.code = exited or 1
        return self.code


def _command(settings: EngineSettings, control_fd: int) -> list[str]:
    """The engine started by name (or the command line a forked one shows)."""
    return [
        sys.executable,
        "-m",
        "fl_system.runtime.launch.simulation_engine",
        str(control_fd),
        str(settings.client_cpus),
        str(settings.client_gpus),
        settings.backend,
        settings.address or "",
    ]


def _cuda_gpus() -> int:
    """CUDA GPUs here, counted through NVML (the engine's workers may still use CUDA)."""
    import torch

    return torch.cuda.device_count()


_warm: list[_Engine] = []  # the idle engine of the last completed run, if any (one at a time)


def _take_warm(settings: EngineSettings) -> _Engine | None:
    """The idle engine if it was started with `settings` and still runs; any other is ended
    (each holds its workers)."""
    engine = _warm.pop() if _warm else None
    if engine is not None and (engine.settings != settings or not engine.alive()):
        engine.stop(wait=ENGINE_EXIT_SECONDS)
        return None
    return engine


def _put_warm(engine: _Engine) -> None:
    """Keep `engine` for the next run."""
    _release_warm()
    _warm.append(engine)
    keep_warm(_release_warm)


def _release_warm() -> None:
    """End the idle engine (fl-run is exiting, or another takes its place)."""
    while _warm:
        _warm.pop().stop(wait=ENGINE_EXIT_SECONDS)
