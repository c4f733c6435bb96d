"""FedDisco reproduction on mnist5k: FedAvg and SCAFFOLD, each with and without Disco weights.

For each setting (the paper presets `experiment=feddisco_niid2`: 5 biased + 1 unbiased client,
and `experiment=feddisco_niid1`: Dirichlet alpha=0.5 over 10 clients) and each seed, four
`fl-run runtime=simulation dataset=mnist5k model=cnn` runs, one after the other:

    algorithm=fedavg                                algorithm=scaffold
    algorithm=fedavg algorithm.disco.enabled=true   algorithm=scaffold algorithm.disco.enabled=true

with Disco's defaults a=0.5, b=0.1 (KL to uniform, normalised over the participants), and
`num_rounds` / `train.local_epochs` cut to fit a CPU budget (the paper: 100 rounds x 10 epochs).
The same seed gives every method the same partition, the same initial model and the same
local-training seeds, so gains are compared per seed. Each run's metrics.csv gives the best
test accuracy over rounds and the mean of the last 10 rounds (records.results.summarize), and
the aggregation weights actually used (`weight_<pid>` columns). Optionally a small (a, b) sweep
of FedAvg + Disco on NIID-2.

Writes a Markdown report and a plot (test accuracy vs round, mean over seeds). Exits non-zero,
with the failing command and the tail of its output, if any fl-run fails.

    python -m benchmarks.feddisco_reproduction.run [--seeds 0 1 2] [--rounds 50] [--local-epochs 2]
        [--sweep-seeds 0] [--out benchmarks/feddisco_reproduction/report.md]
    python -m benchmarks.feddisco_reproduction.run --estimate   # one short run per setting: cost
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

from benchmarks.feddisco_reproduction.arms import (
    DEFAULT_A,
    DEFAULT_B,
    GRIDS,
    METHODS,
    SETTINGS,
    main_specs,
    methods_for,
    run_spec,
    spec_of,
    sweep_specs,
)
from benchmarks.feddisco_reproduction.report import Context, render_report, write_plot
from benchmarks.harness.estimates import project
from benchmarks.harness.execute import execute, execute_all
from benchmarks.harness.outcome import RunOutcome, RunSpec
from benchmarks.harness.reproduce import Started, parsed, reproduce, reproduction_parser
from benchmarks.harness.same_start import StartState, compose_config, start_state
from benchmarks.harness.tables import pct1


# ----- fl-run subprocesses ----------------------------------------------------------------
def run_timeout(spec: RunSpec, clients: int, epochs: int) -> float:
    """Generous: about 5x the cost measured on 2 idle cores, plus start-up."""
    return 300 + 0.4 * spec.rounds * epochs * clients


def run_all(
    specs: Sequence[RunSpec], clients: dict[str, int], epochs: int, keep: Path | None = None
) -> list[RunOutcome]:
    def run(spec: RunSpec) -> RunOutcome:
        timeout = run_timeout(spec, clients[spec.setting], epochs)
        return execute(spec, timeout, prefix="feddisco-repro-")

    return execute_all(
        specs,
        run,
        say=lambda o: f"best {pct1(o.best)} (round {o.best_round}), last-10 {pct1(o.last10)}",
        keep=keep,
    )


def start_states(args: argparse.Namespace) -> dict[tuple[str, int], dict[str, StartState]]:
    return {
        (setting.key, seed): {
            m.label: start_state(compose_config(spec_of(setting, m, seed, args).overrides))
            for m in methods_for(setting, args)
        }
        for setting in SETTINGS
        for seed in args.seeds
    }


def estimate(args: argparse.Namespace, clients: dict[str, int]) -> int:
    """One short SCAFFOLD + Disco run per setting; project the full benchmark's wall time."""
    rounds = 4
    total = 0.0
    disco = next(m for m in METHODS if m.algorithm == "scaffold" and m.disco)
    counts = {s.key: len(args.seeds) * len(methods_for(s, args)) for s in SETTINGS}
    counts[SETTINGS[0].key] += len(sweep_specs(args))
    for setting in SETTINGS:
        (o,) = run_all(
            [run_spec(setting, disco, 0, rounds, args.local_epochs, dataset=args.dataset)],
            clients,
            args.local_epochs,
        )
        per_run = project(o, args.rounds)
        total += counts[setting.key] * per_run
        print(
            f"[estimate] {setting.key}: {o.seconds_per_round:.2f} s/round at E="
            f"{args.local_epochs}, fixed {o.fixed_seconds:.0f} s -> {per_run:.0f} s per run "
            f"x {counts[setting.key]} runs",
            flush=True,
        )
    print(f"[estimate] projected total: {total / 60:.1f} min", flush=True)
    return 0


def parse_args(
    argv: list[str] | None = None, study: str = "feddisco_reproduction", dataset: str = "mnist5k"
) -> argparse.Namespace:
    parser = reproduction_parser(__doc__, study, 50)
    parser.add_argument("--dataset", choices=sorted(GRIDS), default=dataset)
    parser.add_argument("--local-epochs", type=int, default=2)
    parser.add_argument(
        "--sweep-seeds",
        type=int,
        nargs="*",
        default=[0] if dataset == "mnist5k" else [],
        help="seeds of the (a, b) sweep; none: skip",
    )
    parser.add_argument("--sweep-a", type=float, nargs="+", default=[0.3, 0.5, 0.7])
    parser.add_argument("--sweep-b", type=float, nargs="+", default=[0.05, 0.1])
    parser.add_argument(
        "--extra-scaffold-lr",
        type=float,
        default=None,
        help="also run SCAFFOLD +- Disco on NIID-2 with train.lr=LR (the preset's 0.01 diverges)",
    )
    args = parsed(parser, argv)
    args.study = study
    if args.rounds < 10:
        parser.error("--rounds must be at least 10 (the last-10 mean needs them)")
    if args.local_epochs < 1:
        parser.error("--local-epochs must be at least 1")
    if not set(args.sweep_seeds) <= set(args.seeds):
        parser.error("--sweep-seeds must be among --seeds (the sweep reuses their FedAvg runs)")
    if args.sweep_seeds and (DEFAULT_A not in args.sweep_a or DEFAULT_B not in args.sweep_b):
        parser.error(f"the sweep grid must contain a={DEFAULT_A} and b={DEFAULT_B}")
    return args


def configs(args: argparse.Namespace) -> dict[str, DictConfig]:
    """setting -> the config fl-run composes for its seed-0 FedAvg run."""
    return {s.key: compose_config(spec_of(s, METHODS[0], 0, args).overrides) for s in SETTINGS}


def clients(args: argparse.Namespace) -> dict[str, int]:
    return {key: int(cfg.num_clients) for key, cfg in configs(args).items()}


def grid(args: argparse.Namespace) -> list[RunSpec]:
    return [*main_specs(args), *sweep_specs(args)]


def report(
    args: argparse.Namespace, outcomes: list[RunOutcome], plot: Path, started: Started
) -> str:
    total = sum(o.process_seconds for o in outcomes)  # as measured, reused runs included
    ctx = Context(args, started.at, started.load, total, start_states(args), configs(args))
    write_plot(outcomes, args, plot)
    return render_report(ctx, outcomes, plot)


def main(
    argv: list[str] | None = None, study: str = "feddisco_reproduction", dataset: str = "mnist5k"
) -> int:
    args = parse_args(argv, study, dataset)
    return reproduce(
        args,
        study,
        grid=grid,
        run_all=lambda specs, keep: run_all(specs, clients(args), args.local_epochs, keep),
        report=report,
        estimate=lambda args: estimate(args, clients(args)),
    )


if __name__ == "__main__":
    sys.exit(main())
