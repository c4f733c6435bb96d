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
import csv
import datetime as dt
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.harness.fl_run import ROOT, tool_env
from benchmarks.harness.paths import report_path
from benchmarks.harness.process_tree import PeakMemory, tree
from benchmarks.harness.tables import machine_line
from fl_system.checkpoint import load_checkpoint
from fl_system.launch.processes import alive

FL_RUN = str(Path(sys.executable).parent / "fl-run")
FL_CERTS = str(Path(sys.executable).parent / "fl-certs")
MNIST = ["dataset=mnist5k", "model=cnn", "train.batch_size=32"]
DIGITS = ["dataset=digits", "model=mlp", "train.batch_size=64"]
RUN_TIMEOUT = 1800


# ----- running fl-run and watching its processes ------------------------------------------------
@dataclass
class Run:
    """One fl-run: its process, output file, and every descendant seen while it ran."""

    run_dir: Path
    args: list[str]
    env: dict[str, str]
    proc: subprocess.Popen = field(init=False)
    seen: set[int] = field(default_factory=set)
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.run_dir.parent.mkdir(parents=True, exist_ok=True)
        self.output = self.run_dir.parent / f"{self.run_dir.name}.out"
        with self.output.open("a") as out:
            self.proc = subprocess.Popen(
                [FL_RUN, *self.args, f"hydra.run.dir={self.run_dir}"],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def look(self) -> set[int]:
        """Remember (and return) the processes under fl-run now."""
        now = tree(self.proc.pid) if self.proc.poll() is None else set()
        self.seen |= now
        return now

    def wait(self, timeout: float = RUN_TIMEOUT) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            self.look()
            if time.monotonic() > deadline:
                self.proc.send_signal(signal.SIGINT)
                self.proc.wait(timeout=120)
                break
            time.sleep(0.5)
        return self.proc.returncode

    def rows(self) -> list[dict[str, str]]:
        return metrics_rows(self.run_dir)

    def leftovers(self) -> list[int]:
        """Processes this run started that are still alive (after a grace to exit)."""
        deadline = time.monotonic() + 15
        while (left := [p for p in self.seen if alive(p)]) and time.monotonic() < deadline:
            time.sleep(0.5)
        return left

    def error_line(self) -> str:
        """fl-run's last 'fl-run: error' line."""
        text = self.output.read_text(errors="replace").splitlines()
        return next((x.split("\r")[-1] for x in reversed(text) if "fl-run: error" in x), "")

    def tail(self, lines: int = 3) -> str:
        text = self.output.read_text(errors="replace").splitlines()
        return " / ".join(line.split("\r")[-1].strip() for line in text[-lines:])


def metrics_rows(run_dir: Path) -> list[dict[str, str]]:
    """metrics.csv's whole rows (a line being written is left out)."""
    try:
        text = (run_dir / "metrics.csv").read_text()
    except OSError:
        return []
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    return list(csv.DictReader(text.splitlines()))


def round_seconds(rows: Sequence[dict[str, str]]) -> list[float]:
    """Each round's wall time (metrics.csv's wall_seconds counts from round 1's start)."""
    walls = [float(r["wall_seconds"]) for r in rows]
    return [b - a for a, b in zip([0.0, *walls], walls, strict=False)]


def kill_all(pids: set[int]) -> None:
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def supernodes(pids: set[int]) -> dict[int, int]:
    """partition id -> pid of its fl-supernode among `pids`."""
    found = {}
    for pid in pids:
        argv = cmdline(pid)
        if any(a.endswith("fl-supernode") for a in argv[:2]):
            for a in argv:
                if a.startswith("partition-id="):
                    found[int(a.split()[0].split("=")[1])] = pid
    return found


def role_of(pid: int) -> str | None:
    """SuperLink, ServerApp, 'SuperNode i', 'launcher of i' or None."""
    argv = cmdline(pid)
    text = " ".join(argv)
    if any(a.endswith("fl-superlink") for a in argv[:2]):
        return "SuperLink"
    if "flwr-serverapp" in text:
        return "ServerApp"
    if any(a.endswith("fl-supernode") for a in argv[:2]):
        part = next((a for a in argv if a.startswith("partition-id=")), "partition-id=?")
        return f"SuperNode {part.split()[0].split('=')[1]}"
    if "fl_system.supernode.launcher" in text:
        return "launcher"
    return None


def status_of(pid: int) -> dict[str, int] | None:
    """RSS (bytes), open file descriptors and threads of a live process."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    rss, threads = re.search(r"VmRSS:\s+(\d+)", status), re.search(r"Threads:\s+(\d+)", status)
    if rss is None or threads is None:  # a zombie
        return None
    return {"rss": int(rss.group(1)) * 1024, "fds": fds, "threads": int(threads.group(1))}


def node_log(run_dir: Path, partition: int) -> str:
    try:
        return (run_dir / "logs" / f"supernode-{partition}.log").read_text(errors="replace")
    except OSError:
        return ""


def env_for(work: Path, name: str) -> dict[str, str]:
    return tool_env({"FL_STATE_DIR": str(work / f"state-{name}"), "PYTHONUNBUFFERED": "1"})


def say(text: str) -> None:
    print(f"[reliability] {text}", flush=True)


# ----- 1: clients dying -------------------------------------------------------------------------
def clients_dying(work: Path, algorithm: str, *, kill: bool, rounds: int, nodes: int) -> dict:
    """A run of `rounds` rounds on `nodes` SuperNodes; with `kill`, during every round one
    random SuperNode is SIGKILLed once its train message has arrived."""
    name = f"dying-{algorithm}-{'kill' if kill else 'none'}"
    args = ["runtime=local", *MNIST, f"num_clients={nodes}", f"num_rounds={rounds}"]
    args += [f"algorithm={algorithm}", "round_timeout=120", "keep_client_state=true"]
    run = Run(work / name, args, env_for(work, name))
    rng = random.Random(0)
    kills: list[dict] = []
    for round_number in range(1, rounds + 1):
        if not kill:
            break
        while len(run.rows()) < round_number - 1 and run.proc.poll() is None:
            run.look()
            time.sleep(0.05)
        victim = _kill_one_training(run, rng, round_number)
        if victim is not None:
            kills.append(victim)
    code = run.wait()
    rows = run.rows()
    logs = [node_log(run.run_dir, p) for p in range(nodes)]
    return {
        "name": name,
        "nodes": nodes,
        "algorithm": algorithm,
        "exit": code,
        "rounds": len(rows),
        "round_seconds": round_seconds(rows),
        "participants": [int(r["participants"]) for r in rows],
        "failures": [int(r["failures"]) for r in rows],
        "accuracy": float(rows[-1]["test_accuracy"]) if rows else None,
        "kills": kills,
        "restarts": run.output.read_text().count("started again (same partition and state)"),
        "restores": sum(log.count("restored client state") for log in logs),
        "leftovers": len(run.leftovers()),
        "tail": run.tail(),
    }


def _kill_one_training(run: Run, rng: random.Random, round_number: int) -> dict | None:
    """SIGKILL a random SuperNode of this round once it has received its train message."""
    partitions = list(range(int(_arg(run.args, "num_clients"))))
    rng.shuffle(partitions)
    counts = {p: node_log(run.run_dir, p).count("Receiving: train message") for p in partitions}
    deadline = time.monotonic() + 60
    while run.proc.poll() is None and time.monotonic() < deadline:
        if len(run.rows()) >= round_number:
            return None  # the round ended before any chosen node trained
        nodes = supernodes(run.look())
        for p in partitions:
            if (
                p in nodes
                and node_log(run.run_dir, p).count("Receiving: train message") > counts[p]
            ):
                time.sleep(rng.uniform(0.0, 0.3))
                os.kill(nodes[p], signal.SIGKILL)
                at = time.monotonic() - run.started
                return {"round": round_number, "partition": p, "at": round(at, 1)}
        time.sleep(0.02)
    return None


def _arg(args: Sequence[str], key: str) -> str:
    return next(a.split("=", 1)[1] for a in reversed(args) if a.startswith(f"{key}="))


# ----- 2: the server dying ----------------------------------------------------------------------
SERVER_STATE = {  # algorithms with server state, and what each needs besides the quick config
    "feddisco": [],
    "scaffold": [],
    "feddyn": [],
    "fednova": [],
    "fedgsnr": ["train.local_steps=5"],
    "efl": [],
    "taco": ["train.local_steps=5", "algorithm.lam=6"],  # lam T/5 = 1 expels all 3 at once
    "fedacg": [],
    "foolsgold": [],
    "stem": [],
    "fedcat": ["algorithm.k=2", "train.local_steps=3"],
}


def server_dying_local(work: Path, kill_round: int, rounds: int) -> dict:
    """SCAFFOLD on 4 SuperNodes; the SuperLink is SIGKILLed during round `kill_round`."""
    name = "server-local"
    args = ["runtime=local", *MNIST, "num_clients=4", f"num_rounds={rounds}"]
    args += ["algorithm=scaffold", "round_timeout=120"]
    env = env_for(work, name)
    run = Run(work / name, args, env)
    while len(run.rows()) < kill_round - 1 and run.proc.poll() is None:
        run.look()
        time.sleep(0.05)
    time.sleep(1.0)  # into round kill_round
    link = next((p for p in run.look() if role_of(p) == "SuperLink"), None)
    killed_at = len(run.rows()) + 1
    if link is not None:
        os.kill(link, signal.SIGKILL)
    first_exit = run.wait()
    first_left = len(run.leftovers())
    saved = load_checkpoint(run.run_dir / "checkpoint.npz").round
    message = run.error_line()
    again = Run(work / name, [*args, "resume=true"], env)
    code = again.wait()
    rows = again.rows()
    return {
        "killed_in_round": killed_at,
        "first_exit": first_exit,
        "first_message": message,
        "first_leftovers": first_left,
        "checkpoint_round": saved,
        "exit": code,
        "rounds": [int(r["round"]) for r in rows],
        "accuracy": float(rows[-1]["test_accuracy"]) if rows else None,
        "resume_seconds": round(time.monotonic() - again.started, 1),
        "leftovers": len(again.leftovers()),
    }


def server_dying_simulation(work: Path, algorithm: str, kill_round: int, rounds: int) -> dict:
    """fl-run (with Ray) SIGKILLed in round `kill_round`, resumed; the final model against
    an uninterrupted run's."""
    args = ["runtime=simulation", *DIGITS, "num_clients=3", f"num_rounds={rounds}", "seed=5"]
    args += [f"algorithm={algorithm}", *SERVER_STATE[algorithm]]
    name = f"server-sim-{algorithm}"
    straight = Run(work / f"{name}-straight", args, env_for(work, f"{name}-straight"))
    straight_exit = straight.wait()
    env = env_for(work, name)
    killed = Run(work / name, args, env)
    while len(killed.rows()) < kill_round and killed.proc.poll() is None:
        killed.look()
        time.sleep(0.01)
    pids = killed.look()
    killed.proc.kill()
    killed.proc.wait()
    kill_all(pids)
    saved = load_checkpoint(killed.run_dir / "checkpoint.npz").round
    resumed = Run(work / name, [*args, "resume=true"], env)
    code = resumed.wait()
    a = load_checkpoint(straight.run_dir / "checkpoint.npz")
    b = load_checkpoint(killed.run_dir / "checkpoint.npz")
    diff = max(float(np.max(np.abs(a.model[k] - b.model[k]))) for k in a.model)
    return {
        "algorithm": algorithm,
        "straight_exit": straight_exit,
        "killed_after": saved,
        "exit": code,
        "rounds": (a.round, b.round),
        "max_abs_diff": diff,
        "leftovers": len(straight.leftovers()) + len(resumed.leftovers()),
    }


# ----- 3 and 4: hostile replies and message limits ----------------------------------------------
def hostile(
    work: Path, kind: str | None, robust: str = "mean", *, screen: bool = True, rounds: int = 6
) -> dict:
    """Partition 1 of 4 sends a `kind` reply every round (None: an honest run). Without
    `screen` the norm screen is off, leaving a scaled update to the robust aggregation."""
    args = ["runtime=simulation", *DIGITS, "num_clients=4", f"num_rounds={rounds}", "seed=1"]
    args += [f"aggregation.robust={robust.split()[0]}", *robust.split()[1:]]
    args += [] if screen else ["aggregation.norm_ratio=null"]
    if kind is not None:
        args += ["clients.malicious.ids=[1]", f"clients.malicious.kind={kind}"]
    robust_name = re.sub(r"[^A-Za-z0-9_]+", "-", robust.replace("aggregation.robust.", ""))
    name = f"hostile-{kind or 'honest'}-{robust_name}{'' if screen else '-unscreened'}"
    run = Run(work / name, args, env_for(work, name))
    code = run.wait()
    rows = run.rows()
    log = (run.run_dir / "logs" / "serverapp.log").read_text(errors="replace")
    reasons = [
        line.split(" dropped: ", 1)[1]
        for line in log.splitlines()
        if "(partition 1) dropped: " in line
    ]
    return {
        "kind": kind or "honest",
        "robust": robust if screen else f"{robust}, norm screen off",
        "exit": code,
        "participants": [int(r["participants"]) for r in rows],
        "accuracy": float(rows[-1]["test_accuracy"]) if rows else None,
        "refusals": len(reasons),
        "reason": reasons[0] if reasons else run.tail(1) if code else "",
        "bytes_up_round_1": int(rows[0]["bytes_up"]) if rows else None,
        "leftovers": len(run.leftovers()),
    }


# ----- 5: secrets -------------------------------------------------------------------------------
def secrets(work: Path) -> list[dict]:
    """fl-certs --bundles for two SuperNodes: each bundle's files and modes."""
    out = work / "certs"
    subprocess.run(
        [
            FL_CERTS,
            str(out / "all"),
            "--server-name",
            "superlink",
            "--supernodes",
            "2",
            "--bundles",
            str(out / "bundles"),
        ],
        check=True,
        capture_output=True,
        env=tool_env(),
    )
    bundles = []
    for folder in sorted(p for p in (out / "bundles").iterdir() if p.is_dir()):
        files = sorted(folder.rglob("*"))
        bundles.append(
            {
                "bundle": folder.name,
                "files": [f"{f.relative_to(folder)} ({f.stat().st_mode & 0o777:o})" for f in files],
                "private_keys": [f.name for f in files if f.name.endswith(".key")],
            }
        )
    return bundles


# ----- 6: soak ------------------------------------------------------------------------------------
def soak(work: Path, nodes: int, rounds: int) -> dict:
    """Every process's RSS, fds and threads at the end of each round."""
    args = ["runtime=local", *MNIST, f"num_clients={nodes}", f"num_rounds={rounds}"]
    args += ["round_timeout=300"]
    run = Run(work / "soak", args, env_for(work, "soak"))
    samples: list[dict[str, dict[str, int]]] = []
    while run.proc.poll() is None:
        if len(run.rows()) > len(samples):
            samples.append(_snapshot(run.look()))
        time.sleep(0.05)
    code = run.wait()
    return {
        "exit": code,
        "rounds": len(run.rows()),
        "round_seconds": round_seconds(run.rows()),
        "samples": samples,
        "leftovers": len(run.leftovers()),
    }


def _snapshot(pids: set[int]) -> dict[str, dict[str, int]]:
    by_role: dict[str, dict[str, int]] = {}
    for pid in pids:
        role = role_of(pid)
        stats = status_of(pid) if role else None
        if role and stats:
            role = f"{role} {pid}" if role == "launcher" else role
            by_role[role] = stats
    return by_role


# ----- 7: scale -------------------------------------------------------------------------------
def scale(work: Path, clients: int, sampled: int, rounds: int) -> dict:
    args = ["runtime=simulation", *MNIST, f"num_clients={clients}", f"num_rounds={rounds}"]
    args += [f"clients_per_round={sampled}", "partition=iid", "round_timeout=600"]
    run = Run(work / f"scale-{clients}", args, env_for(work, f"scale-{clients}"))
    peak = PeakMemory(run.proc.pid, interval=0.5)
    peak_rss = 0
    while run.proc.poll() is None:
        peak_rss = max(peak_rss, sum((status_of(p) or {"rss": 0})["rss"] for p in run.look()))
        time.sleep(0.5)
    pss = peak.stop()
    code = run.wait()
    seconds = round_seconds(run.rows())
    return {
        "clients": clients,
        "sampled": sampled,
        "exit": code,
        "rounds": len(seconds),
        "peak_pss": pss,
        "peak_rss_sum": peak_rss,
        "seconds_per_round": statistics.fmean(seconds[1:]) if len(seconds) > 1 else None,
        "first_round": seconds[0] if seconds else None,
        "leftovers": len(run.leftovers()),
    }


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


# ----- main -----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    if args.notes:
        sections.append(args.notes.read_text().splitlines())
    args.out.write_text("\n\n".join("\n".join(s) for s in sections if s) + "\n")


def _flags(argv: list[str] | None) -> str:
    given = sys.argv[1:] if argv is None else argv
    return (" " + " ".join(given)) if given else ""


if __name__ == "__main__":
    sys.exit(main())
