"""Round overhead of fl_system's runtimes against a plain PyTorch FedAvg loop, and wire bytes.

Runs, one after the other and never overlapping:

1. `fl-run runtime=simulation` (Flower's Ray engine) as a subprocess;
2. a plain single-process PyTorch loop doing the same FedAvg rounds (same partitions, local
   rule, train settings, seeds, weighted average and central evaluation), without Flower;
3. `fl-run runtime=local` (a real SuperLink and SuperNodes over gRPC) with --clients nodes,
   the default command (`fl-run` with no overrides: 4 nodes), and --scale-clients nodes with
   the peak memory (PSS summed over the process tree) sampled every second;
4. with `--before REV`: the same local runs from a git worktree of REV (the code before a
   change), so before and after come from one invocation;
5. the CPU an idle federation of --clients nodes burns, with Flower's `flower-supernode` and
   with our `fl-supernode`.

Every fl-run gets an empty partition cache, as a new user's first run would. Seconds per round
after warm-up are (wall time at the end of the last round - at the end of round 1) /
(rounds - 1); round 1 is reported apart.

    python -m benchmarks.round_overhead.run [--rounds-sim 8] [--rounds-local 5] [--clients 10]
        [--scale-clients 20] [--before REV] [--out benchmarks/round_overhead/report.md]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from benchmarks.harness.fl_run import (
    ROOT,
    BenchmarkError,
    Code,
    cpu_model,
    remove_worktree,
    run_fl,
    worktree,
)
from benchmarks.harness.paths import report_path
from benchmarks.harness.process_tree import PeakMemory, RoundCpu
from benchmarks.round_overhead.idle_federation import IdleCpu, idle_cpu
from client_app.trainer import TrainSettings, train_locally
from fl_system.aggregation import weighted_average
from fl_system.devices import resolve_device
from fl_system.evaluation import evaluate
from fl_system.experiment import build, build_model, load_dataset, partition_indices
from fl_system.seeding import derive_seed

CONF_DIR = ROOT / "conf"
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


def compose_config(overrides: list[str]) -> DictConfig:
    """The same config fl-run would compose for these overrides (without the run dir)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=overrides)


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


# ----- report -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Measured:
    """Everything one invocation measured."""

    started: dt.datetime
    load_start: tuple[float, ...]
    args: argparse.Namespace
    sim_cfg: DictConfig
    plain_threads: int
    raw_model: int
    sim: RunResult
    plain: RunResult
    local: RunResult
    default: RunResult
    scale: RunResult
    idle: list[IdleCpu]
    before_local: RunResult | None = None
    before_default: RunResult | None = None


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def header(m: Measured) -> list[str]:
    a, rt, train = m.args, m.sim_cfg.runtime, m.sim_cfg.train
    before = f" --before {a.before}" if a.before else ""
    runs = [m.sim, m.local, m.default, m.scale, m.before_local, m.before_default]
    return [
        "# Round overhead: fl_system runtimes vs a plain PyTorch loop",
        "",
        "Generated by `python -m benchmarks.round_overhead.run "
        f"--rounds-sim {a.rounds_sim} --rounds-local {a.rounds_local} --clients {a.clients} "
        f"--scale-clients {a.scale_clients}{before}`; every number below comes from this one "
        "invocation.",
        "",
        f"- Date: {m.started.isoformat(timespec='seconds')}",
        f"- Machine: nproc {os.cpu_count()}, CPU {cpu_model()}; "
        f"Python {platform.python_version()}, torch {torch.__version__}",
        "- Load average (1/5/15 min) at start: "
        + " / ".join(f"{v:.2f}" for v in m.load_start)
        + " (the machine is shared: see the load after each run below)",
        f"- Experiment: FedAvg, mnist5k, cnn, partition iid, every client every round, "
        f"1 local epoch, batch {train.batch_size}, lr {train.lr}, seed {m.sim_cfg.seed}, "
        "central evaluation every round; the default command is `fl-run` with no overrides "
        "(the same experiment with 4 nodes and 5 rounds)",
        f"- Torch threads: plain loop {m.plain_threads} (torch's default in this process); "
        f"simulation {rt.torch_threads} per Ray worker with {rt.client_cpus} CPU per virtual "
        "client; local 1 per ClientApp; the server's driver torch's default",
        "",
        "Commands (into temporary run directories, each with an empty partition cache):",
        "",
        "```",
        *[r.command for r in runs if r is not None],
        "```",
    ]


def acceptance_section(m: Measured) -> list[str]:
    plain = m.plain.seconds_per_round
    overhead = m.local.seconds_per_round - plain
    ratio = m.sim.seconds_per_round / plain
    rows = [
        (
            f"{m.args.clients} SuperNodes: s/round after round 1 minus the plain loop's",
            f"<= {LOCAL_OVERHEAD_GOAL:.0f} s",
            f"{m.local.seconds_per_round:.2f} - {plain:.2f} = {overhead:.2f} s",
            verdict(overhead <= LOCAL_OVERHEAD_GOAL),
        ),
        (
            f"{m.args.scale_clients} SuperNodes: run completes, peak PSS of the process tree",
            f"< {MEMORY_GOAL / GIB:.0f} GiB",
            f"{m.scale.rounds} rounds, {(m.scale.peak_pss or 0) / GIB:.2f} GiB",
            verdict((m.scale.peak_pss or MEMORY_GOAL) < MEMORY_GOAL),
        ),
        (
            "simulation s/round / plain loop",
            f"<= {SIM_GOAL}x (goal 1.10x)",
            f"{m.sim.seconds_per_round:.3f} / {plain:.3f} = {ratio:.2f}x",
            verdict(ratio <= SIM_GOAL),
        ),
    ]
    lines = ["## Acceptance", "", "| what | target | measured | |", "|---|---|---|---|"]
    lines += [f"| {w} | {t} | {v} | **{ok}** |" for w, t, v, ok in rows]
    return lines


def timing_section(m: Measured) -> list[str]:
    runs = [m.sim, m.plain, m.local, m.default, m.scale, m.before_local, m.before_default]
    lines = [
        "## Seconds per round",
        "",
        "Round 1 is the driver's clock at the end of round 1 (it includes the handshake and, "
        "for a cold partition cache, loading the data); s/round is the mean of rounds 2..N; "
        "'in all' is fl-run from start to exit (start-up and teardown included).",
        "",
        "| run | rounds | round 1 (s) | s/round after round 1 | vs plain loop | "
        "rounds 2..N each (s) | in all (s) | accuracy at last round | load after |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in (x for x in runs if x is not None):
        acc = "n/a" if r.final_accuracy is None else f"{r.final_accuracy:.4f}"
        total = "" if r.total_seconds is None else f"{r.total_seconds:.0f}"
        lines.append(
            f"| {r.name} | {r.rounds} | {r.round1:.2f} | {r.seconds_per_round:.3f} | "
            f"{r.seconds_per_round / m.plain.seconds_per_round:.2f}x | "
            f"{', '.join(f'{t:.2f}' for t in r.later_rounds)} | {total} | {acc} | "
            f"{r.load_after:.2f} |"
        )
    return lines


def before_after_section(m: Measured) -> list[str]:
    if m.before_local is None or m.before_default is None:
        return ["## Before and after", "", "Not measured (run with `--before REV`)."]
    lines = [
        "## Before and after",
        "",
        f"Before: this benchmark's runs from a worktree of `{m.args.before}`.",
        "",
        "| runtime=local | s/round before | after | round 1 before | after | "
        "in all before | after |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    pairs = [
        (f"{m.args.clients} SuperNodes", m.before_local, m.local),
        ("default command (4 SuperNodes)", m.before_default, m.default),
    ]
    for label, b, a in pairs:
        lines.append(
            f"| {label} | {b.seconds_per_round:.2f} | {a.seconds_per_round:.2f} | "
            f"{b.round1:.1f} | {a.round1:.1f} | {b.total_seconds:.0f} | {a.total_seconds:.0f} |"
        )
    return lines


def cpu_section(m: Measured) -> list[str]:
    # Not the 'before' runs: Flower's SuperExec starts a process per message without waiting
    # for it, and summing per-process CPU over such a tree counted far more than the cores
    # can give (219 CPU s per 58 s round on 2 cores), so those figures are left out.
    runs = [r for r in (m.local, m.scale) if r.cpu_by_role]
    roles = list(dict.fromkeys(role for r in runs for role in r.cpu_by_role))
    lines = [
        "## Where the CPU goes (runtime=local)",
        "",
        "CPU seconds per round over rounds 2..N, by process role (a process's reaped children "
        f"count for it), against the {os.cpu_count()} cores' wall budget of "
        "cores x s/round. The 'before' runs are left out: summing per-process CPU over a "
        "tree in which Flower's SuperExec starts a process per message without waiting for "
        "it counted more CPU than the cores have.",
        "",
        "| role | " + " | ".join(r.name for r in runs) + " |",
        "|---|" + "---:|" * len(runs),
    ]
    for role in roles:
        cells = " | ".join(f"{r.cpu_by_role.get(role, 0.0):.2f}" for r in runs)
        lines.append(f"| {role} | {cells} |")
    totals = " | ".join(f"**{sum(r.cpu_by_role.values()):.2f}**" for r in runs)
    budget = " | ".join(f"{(os.cpu_count() or 1) * r.seconds_per_round:.2f}" for r in runs)
    return [*lines, f"| total | {totals} |", f"| cores x s/round | {budget} |"]


def idle_section(m: Measured) -> list[str]:
    lines = [
        "## Idle CPU",
        "",
        f"A SuperLink and {m.args.clients} SuperNodes with no run, measured after the "
        "start-up has settled; percent of one core, summed over the whole process tree.",
        "",
        "| SuperNode | settle (s) | window (s) | processes | CPU (% of one core) |",
        "|---|---:|---:|---:|---:|",
    ]
    for i in m.idle:
        lines.append(
            f"| `{i.node_command}` | {i.settle:.0f} | {i.window:.0f} | {i.processes} | "
            f"{i.percent:.1f} |"
        )
    return lines


def same_model_section(m: Measured) -> list[str]:
    """Same seeds, same model: test accuracy must agree round for round."""
    pairs = [(m.plain, m.sim), (m.local, m.sim)]
    if m.before_local is not None and m.before_default is not None:
        pairs += [(m.before_local, m.local), (m.before_default, m.default)]
    lines = ["## Same seed, same model", ""]
    for a, b in pairs:
        n = min(a.rounds, b.rounds)
        same = all(
            x is not None and y is not None and abs(x - y) < 1e-9
            for x, y in zip(a.accuracies[:n], b.accuracies[:n], strict=True)
        )
        lines.append(
            f"- {a.name} vs {b.name}, rounds 1..{n}: "
            f"{[f'{x:.4f}' for x in a.accuracies[:n]]} vs {[f'{y:.4f}' for y in b.accuracies[:n]]}"
            f" -> **{'identical' if same else 'DIFFERENT'}**"
        )
    return lines


def bytes_section(m: Measured) -> list[str]:
    clients = m.args.clients
    raw = m.raw_model * clients
    lines = [
        "## Bytes per round",
        "",
        f"Raw float32 model: {m.raw_model:,} bytes (sum of numel x 4 over the state_dict); "
        f"x {clients} clients = {raw:,} bytes per direction per round. Measured: mean over "
        "rounds 2..N of metrics.csv (what Flower serialises: our packed models, one array per "
        "dtype); round 1 also carries the one-off handshake and is shown apart.",
        "",
        "| run | direction | measured bytes/round | raw float32 x clients | ratio | round 1 |",
        "|---|---|---:|---:|---:|---:|",
    ]
    goals = []
    for run in (m.sim, m.local):
        for b in bytes_rows(run.rows, raw):
            lines.append(
                f"| {run.name} | {b.direction} | {b.mean_after:,.0f} | {b.raw:,} | "
                f"{b.ratio:.4f} | {b.round1:,} |"
            )
            ok = abs(b.ratio - 1) <= BYTES_TOLERANCE
            goals.append(
                f"- {run.name}, bytes {b.direction.split()[0]} within {BYTES_TOLERANCE:.0%} of "
                f"raw float32: {b.ratio - 1:+.2%} -> **{verdict(ok)}**"
            )
    return [*lines, "", *goals]


def render_report(m: Measured, notes: str) -> str:
    sections = [
        header(m),
        acceptance_section(m),
        timing_section(m),
        before_after_section(m),
        cpu_section(m),
        idle_section(m),
        same_model_section(m),
        bytes_section(m),
    ]
    text = "\n\n".join("\n".join(section) for section in sections) + "\n"
    return text + (f"\n## Where the time goes\n\n{notes}\n" if notes else "")


# ----- main ---------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds-sim", type=int, default=8, help="rounds for simulation")
    parser.add_argument("--rounds-local", type=int, default=5, help="rounds for runtime=local")
    parser.add_argument("--clients", type=int, default=10, help="clients (all train each round)")
    parser.add_argument("--scale-clients", type=int, default=20, help="nodes for the scale run")
    parser.add_argument("--before", help="git revision to measure as 'before' (a worktree)")
    parser.add_argument("--idle-settle", type=float, default=90, help="seconds before measuring")
    parser.add_argument("--idle-window", type=float, default=30, help="seconds measured")
    parser.add_argument(
        "--notes", type=Path, help="a Markdown file whose text becomes 'Where the time goes'"
    )
    parser.add_argument("--out", type=Path, default=report_path("round_overhead"))
    args = parser.parse_args(argv)
    if args.rounds_sim < 2 or args.rounds_local < 2:
        parser.error("--rounds-sim and --rounds-local must be at least 2 (round 1 is warm-up)")
    if args.clients < 1 or args.scale_clients < 1:
        parser.error("--clients and --scale-clients must be at least 1")
    if args.notes is not None and not args.notes.is_file():
        parser.error(f"--notes: no file at {args.notes}")
    return args


def measure(args: argparse.Namespace) -> Measured:
    now, load = dt.datetime.now().astimezone(), os.getloadavg()
    after = Code("after")
    bench = experiment_overrides(args.clients, args.rounds_local)
    sim_cfg = compose_config(
        ["runtime=simulation", *experiment_overrides(args.clients, args.rounds_sim)]
    )
    sim = measure_fl_run(
        "simulation",
        ["runtime=simulation", *experiment_overrides(args.clients, args.rounds_sim)],
        args.rounds_sim,
        after,
    )
    plain = plain_fedavg(sim_cfg, args.rounds_sim)
    local = measure_fl_run(f"local, {args.clients} nodes", bench, args.rounds_local, after)
    default = measure_fl_run("local, default command", [], 5, after)
    scale = measure_fl_run(
        f"local, {args.scale_clients} nodes",
        experiment_overrides(args.scale_clients, 3),
        3,
        after,
        memory=True,
    )
    before_local = before_default = None
    if args.before:
        tree = worktree(args.before, prefix="round-overhead-before-")
        try:
            old = Code(f"before ({args.before})", tree)
            before_local = measure_fl_run(
                f"before: local, {args.clients} nodes",
                experiment_overrides(args.clients, 3),
                3,
                old,
            )
            before_default = measure_fl_run("before: local, default command", [], 5, old)
        finally:
            remove_worktree(tree)
    idle = [
        idle_cpu(command, args.clients, settle=args.idle_settle, window=args.idle_window, env=env)
        for command, env in (
            ("flower-supernode", {}),
            ("fl-supernode", {}),
        )
    ]
    for i in idle:
        print(f"[bench] idle {i.node_command} x{i.nodes}: {i.percent:.1f}% of one core", flush=True)
    return Measured(
        started=now,
        load_start=load,
        args=args,
        sim_cfg=sim_cfg,
        plain_threads=torch.get_num_threads(),
        raw_model=raw_model_bytes(sim_cfg),
        sim=sim,
        plain=plain,
        local=local,
        default=default,
        scale=scale,
        idle=idle,
        before_local=before_local,
        before_default=before_default,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    try:
        measured = measure(args)
    except (BenchmarkError, RuntimeError) as err:
        print(f"round_overhead: error: {err}", file=sys.stderr, flush=True)
        return 1
    notes = args.notes.read_text().strip() if args.notes else ""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render_report(measured, notes))
    print(f"[bench] report written to {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
