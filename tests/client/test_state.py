"""Client state files are whole or absent: a client killed while saving leaves the last
complete record, never half a file."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from flwr.app import RecordDict

from client_app.state import ClientState

WRITER = """
import sys
import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict
from client_app.state import ClientState

state = ClientState(RecordDict(), __import__("pathlib").Path(sys.argv[1]), "run", 0)
version = 0
while True:
    version += 1
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
        record = ClientState(RecordDict(), root, "run", 0).load("c_i")
        assert record is not None
        version = int(record["v"].numpy()[0])
        assert version >= 1
        np.testing.assert_array_equal(record["w"].numpy(), np.full(2_000_000, float(version)))
