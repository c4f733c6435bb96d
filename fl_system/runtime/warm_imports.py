"""Third-party modules every ClientApp of this project imports, for the processes that fork
ClientApps (the shared launcher, the simulation engine) to import once before forking.

torch._dynamo is among them because torch's optimisers import it in their constructor: about
1.5 s of CPU that would otherwise fall into the first round of every forked ClientApp.
pyarrow and Pillow come with the node-data readers that every ClientApp's code imports; left
out, they were a third of each ClientApp task's CPU on a small model.
"""

from __future__ import annotations

import importlib
import time

PRELOAD = (
    "torch",
    "torch._dynamo",
    "torch.optim",
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
