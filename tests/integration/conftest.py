"""Runs the real `fl-run` CLI as a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from fl_system.data.cache_root import CACHE_ENV
from fl_system.learning.devices import thread_env
from fl_system.records.results import METRIC_COLUMNS, MetricsLog
from fl_system.runtime.launch.ports import free_port, port_open
from fl_system.runtime.launch.processes import ProcessGroup, descendants, tool_env
from tests.algorithms import ASYNCHRONOUS
from tests.integration.fl_run_fork import FL_RUN, ForkedRun, start_fl_run
from tests.node_polling import SUITE_POLLING

__all__ = ["FL_RUN", "ForkedRun", "start_fl_run"]

# Small and fast: 8x8 digits, an MLP, two clients.
QUICK = ["dataset=digits", "model=mlp", "num_clients=2", "train.batch_size=64"]


def env_in(root: Path) -> dict[str, str]:
    """fl-run's environment with a private partition cache under `root`."""
    env = dict(os.environ)
    env[CACHE_ENV] = str(root / "node-cache")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


@pytest.fixture(scope="session")
def worker_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("node-cache")


@pytest.fixture
def cli_env(worker_cache: Path, tmp_path: Path) -> dict[str, str]:
    """fl-run's environment, with one dataset and partition cache per test worker, as a
    user's runs share ~/.cache/fl_system: entries are keyed by what they hold and written
    atomically, so runs may share them (the first run of a configuration in a worker fills
    it; each later run skips ~0.5 s of parsing and partitioning)."""
    return {**env_in(tmp_path), CACHE_ENV: str(worker_cache)}


def run_cli(
    args: list[str], env: dict[str, str], timeout: float = 240, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`fl-run <args>` to its end, its output captured (as `subprocess.run`)."""
    proc = start_fl_run(args, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    return subprocess.CompletedProcess([FL_RUN, *args], proc.wait(), out, err)


SUMMARY_KEYS = {
    "final_accuracy",
    "best_accuracy",
    "rounds",
    "rounds_to_target",
    "seconds_to_target",
    "bytes_up",
    "bytes_down",
    "wall_seconds",
}
# The quick config's MLP in float32 bytes: what each client receives and sends per round.
MLP_BYTES = 4 * (64 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10)


def check_two_round_run(
    result: subprocess.CompletedProcess[str], run_dir: Path, *, weights: str = "weight_{}"
) -> None:
    """What a successful 2-round, 2-client run of the quick config leaves behind; `weights`
    names the columns of round 2's averaging weights (FedCat weighs copies, not clients)."""
    assert result.returncode == 0, result.stderr[-3000:]
    assert "final accuracy" in result.stdout
    assert f"run directory: {run_dir}" in result.stdout
    for name in ("config.yaml", "metrics.csv", "summary.json", "curve.png", "checkpoint.npz"):
        assert (run_dir / name).is_file(), name
    rows = MetricsLog(run_dir / "metrics.csv").rows()
    assert [r["round"] for r in rows] == ["1", "2"]
    assert set(METRIC_COLUMNS) <= set(rows[0])
    assert all(r["participants"] == "2" and r["failures"] == "0" for r in rows)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary) >= SUMMARY_KEYS
    assert summary["rounds"] == 2 and 0.0 <= summary["final_accuracy"] <= 1.0
    # Every aggregation weight is recorded, and they sum to one.
    assert sum(float(rows[1][weights.format(i)]) for i in range(2)) == pytest.approx(1.0)
    # One clock for training time: the round lines in the server log, metrics.csv's
    # wall_seconds (from round 1's start) and fl-run's last line agree; "in all" adds start-up.
    lines = re.findall(
        r"round (\d+)/2 .*\| ([0-9.]+) s this round \| ([0-9.]+) s training",
        (run_dir / "logs" / "serverapp.log").read_text(),
    )
    assert [int(r) for r, _, _ in lines] == [1, 2]
    ended = 0.0  # a round's seconds are its row's wall_seconds less the previous row's
    for (_, this_round, training), row in zip(lines, rows, strict=True):
        wall = float(row["wall_seconds"])
        assert float(training) == pytest.approx(wall, abs=0.051)
        assert float(this_round) == pytest.approx(wall - ended, abs=0.052)
        ended = wall
    total = re.search(r"after 2 rounds: ([0-9.]+) s training, ([0-9.]+) s in all", result.stdout)
    assert total is not None, result.stdout
    assert float(total.group(1)) == pytest.approx(summary["wall_seconds"], abs=0.051)
    assert float(total.group(2)) > float(total.group(1))
    # Real bytes crossed gRPC: at least the MLP's float32 weights, each way, per client.
    assert int(rows[1]["bytes_down"]) >= 2 * MLP_BYTES
    assert int(rows[1]["bytes_up"]) >= 2 * MLP_BYTES


@dataclass(frozen=True)
class Interrupted:
    returncode: int
    stderr: str
    process_tree: set[int]  # every descendant alive just before the signal


def interrupt_when(
    args: list[str],
    env: dict[str, str],
    ready: Callable[[], bool],
    sig: int,
    timeout: float = 300,
) -> Interrupted:
    """Start fl-run, wait until `ready()`, record its process tree, send `sig`, wait for exit."""
    proc = start_fl_run(args, env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, f"not ready within {timeout} s"
            time.sleep(0.2)
        tree = descendants(proc.pid)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(1)  # let the kernel reap what was killed
    return Interrupted(proc.returncode, err, tree)


class HandStartedFederation:
    """A SuperLink and SuperNodes started the way a user starts them on separate machines."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        # One torch thread per ClientApp, as runtime=local sets: nodes share this machine's cores.
        self.env = tool_env({**thread_env(1), **SUITE_POLLING, **env})
        self.procs = ProcessGroup()
        self.port = free_port()  # the SuperLink's one port: SuperNodes and operators
        self.nodes: dict[int, subprocess.Popen] = {}

    def start_superlink(self, flower: bool = False) -> None:
        """`fl-server` (its launcher forks each run's ServerApp), or with `flower` Flower's own
        `flower-superlink` (its SuperExec starts a `flwr-serverapp` per run)."""
        if flower:
            cmd = [
                "flower-superlink", "--insecure",
                "--host", "127.0.0.1", "--port", str(self.port),
                "--disable-runtime-dependency-installation",
            ]  # fmt: skip
        else:
            cmd = [
                "fl-server", "--insecure",
                "--address", f"127.0.0.1:{self.port}",
                "--state-dir", str(self.root / "superlink-state"),
            ]  # fmt: skip
        self.procs.start("superlink", cmd, self.root / "superlink.log", self.env)
        deadline = time.monotonic() + 60
        while not port_open("127.0.0.1", self.port):
            assert self.procs.first_dead() is None, "the SuperLink exited during start-up"
            assert time.monotonic() < deadline, "SuperLink not up after 60 s"
            time.sleep(0.2)

    def start_supernode(
        self, partition_id: int, num_partitions: int, log_name: str, node_config: str = ""
    ) -> subprocess.Popen:
        """An `fl-supernode`; `node_config` adds entries (e.g. `data-dir=...`) to its config."""
        config = f"partition-id={partition_id} num-partitions={num_partitions} {node_config}"
        self.nodes[partition_id] = self.procs.start(
            f"supernode {partition_id}",
            [
                "fl-supernode", "--insecure",
                "--superlink", f"127.0.0.1:{self.port}",
                "--node-config", config.strip(),
                "--port", str(free_port()),
            ],
            self.root / log_name,
            self.env,
        )  # fmt: skip
        return self.nodes[partition_id]

    def stop_supernode(self, partition_id: int) -> None:
        proc = self.nodes.pop(partition_id)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
        self.procs.procs = [(n, p) for n, p in self.procs.procs if p is not proc]

    def remote_args(self) -> list[str]:
        return [
            "runtime=remote",
            f"runtime.address=127.0.0.1:{self.port}",
            "runtime.insecure=true",
        ]

    def stop(self) -> None:
        self.procs.stop()


def holding(folder: Path) -> list[int]:
    """Processes with a file under `folder` open (the engine writes each member's log)."""
    pids = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            targets = [os.readlink(fd) for fd in fd_dir.iterdir()]
        except OSError:  # gone, or not ours to read
            continue
        if any(t.startswith(f"{folder}/") for t in targets):
            pids.append(int(fd_dir.parent.name))
    return pids


def run_sweep(
    args: list[str], sweep_dir: Path, env: dict[str, str], timeout: float = 400
) -> list[Path]:
    """A `-m` sweep that must succeed and leave no process behind; its members' directories."""
    result = run_cli(["-m", *args, f"hydra.sweep.dir={sweep_dir}"], env, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    assert not holding(sweep_dir), "a process of the sweep outlived fl-run"
    return sorted(p for p in sweep_dir.iterdir() if p.is_dir())


def run_every_algorithm(common: list[str], tmp_path: Path, env: dict[str, str]) -> list[Path]:
    """Every conf/algorithm option with `common` for 2 rounds: one warm sweep, and TACO apart
    (its honest clients agree in round 1, and in a 2-round run one strike expels, lam =
    ceil(2 / 5): every client would be; its warm-up round gives no strikes, README's TACO).
    Returns every run's directory, each checked to hold rounds 1 and 2."""
    from fl_system.config.compose import CONF_DIR
    from fl_system.config.overrides import options

    # FedBuff and FedAsync need a virtual clock, which these runs do not set (their own runs:
    # test_asynchronous.py)
    algorithms = [a for a in options(CONF_DIR, "algorithm") if a not in ASYNCHRONOUS]
    others = ",".join(a for a in algorithms if a != "taco")
    members = run_sweep([*common, f"algorithm={others}"], tmp_path / "sweep", env)
    taco = run_cli(
        [*common, "algorithm=taco", "algorithm.warmup_rounds=1", f"hydra.run.dir={tmp_path / 't'}"],
        env,
    )
    assert taco.returncode == 0, taco.stderr[-3000:]
    members.append(tmp_path / "t")
    assert len(members) == len(algorithms) >= 17
    for member in members:
        rows = MetricsLog(member / "metrics.csv").rows()
        assert [int(r["round"]) for r in rows] == [1, 2], member.name
    return members


def supernode_of(partition: int, pids: set[int]) -> int | None:
    """The pid of the fl-supernode serving `partition` among `pids`."""
    for pid in pids:
        try:  # its arguments, or the title a forked node shows (the same words)
            argv = re.split(rb"[\0 ]", Path(f"/proc/{pid}/cmdline").read_bytes())
        except OSError:
            continue
        if any(a.endswith(b"fl-supernode") for a in argv[:2]) and any(
            a == f"partition-id={partition}".encode() for a in argv
        ):
            return pid
    return None


def kill_supernodes_mid_run(
    args: list[str], env: dict[str, str], kills: Mapping[int, Callable[[], bool]]
) -> tuple[int, str]:
    """fl-run with `args`; SIGKILL the fl-supernode of each partition in `kills` once its
    predicate holds (fl-run starts it again); fl-run's exit code and output."""
    proc = start_fl_run(args, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline, waiting = time.monotonic() + 180, dict(kills)
        while waiting:
            assert proc.poll() is None and time.monotonic() < deadline, "the run never got there"
            for partition, ready in list(waiting.items()):
                if ready():
                    node = supernode_of(partition, descendants(proc.pid))
                    assert node is not None
                    os.kill(node, signal.SIGKILL)
                    del waiting[partition]
            time.sleep(0.02)
        output, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, output
