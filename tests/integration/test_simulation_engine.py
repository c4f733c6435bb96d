"""The simulation engine: a `-m` sweep's members share one warm engine and nothing else, and
its two backends (forked workers, Ray) train alike."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from fl_system.learning.devices import POOL_ENVS
from fl_system.records.checkpoint import load_checkpoint
from fl_system.runtime.launch import LaunchError, simulation
from fl_system.runtime.launch.simulation import EngineSettings, SimulationRuntime, _Engine

from .conftest import QUICK, run_cli, run_sweep
from .resumed import history

pytestmark = pytest.mark.integration

# Stateful rules on purpose: SCAFFOLD's control variates and MOON's previous local models live
# on the clients between rounds, so state leaking from one member into the next would show.
ALGORITHMS = ("fedavg", "scaffold", "moon")
SEEDS = (0, 1)
ARGS = [*QUICK, "runtime=simulation", "num_rounds=3"]


def test_a_sweeps_members_end_exactly_as_separate_runs(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Six members (three algorithms x two seeds) in one fl-run, one engine between them;
    each stateful algorithm's second seed, which ran right after its first in the same engine
    (where leaked client state would show most), then as a separate fl-run: every round's metrics
    and the final model are equal, and nothing of the sweep outlives fl-run."""
    sweep = [*ARGS, f"algorithm={','.join(ALGORITHMS)}", f"seed={','.join(map(str, SEEDS))}"]
    members = run_sweep(sweep, tmp_path / "sweep", cli_env)
    assert len(members) == len(ALGORITHMS) * len(SEEDS)
    compared = set()
    for member in members:
        config = (member / "config.yaml").read_text()
        algorithm = next(a for a in ALGORITHMS if f"name: {a}\n" in config)
        seed = next(s for s in SEEDS if f"\nseed: {s}\n" in config)
        if seed != SEEDS[-1] or algorithm == "fedavg":  # the stateful ones, where state would leak
            continue
        compared.add(algorithm)
        alone = tmp_path / f"alone-{algorithm}-{seed}"
        result = run_cli(
            [*ARGS, f"algorithm={algorithm}", f"seed={seed}", f"hydra.run.dir={alone}"], cli_env
        )
        assert result.returncode == 0, result.stderr[-3000:]
        _assert_same_run(member, alone, rounds=3)
    assert compared == set(ALGORITHMS) - {"fedavg"}


def test_the_ray_backend_trains_exactly_like_the_forked_workers(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """runtime.backend=ray (Flower's RayBackend) and the default forked workers run the same
    ClientApp on the same messages: the same history and model, SCAFFOLD's client state too."""
    runs = {}
    for backend in ("ray", "process"):
        runs[backend] = tmp_path / backend
        args = [*ARGS, "algorithm=scaffold", f"runtime.backend={backend}"]
        result = run_cli([*args, f"hydra.run.dir={runs[backend]}"], cli_env)
        assert result.returncode == 0, result.stderr[-3000:]
    assert "Ray" in (runs["ray"] / "logs" / "serverapp.log").read_text()  # it did start Ray
    _assert_same_run(runs["ray"], runs["process"], rounds=3)


def _assert_same_run(a: Path, b: Path, rounds: int) -> None:
    assert history(a) == history(b), (a.name, b.name)
    first, second = (load_checkpoint(d / "checkpoint.npz") for d in (a, b))
    assert first.round == second.round == rounds
    for name, array in second.model.items():
        np.testing.assert_array_equal(first.model[name], array, err_msg=a.name)


def test_an_engine_that_died_before_its_run_is_one_clear_error(tmp_path: Path) -> None:
    """Killed while starting (out of memory, say): the submission says so, with its log."""
    log = tmp_path / "serverapp.log"
    engine = _Engine(EngineSettings(1.0, 0.0, 1, "process", None), log)
    try:
        os.kill(engine.process.pid, signal.SIGKILL)
        engine.process.wait(timeout=10)
        with pytest.raises(LaunchError, match="engine exited with code -9 before the run started"):
            engine.submit(tmp_path / "config.json", log)
    finally:
        engine.stop()


def test_the_engine_sizes_its_thread_pools_unless_the_user_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine and the workers it forks share the cores: torch's, OpenMP's and the BLAS
    pools get runtime.torch_threads threads each, read when they load; a pool's variable the
    user set is theirs. (An engine started by name, as a sweep's later engine is: a forked
    one's /proc environ would be fl-run's.)"""
    monkeypatch.setattr(simulation, "forkable", lambda: False)
    for name in POOL_ENVS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    engine = _Engine(EngineSettings(1.0, 0.0, 2, "process", None), tmp_path / "serverapp.log")
    try:
        environ = _environ(engine.process.pid)
    finally:
        engine.stop()
    pools = dict(v.decode().split("=", 1) for v in environ if v.split(b"=")[0].endswith(b"THREADS"))
    assert pools == {
        "FL_TORCH_THREADS": "2",
        "FL_EVAL_THREADS": str(len(os.sched_getaffinity(0))),  # its clients idle meanwhile
        "OMP_NUM_THREADS": "2",
        "MKL_NUM_THREADS": "2",
        "OPENBLAS_NUM_THREADS": "3",
    }


def _environ(pid: int, timeout: float = 10.0) -> list[bytes]:
    """A started process's environment. Popen returns once the exec began; /proc reads an
    empty environment until the kernel has set the new program's up, a moment later."""
    deadline = time.monotonic() + timeout
    while not (environ := Path(f"/proc/{pid}/environ").read_bytes()):
        assert time.monotonic() < deadline, f"pid {pid}'s environment still empty"
        time.sleep(0.01)
    return environ.split(b"\0")


def test_gpu_shares_on_a_machine_without_cuda_are_refused_before_anything_starts() -> None:
    if torch.cuda.device_count():
        assert SimulationRuntime(client_gpus=0.5).settings.client_gpus == 0.5
    else:
        with pytest.raises(ValueError, match=r"client_gpus=0\.5 but this machine has no CUDA GPU"):
            SimulationRuntime(client_gpus=0.5)
