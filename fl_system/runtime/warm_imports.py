"""Third-party modules every ClientApp of this project imports, for the processes that fork
ClientApps (the shared launcher, the simulation engine) to import once before forking.

torch._dynamo is not: local training steps without torch.optim (`fl_system.learning.sgd`),
whose first step imported it (about a second of CPU, most of the engine's start-up).
pyarrow and Pillow come with the node-data readers that every ClientApp's code imports; left
out, they were a third of each ClientApp task's CPU on a small model. numpy.random is loaded by
numpy only when first used, which every ClientApp did (54 ms of CPU each, per node per round);
its global generator, seeded from the OS at import, is seeded from the OS again in each forked
child, so no two children draw the same numbers from it.

The launcher that also forks ServerApps (fl-server's) imports matplotlib's headless plotting
too: every run's ServerApp draws its curve.png at the end, and importing pyplot there cost
each run 0.4 s of CPU. The simulation engine does not: its imports are fl-run's start-up (a
run there pays the 0.4 s once, at its end).
"""

from __future__ import annotations

import importlib
import os
import time

PRELOAD = (
    "torch",
    "numpy",
    "numpy.random",
    "pyarrow",
    "pyarrow.csv",
    "pyarrow.parquet",
    "PIL.Image",
    "omegaconf",
    "hydra.utils",
    "yaml",
    "tqdm",
    "flwr.app",
    "flwr.clientapp",
    "flwr.serverapp",
)


def preload(*, plotting: bool = False) -> float:
    """Import every module of PRELOAD, and with `plotting` matplotlib's headless pyplot;
    returns the seconds it took."""
    start = time.perf_counter()
    for name in PRELOAD:
        importlib.import_module(name)
    if plotting:
        import matplotlib

        matplotlib.use("Agg")  # as the curve's plotting selects it: no display to look for
        importlib.import_module("matplotlib.pyplot")
    reseed_numpy_in_children()
    return time.perf_counter() - start


def reseed_numpy_in_children() -> None:
    """Seed numpy's global generator from the OS's entropy in every child forked from now on
    (forked, each would draw what the parent and its siblings draw)."""
    import numpy as np

    os.register_at_fork(after_in_child=np.random.seed)  # no argument: from the OS's entropy
