"""Third-party modules every ClientApp of this project imports, for the processes that fork
ClientApps (the shared launcher, the simulation engine) to import once before forking.

torch._dynamo is not: local training steps without torch.optim (`fl_system.learning.sgd`),
whose first step imported it (about a second of CPU, most of the engine's start-up).
pyarrow and Pillow come with the node-data readers that every ClientApp's code imports; left
out, they were a third of each ClientApp task's CPU on a small model.
"""

from __future__ import annotations

import importlib
import time

PRELOAD = (
    "torch",
    "numpy",
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


def preload() -> float:
    """Import every module of PRELOAD; returns the seconds it took."""
    start = time.perf_counter()
    for name in PRELOAD:
        importlib.import_module(name)
    return time.perf_counter() - start
