"""Reliability under faults, hostile updates and scale: every fault injected for real, measured
in one invocation, reported in benchmarks/reliability/report.md.

    1 clients dying   runtime=local, 6 SuperNodes, 10 rounds, mnist5k + cnn: during every
                      round a random SuperNode is SIGKILLed while it trains (fl-run starts it
                      again); FedAvg and SCAFFOLD (client state on disk), and FedAvg unharmed
    2 server dying    runtime=local: the SuperLink (with its ServerApp) SIGKILLed in round
                      --server-kill-round, then resume=true; simulation: for every algorithm
                      with server state, fl-run SIGKILLed in that round and resumed, final
                      model against the uninterrupted run's
    3 hostile replies simulation, 4 clients: partition 1 sends each kind of broken reply
                      (clients.malicious.kind); a x100 update under each aggregation.robust
    4 message limits  partition 1 sends an oversized reply (beyond aggregation.max_reply_ratio)
    5 secrets         fl-certs --bundles: what each machine's bundle holds, and its modes
    6 soak            runtime=local, 20 SuperNodes, 50 rounds, FedAvg on mnist5k: RSS, open
                      files and threads of every process, first round against last
    7 scale           runtime=simulation, 100 and 1,000 clients, 100 sampled a round, 20
                      rounds, mnist5k: peak memory and seconds per round

Every run ends by checking that nothing it started is still alive.

    python -m benchmarks.reliability.run [--only 1 2 ...] [--out benchmarks/reliability/report.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.harness.paths import invocation, report_path
from benchmarks.harness.tables import machine_line
from benchmarks.reliability.cases import (
    SERVER_STATE,
    clients_dying,
    hostile,
    scale,
    secrets,
    server_dying_local,
    server_dying_simulation,
    soak,
)
from benchmarks.reliability.processes import say
from benchmarks.reliability.report import write_report


# ----- main -----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=invocation("reliability"), description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--only", nargs="+", type=int, default=list(range(1, 8)))
    parser.add_argument("--out", type=Path, default=report_path("reliability"))
    parser.add_argument("--dying-rounds", type=int, default=10)
    parser.add_argument("--dying-nodes", type=int, default=6)
    parser.add_argument("--server-kill-round", type=int, default=4)
    parser.add_argument("--server-rounds", type=int, default=8)
    parser.add_argument("--soak-nodes", type=int, default=20)
    parser.add_argument("--soak-rounds", type=int, default=50)
    parser.add_argument("--scale-clients", nargs="+", type=int, default=[100, 1000])
    parser.add_argument("--scale-rounds", type=int, default=20)
    parser.add_argument("--scale-sampled", type=int, default=100, help="clients per round")
    parser.add_argument("--algorithms", nargs="+", default=list(SERVER_STATE))
    parser.add_argument("--notes", type=Path, help="Markdown appended to the report")
    parser.add_argument(
        "--render-only",
        type=Path,
        metavar="RESULTS_JSON",
        help="write the report from an earlier invocation's results.json (with --notes)",
    )
    args = parser.parse_args(argv)
    if args.render_only:
        saved = json.loads(args.render_only.read_text())
        write_report(args, saved["results"], saved["failed"], saved["header"])
        say(f"report: {args.out}")
        return 0
    load = os.getloadavg()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="fl-reliability-"))
    say(f"work directory {work}")
    results: dict = {}

    failed: list[str] = []

    def step(label: str, fn: Callable[[], object]) -> object:
        """Run one measurement; a failure is reported, not fatal to the others."""
        t = time.monotonic()
        say(f"{label} ...")
        try:
            value = fn()
        except Exception as err:  # reported in the report's last section
            failed.append(f"- {label}: {type(err).__name__}: {err}")
            say(f"{label} FAILED: {err}")
            return None
        say(f"{label}: {time.monotonic() - t:.0f} s")
        return value

    def steps(label: str, fn: Callable[..., object], cases: Sequence) -> list:
        """`step` per case; the ones that succeeded."""
        done = [step(f"{label} {case}", lambda case=case: fn(case)) for case in cases]
        return [value for value in done if value is not None]

    if 1 in args.only:
        results["dying"] = steps(
            "1",
            lambda case: clients_dying(
                work, case[0], kill=case[1], rounds=args.dying_rounds, nodes=args.dying_nodes
            ),
            [("fedavg", False), ("fedavg", True), ("scaffold", True)],
        )
    if 2 in args.only:
        results["server_local"] = step(
            "2 local", lambda: server_dying_local(work, args.server_kill_round, args.server_rounds)
        )
        results["server_sim"] = steps(
            "2 simulation", lambda alg: server_dying_simulation(work, alg, 3, 6), args.algorithms
        )
    if 3 in args.only:
        kinds = [None, "nan", "inf", "shape", "dtype", "missing", "huge", "scaled"]
        results["hostile"] = steps("3", lambda kind: hostile(work, kind), kinds)
        results["robust"] = steps(
            "3 scaled, norm screen off",
            lambda rob: hostile(work, "scaled", rob, screen=False),
            ["mean", "clip", "median", "trimmed_mean", "trimmed_mean aggregation.robust.trim=0.25"],
        )
    if 4 in args.only:
        results["limits"] = steps("4", lambda kind: hostile(work, kind), ["oversized"])
    if 5 in args.only:
        results["secrets"] = step("5 secrets", lambda: secrets(work))
    if 6 in args.only:
        results["soak"] = step("6 soak", lambda: soak(work, args.soak_nodes, args.soak_rounds))
    if 7 in args.only:
        results["scale"] = steps(
            "7 clients",
            lambda n: scale(work, n, min(n, args.scale_sampled), args.scale_rounds),
            args.scale_clients,
        )
    header = [
        "# Reliability under faults, hostile updates and scale",
        "",
        f"`python -m benchmarks.reliability.run{_flags(argv)}`, {dt.date.today()}, "
        f"{(time.monotonic() - started) / 60:.0f} min in all.",
        machine_line(load),
    ]
    saved = {"results": results, "failed": failed, "header": header}
    (work / "results.json").write_text(json.dumps(saved, indent=1, default=str))
    say(f"results: {work / 'results.json'}")
    write_report(args, results, failed, header)
    say(f"report: {args.out}")
    return 0


def _flags(argv: list[str] | None) -> str:
    given = sys.argv[1:] if argv is None else argv
    return (" " + " ".join(given)) if given else ""


if __name__ == "__main__":
    sys.exit(main())
