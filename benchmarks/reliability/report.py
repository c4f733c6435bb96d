"""The reliability report: one section per case, the measurements that failed last."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence

import numpy as np

from benchmarks.harness.tables import report_text


# ----- the report -------------------------------------------------------------------------------
def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A Markdown table."""
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(str(v) for v in row) + " |" for row in rows),
    ]


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def section_dying(results: list[dict]) -> list[str]:
    if not results:
        return []
    r0 = results[0]
    lines = [
        f"## 1. Clients dying mid-round (runtime=local, {r0['nodes']} SuperNodes, "
        f"{len(r0['participants'])} rounds, mnist5k + cnn)",
        "",
        *table(
            [
                "run",
                "exit",
                "rounds",
                "kills",
                "restarts",
                "state restores",
                "final acc",
                "leftovers",
            ],
            [
                [
                    r["name"],
                    r["exit"],
                    r["rounds"],
                    len(r["kills"]),
                    r["restarts"],
                    r["restores"],
                    _pct(r["accuracy"]),
                    r["leftovers"],
                ]
                for r in results
            ],
        ),
    ]
    for r in results:
        killed = {k["round"]: k["partition"] for k in r["kills"]}
        lines += ["", f"{r['name']}, per round (killed partition / participants / failures / s):"]
        lines.append(
            ", ".join(
                f"r{i + 1}: {killed.get(i + 1, '-')} / {p} / {f} / {s:.1f}"
                for i, (p, f, s) in enumerate(
                    zip(r["participants"], r["failures"], r["round_seconds"], strict=False)
                )
            )
        )
    return lines


def section_server(local: dict | None, sims: list[dict]) -> list[str]:
    if not local and not sims:
        return []
    lines = ["## 2. The server dying"]
    if local:
        lines += [
            "",
            f"runtime=local, SCAFFOLD, 4 SuperNodes: SuperLink SIGKILLed in round "
            f"{local['killed_in_round']}; fl-run exited {local['first_exit']} "
            f'("{local["first_message"]}"), {local["first_leftovers"]} processes left; '
            f"checkpoint at round {local['checkpoint_round']}. resume=true: exit "
            f"{local['exit']}, rounds {local['rounds'][0]}..{local['rounds'][-1]} in metrics.csv "
            f"({len(local['rounds'])} rows), final accuracy {_pct(local['accuracy'])}, "
            f"{local['resume_seconds']} s, {local['leftovers']} processes left.",
        ]
    if sims:
        lines += [
            "",
            "runtime=simulation (digits + mlp, 3 clients): fl-run SIGKILLed after the "
            "checkpoint of the round below, resumed; final model against the uninterrupted "
            "run's:",
            "",
            *table(
                [
                    "algorithm",
                    "killed after round",
                    "exit",
                    "rounds (straight, resumed)",
                    "max abs diff",
                    "leftovers",
                ],
                [
                    [
                        r["algorithm"],
                        r["killed_after"],
                        r["exit"],
                        r["rounds"],
                        f"{r['max_abs_diff']:.3g}",
                        r["leftovers"],
                    ]
                    for r in sims
                ],
            ),
        ]
    return lines


def section_hostile(results: list[dict], title: str) -> list[str]:
    if not results:
        return []
    return [
        title,
        "",
        *table(
            [
                "kind",
                "robust",
                "exit",
                "participants per round",
                "refusals",
                "final acc",
                "first reason",
            ],
            [
                [
                    r["kind"],
                    r["robust"],
                    r["exit"],
                    r["participants"],
                    r["refusals"],
                    _pct(r["accuracy"]),
                    r["reason"][:160],
                ]
                for r in results
            ],
        ),
    ]


def section_secrets(bundles: list[dict]) -> list[str]:
    if not bundles:
        return []
    lines = ["## 5. Secrets (fl-certs --bundles, 2 SuperNodes)", ""]
    for b in bundles:
        lines.append(
            f"- `{b['bundle']}`: {', '.join(b['files'])}; private keys: "
            f"{', '.join(b['private_keys']) or 'none'}"
        )
    return lines


def section_soak(result: dict | None, nodes: int, rounds: int) -> list[str]:
    if not result:
        return []
    lines = [
        f"## 6. Soak (runtime=local, {nodes} SuperNodes, {rounds} rounds, FedAvg, mnist5k)",
        "",
        f"exit {result['exit']}, {result['rounds']} rounds, seconds per round "
        f"{statistics.fmean(result['round_seconds'][1:]):.2f} (round 1: "
        f"{result['round_seconds'][0]:.2f}), {result['leftovers']} processes left.",
        "",
        "| process | RSS first → last (growth) | fds first → last | threads first → last |",
        "|---|---|---|---|",
    ]
    first, last = result["samples"][0], result["samples"][-1]
    groups: dict[str, list[str]] = {}
    for role in first:
        if role in last:
            group = role.split()[0] if role.split()[0] in ("SuperNode", "launcher") else role
            groups.setdefault(group, []).append(role)
    for group, roles in sorted(groups.items()):
        growth = [last[r]["rss"] / first[r]["rss"] - 1 for r in roles]
        worst = roles[int(np.argmax(growth))]
        peak = {
            key: max(sample[worst][key] for sample in result["samples"] if worst in sample)
            for key in ("fds", "threads")
        }
        label = group if len(roles) == 1 else f"{group}s ({len(roles)}; the worst)"
        lines.append(
            f"| {label} | {mib(first[worst]['rss'])} → {mib(last[worst]['rss'])} "
            f"({100 * max(growth):+.1f} %; median {100 * statistics.median(growth):+.1f} %) | "
            f"{first[worst]['fds']} → {last[worst]['fds']} (max {peak['fds']}) | "
            f"{first[worst]['threads']} → {last[worst]['threads']} (max {peak['threads']}) |"
        )
    return lines


def section_scale(results: list[dict]) -> list[str]:
    if not results:
        return []
    lines = [
        f"## 7. Simulated scale (runtime=simulation, mnist5k + cnn, "
        f"{max(r['sampled'] for r in results)} sampled a round)",
        "",
        *table(
            [
                "clients",
                "exit",
                "rounds",
                "peak PSS (whole tree)",
                "peak RSS sum",
                "s per round (after round 1)",
                "round 1 s",
                "leftovers",
            ],
            [
                [
                    r["clients"],
                    r["exit"],
                    r["rounds"],
                    mib(r["peak_pss"]),
                    mib(r["peak_rss_sum"]),
                    _num(r["seconds_per_round"], 2),
                    _num(r["first_round"], 1),
                    r["leftovers"],
                ]
                for r in results
            ],
        ),
    ]
    if len(results) == 2 and all(r["seconds_per_round"] for r in results):
        a, b = results
        lines += [
            "",
            f"From {a['clients']} to {b['clients']} clients: peak PSS x"
            f"{b['peak_pss'] / a['peak_pss']:.2f}, seconds per round x"
            f"{b['seconds_per_round'] / a['seconds_per_round']:.2f}.",
        ]
    return lines


def _num(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.2f} %"


def write_report(
    args: argparse.Namespace, results: dict, failed: list[str], header: list[str]
) -> None:
    sections = [
        header,
        section_dying(results.get("dying", [])),
        section_server(results.get("server_local"), results.get("server_sim", [])),
        section_hostile(
            results.get("hostile", []) + results.get("robust", []),
            "## 3. Hostile or broken replies (simulation, digits + mlp, 4 clients, "
            "partition 1 malicious, 6 rounds)",
        ),
        section_hostile(results.get("limits", []), "## 4. Message limits (an oversized reply)"),
        section_secrets(results.get("secrets", [])),
        section_soak(results.get("soak"), args.soak_nodes, args.soak_rounds),
        section_scale(results.get("scale", [])),
        ["## Measurements that failed", "", *failed] if failed else [],
    ]
    args.out.write_text(report_text(sections, args.notes))
