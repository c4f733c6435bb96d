"""What FedGSNR's statistics exchange costs: its time against the training exchange, and bytes.

Three `fl-run` runs, one after the other, of the same experiment (mnist5k, cnn, --clients
clients all training every round, E_const = train.local_steps, batch B, SGD lr 0.01 without
momentum, Dirichlet 0.5 partition, seed 0, the chosen runtime):

    algorithm=fedavg                    E_const steps per client
    algorithm=fedgsnr                   gradient statistics query, then E_k steps per client
    algorithm=fedgsnr, s = 1            the same with statistics from one sample: the query's
                                        fixed cost (messages, model loading, packing)

From FedGSNR's metrics.csv, per round after round 1 (which carries the warm-up and the
handshakes): `seconds_gsnr` / `seconds_train`, the wall time of the statistics exchange as a
share of the training exchange; `bytes_up` and `bytes_down` against FedAvg's same rounds; and
the allocation (max E_k, entropy), which sets how long the training exchange takes.

With `--before REV`, a fourth run: the FedGSNR run again with the code of REV (a temporary
worktree), for a before/after measured under the same load.

Then, in this process on one torch thread (as a simulated client), the compute alone: each
client's statistics (`gradient_statistics`, s samples) against its E_const training steps
(`train_locally`), summed over the clients, at the initial model. The difference between the
two shares is what an exchange costs whatever it computes (messages, model loading, packing).
Each lever on the statistics is measured on its own there: the per-sample gradient sums from
one batched backward pass (`layer_gradient_sums`) against torch.func's vmap
(`vmap_gradient_sums`) on the same samples; fewer samples (s/2, s/4): their time, and how far
their n_opt lie from those at s, against how far two draws of s samples lie from each other.

    python -m benchmarks.gsnr_overhead.run [--clients 30] [--rounds 6] [--steps 20] [--batch 64]
        [--samples 64] [--runtime simulation] [--before REV]
        [--out benchmarks/gsnr_overhead/report.md]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_dir

from benchmarks.harness.fl_run import ROOT, BenchmarkError, Code, remove_worktree, run_fl, worktree
from benchmarks.harness.paths import invocation, report_path
from client_app.addons.gsnr import gradient_statistics
from client_app.algorithms.fedavg import FedAvgRule
from client_app.layer_gradients import layer_gradient_sums, supported_layers
from client_app.per_sample import vmap_gradient_sums
from client_app.trainer import TrainSettings, train_locally
from fl_system.addons import gsnr
from fl_system.data.configured import load_dataset, partition_indices
from fl_system.learning.own_model import build_model

SHARE_GOAL = 0.15  # statistics exchange time / training exchange time
EXPECTED_UP = 3.0  # model up + mean and variance up, each a model's size
# benchmarks/gsnr_overhead/report.md of 2026-11-24 (commit 1d50c89): seconds_gsnr, seconds_train and
# their share, means over rounds 2-6 (the share is the mean of the per-round shares)
REPORTED_BEFORE = ("1d50c89, report of 2026-11-24", 0.646, 1.888, 0.343)


@dataclass(frozen=True)
class Run:
    algorithm: str
    command: list[str]
    rows: list[dict[str, str]]
    process_seconds: float

    def later(self) -> list[dict[str, str]]:
        """Rounds after the first."""
        return self.rows[1:]

    def mean(self, column: str) -> float:
        return statistics.fmean(float(r[column]) for r in self.later())

    def per_round_seconds(self) -> float:
        ends = [float(r["wall_seconds"]) for r in self.rows]
        return (ends[-1] - ends[0]) / (len(ends) - 1)


def overrides(args: argparse.Namespace, algorithm: str, samples: int | None = None) -> list[str]:
    return [
        f"runtime={args.runtime}",
        f"algorithm={algorithm}",
        "dataset=mnist5k",
        "model=cnn",
        "partition=dirichlet",
        "partition.alpha=0.5",
        f"num_clients={args.clients}",
        f"num_rounds={args.rounds}",
        f"train.local_steps={args.steps}",
        f"train.batch_size={args.batch}",
        "train.lr=0.01",
        "train.momentum=0.0",
        f"algorithm.gsnr.samples={samples or args.samples}",
        "seed=0",
    ]


def execute(
    args: argparse.Namespace, algorithm: str, samples: int | None = None, code: Code | None = None
) -> Run:
    run_dir = Path(tempfile.mkdtemp(prefix="gsnr-overhead-"))
    code = code or Code("after")
    command = [*code.command(), *overrides(args, algorithm, samples), f"hydra.run.dir={run_dir}"]
    print(f"[bench] {shlex.join(command)}", flush=True)
    started = time.perf_counter()
    env = code.env(run_dir / "cache")
    env["FL_STATE_DIR"] = str(run_dir / "client-state")
    try:
        timeout = 600 + 20 * args.rounds * args.clients
        run_fl(command, run_dir / "fl-run.out", timeout, env, cwd=code.root or ROOT)
    except BenchmarkError as err:
        raise BenchmarkError(f"{algorithm} failed (run directory kept: {run_dir})\n{err}") from None
    with (run_dir / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    shutil.rmtree(run_dir, ignore_errors=True)
    return Run(algorithm, command, rows, time.perf_counter() - started)


@dataclass(frozen=True)
class Compute:
    """Seconds summed over every client, one after the other, at the initial model."""

    stats_seconds: float  # gradient_statistics with s samples (the code as it runs)
    train_seconds: float  # E_const training steps
    vmap_seconds: float  # the per-sample gradient sums of the s samples by torch.func's vmap
    layer_seconds: float  # the same sums from one batched backward pass
    fewer_seconds: dict[int, float]  # gradient_statistics with fewer samples
    kernel_n_opt: float  # max relative n_opt difference, layer sums against vmap sums
    redraw_n_opt: float  # median relative n_opt difference, two draws of s samples
    fewer_n_opt: dict[int, float]  # the same, fewer samples against s


def compute_only(args: argparse.Namespace, repeats: int = 3) -> Compute:
    """Statistics vs training compute for every client, on one thread, best of `repeats`;
    each lever on the statistics timed alone, and what fewer samples do to n_opt."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose("config", overrides=overrides(args, "fedgsnr"))
    torch.set_num_threads(1)
    data = load_dataset(cfg)
    parts = partition_indices(cfg, args.clients)
    settings = TrainSettings(local_steps=args.steps, batch_size=args.batch, lr=0.01)
    device = torch.device("cpu")
    fewer = [args.samples // 2, args.samples // 4]
    best: dict[str, float] = {}
    for _ in range(repeats):
        seconds: dict[str, float] = {}
        for k, idx in enumerate(parts):
            x, y = data.x_train[idx], data.y_train[idx]
            xs = torch.as_tensor(x[: args.samples])
            ys = torch.as_tensor(y[: args.samples], dtype=torch.long)
            model = build_model(cfg).eval()
            params = {n: p.detach() for n, p in model.named_parameters()}
            layers = supported_layers(model)
            clock = _Clock(seconds)
            clock("vmap", vmap_gradient_sums, model, params, xs, ys)
            clock("layer", layer_gradient_sums, model, layers, xs, ys)
            for s in (args.samples, *fewer):
                clock(f"s{s}", gradient_statistics, model, x, y, samples=s, seed=k)
            clock(
                "train", train_locally, model, x, y, FedAvgRule(), settings, seed=k, device=device
            )
        best = {n: min(best.get(n, math.inf), t) for n, t in seconds.items()}
    return Compute(
        stats_seconds=best[f"s{args.samples}"],
        train_seconds=best["train"],
        vmap_seconds=best["vmap"],
        layer_seconds=best["layer"],
        fewer_seconds={s: best[f"s{s}"] for s in fewer},
        **_n_opt_differences(args, cfg, data, parts, fewer),
    )


@dataclass(frozen=True)
class _Clock:
    """Adds each call's seconds to `seconds[name]`."""

    seconds: dict[str, float]

    def __call__(self, name: str, work, *args, **kwargs) -> None:
        start = time.perf_counter()
        work(*args, **kwargs)
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start


def _n_opt_differences(args, cfg, data, parts, fewer: list[int]) -> dict[str, object]:
    """n_opt of every client at the initial model from several estimates, against the one
    that runs (s samples, layer sums): relative differences."""
    model = build_model(cfg)
    params = {n: p.detach() for n, p in model.named_parameters()}
    layers = supported_layers(model)

    def n_opt(stats: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        means, variances = np.stack([m for m, _ in stats]), np.stack([v for _, v in stats])
        sizes = [len(idx) for idx in parts]
        m_g, v_g = gsnr.global_statistics(means, variances, sizes)
        return gsnr.client_terms(means, variances, m_g, v_g, args.batch).n_opt

    def drawn(samples: int, seed: int) -> np.ndarray:
        return n_opt(
            [
                gradient_statistics(
                    model, data.x_train[idx], data.y_train[idx], samples=samples, seed=seed + k
                )[:2]
                for k, idx in enumerate(parts)
            ]
        )

    def from_sums(kernel) -> np.ndarray:
        stats = []
        for idx in parts:
            xs = torch.as_tensor(data.x_train[idx[: args.samples]])
            ys = torch.as_tensor(data.y_train[idx[: args.samples]], dtype=torch.long)
            sums = kernel(xs, ys)
            total = torch.cat([g.reshape(-1) for g, _ in sums.values()]).double().numpy()
            squares = torch.cat([q.reshape(-1) for _, q in sums.values()]).double().numpy()
            mean = total / len(ys)
            stats.append((mean, np.maximum(squares / len(ys) - mean**2, 0.0)))
        return n_opt(stats)

    def relative(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.abs(a - b) / np.maximum(np.abs(b), 1e-12)

    reference = drawn(args.samples, 0)
    kernels = (
        from_sums(lambda xs, ys: layer_gradient_sums(model, layers, xs, ys)),
        from_sums(lambda xs, ys: vmap_gradient_sums(model, params, xs, ys)),
    )
    return {
        "kernel_n_opt": float(relative(*kernels).max()),
        "redraw_n_opt": float(np.median(relative(drawn(args.samples, 10_000), reference))),
        "fewer_n_opt": {s: float(np.median(relative(drawn(s, 0), reference))) for s in fewer},
    }


def report(
    args: argparse.Namespace,
    fedavg: Run,
    fedgsnr: Run,
    one_sample: Run,
    before: Run | None,
    compute: Compute,
    load: tuple[float, ...],
) -> str:
    share = _share(fedgsnr)
    up = fedgsnr.mean("bytes_up") / fedavg.mean("bytes_up")
    down = fedgsnr.mean("bytes_down") / fedavg.mean("bytes_down")
    same_total = all(
        sum(int(r[f"steps_{k}"]) for k in range(args.clients) if r.get(f"steps_{k}"))
        == args.clients * args.steps
        for r in fedgsnr.rows
    )
    lines = [
        "# FedGSNR overhead: the statistics exchange against the training exchange",
        "",
        f"Generated by `python -m benchmarks.gsnr_overhead.run {shlex.join(sys.argv[1:])}`; every "
        "number below comes from this one invocation.",
        "",
        f"- Date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}",
        f"- Machine: nproc {os.cpu_count()}, {platform.processor() or platform.machine()}; "
        f"Python {platform.python_version()}, torch {torch.__version__}",
        f"- Load average at start: {' / '.join(f'{x:.2f}' for x in load)}",
        f"- Experiment: mnist5k, cnn, {args.clients} clients (all every round), Dirichlet 0.5, "
        f"E_const = {args.steps} steps, B = {args.batch}, s = {args.samples} samples for the "
        f"statistics, SGD lr 0.01 without momentum, seed 0, runtime={args.runtime}, "
        f"{args.rounds} rounds (round 1, with the warm-up and handshakes, left out below)",
        "",
        "```",
        shlex.join(fedavg.command),
        shlex.join(fedgsnr.command),
        "```",
        "",
        "## Acceptance",
        "",
        "| what | goal | measured | |",
        "|---|---|---|---|",
        f"| statistics exchange time / training exchange time (mean over rounds 2-{args.rounds}) "
        f"| <= {SHARE_GOAL:.0%} | {share:.1%} | **{'PASS' if share <= SHARE_GOAL else 'MISS'}** |",
        f"| bytes up per round, FedGSNR / FedAvg | about {EXPECTED_UP:.0f}x | {up:.2f}x | |",
        f"| bytes down per round, FedGSNR / FedAvg | about 2x (the model goes down twice) "
        f"| {down:.2f}x | |",
        f"| sum of E_k = N x E_const every round | exact | {'yes' if same_total else 'NO'} | |",
        "",
        *_before_after(args, fedgsnr, before, share),
        "## Compute alone, and each lever on its own",
        "",
        f"In this process, one torch thread, best of 3, all {args.clients} clients one after "
        f"the other at the initial model: statistics {compute.stats_seconds:.3f} s, "
        f"{args.steps} training steps {compute.train_seconds:.3f} s: "
        f"**{compute.stats_seconds / compute.train_seconds:.1%}** of the training compute. "
        f"The exchange share above ({share:.1%}) adds what every exchange costs besides its "
        "compute (the per-message work of the runtime, loading the model into the client, "
        "packing and counting).",
        "",
        "| lever | seconds, all clients | against training | effect on n_opt |",
        "|---|---|---|---|",
        f"| per-sample gradient sums, torch.func vmap (before) | {compute.vmap_seconds:.3f} "
        f"| {compute.vmap_seconds / compute.train_seconds:.1%} | reference |",
        f"| per-sample gradient sums, one batched backward pass (now) "
        f"| {compute.layer_seconds:.3f} | {compute.layer_seconds / compute.train_seconds:.1%} "
        f"| max {compute.kernel_n_opt:.1e} relative (float32 rounding) |",
        f"| statistics as they run, s = {args.samples} | {compute.stats_seconds:.3f} "
        f"| {compute.stats_seconds / compute.train_seconds:.1%} "
        f"| another draw of {args.samples}: median {compute.redraw_n_opt:.1%} |",
        *(
            f"| fewer samples, s = {s} | {t:.3f} | {t / compute.train_seconds:.1%} "
            f"| median {compute.fewer_n_opt[s]:.1%} from s = {args.samples} |"
            for s, t in compute.fewer_seconds.items()
        ),
        "",
        "The batched pass gives the vmap sums in "
        f"{compute.layer_seconds / compute.vmap_seconds:.0%} of vmap's time, with the same "
        "n_opt to float32 rounding (the spec's tolerance is 4 decimals; "
        "tests/client/test_layer_gradients.py). Fewer samples are not used: the spec "
        f'(1.1, 3, 6.1) and the paper (Algorithm 1: "sample size B") set s = B = {args.batch}, '
        "and s only sets the estimate's noise (last column: how far n_opt moves between two "
        "draws of s samples, and from s to fewer): fewer samples buy time with a noisier "
        "estimate, which the paper's estimator does not allow.",
        "",
        f"The same FedGSNR run with s = 1 sample (statistics nearly free): "
        f"seconds_gsnr {one_sample.mean('seconds_gsnr'):.2f} s against "
        f"{fedgsnr.mean('seconds_gsnr'):.2f} s with s = {args.samples} (means over rounds "
        f"2-{args.rounds}); that floor is the exchange's fixed cost for {args.clients} messages: "
        f"**{one_sample.mean('seconds_gsnr') / fedgsnr.mean('seconds_train'):.1%}** of the "
        "training exchange before any statistics are computed.",
        "",
        "## Per round",
        "",
        "| round | seconds_gsnr | seconds_train | share | max E_k | entropy (uniform: "
        f"{math.log(args.clients):.3f}) | FedGSNR s/round | FedAvg s/round |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r, a in zip(fedgsnr.rows, fedavg.rows, strict=True):
        lines.append(
            f"| {r['round']} | {float(r['seconds_gsnr']):.2f} | {float(r['seconds_train']):.2f} "
            f"| {float(r['seconds_gsnr']) / float(r['seconds_train']):.1%} "
            f"| {r['gsnr_max_steps']} | {float(r['gsnr_entropy']):.3f} "
            f"| {_round_seconds(fedgsnr, r):.2f} | {_round_seconds(fedavg, a):.2f} |"
        )
    lines += [
        "",
        "## Whole runs",
        "",
        "| | s/round after round 1 | process wall time | bytes up / round | bytes down / round "
        "| final accuracy |",
        "|---|---|---|---|---|---|",
    ]
    for run in (fedavg, fedgsnr):
        lines.append(
            f"| {run.algorithm} | {run.per_round_seconds():.2f} | {run.process_seconds:.0f} s "
            f"| {run.mean('bytes_up'):,.0f} | {run.mean('bytes_down'):,.0f} "
            f"| {float(run.rows[-1]['test_accuracy']):.4f} |"
        )
    lines += [
        "",
        "FedGSNR's round is longer than FedAvg's by the statistics exchange and by the",
        "allocation itself: the training exchange lasts as long as its slowest client, and",
        "max E_k is above E_const whenever the allocation is uneven.",
        "",
    ]
    return "\n".join(lines)


def _share(run: Run) -> float:
    """Mean over the rounds after the first of seconds_gsnr / seconds_train."""
    return statistics.fmean(
        float(r["seconds_gsnr"]) / float(r["seconds_train"]) for r in run.later()
    )


def _before_after(
    args: argparse.Namespace, fedgsnr: Run, before: Run | None, share: float
) -> list[str]:
    """The share before (the report of 2026-11-24, and REV's code in this invocation)."""
    lines = [
        "## Before and after",
        "",
        "| code | seconds_gsnr | seconds_train | share | where measured |",
        "|---|---|---|---|---|",
        f"| before: {REPORTED_BEFORE[0]} | {REPORTED_BEFORE[1]:.2f} | {REPORTED_BEFORE[2]:.2f} "
        f"| {REPORTED_BEFORE[3]:.1%} | quoted from that report (another day, another load) |",
    ]
    if before is not None:
        lines.append(
            f"| before: {args.before} | {before.mean('seconds_gsnr'):.2f} "
            f"| {before.mean('seconds_train'):.2f} | {_share(before):.1%} | this invocation |"
        )
    lines += [
        f"| after: this checkout | {fedgsnr.mean('seconds_gsnr'):.2f} "
        f"| {fedgsnr.mean('seconds_train'):.2f} | {share:.1%} | this invocation |",
        "",
        f"Means over rounds 2-{args.rounds} of the FedGSNR run, s = {args.samples}.",
        "",
    ]
    return lines


def _round_seconds(run: Run, row: dict[str, str]) -> float:
    i = run.rows.index(row)
    previous = float(run.rows[i - 1]["wall_seconds"]) if i else 0.0
    return float(row["wall_seconds"]) - previous


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=invocation("gsnr_overhead"), description=__doc__.splitlines()[0]
    )
    parser.add_argument("--clients", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=20, help="E_const = train.local_steps")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--samples", type=int, default=64, help="algorithm.gsnr.samples")
    parser.add_argument("--runtime", default="simulation", choices=("simulation", "local"))
    parser.add_argument("--before", help="also run FedGSNR with this commit's code")
    parser.add_argument("--out", type=Path, default=report_path("gsnr_overhead"))
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (round 1 is left out)")
    load = os.getloadavg()
    try:
        fedavg = execute(args, "fedavg")
        fedgsnr = execute(args, "fedgsnr")
        one_sample = execute(args, "fedgsnr", samples=1)
        before = None
        if args.before:
            tree = worktree(args.before, prefix="gsnr-overhead-before-")
            try:
                before = execute(args, "fedgsnr", code=Code(args.before, tree))
            finally:
                remove_worktree(tree)
    except (BenchmarkError, subprocess.CalledProcessError) as err:
        print(f"gsnr_overhead: {err}", file=sys.stderr)
        return 1
    compute = compute_only(args)
    args.out.write_text(report(args, fedavg, fedgsnr, one_sample, before, compute, load))
    print(f"[bench] report: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
