"""Round overhead of fl_system's runtimes against a plain PyTorch FedAvg loop, and wire bytes.

Runs, one after the other and never overlapping:

1. `fl-run runtime=simulation` (Flower's Ray engine) as a subprocess;
2. `fl-run runtime=local` (a real SuperLink and SuperNodes over gRPC) as a subprocess;
3. a plain single-process PyTorch loop doing the same FedAvg rounds (same partitions, local
   rule, train settings, seeds, weighted average and central evaluation), without Flower.

Seconds per round after warm-up are (wall time at the end of the last round - wall time at the
end of round 1) / (rounds - 1). Bytes per round come from the simulation's metrics.csv and are
compared with the model's raw float32 size times the number of clients.

    python benchmarks/round_overhead.py [--rounds-sim 8] [--rounds-local 5] [--clients 10]
                                        [--out benchmarks/round_overhead.md]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from fl_runs import ROOT, BenchmarkError, run_fl, tool_env
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from client_app.trainer import TrainSettings, train_locally
from fl_system.aggregation import weighted_average
from fl_system.devices import resolve_device
from fl_system.evaluation import evaluate
from fl_system.experiment import build, build_model, load_dataset, partition_indices
from fl_system.seeding import derive_seed
from server_app.exchange import POLL_SECONDS

CONF_DIR = ROOT / "conf"
SIM_GOAL = 1.25  # simulation s/round may be at most this multiple of the plain loop's
BYTES_TOLERANCE = 0.05  # measured bytes/round within this fraction of raw float32 x clients


@dataclass(frozen=True)
class RunResult:
    """One measured runtime: how it was run and what its rounds cost."""

    name: str
    command: str
    rounds: int
    ends: list[float]  # cumulative seconds at the end of each round
    accuracies: list[float | None]  # central test accuracy after each round
    load_after: float  # 1-minute load average when it finished (the machine is shared)
    rows: list[dict[str, str]]  # metrics.csv (empty for the plain loop)

    @property
    def final_accuracy(self) -> float | None:
        return self.accuracies[-1]

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


def compose_config(runtime: str, clients: int, rounds: int) -> DictConfig:
    """The same config fl-run would compose for these overrides (without the run dir)."""
    overrides = [f"runtime={runtime}", *experiment_overrides(clients, rounds)]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=overrides)


# ----- fl-run subprocesses ----------------------------------------------------------------
def fl_run_command(runtime: str, clients: int, rounds: int, run_dir: Path) -> list[str]:
    return [
        "fl-run",
        f"runtime={runtime}",
        *experiment_overrides(clients, rounds),
        f"hydra.run.dir={run_dir}",
    ]


def read_metrics(path: Path, rounds: int) -> list[dict[str, str]]:
    if not path.exists():
        raise BenchmarkError(f"{path} was not written")
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    if len(rows) != rounds:
        raise BenchmarkError(f"{path} has {len(rows)} rounds, expected {rounds}")
    return rows


def measure_fl_run(name: str, runtime: str, clients: int, rounds: int) -> RunResult:
    """One fl-run into a temporary run directory (kept, and named, if the run fails)."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"round-overhead-{runtime}-"))
    command = fl_run_command(runtime, clients, rounds, run_dir)
    print(f"[bench] {name}: {shlex.join(command)}", flush=True)
    try:
        run_fl(command, run_dir / "fl-run.out", timeout=300 + 120 * rounds, env=tool_env())
        rows = read_metrics(run_dir / "metrics.csv", rounds)
    except BenchmarkError as err:
        raise BenchmarkError(f"{name} failed (run directory kept: {run_dir})\n{err}") from None
    shutil.rmtree(run_dir, ignore_errors=True)
    result = RunResult(
        name=name,
        command=shlex.join(command),
        rounds=rounds,
        ends=[float(r["wall_seconds"]) for r in rows],
        accuracies=[float(r["test_accuracy"]) if r.get("test_accuracy") else None for r in rows],
        load_after=os.getloadavg()[0],
        rows=rows,
    )
    print(f"[bench] {name}: {result.seconds_per_round:.3f} s/round after warm-up", flush=True)
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


# ----- report -------------------------------------------------------------------------------
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def clientapp_import_seconds() -> float:
    """Wall seconds a fresh process needs to import the ClientApp (torch, flwr, the app)."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import client_app.app"], cwd=ROOT, env=tool_env(), check=True
    )
    return time.perf_counter() - start


@dataclass(frozen=True)
class ReportContext:
    """Everything besides the measurements that the report states."""

    started: dt.datetime
    load_start: tuple[float, ...]
    sim_cfg: DictConfig
    local_cfg: DictConfig
    plain_threads: int
    clients: int
    raw_model: int
    import_seconds: float


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def header(ctx: ReportContext, sim: RunResult, local: RunResult) -> list[str]:
    rt, train = ctx.sim_cfg.runtime, ctx.sim_cfg.train
    return [
        "# Round overhead: fl_system runtimes vs a plain PyTorch loop",
        "",
        "Generated by `python benchmarks/round_overhead.py "
        f"--rounds-sim {sim.rounds} --rounds-local {local.rounds} --clients {ctx.clients}`; "
        "all numbers below come from this one invocation.",
        "",
        f"- Date: {ctx.started.isoformat(timespec='seconds')}",
        f"- Machine: nproc {os.cpu_count()}, CPU {cpu_model()}; "
        f"Python {platform.python_version()}, torch {torch.__version__}",
        "- Load average (1/5/15 min) at start: "
        + " / ".join(f"{v:.2f}" for v in ctx.load_start)
        + " (the machine is shared: see the load after each phase below)",
        f"- Experiment: FedAvg, mnist5k, cnn, partition iid, {ctx.clients} clients (all of them "
        f"every round), 1 local epoch, batch {train.batch_size}, lr {train.lr}, "
        f"seed {ctx.sim_cfg.seed}, central evaluation every round",
        f"- Torch threads: plain loop {ctx.plain_threads} (torch's default in this process); "
        f"simulation {rt.torch_threads} per Ray worker with {rt.client_cpus} CPU per virtual "
        f"client; local {ctx.local_cfg.runtime.torch_threads} per ClientApp process; "
        "the server's driver torch's default",
        "",
        "Commands (into temporary run directories, removed afterwards):",
        "",
        "```",
        sim.command,
        local.command,
        "```",
    ]


def timing_section(sim: RunResult, local: RunResult, plain: RunResult) -> list[str]:
    lines = [
        "## Seconds per round after warm-up",
        "",
        "(wall time at the end of the last round - at the end of round 1) / (rounds - 1).",
        "",
        "| runtime | rounds | s/round after warm-up | ratio to plain loop | "
        "rounds 2..N each (s) | test accuracy at last round | load (1 min) after |",
        "|---|---:|---:|---:|---|---:|---:|",
    ]
    for r in (sim, local, plain):
        acc = "n/a" if r.final_accuracy is None else f"{r.final_accuracy:.4f}"
        lines.append(
            f"| {r.name} | {r.rounds} | {r.seconds_per_round:.3f} | "
            f"{r.seconds_per_round / plain.seconds_per_round:.2f}x | "
            f"{', '.join(f'{t:.2f}' for t in r.later_rounds)} | {acc} | "
            f"{r.load_after:.2f} |"
        )
    return [*lines, "", consistency(sim, local, plain)]


def consistency(sim: RunResult, local: RunResult, plain: RunResult) -> str:
    """Same seeds, same model: test accuracy must agree round for round across all three."""
    pairs = [(plain, min(plain.rounds, sim.rounds)), (local, min(local.rounds, sim.rounds))]
    parts = []
    for other, rnd in pairs:
        a, b = sim.accuracies[rnd - 1], other.accuracies[rnd - 1]
        same = a is not None and b is not None and abs(a - b) < 1e-9
        parts.append(
            f"{other.name} {b} vs simulation {a} after round {rnd} "
            f"({'identical' if same else 'DIFFERENT'})"
        )
    return "Same model check (test accuracy): " + "; ".join(parts) + "."


def bytes_section(ctx: ReportContext, table: list[BytesRow]) -> list[str]:
    lines = [
        "## Bytes per round (simulation metrics)",
        "",
        f"Raw float32 model: {ctx.raw_model:,} bytes (sum of numel x 4 over the state_dict); "
        f"x {ctx.clients} clients = {ctx.raw_model * ctx.clients:,} bytes per direction per "
        "round. Measured: mean over rounds 2..N; round 1 also carries the one-off handshake "
        "and is shown apart.",
        "",
        "| direction | measured bytes/round | raw float32 x clients | ratio | round 1 |",
        "|---|---:|---:|---:|---:|",
    ]
    for b in table:
        lines.append(
            f"| {b.direction} | {b.mean_after:,.0f} | {b.raw:,} | {b.ratio:.4f} | {b.round1:,} |"
        )
    return lines


def goals_section(sim: RunResult, plain: RunResult, table: list[BytesRow]) -> list[str]:
    ratio = sim.seconds_per_round / plain.seconds_per_round
    lines = [
        "## Goals",
        "",
        f"- Simulation round <= {SIM_GOAL}x plain loop: {ratio:.2f}x -> "
        f"**{verdict(ratio <= SIM_GOAL)}**",
    ]
    for b in table:
        ok = abs(b.ratio - 1) <= BYTES_TOLERANCE
        lines.append(
            f"- Bytes {b.direction.split()[0]} within {BYTES_TOLERANCE:.0%} of raw float32: "
            f"{b.ratio - 1:+.2%} -> **{verdict(ok)}**"
        )
    return lines


def overhead_section(
    ctx: ReportContext, sim: RunResult, local: RunResult, plain: RunResult, table: list[BytesRow]
) -> list[str]:
    cores = os.cpu_count() or 1
    workers = max(1, min(ctx.clients, int(cores // float(ctx.sim_cfg.runtime.client_cpus))))
    sim_delta = sim.seconds_per_round - plain.seconds_per_round
    parallel = "does not make up for it" if sim_delta > 0 else "more than makes up for it"
    sim_text = (
        f"Simulation is {abs(sim_delta):.2f} s per round {'slower' if sim_delta > 0 else 'faster'}"
        f" than the plain loop: it pays for Ray passing the serialized global model to "
        f"{ctx.clients} virtual clients and their models back (each message is one Ray "
        "actor call), the simulation engine picking new messages up every 0.1 s, and the "
        "driver's per-round checkpoint and fsynced metrics, "
        f"but its {workers} one-thread worker(s) train clients in parallel, which on "
        f"this small CNN {parallel} "
        f"against one process running {ctx.plain_threads} torch threads."
    )
    spawn = ctx.import_seconds * ctx.clients / cores
    local_text = (
        f"The local runtime costs {local.seconds_per_round - plain.seconds_per_round:.1f} s "
        f"more per round ({local.seconds_per_round / ctx.clients:.1f} s per client): every "
        "message spawns a fresh `flwr-clientapp` process, and importing the ClientApp alone "
        f"took {ctx.import_seconds:.1f} s here (about {spawn:.0f} s of wall time when "
        f"{ctx.clients} start at once on {cores} cores) before it reloads the config, "
        "partition and model; idle SuperNodes poll the SuperLink every 3 s and wait for the "
        f"ClientApp's reply in 0.5 s steps, and the ServerApp checks for replies at most "
        f"every {POLL_SECONDS} s."
    )
    worst = max(abs(b.ratio - 1) for b in table)
    bytes_text = (
        f"Bytes differ from raw float32 by at most {worst:.1%}: Flower's serialized "
        "ArrayRecords add only per-array and per-message headers and the round's config "
        "to the tensors."
    )
    return ["## Where the overhead goes", "", f"{sim_text} {local_text} {bytes_text}"]


def render_report(
    ctx: ReportContext, sim: RunResult, local: RunResult, plain: RunResult, table: list[BytesRow]
) -> str:
    sections = [
        header(ctx, sim, local),
        timing_section(sim, local, plain),
        bytes_section(ctx, table),
        goals_section(sim, plain, table),
        overhead_section(ctx, sim, local, plain, table),
    ]
    return "\n\n".join("\n".join(section) for section in sections) + "\n"


# ----- main ---------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds-sim", type=int, default=8, help="rounds for simulation")
    parser.add_argument("--rounds-local", type=int, default=5, help="rounds for runtime=local")
    parser.add_argument("--clients", type=int, default=10, help="clients (all train each round)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "round_overhead.md")
    args = parser.parse_args(argv)
    if args.rounds_sim < 2 or args.rounds_local < 2:
        parser.error("--rounds-sim and --rounds-local must be at least 2 (round 1 is warm-up)")
    if args.clients < 1:
        parser.error("--clients must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    started = dt.datetime.now().astimezone()
    load_start = os.getloadavg()
    sim_cfg = compose_config("simulation", args.clients, args.rounds_sim)
    local_cfg = compose_config("local", args.clients, args.rounds_local)
    try:
        sim = measure_fl_run("simulation", "simulation", args.clients, args.rounds_sim)
        local = measure_fl_run("local (gRPC)", "local", args.clients, args.rounds_local)
    except BenchmarkError as err:
        print(f"round_overhead: error: {err}", file=sys.stderr, flush=True)
        return 1
    plain = plain_fedavg(sim_cfg, args.rounds_sim)
    ctx = ReportContext(
        started=started,
        load_start=load_start,
        sim_cfg=sim_cfg,
        local_cfg=local_cfg,
        plain_threads=torch.get_num_threads(),
        clients=args.clients,
        raw_model=raw_model_bytes(sim_cfg),
        import_seconds=clientapp_import_seconds(),
    )
    table = bytes_rows(sim.rows, ctx.raw_model * args.clients)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render_report(ctx, sim, local, plain, table))
    print(f"[bench] report written to {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
