"""Every algorithm over real gRPC, submitted one run after another to one shared federation.

Starting a SuperLink and two SuperNodes costs more than a two-round run of the quick config,
so the federation is started once per module (as a user starts one by hand) and each
algorithm is a separate `fl-run runtime=remote` against it. Sharing is safe: every run gets a
new run id, and client state (SCAFFOLD's c_i, FedDyn's and MOON's) is keyed by it. Pytest runs
a module's tests one at a time, so runs never overlap on the federation.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fl_system.cli import CONF_DIR
from fl_system.records.results import MetricsLog
from server_app.strategies.fedcat_math import ChainSchedule
from tests.algorithms import ASYNCHRONOUS
from tests.integration.conftest import (
    QUICK,
    HandStartedFederation,
    check_two_round_run,
    env_in,
    run_cli,
    start_fl_run,
)
from tests.integration.flower_app import LOOP_APP, write_app

pytestmark = pytest.mark.integration

# Every shipped algorithm whose messages or client state differ through fl-run (FedGSNR's two
# exchanges and TACO's freeloader run in test_local_runtime.py; FedAvg and FedDisco, with
# TACO, in a Flower app of one's own below; EFL with its compressor on the uplink; FedAdam
# with Disco's weights, the adaptive step on their average, for FedOpt's three rules), plus a
# composition of both add-ons with an algorithm that sends and returns extra arrays.
# FedAdagrad and FedYogi (FedAdam's messages and server, another step), FedProx (FedAvg's
# messages, a local term) and FoolsGold (FedAvg's messages, server-side weights) send
# nothing the runs here do not; they run under Flower's start (test_flower_app.py) and in
# simulation.
SAME_WIRE = ("fedadagrad", "fedyogi", "fedprox", "foolsgold")
# FedBuff and FedAsync have no rounds: FedAsync runs below, FedBuff in test_asynchronous.py
ALGORITHMS = {
    path.stem: [f"algorithm={path.stem}"]
    for path in sorted((CONF_DIR / "algorithm").glob("*.yaml"))
    if path.stem not in ("fedgsnr", "taco", "fedavg", "feddisco", *SAME_WIRE, *ASYNCHRONOUS)
} | {
    "efl": ["algorithm=efl", "compression.up=st", "compression.up.q=0.05"],
    "fedcat": ["algorithm=fedcat", "algorithm.k=2"],  # two copies: both nodes, both rounds
    "fedadam": ["algorithm=fedadam", "algorithm.disco.enabled=true"],
    "scaffold+disco+gsnr": [
        "algorithm=scaffold",
        "algorithm.disco.enabled=true",
        "algorithm.gsnr.enabled=true",
        "train.local_steps=4",
    ],
}


@pytest.fixture(scope="module")
def federation_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("shared-federation")


@pytest.fixture(scope="module")
def shared_env(federation_root: Path) -> dict[str, str]:
    """One environment for the federation and its runs: own cache, client state, FLWR_HOME."""
    env = env_in(federation_root)
    env["FL_STATE_DIR"] = str(federation_root / "node-state")
    env["FLWR_HOME"] = str(federation_root / "flwr-home")
    return env


@pytest.fixture(scope="module")
def federation(
    federation_root: Path, shared_env: dict[str, str]
) -> Iterator[HandStartedFederation]:
    """A SuperLink and two fl-supernodes, started once for all the runs of this module."""
    federation = HandStartedFederation(federation_root, shared_env)
    try:
        federation.start_superlink()
        for pid in range(2):
            federation.start_supernode(pid, 2, f"supernode-{pid}.log")
        yield federation
    finally:
        federation.stop()


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_two_rounds_over_grpc(
    algorithm: str, federation: HandStartedFederation, shared_env: dict[str, str], tmp_path: Path
) -> None:
    """Two rounds of each algorithm across process boundaries, with the run's records."""
    node_logs = [federation.root / f"supernode-{pid}.log" for pid in range(2)]
    log_starts = [log.stat().st_size for log in node_logs]  # this run's lines follow these
    run_dir = tmp_path / "run"
    result = run_cli(
        [
            *ALGORITHMS[algorithm], *QUICK, "num_rounds=2", *federation.remote_args(),
            f"hydra.run.dir={run_dir}",
        ],
        shared_env,
    )  # fmt: skip
    check_two_round_run(
        result, run_dir, weights="copy_weight_{}" if algorithm == "fedcat" else "weight_{}"
    )
    # Both SuperNodes ran this run's ClientApps in their own processes, and are still up.
    for log, start in zip(node_logs, log_starts, strict=True):
        with open(log, "rb") as handle:
            handle.seek(start)
            assert b"ClientApp task" in handle.read(), log
    assert federation.procs.first_dead() is None, "a process of the shared federation died"
    if algorithm == "fedcat":  # the chains' devices are the schedule's
        schedule = ChainSchedule(num_devices=2, k=2, greedy_prob=0.5, regroup_every=1, seed=0)
        rows = MetricsLog(run_dir / "metrics.csv").rows()
        assert [[int(r["copy_0"]), int(r["copy_1"])] for r in rows] == [
            schedule.devices(rnd) for rnd in (1, 2)
        ]


def test_fedasync_steps_as_replies_reach_the_server_over_grpc(
    federation: HandStartedFederation, shared_env: dict[str, str], tmp_path: Path
) -> None:
    """runtime=remote: both nodes in flight, a server step per reply in the order the replies
    come (the wall clock), each later than the one before."""
    run_dir = tmp_path / "run"
    args = ["algorithm=fedasync", "async.concurrency=2", *QUICK, "num_rounds=4"]
    result = run_cli([*args, *federation.remote_args(), f"hydra.run.dir={run_dir}"], shared_env)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = MetricsLog(run_dir / "metrics.csv").rows()
    assert [(r["round"], r["participants"], r["failures"]) for r in rows] == [
        (str(step), "1", "0") for step in range(1, 5)
    ]
    clock = [float(r["wall_clock"]) for r in rows]
    assert clock == sorted(clock) and clock[0] > 0 and "virtual_clock" not in rows[0]
    assert float(rows[-1]["test_accuracy"]) > 0.2  # ten classes: 0.1 by chance


def test_a_run_stopped_with_flwr_stop_says_so_and_how_to_resume(
    federation: HandStartedFederation, shared_env: dict[str, str], tmp_path: Path
) -> None:
    """`flwr stop` on a running fl-run: fl-run exits 1 saying the run was stopped from outside,
    which rounds are saved and how to continue, in one plain line."""
    run_dir = tmp_path / "run"
    args = [*QUICK, "num_rounds=500", *federation.remote_args(), f"hydra.run.dir={run_dir}"]
    proc = start_fl_run(args, shared_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        log, deadline, found = run_dir / "logs" / "serverapp.log", time.monotonic() + 120, None
        while time.monotonic() < deadline and proc.poll() is None:
            text = log.read_text(errors="replace") if log.exists() else ""
            found = re.search(r"Successfully started run (\d+)", text)
            if found and "round 2/500" in text:
                break
            time.sleep(0.2)
        assert found is not None and proc.poll() is None, "the run did not get going"
        home = tmp_path / "flwr-home"
        home.mkdir()
        (home / "config.toml").write_text(
            '[superlink]\ndefault = "fed"\n\n[superlink.fed]\n'
            f'address = "127.0.0.1:{federation.port}"\ninsecure = true\n'
        )
        stop_env = {**shared_env, "FLWR_HOME": str(home)}
        subprocess.run(
            ["flwr", "stop", found.group(1), "fed"], env=stop_env, check=True, timeout=60
        )
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    (line,) = [x for x in err.splitlines() if "error" in x]
    assert line.startswith(
        f"fl-run: error: Flower run {found.group(1)} was stopped from outside (flwr stop); "
        "rounds up to "
    )
    assert f"resume=true hydra.run.dir={run_dir}" in line and "\x1b" not in err


def test_a_flower_app_of_ones_own_runs_fedavg_feddisco_and_taco(
    federation: HandStartedFederation, shared_env: dict[str, str], tmp_path: Path
) -> None:
    """`flwr run` of a stock Flower app whose ServerApp calls Flower's `strategy.start` for
    FedAvg, FedDisco and TACO in turn, on the SuperNodes fl-run uses: each trains two rounds
    over gRPC and beats its initial model."""
    taco = ["algorithm=taco", "train.local_steps=20", "algorithm.lam=6"]
    cases = {
        "fedavg": [*QUICK, "num_rounds=2"],
        "feddisco": [*QUICK, "num_rounds=2", "algorithm=feddisco"],
        "taco": [*QUICK, "num_rounds=2", *taco],
    }
    app = write_app(tmp_path / "app", LOOP_APP)
    cases_file = tmp_path / "cases.json"
    cases_file.write_text(json.dumps(cases))
    home = tmp_path / "flwr-home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[superlink]\ndefault = "fed"\n\n[superlink.fed]\n'
        f'address = "127.0.0.1:{federation.port}"\ninsecure = true\n'
    )
    done = subprocess.run(
        ["flwr", "run", str(app), "fed", "--stream", "--run-config", f'cases-file="{cases_file}"'],
        env={**shared_env, "FLWR_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert sorted(results) == ["fedavg", "feddisco", "taco"], done.stdout[-3000:]
    for name, got in results.items():
        assert got["is_flower_strategy"] and got["train_rounds"] == [1, 2], name
        assert got["accuracy"]["2"] > got["accuracy"]["0"] + 0.2, (name, got["accuracy"])
    assert federation.procs.first_dead() is None, "a process of the shared federation died"
