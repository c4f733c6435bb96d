"""Nodes that come and go through a long run across network namespaces, and what each kind
of event costs.

The churn of the suite's `tests/e2e/test_churn.py` (the same federation, TLS and SuperNode
authentication, one fl-client per namespaced host, events drawn from a seed; see
`tests/e2e/churn.py`), longer: `--rounds` rounds with `--events` kills spread over the run
(fl-supernode, fl-client and whole-host SIGKILLs in turn), a node down at its handshake and
a key unregistered for a newcomer. Per event kind it reports how long the node was away
(kill to admitted again), the rounds its partition missed, how many rounds after its return
it trained again and the seconds from its return to the end of that round; and whether the
run completed, with its rounds and accuracy. Needs root (network namespaces).

    python -m benchmarks.churn.run [--rounds 100] [--events 12] [--seed 0] [--hosts 4]
        [--out benchmarks/churn/report.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.harness.paths import invocation, plot_path, report_path, write_report
from benchmarks.harness.tables import machine_line
from tests.e2e import churn
from tests.e2e.federation import started_federation
from tests.e2e.netns import unavailable

STUDY = "churn"
KIND_ORDER = ("before", "supernode", "fl-client", "host", "leave")
WHAT = {
    "before": "fl-supernode SIGKILLed just before the run was submitted (down at its handshake)",
    "supernode": "fl-supernode SIGKILLed (its fl-client exits), the same fl-client command rerun",
    "fl-client": "fl-client SIGKILLed (its SuperNode stops by itself), the same command rerun",
    "host": "every process of the node's namespace SIGKILLed, the same command rerun",
    "leave": "the node's key unregistered; a newcomer's key registered, same partition",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=invocation(STUDY), description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--events", type=int, default=12, help="kills during the run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hosts", type=int, default=4, help="client hosts, one node each")
    parser.add_argument("--out", type=Path, default=report_path(STUDY))
    args = parser.parse_args(argv)
    if (why := unavailable()) is not None:
        print(f"{invocation(STUDY)}: error: {why}", file=sys.stderr)
        return 2
    if (args.rounds - 10) / (args.events + 1) < 6:
        print(f"{invocation(STUDY)}: error: too many --events for --rounds", file=sys.stderr)
        return 2
    hosts = [f"client-{i}" for i in range(args.hosts)]
    plan = churn.draw(args.seed, args.rounds, len(hosts), in_run=args.events)
    load = list(os.getloadavg())
    started = dt.datetime.now()
    work = Path(tempfile.mkdtemp(prefix="churn-"))
    with started_federation(work, hosts) as federation:
        outcome = churn.churned_run(federation, hosts, plan, work / "run", claimant=False)
    print(f"[bench] the run's directory and every node's log: {work}", flush=True)
    lines = render(args, plan, outcome, started, load)
    write_report(args.out, lines)
    draw_timeline(plan, outcome, args.hosts, plot_path(args.out))
    return 0 if outcome.code == 0 else 1


def render(
    args: argparse.Namespace,
    plan: churn.Plan,
    outcome: churn.Outcome,
    started: dt.datetime,
    load: list[float],
) -> list[str]:
    rows = outcome.rows
    final = rows[-1].get("test_accuracy", "") if rows else ""
    out = [
        "# Churn: nodes that come and go through a run",
        "",
        f"- Invocation: `{invocation(STUDY)} --rounds {args.rounds} --events {args.events} "
        f"--seed {args.seed} --hosts {args.hosts}`, started {started:%Y-%m-%d %H:%M}",
        machine_line(load),
        "- Federation: fl-server and one fl-client per network namespace, TLS and SuperNode "
        f"authentication, heartbeat 5 s; fedavg, digits, mlp, num_clients={args.hosts}, every "
        "node every round.",
        f"- Run: fl-run exit code {outcome.code}, {len(rows)} of {plan.num_rounds} rounds "
        f"completed, final accuracy {final}; processes left in the client hosts: "
        f"{sum(len(v) for v in outcome.leftovers.values())}.",
        "",
        "| event | n | away s (median, max) | rounds missed (median, max) | rounds after "
        "return to train (max) | s from return to that round's end (median, max) |",
        "|---|---|---|---|---|---|",
    ]
    for kind in KIND_ORDER:
        events = [e for e in plan.events if e.kind == kind]
        if not events:
            continue
        away = [e.returned_at - e.fired_at for e in events if e.returned_at and e.fired_at]
        missed = [churn.rounds_without(rows, e) for e in events]
        back = [churn.first_round_back(rows, e) for e in events if e.returned_rows is not None]
        wait = [e.back_at - e.returned_at for e in events if e.back_at and e.returned_at]
        out.append(
            f"| {kind} | {len(events)} | {_pair(away)} | {_pair(missed, '.0f')} | "
            f"{max((b for b in back if b is not None), default='-')}"
            f"{' (one never)' if None in back else ''} | {_pair(wait)} |"
        )
    out += ["", "What each event is:", ""]
    out += [f"- `{kind}`: {WHAT[kind]}." for kind in KIND_ORDER]
    out += [
        "",
        "Rounds after return: 1 is the round under way when the node was admitted again, 2 the "
        "next. Rounds missed: from the round under way at the event to its partition's first "
        "round back. The server's log: "
        f"{len(outcome.lines['left'])} departures, {len(outcome.lines['returns'])} returns, "
        f"{len(outcome.lines['joins'])} joins. Timeline: `plot.png` (a tick per round a "
        "partition trained in; x where its node was taken down, o where it was admitted "
        "again).",
    ]
    return out


def _pair(values: list[float], fmt: str = ".1f") -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):{fmt}}, {max(values):{fmt}}"


def draw_timeline(plan: churn.Plan, outcome: churn.Outcome, hosts: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    partitions = list(range(hosts))
    fig, ax = plt.subplots(figsize=(10, 2.5 + 0.3 * len(partitions)))
    for p in partitions:
        trained = [i + 1 for i, row in enumerate(outcome.rows) if row.get(f"weight_{p}")]
        ax.plot(trained, [p] * len(trained), "|", color="tab:blue", markersize=8)
    colors = {"before": "grey", "supernode": "tab:red", "fl-client": "tab:orange"}
    colors |= {"host": "tab:purple", "leave": "tab:green"}
    for event in plan.events:
        if event.fired_rows is not None:
            ax.plot(event.fired_rows + 0.5, event.partition, "x", color=colors[event.kind])
        if event.returned_rows is not None:
            ax.plot(event.returned_rows + 0.5, event.partition, "o", color=colors[event.kind])
    ax.set_xlabel("round (| trained; x taken down, o admitted again, coloured by kind)")
    ax.set_ylabel("partition")
    ax.set_yticks(partitions)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"[bench] plot written to {path}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
