"""What the processes that fork ClientApps must not share with their children."""

from __future__ import annotations

import subprocess
import sys

FORKED_DRAWS = """
import os, sys
import numpy as np
from fl_system.runtime.warm_imports import reseed_numpy_in_children
if sys.argv[1] == "reseeded":
    reseed_numpy_in_children()
np.random.seed(0)  # the parent's state, fixed: children without a reseed repeat it
draws = []
for _ in range(2):
    read, write = os.pipe()
    if (pid := os.fork()) == 0:
        os.write(write, repr(np.random.random()).encode())
        os._exit(0)
    os.close(write)
    draws.append(os.read(read, 64).decode())
    os.waitpid(pid, 0)
draws.append(repr(np.random.random()))
print(len(set(draws)))
"""


def _distinct_draws(mode: str) -> int:
    said = subprocess.run(
        [sys.executable, "-c", FORKED_DRAWS, mode], capture_output=True, text=True, timeout=120
    )
    assert said.returncode == 0, said.stderr
    return int(said.stdout)


def test_forked_children_draw_their_own_numbers_from_numpys_global_generator() -> None:
    """Two children and their parent: three different draws once reseeded, one without."""
    assert _distinct_draws("plain") == 1
    assert _distinct_draws("reseeded") == 3
