"""What a round costs: fl-run timed and sampled, the plain PyTorch loop, bytes per round."""

from __future__ import annotations

import csv
import os
import shlex
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from benchmarks.harness.fl_run import (
    ROOT,
    BenchmarkError,
    Code,
    run_fl,
)
from benchmarks.harness.process_tree import PeakMemory, RoundCpu
from client_app.trainer import TrainSettings, train_locally
from fl_system.data.configured import load_dataset, partition_indices
from fl_system.learning.aggregation import weighted_average
from fl_system.learning.devices import resolve_device
from fl_system.learning.evaluation import evaluate
from fl_system.learning.own_model import build_model
from fl_system.learning.seeding import derive_seed
from fl_system.settings.config_nodes import build

SIM_GOAL = 1.25  # simulation s/round may be at most this multiple of the plain loop's
LOCAL_OVERHEAD_GOAL = 4.0  # local s/round minus the plain loop's, 10 nodes
MEMORY_GOAL = 16 * 2**30  # peak PSS of the whole federation at --scale-clients nodes
BYTES_TOLERANCE = 0.05  # measured bytes/round within this fraction of raw float32 x clients
GIB = 2**30


@dataclass(frozen=True)
class RunResult:
    """One measured run: how it was run and what its rounds cost."""

    name: str
    command: str
    rounds: int
    ends: list[float]  # cumulative seconds at the end of each round (the driver's clock)
    accuracies: list[float | None]  # central test accuracy after each round
    load_after: float  # 1-minute load average when it finished (the machine is shared)
    rows: list[dict[str, str]] = field(default_factory=list)  # metrics.csv (none: plain loop)
    total_seconds: float | None = None  # fl-run from start to exit
    peak_pss: int | None = None  # bytes, when sampled
    cpu_by_role: dict[str, float] = field(default_factory=dict)  # CPU s/round, rounds 2..N

    @property
    def final_accuracy(self) -> float | None:
        return self.accuracies[-1]

    @property
    def round1(self) -> float:
        return self.ends[0]

    @property
    def seconds_per_round(self) -> float:
        """Mean over rounds 2..N: (end of last round - end of round 1) / (rounds - 1)."""
        return (self.ends[-1] - self.ends[0]) / (len(self.ends) - 1)

    @property
    def later_rounds(self) -> list[float]:
        """Each of rounds 2..N on its own, to show how noisy the mean is."""
        return [b - a for a, b in zip(self.ends, self.ends[1:], strict=False)]


# ----- experiment -------------------------------------------------------------------------
def experiment_overrides(clients: int, rounds: int) -> list[str]:
    """The benchmarked experiment, as Hydra overrides shared by every runtime."""
    return [
        "algorithm=fedavg",
        "dataset=mnist5k",
        "model=cnn",
        "partition=iid",
        f"num_clients={clients}",
        f"num_rounds={rounds}",
        "train.local_epochs=1",
        "seed=0",
    ]


# ----- fl-run subprocesses ----------------------------------------------------------------
def read_metrics(path: Path, rounds: int) -> list[dict[str, str]]:
    if not path.exists():
        raise BenchmarkError(f"{path} was not written")
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    if len(rows) != rounds:
        raise BenchmarkError(f"{path} has {len(rows)} rounds, expected {rounds}")
    return rows


def measure_fl_run(
    name: str, overrides: list[str], rounds: int, code: Code, *, memory: bool = False
) -> RunResult:
    """One fl-run into a temporary run directory (kept, and named, if the run fails)."""
    run_dir = Path(tempfile.mkdtemp(prefix="round-overhead-"))
    command = [*code.command(), *overrides, f"hydra.run.dir={run_dir}"]
    print(f"[bench] {name}: {shlex.join(command)}", flush=True)
    samplers: list[PeakMemory | RoundCpu] = []

    def watch(pid: int) -> None:
        samplers.append(RoundCpu(pid, run_dir / "metrics.csv"))
        if memory:
            samplers.append(PeakMemory(pid))

    started = time.monotonic()
    try:
        run_fl(
            command,
            run_dir / "fl-run.out",
            timeout=600 + 120 * rounds,
            env=code.env(run_dir / "partition-cache"),
            cwd=code.root or ROOT,
            on_start=watch,
        )
        rows = read_metrics(run_dir / "metrics.csv", rounds)
    except BenchmarkError as err:
        raise BenchmarkError(f"{name} failed (run directory kept: {run_dir})\n{err}") from None
    finally:
        cpu = samplers[0].stop() if samplers else {}
        peak = samplers[1].stop() if len(samplers) > 1 else None
    total = time.monotonic() - started
    shutil.rmtree(run_dir, ignore_errors=True)
    result = RunResult(
        name=name,
        command=shlex.join(command),
        rounds=rounds,
        ends=[float(r["wall_seconds"]) for r in rows],
        accuracies=[float(r["test_accuracy"]) if r.get("test_accuracy") else None for r in rows],
        load_after=os.getloadavg()[0],
        rows=rows,
        total_seconds=total,
        peak_pss=peak,
        cpu_by_role=cpu,  # type: ignore[arg-type]
    )
    print(
        f"[bench] {name}: {result.seconds_per_round:.3f} s/round after warm-up, round 1 "
        f"{result.round1:.1f} s, {total:.0f} s in all",
        flush=True,
    )
    return result


# ----- plain PyTorch yardstick --------------------------------------------------------------
def plain_fedavg(cfg: DictConfig, rounds: int) -> RunResult:
    """FedAvg without Flower: the same local training, averaging and evaluation, in-process."""
    data = load_dataset(cfg)
    parts = [
        (data.x_train[idx], data.y_train[idx])
        for idx in partition_indices(cfg, int(cfg.num_clients))
    ]
    model = build_model(cfg)
    keys = list(model.state_dict())
    global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    settings = TrainSettings(**OmegaConf.to_container(cfg.train))
    train_device = resolve_device("auto")  # a SuperNode's default device
    eval_device = resolve_device(str(cfg.server.device))
    ends: list[float] = []
    accuracies: list[float | None] = []
    started = time.perf_counter()
    for rnd in range(1, rounds + 1):
        models, weights = [], []
        for pid, (x, y) in enumerate(parts):
            model.load_state_dict(global_state)
            result = train_locally(
                model,
                x,
                y,
                build(cfg.algorithm.local_rule),
                settings,
                seed=derive_seed(cfg.seed, rnd, pid),
                device=train_device,
            )
            models.append([v.detach().cpu().numpy().copy() for v in model.state_dict().values()])
            weights.append(float(result.num_examples))
        averaged = weighted_average(models, weights)
        global_state = {k: torch.from_numpy(v) for k, v in zip(keys, averaged, strict=True)}
        model.load_state_dict(global_state)
        accuracies.append(evaluate(model, data.x_test, data.y_test, device=eval_device)[0])
        ends.append(time.perf_counter() - started)
    result = RunResult(
        name="plain PyTorch loop",
        command="(in-process)",
        rounds=rounds,
        ends=ends,
        accuracies=accuracies,
        load_after=os.getloadavg()[0],
        rows=[],
    )
    print(f"[bench] plain loop: {result.seconds_per_round:.3f} s/round after warm-up", flush=True)
    return result


# ----- bytes --------------------------------------------------------------------------------
def raw_model_bytes(cfg: DictConfig) -> int:
    """Raw float32 size of the model: sum of numel x 4 over its state_dict."""
    return sum(t.numel() * 4 for t in build_model(cfg).state_dict().values())


@dataclass(frozen=True)
class BytesRow:
    direction: str
    round1: int
    mean_after: float  # mean over rounds 2..N
    raw: int  # raw float32 x clients

    @property
    def ratio(self) -> float:
        return self.mean_after / self.raw


def bytes_rows(rows: list[dict[str, str]], raw_per_round: int) -> list[BytesRow]:
    out = []
    for direction, column in (("up (clients -> server)", "bytes_up"), ("down", "bytes_down")):
        values = [int(r[column]) for r in rows]
        later = values[1:]
        out.append(BytesRow(direction, values[0], sum(later) / len(later), raw_per_round))
    return out
