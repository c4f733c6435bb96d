"""A server killed with SIGKILL loses at most the rounds since its last checkpoint
(`checkpoint.every`); resumed, it runs them again to the uninterrupted run's model."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fl_system.records.checkpoint import checkpoint_round
from fl_system.runtime.launch.processes import alive, descendants
from tests.integration.conftest import QUICK, run_cli, start_fl_run
from tests.integration.resumed import assert_same_end, metrics_rows

pytestmark = pytest.mark.integration

ROUNDS = 30
ARGS = ["runtime=simulation", *QUICK, "num_clients=3", "algorithm=scaffold", "seed=5"]


def _clients_ahead(run_dir: Path, state: Path) -> bool:
    """A client saved state for a round the server has not checkpointed yet."""
    try:
        saved = (run_dir / "checkpoint.npz").stat().st_mtime_ns
        return any(f.stat().st_mtime_ns > saved for f in state.rglob("*.npz"))
    except OSError:  # a file replaced while looked at
        return False


def _saved_rounds(state: Path) -> list[int]:
    """The rounds of the clients' saved state files (`<name>.r<round>.npz`)."""
    found = (re.fullmatch(r".*\.r(\d+)\.npz", f.name) for f in state.rglob("*.npz"))
    return [int(m.group(1)) for m in found if m]


def _kill_when(args: list[str], env: dict[str, str], ready) -> None:
    """Start fl-run, and SIGKILL it and every process under it at once when `ready()`."""
    proc = start_fl_run(args, env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tree: list[int] = []
    try:
        deadline = time.monotonic() + 300
        while not ready():
            assert proc.poll() is None and time.monotonic() < deadline
            if not tree:
                tree = descendants(proc.pid)  # the engine and its workers: started once
            time.sleep(0.002)
    finally:  # ready or not: nothing of the run outlives the test
        for pid in (proc.pid, *tree, *descendants(proc.pid)):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=60)


def test_a_killed_server_resumes_to_the_uninterrupted_model_whatever_its_checkpoint_spacing(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """SCAFFOLD (server c, clients' c_i on disk) is killed once a client has saved its state
    for a round the server has not checkpointed: that round runs again from the clients'
    state before it (not from what the lost attempt saved, which would update c_i twice).
    With checkpoint.every=3 the kill comes two rounds after a checkpoint: the row written
    since survives it, and resume runs both rounds again from the clients' state of the
    checkpoint's round, which their later saves kept. Both end with the model of the
    uninterrupted run (checkpoint.every=1)."""
    straight = tmp_path / "straight"
    result = run_cli([*ARGS, f"num_rounds={ROUNDS}", f"hydra.run.dir={straight}"], cli_env)
    assert result.returncode == 0, result.stderr[-3000:]

    for every in (1, 3):
        killed, state = tmp_path / f"killed-{every}", tmp_path / f"state-{every}"
        env = {**cli_env, "FL_STATE_DIR": str(state)}
        args = [*ARGS, f"num_rounds={ROUNDS}", f"checkpoint.every={every}"]

        def ready(killed: Path = killed, state: Path = state, every: int = every) -> bool:
            written = len(metrics_rows(killed)) if (killed / "metrics.csv").exists() else 0
            if written < 3:
                return False
            if every == 1:
                return _clients_ahead(killed, state)
            # two rounds past a checkpoint (the next one a round away), clients saved in the
            # second: had they kept only their last two versions, the checkpoint's were gone
            return written % every == 1 and max(_saved_rounds(state), default=0) > written

        _kill_when([*args, f"hydra.run.dir={killed}"], env, ready)
        killed_at = checkpoint_round(killed / "checkpoint.npz") or 0
        written = len(metrics_rows(killed))
        assert 2 <= killed_at < ROUNDS and killed_at % every == 0, (every, killed_at)
        if every > 1:  # killed between checkpoints: nothing written was lost
            assert killed_at < written < killed_at + every, (killed_at, written)

        result = run_cli([*args, "resume=true", f"hydra.run.dir={killed}"], env, timeout=400)
        assert result.returncode == 0, result.stderr[-3000:]
        assert_same_end(straight, killed, ROUNDS)
