from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fl_system.records.checkpoint import (
    Checkpoint,
    CheckpointError,
    checkpoint_round,
    load_checkpoint,
    save_checkpoint,
)


def _ckpt() -> Checkpoint:
    return Checkpoint(
        round=3,
        model={"conv.weight": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(2)},
        strategy_state={"c": np.array([0.5, -1.0])},
        elapsed_seconds=12.5,
        config={"seed": 1, "num_rounds": 5},
    )


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.npz"
    save_checkpoint(path, _ckpt())
    got = load_checkpoint(path)
    assert got.round == 3 and got.elapsed_seconds == 12.5
    assert list(got.model) == ["conv.weight", "b"]
    np.testing.assert_array_equal(got.model["conv.weight"], _ckpt().model["conv.weight"])
    np.testing.assert_array_equal(got.strategy_state["c"], [0.5, -1.0])
    assert got.config == {"seed": 1, "num_rounds": 5}
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


@pytest.mark.parametrize("payload", [b"", b"not a zip at all", b"PK\x03\x04broken"])
def test_corrupt_file_is_a_clear_error(tmp_path: Path, payload: bytes) -> None:
    path = tmp_path / "checkpoint.npz"
    path.write_bytes(payload)
    with pytest.raises(CheckpointError, match="corrupt or unreadable"):
        load_checkpoint(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="nothing to resume"):
        load_checkpoint(tmp_path / "checkpoint.npz")


def test_the_round_is_read_from_the_header_alone(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.npz"
    assert checkpoint_round(path) is None
    path.write_bytes(b"PK\x03\x04broken")
    assert checkpoint_round(path) is None
    save_checkpoint(path, _ckpt())
    assert checkpoint_round(path) == 3


WRITER = """
import sys
from pathlib import Path
import numpy as np
from fl_system.records.checkpoint import Checkpoint, save_checkpoint

path = Path(sys.argv[1])
r = 0
while True:
    r += 1
    big = np.full(3_000_000, float(r), np.float32)  # 12 MB: the kill lands mid-write
    save_checkpoint(path, Checkpoint(r, {"w": big}, {"c": np.array([r])}, float(r), {"seed": 1}))
    print(r, flush=True)
"""


def test_a_kill_during_the_write_leaves_the_previous_checkpoint_usable(tmp_path: Path) -> None:
    for delay in (0.2, 0.45, 0.7):
        path = tmp_path / f"kill-{delay}" / "checkpoint.npz"
        path.parent.mkdir()
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True
        )
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "1"  # one checkpoint is complete
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
        got = load_checkpoint(path)
        assert got.round >= 1 and got.elapsed_seconds == float(got.round)
        np.testing.assert_array_equal(got.model["w"], np.full(3_000_000, float(got.round)))
        np.testing.assert_array_equal(got.strategy_state["c"], [got.round])
        # the next save goes over whatever the kill left half-written
        save_checkpoint(path, _ckpt())
        assert load_checkpoint(path).round == 3
