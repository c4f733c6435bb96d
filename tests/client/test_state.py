"""Client state files are whole or absent: a client killed while saving leaves the last
complete record, never half a file. Files are versioned by round: a round run again after a
server crash starts from the state saved before it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict

from client_app.state import ClientState

WRITER = """
import sys
import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict
from client_app.state import ClientState

root = __import__("pathlib").Path(sys.argv[1])
version = 0
while True:
    version += 1
    state = ClientState(RecordDict(), root, "run", 0, version)
    big = np.full(2_000_000, float(version), np.float32)  # 8 MB: the kill lands mid-write
    state.save("c_i", ArrayRecord({"w": Array(big), "v": Array(np.array([version]))}))
    print(version, flush=True)
"""


def test_a_client_killed_while_saving_leaves_the_last_whole_record(tmp_path: Path) -> None:
    for delay in (0.3, 0.55, 0.8):
        root = tmp_path / f"kill-{delay}"
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root)], stdout=subprocess.PIPE, text=True
        )
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "1"  # one save is complete
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
        record = ClientState(RecordDict(), root, "run", 0, 10**9).load("c_i")
        assert record is not None
        version = int(record["v"].numpy()[0])
        assert version >= 1
        np.testing.assert_array_equal(record["w"].numpy(), np.full(2_000_000, float(version)))


def _record(value: float) -> ArrayRecord:
    return ArrayRecord({"w": Array(np.array([value], np.float32))})


def _value(record: ArrayRecord | None) -> float | None:
    return None if record is None else float(record["w"].numpy()[0])


def test_a_round_run_again_reads_the_state_saved_before_it(tmp_path: Path) -> None:
    for rnd in (1, 2, 3):
        ClientState(RecordDict(), tmp_path, "run", 0, rnd).save("c_i", _record(rnd))
    # the server resumes from its round-2 checkpoint and runs round 3 again
    assert _value(ClientState(RecordDict(), tmp_path, "run", 0, 3).load("c_i")) == 2.0
    assert _value(ClientState(RecordDict(), tmp_path, "run", 0, 4).load("c_i")) == 3.0
    assert _value(ClientState(RecordDict(), tmp_path, "run", 0, 1).load("c_i")) is None
    # two versions are kept: the round's own and the newest before it
    files = sorted(p.name for p in (tmp_path / "run" / "partition-0").iterdir())
    assert files == ["c_i.r2.npz", "c_i.r3.npz"]


def test_with_checkpoints_every_3_rounds_a_resume_finds_the_state_of_the_last_one(
    tmp_path: Path,
) -> None:
    """checkpoint.every=3: a server killed in round 8 resumes from its round-6 checkpoint;
    round 7 must start from the state saved in round 6, however many rounds saved since."""
    for rnd in range(1, 9):
        ClientState(RecordDict(), tmp_path, "run", 0, rnd, checkpoint_every=3).save(
            "c_i", _record(rnd)
        )
    assert _value(ClientState(RecordDict(), tmp_path, "run", 0, 7).load("c_i")) == 6.0
    # kept: every version after round 8 - 3 and the newest at or before it
    files = sorted(p.name for p in (tmp_path / "run" / "partition-0").iterdir())
    assert files == ["c_i.r5.npz", "c_i.r6.npz", "c_i.r7.npz", "c_i.r8.npz"]


def test_saves_of_this_run_are_read_back_within_the_round(tmp_path: Path) -> None:
    memory = RecordDict()
    ClientState(memory, tmp_path, "run", 0, 5).save("held", _record(7.0))
    assert _value(ClientState(memory, tmp_path, "run", 0, 5).load("held")) == 7.0
