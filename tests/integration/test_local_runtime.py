"""runtime=local: a real SuperLink and SuperNodes over gRPC, started by the CLI.

Starting a federation per run is slow, so only FedGSNR (FedAvg with a statistics exchange
before training), EFL with compression both ways and TACO with four SuperNodes (one a
freeloader) run here; every other algorithm runs over gRPC on one shared hand-started
federation in test_algorithms_grpc.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fl_system.learning.codecs import kept_count
from fl_system.learning.golomb import golomb_position_bits
from fl_system.records.checkpoint import load_checkpoint
from fl_system.records.results import MetricsLog
from fl_system.runtime.launch.processes import alive, descendants
from tests.integration.conftest import (
    QUICK,
    ForkedRun,
    check_two_round_run,
    interrupt_when,
    run_cli,
    start_fl_run,
    supernode_of,
)

pytestmark = pytest.mark.integration


def test_two_rounds_over_grpc(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """fl-run starts, uses and tears down its own federation; the run directory is complete.

    FedGSNR: each round asks both clients for gradient statistics, then trains each its own
    number of steps; together they run 2 x E_const steps.
    """
    run_dir = tmp_path / "run"
    result = run_cli(
        [
            "algorithm=fedgsnr", "train.local_steps=6", *QUICK, "num_rounds=2",
            f"hydra.run.dir={run_dir}",
        ],
        cli_env,
    )  # fmt: skip
    check_two_round_run(result, run_dir)
    for row in MetricsLog(run_dir / "metrics.csv").rows():
        steps = [int(row[f"steps_{pid}"]) for pid in range(2)]
        assert sum(steps) == 12 and min(steps) >= 1, row
        assert all(float(row[f"{key}_{pid}"]) > 0 for key in ("n_opt", "gsnr") for pid in range(2))
        # the statistics exchange moved about two models up per client (mean and variance)
        assert int(row["bytes_up_gsnr"]) > 1.9 * int(row["bytes_up_train"])
        exchanges = int(row["bytes_up_gsnr"]) + int(row["bytes_up_train"])
        handshakes = int(row["bytes_up"]) - exchanges  # counted into round 1
        assert handshakes >= 0 if row["round"] == "1" else handshakes == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary["contribution"]) == {"0", "1"}
    # The SuperNodes really ran as separate processes and logged their messages.
    logs = run_dir / "logs"
    for pid in range(2):
        assert "ClientApp task" in (logs / f"supernode-{pid}.log").read_text()


def test_sigterm_mid_run_leaves_no_process(tmp_path: Path, cli_env: dict[str, str]) -> None:
    run_dir = tmp_path / "run"
    stopped = interrupt_when(
        [*QUICK, "num_rounds=50", f"hydra.run.dir={run_dir}"],
        cli_env,
        ready=(run_dir / "metrics.csv").exists,  # the federation is up and training
        sig=signal.SIGTERM,
    )
    # SuperLink, 2 SuperNodes, flwr run, and their helpers were running.
    assert len(stopped.process_tree) >= 4
    assert stopped.returncode == 143
    assert "terminated" in stopped.stderr
    assert [pid for pid in stopped.process_tree if alive(pid)] == []


FRAMING = 5000  # bytes a reply carries beyond its encoded arrays (about 3.9 kB measured)


def test_efl_with_sparse_ternary_both_ways_moves_a_fraction_of_dense_bytes(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """EFL over gRPC with st at q = 1/100 up and down and top-k u, v (fisher_comm=topk): in
    round 2 each reply carries the ST update (spec 2.9's Golomb bits) and the k largest u with
    their v (two float32 and a Golomb-coded position each) and its framing, so the bytes up are
    below dense FedAvg's 32 bits per parameter per client by that ratio (more than 15x); so
    are the bytes down (one broadcast, U and V), the clients being in sync after round 1."""
    run_dir = tmp_path / "run"
    q = 0.01
    codecs = [f"compression.{d}{s}" for d in ("up", "down") for s in ("=st", f".q={q}")]
    efl = ["algorithm=efl", "algorithm.fisher_comm=topk", f"algorithm.fisher_q={q}"]
    result = run_cli([*efl, *codecs, *QUICK, "num_rounds=2", f"hydra.run.dir={run_dir}"], cli_env)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = MetricsLog(run_dir / "metrics.csv").rows()
    assert [(r["participants"], r["failures"]) for r in rows] == [("2", "0")] * 2
    model = load_checkpoint(run_dir / "checkpoint.npz").model
    dense = 2 * sum(4 * v.size for v in model.values())  # FedAvg: two float32 models a way
    kept = [(kept_count(v.size, q), v.size) for v in model.values()]
    # per client: k values of u and of v, k Golomb-coded positions (spec 2.9's mean)
    fisher = 2 * sum(k * (8 + golomb_position_bits(k / n) / 8) for k, n in kept)
    row = rows[1]
    payload = int(row["update_bits_golomb"]) / 8 + fisher
    expected = dense / (payload + 2 * FRAMING)
    assert expected > 15  # about 33 on the payload alone, for the digits MLP
    framing = int(row["bytes_up"]) - int(row["update_bytes_up"]) - fisher
    assert 0 < framing < 2 * FRAMING  # records, layouts, metrics, Flower's object headers
    assert dense / int(row["bytes_up"]) > expected
    assert dense / int(row["bytes_down"]) > expected


def test_taco_expels_an_echoing_freeloader_and_carries_on(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Four SuperNodes with two labels each, partition 3 echoing the last global update: it
    uploads nothing in round 1, then a copy of the consensus, scores alpha >= 0.6 in rounds 2
    and 3 and is expelled after round 3 (lam = 2); round 4 trains the other three."""
    run_dir = tmp_path / "run"
    taco = ["algorithm=taco", "algorithm.lam=2", "train.local_steps=10", "partition=label2"]
    freeloader = ["clients.freeloaders.ids=[3]", "clients.freeloaders.kind=echo"]
    quick = [*QUICK, "num_clients=4", "train.batch_size=32", "num_rounds=4"]
    result = run_cli([*taco, *freeloader, *quick, f"hydra.run.dir={run_dir}"], cli_env)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = MetricsLog(run_dir / "metrics.csv").rows()
    assert [r["participants"] for r in rows] == ["4", "4", "4", "3"]
    assert [r["expelled_now"] for r in rows] == ["", "", "3", ""]
    assert float(rows[0]["alpha_3"]) == 0.0  # a zero update the first time
    for row in rows[1:3]:
        benign = [float(row[f"alpha_{pid}"]) for pid in range(3)]
        assert float(row["alpha_3"]) >= 0.6 > max(benign), row
    assert rows[3]["alpha_3"] == "" and float(rows[3]["correction_0"]) < 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [(e["partition"], e["round"]) for e in summary["expelled"]] == [(3, 3)]
    server_log = (run_dir / "logs" / "serverapp.log").read_text()
    assert "partition 3 expelled as a freeloader" in server_log


def test_a_supernode_killed_mid_round_is_restarted_and_the_run_goes_on(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """SCAFFOLD on three SuperNodes; partition 0's is SIGKILLed while it trains round 2. The
    SuperLink notices the dead node by its heartbeat within seconds, so round 2 ends without
    it long before round_timeout; fl-run starts the node again (same partition, state dir and
    log), it trains again from its saved c_i, the run completes and leaves no process."""
    run_dir, log0 = tmp_path / "run", tmp_path / "run" / "logs" / "supernode-0.log"
    env = {**cli_env, "FL_STATE_DIR": str(tmp_path / "state")}
    args = [*QUICK, "num_clients=3", "algorithm=scaffold", "num_rounds=8", "round_timeout=120"]
    proc = _fl_run_in_background([*args, f"hydra.run.dir={run_dir}"], env)
    seen: set[int] = set()
    try:
        deadline = _wait_until(
            proc, lambda: log0.exists() and log0.read_text().count("Receiving: train message") >= 2
        )
        seen |= descendants(proc.pid)
        node = supernode_of(0, seen)
        assert node is not None
        os.kill(node, signal.SIGKILL)
        while proc.poll() is None:
            seen |= descendants(proc.pid)
            assert time.monotonic() < deadline + 120, "the run did not end"
            time.sleep(0.5)
        output = proc.stdout.read() if proc.stdout else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output[-3000:]
    assert "supernode 0 exited with code -9; started again" in output
    rows = MetricsLog(run_dir / "metrics.csv").rows()
    assert [r["round"] for r in rows] == [str(r) for r in range(1, 9)]
    assert int(rows[1]["failures"]) >= 1 and not float(rows[1]["weight_0"] or 0)
    round_2 = float(rows[1]["wall_seconds"]) - float(rows[0]["wall_seconds"])
    assert round_2 < 30, f"round 2 waited {round_2:.1f} s for the dead node"
    assert any(float(r["weight_0"] or 0) > 0 for r in rows[2:]), "partition 0 never came back"
    assert "restored client state 'scaffold-c-i'" in log0.read_text()
    assert [pid for pid in seen if alive(pid)] == []


def test_one_clientapp_launcher_serves_every_node_and_its_death_ends_the_run(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The local federation imports torch once: one launcher, fl-run's child, forks every
    node's ClientApps (each writes to its node's log). Killing it fails the run at once with
    its name, the saved rounds and the resume command, and leaves no process."""
    run_dir = tmp_path / "run"
    proc = _fl_run_in_background([*QUICK, "num_rounds=50", f"hydra.run.dir={run_dir}"], cli_env)
    seen: set[int] = set()
    try:
        _wait_until(proc, lambda: len(MetricsLog(run_dir / "metrics.csv").rows()) >= 2)
        seen |= descendants(proc.pid)
        launchers = [
            pid for pid in seen if b"fl_system.runtime.supernode.launcher" in _cmdline(pid)
        ]
        direct = [pid for pid in launchers if _parent(pid) == proc.pid]
        assert len(direct) == 1, launchers  # one launcher; the rest are its ClientApps
        for partition in range(2):
            node_log = (run_dir / "logs" / f"supernode-{partition}.log").read_text()
            assert f"[launcher {direct[0]}] ClientApp task" in node_log
        os.kill(direct[0], signal.SIGKILL)
        output, _ = proc.communicate(timeout=60)
        seen |= descendants(proc.pid)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, output[-3000:]
    assert "clientapp launcher exited with code -9" in output
    assert "resume=true" in output
    time.sleep(1)
    assert [pid for pid in seen if alive(pid)] == []


def _fl_run_in_background(args: list[str], env: dict[str, str]) -> ForkedRun | subprocess.Popen:
    return start_fl_run(args, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _wait_until(proc: subprocess.Popen, reached: Callable[[], bool], timeout: float = 180) -> float:
    """Poll until round 2 is `reached` while fl-run runs; returns the deadline used."""
    deadline = time.monotonic() + timeout
    while not reached():
        assert proc.poll() is None and time.monotonic() < deadline, "round 2 never reached"
        time.sleep(0.01)
    return deadline


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None
