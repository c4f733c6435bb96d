"""The cases: clients and the server killed, hostile replies, message limits, secrets, soak,
scale."""

from __future__ import annotations

import os
import random
import re
import signal
import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.harness.fl_run import tool_env
from benchmarks.harness.process_tree import PeakMemory
from benchmarks.reliability.processes import (
    DIGITS,
    FL_CERTS,
    MNIST,
    Run,
    env_for,
    kill_all,
    node_log,
    role_of,
    round_seconds,
    status_of,
    supernodes,
)
from fl_system.records.checkpoint import load_checkpoint


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
