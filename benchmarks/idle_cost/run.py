"""What an idle federation costs: CPU per idle node and the SuperLink's, memory per node.

For each --nodes count, one after the other: `fl-server --insecure` and that many
`fl-client` nodes on this machine, as a deployment starts them, with no run; once the
SuperLink has said every node joined and --settle seconds have passed (start-up imports),
each process's CPU over --window seconds, by role, and the PSS of each node's process tree.
With `--before REV` the same from a git worktree of REV (the code before a change), each
count's two arms back to back, so before and after come from one invocation.

Targets (issue 67): at most 1 % of a core per idle node, 5 % for the SuperLink at 10 nodes.

    python -m benchmarks.idle_cost.run [--nodes 2 10 30] [--settle 45] [--window 60]
        [--before REV] [--out benchmarks/idle_cost/report.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.harness.fl_run import Code, remove_worktree, worktree
from benchmarks.harness.paths import invocation, report_path, write_report
from benchmarks.harness.tables import machine_line
from benchmarks.idle_cost.federation import NODE_ROLES, SERVER_ROLES, IdleCost, idle_cost

NODE_TARGET = 1.0  # % of one core per idle node
SUPERLINK_TARGET = 5.0  # % of one core at TARGET_NODES
TARGET_NODES = 10
MIB = 2**20


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=invocation("idle_cost"), description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 10, 30])
    parser.add_argument("--settle", type=float, default=45, help="seconds before measuring")
    parser.add_argument("--window", type=float, default=60, help="seconds measured")
    parser.add_argument("--before", help="git revision to measure as 'before' (a worktree)")
    parser.add_argument("--out", type=Path, default=report_path("idle_cost"))
    args = parser.parse_args(argv)
    if min(args.nodes) < 1:
        parser.error("--nodes must be at least 1")
    if args.settle < 0 or args.window <= 0:
        parser.error("--settle must be >= 0 and --window > 0 seconds")
    return args


def measure(args: argparse.Namespace) -> list[IdleCost]:
    arms = [Code("after")]
    tree = worktree(args.before, prefix="idle-cost-before-") if args.before else None
    if tree is not None:
        arms.insert(0, Code(f"before ({args.before})", tree))
    costs = []
    try:
        for nodes in args.nodes:
            for code in arms:
                cost = idle_cost(code, nodes, settle=args.settle, window=args.window)
                print(
                    f"[bench] {code.label}, {nodes} nodes: SuperLink "
                    f"{cost.percent.get('superlink', 0.0):.2f} %, per node "
                    f"{cost.per_node():.2f} % of one core",
                    flush=True,
                )
                costs.append(cost)
    finally:
        if tree is not None:
            remove_worktree(tree)
    return costs


def render(
    costs: list[IdleCost], args: argparse.Namespace, started: dt.datetime, load: tuple
) -> list[str]:
    roles = [*SERVER_ROLES, *NODE_ROLES]
    lines = [
        "# Idle cost: an fl-server and N idle fl-client nodes",
        "",
        f"- Run {started:%Y-%m-%d %H:%M %Z}: `{invocation('idle_cost')} "
        + " ".join(sys.argv[1:])
        + "`",
        machine_line(load),
        f"- Each deployment measured {args.window:.0f} s, {args.settle:.0f} s after the "
        "SuperLink said the last node joined; CPU is user + system time over the window, "
        "in % of one core; PSS splits shared pages among the processes that map them.",
        f"- Targets: at most {NODE_TARGET:.0f} % of a core per idle node, "
        f"{SUPERLINK_TARGET:.0f} % for the SuperLink at {TARGET_NODES} nodes.",
        "",
        "## CPU by role (% of one core; node roles summed over all nodes)",
        "",
        "| code | nodes | " + " | ".join(roles) + " | per node | joined after (s) |",
        "|---|---:|" + "---:|" * (len(roles) + 2),
    ]
    for c in costs:
        cells = " | ".join(f"{c.percent.get(r, 0.0):.2f}" for r in roles)
        lines.append(
            f"| {c.code} | {c.nodes} | {cells} | **{c.per_node():.2f}** | {c.connect:.0f} |"
        )
    lines += [
        "",
        "## Memory (PSS, MiB)",
        "",
        "| code | nodes | per node tree | fl-server tree |",
        "|---|---:|---:|---:|",
    ]
    for c in costs:
        lines.append(
            f"| {c.code} | {c.nodes} | {c.node_pss / MIB:.0f} | {c.server_pss / MIB:.0f} |"
        )
    return [*lines, "", *verdict(costs)]


def verdict(costs: list[IdleCost]) -> list[str]:
    after = [c for c in costs if c.code == "after"]
    lines = ["## Against the targets", ""]
    for c in after:
        node_ok = "met" if c.per_node() <= NODE_TARGET else "missed"
        line = f"- {c.nodes} nodes: {c.per_node():.2f} % per node ({node_ok})"
        if c.nodes == TARGET_NODES:
            sl = c.percent.get("superlink", 0.0)
            line += f"; SuperLink {sl:.2f} % ({'met' if sl <= SUPERLINK_TARGET else 'missed'})"
        lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started, load = dt.datetime.now().astimezone(), os.getloadavg()
    try:
        costs = measure(args)
    except (RuntimeError, subprocess.CalledProcessError) as err:
        print(f"idle_cost: error: {err}", file=sys.stderr, flush=True)
        return 1
    write_report(args.out, render(costs, args, started, load))
    return 0


if __name__ == "__main__":
    sys.exit(main())
